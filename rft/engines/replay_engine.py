"""The `replay` rollout engine: answers prompts with recorded responses, for tests and for
deterministic re-runs of a workflow.

Its config section is `explorer.rollout_model.engine_args.path`: a JSONL experience export
(`rft replay export --format jsonl`, rows of `rft.replay.experience_rows`). Each experience's
prompt token ids key its response; a prompt recorded k times answers with its k responses in
the order of the file, then again from the first (so `n` rollouts of a group come back as the
group was recorded). A response is returned with its recorded token ids, logprobs and text;
`max_tokens` cuts a longer one (finish "length"). Other sampling settings cannot change a
recording, so a call whose logprob temperature differs from the recorded one is refused, as is a
prompt the file does not hold (named by its first tokens). Weights are not used: loading a
version only sets `model_version`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rft.config.binding import Issue
from rft.engines.models import load_tokenizer
from rft.engines.rollout import Rollout, RolloutEngine, RolloutEngineConfig, SamplingParams
from rft.errors import ConfigError, EngineError, ReplayError
from rft.events.models import Experience
from rft.replay.experience_rows import jsonl_experiences

PATH_KEY = "explorer.rollout_model.engine_args.path"


def read_recording(path: str | Path) -> dict[tuple[int, ...], list[Experience]]:
    """The experiences of a JSONL export, by prompt token ids, in file order."""
    file = Path(path).expanduser()
    by_prompt: dict[tuple[int, ...], list[Experience]] = {}
    try:
        for exp in jsonl_experiences(file):
            by_prompt.setdefault(tuple(int(i) for i in exp.prompt_ids), []).append(exp)
    except OSError as exc:
        raise ReplayError(f"{file}: cannot read the recording: {exc.strerror or exc}") from exc
    if not by_prompt:
        raise ReplayError(f"{file}: the recording holds no experience")
    return by_prompt


def recording_issues(cfg: Any, at: str = "", section: Any = None) -> list[Issue]:
    """The entry's load-time check: `engine_args.path` names a readable recording."""
    path = cfg.explorer.rollout_model.engine_args.get("path")
    if not isinstance(path, str) or not path:
        return [Issue(PATH_KEY, "is required by engine_type replay (a JSONL experience export)")]
    try:
        read_recording(path)
    except ReplayError as exc:
        return [Issue(PATH_KEY, str(exc))]
    return []


class ReplayRolloutEngine(RolloutEngine):
    """Recorded responses, keyed by prompt token ids (see the module docstring)."""

    def __init__(
        self, recording: dict[tuple[int, ...], list[Experience]], tokenizer: Any, source: str
    ) -> None:
        self._recording = recording
        self._tokenizer = tokenizer
        self._source = source
        self._next = dict.fromkeys(recording, 0)  # per prompt: the response to give next
        self._version = 0

    @classmethod
    def from_config(cls, config: RolloutEngineConfig) -> ReplayRolloutEngine:
        path = config.options.get("path")
        if not isinstance(path, str):
            raise ConfigError(f"{PATH_KEY}: is required by engine_type replay")
        return cls(read_recording(path), load_tokenizer(config.model), path)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_version(self) -> int:
        return self._version

    def load_state_dict(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        self._version = int(version)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        return [self._answer(tuple(int(i) for i in p), params) for p in prompt_ids]

    def _answer(self, prompt: tuple[int, ...], params: SamplingParams) -> list[Rollout]:
        recorded = self._recording.get(prompt)
        if recorded is None:
            raise EngineError(
                f"{self._source}: no recorded response for the prompt starting "
                f"{list(prompt[:8])} ({len(prompt)} tokens)"
            )
        out = []
        for _ in range(params.n):
            exp = recorded[self._next[prompt] % len(recorded)]
            if exp.logprob_temperature != params.logprob_temperature:
                raise EngineError(
                    f"{self._source}: {exp.experience_id} was recorded with logprobs at "
                    f"temperature {exp.logprob_temperature}, this call asks for "
                    f"{params.logprob_temperature}"
                )
            self._next[prompt] += 1
            out.append(_rollout(exp, params.max_tokens, self._tokenizer))
        return out


def _rollout(exp: Experience, max_tokens: int, tokenizer: Any) -> Rollout:
    ids = np.asarray(exp.response_ids, dtype=np.int32)
    logprobs = np.asarray(exp.logprobs, dtype=np.float32)
    text, finish = exp.response_text, "length" if exp.truncated else "stop"
    if len(ids) > max_tokens:
        ids, logprobs, finish = ids[:max_tokens], logprobs[:max_tokens], "length"
        text = tokenizer.decode(ids.tolist(), skip_special_tokens=True)
    return Rollout(
        prompt_ids=np.asarray(exp.prompt_ids, dtype=np.int32),
        response_ids=ids,
        logprobs=logprobs,
        text=text,
        finish_reason=finish,
        logprob_temperature=exp.logprob_temperature,
    )


def replay_rollout_engine(config: RolloutEngineConfig) -> RolloutEngine:
    """The `replay` entry of ROLLOUT_ENGINES."""
    return ReplayRolloutEngine.from_config(config)
