"""engine_type vllm on a machine without vLLM: lazy import, refusal at load with the install
command, the vLLM settings reaching the engine's options, and the logprob-exactness rule.

The engine itself runs on the GPU machine (bench/rollout_engines.py, infra/gpu/); CI has no vLLM.
"""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rft.catalog import load_config
from rft.catalog.part_keys import bind_part_keys
from rft.config import ConfigValidationError, ConfigWarning
from rft.consumers.run_plan import RunPlan
from rft.engines.rollout import ROLLOUT_ENGINES, PrefixCacheCounts, SamplingParams
from rft.engines.vllm_engine import (
    PROCESSED,
    RAW,
    _sampled_logprobs,
    _Timeout,
    cached_prompt_tokens,
    inexact_logprobs,
    logprobs_mode_for,
)
from rft.errors import EngineError
from tests.unit.config_samples import MINIMAL

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_the_engine_module_imports_without_importing_vllm() -> None:
    code = (
        "import sys\n"
        "import rft.engines.vllm_engine, rft.engines.rollout\n"
        "from rft.engines.rollout import ROLLOUT_ENGINES\n"
        "assert 'vllm' in ROLLOUT_ENGINES.names()\n"
        "print('vllm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd()
    )
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
@pytest.mark.parametrize("name", ["vllm", "vllm_async"])  # vllm_async: Trinity's name for it
def test_selecting_vllm_without_it_fails_at_load_with_the_install_command(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(ConfigValidationError) as err:
        load_config(write(tmp_path, MINIMAL), [f"explorer.rollout_model.engine_type={name}"])
    text = str(err.value)
    assert "explorer.rollout_model.engine_type" in text
    assert "pip install 'vllm==0.26.0'" in text


def test_trinity_vllm_keys_reach_the_engine_options(tmp_path: Path) -> None:
    keys = [
        "explorer.rollout_model.gpu_memory_utilization=0.5",
        "explorer.rollout_model.enforce_eager=true",
        "explorer.rollout_model.enable_prefix_caching=false",
        "explorer.rollout_model.max_model_len=96",
        "model.max_prompt_tokens=64",
        "model.max_response_tokens=32",
        "explorer.rollout_model.seed=7",
    ]
    # the vllm engine's own keys under the hf engine: each warned as vllm's, read by nobody
    with pytest.warns(ConfigWarning) as record:
        cfg = load_config(write(tmp_path, MINIMAL), keys)
    said = [str(w.message) for w in record]
    for key in ("gpu_memory_utilization", "enable_prefix_caching"):
        assert any(
            f"`explorer.rollout_model.{key}` is a key of engine_type vllm; engine_type hf does "
            "not read it, so it is ignored" in line
            for line in said
        ), said
    # the hf engine reads enforce_eager only (its compiled path on a GPU)
    rollout = cfg.explorer.rollout_model
    assert rollout.part_keys == {}
    assert RunPlan(cfg).rollout_engine_config().options == {"enforce_eager": True}
    # selected, the vllm engine gets its keys converted and checked like any key (this machine
    # has no vllm, so the load itself would stop at the missing package: bound directly here)
    rollout.engine_type = "vllm"
    rollout.part_keys = {"gpu_memory_utilization": "0.5", "enable_prefix_caching": "false"}
    at = "explorer.rollout_model"
    assert bind_part_keys(ROLLOUT_ENGINES, "vllm", at, rollout) == ([], [])
    options = RunPlan(cfg).rollout_engine_config().options
    assert options["gpu_memory_utilization"] == 0.5
    assert options["enforce_eager"] is True
    assert options["enable_prefix_caching"] is False
    assert options["max_model_len"] == 96 == cfg.model.max_model_len
    assert options["seed"] == 7
    rollout.part_keys = {"gpu_memory_utilization": 1.5, "gpu_memory_utilisation": 0.5}
    issues, notices = bind_part_keys(ROLLOUT_ENGINES, "vllm", at, rollout)
    assert [i.path for i in issues] == [f"{at}.gpu_memory_utilization"]
    assert "expected a value > 0 and <= 1, got 1.5" in issues[0].message
    assert [n.message for n in notices] == [
        f"unknown key `{at}.gpu_memory_utilisation` is ignored; did you mean "
        "`gpu_memory_utilization`?"
    ]
    rollout.part_keys = {"gpu_memory_utilization": 0.5}
    assert bind_part_keys(ROLLOUT_ENGINES, "vllm", at, rollout) == ([], [])
    # the vllm entry's engine_args: its scheduler and CUDA-graph settings
    cfg.explorer.rollout_model.engine_type = "vllm"
    cfg.explorer.rollout_model.engine_args = {"max_num_seqs": 256, "async_scheduling": True}
    options = RunPlan(cfg).rollout_engine_config().options
    assert options["max_num_seqs"] == 256
    assert options["async_scheduling"] is True


def test_a_rollout_max_model_len_unlike_the_models_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match="explorer.rollout_model.max_model_len"):
        load_config(
            write(tmp_path, MINIMAL),
            ["model.max_model_len=4096", "explorer.rollout_model.max_model_len=3000"],
        )


def test_logprob_mode_follows_the_configured_temperature() -> None:
    assert logprobs_mode_for(1.0) == RAW
    assert logprobs_mode_for(0.0) == RAW
    assert logprobs_mode_for(0.7) == PROCESSED


@pytest.mark.parametrize(
    ("mode", "params", "exact"),
    [
        # raw mode is log_softmax(logits): exact at T=1 whatever filters or penalties shape sampling
        (RAW, SamplingParams(temperature=1.0, top_p=0.9, top_k=20, repetition_penalty=1.2), True),
        (RAW, SamplingParams(temperature=0.0), True),
        (RAW, SamplingParams(temperature=0.7), False),
        # processed mode is after temperature and after filters and penalties
        (PROCESSED, SamplingParams(temperature=0.7), True),
        (PROCESSED, SamplingParams(temperature=0.0), True),
        (PROCESSED, SamplingParams(temperature=0.0, top_p=0.5), True),
        (PROCESSED, SamplingParams(temperature=0.7, top_p=0.9), False),
        (PROCESSED, SamplingParams(temperature=0.7, top_k=5), False),
        (PROCESSED, SamplingParams(temperature=0.7, repetition_penalty=1.1), False),
        (PROCESSED, SamplingParams(temperature=0.7, min_tokens=2), False),
    ],
)
def test_inexact_logprobs(mode: str, params: SamplingParams, exact: bool) -> None:
    assert (inexact_logprobs(mode, params) is None) == exact


@pytest.mark.skipif(HAS_VLLM, reason="the refusal below is the one for a missing vLLM")
def test_a_vllm_config_that_would_report_wrong_logprobs_is_refused_at_load(
    tmp_path: Path,
) -> None:
    text = MINIMAL + ("      rollout_args:\n        temperature: 0.7\n        top_p: 0.9\n")
    with pytest.raises(ConfigValidationError) as err:
        load_config(write(tmp_path, text), ["explorer.rollout_model.engine_type=vllm"])
    assert "buffer.explorer_input.taskset.rollout_args" in str(err.value)
    assert "top_p" in str(err.value)


def test_prefix_cache_counts_add_up_and_refuse_impossible_reports() -> None:
    counts = PrefixCacheCounts()
    assert counts.hit_rate is None  # no prompt yet
    counts.add(100, 64)
    earlier = PrefixCacheCounts(counts.prompt_tokens, counts.cached_tokens)
    counts.add(50, 0)
    assert (counts.prompt_tokens, counts.cached_tokens) == (150, 64)
    assert counts.hit_rate == pytest.approx(64 / 150)
    later = counts.since(earlier)
    assert (later.prompt_tokens, later.cached_tokens, later.hit_rate) == (50, 0, 0.0)
    for prompt, cached in ((10, 11), (10, -1)):
        with pytest.raises(EngineError, match=f"{cached} cached tokens of a {prompt}-token"):
            counts.add(prompt, cached)
    assert (counts.prompt_tokens, counts.cached_tokens) == (
        150,
        64,
    )  # a refused report adds nothing


def test_cached_prompt_tokens_reads_num_cached_tokens_of_finished_and_aborted_requests() -> None:
    # vLLM's RequestOutput carries num_cached_tokens (None until its prefill was scheduled)
    assert cached_prompt_tokens(SimpleNamespace(num_cached_tokens=48)) == 48
    assert cached_prompt_tokens(SimpleNamespace(num_cached_tokens=None)) == 0
    aborted = _Timeout(SimpleNamespace(num_cached_tokens=32))
    assert cached_prompt_tokens(aborted) == 32  # aborted at the deadline after its prefill
    assert cached_prompt_tokens(_Timeout(None)) == 0  # aborted before any output


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class _FlatPositions:
    """vLLM's flat logprobs layout: every position's entries in one array, sliced by index."""

    def __init__(self, positions: list[list[tuple[int, float]]]) -> None:
        self.token_ids = [t for pos in positions for t, _ in pos]
        self.logprobs = [lp for pos in positions for _, lp in pos]
        self.starts = list(itertools.accumulate([0] + [len(p) for p in positions]))

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i: int) -> dict[int, _Logprob]:
        span = range(self.starts[i], self.starts[i + 1])
        return {self.token_ids[j]: _Logprob(self.logprobs[j]) for j in span}


class _Completion:
    def __init__(self, logprobs: Any) -> None:
        self.logprobs = logprobs


def test_sampled_logprobs_read_alike_from_flat_arrays_and_per_position_maps() -> None:
    ids = [5, 9, 5]
    sampled = [(5, -0.25), (9, -1.5), (5, -0.75)]
    maps = [{t: _Logprob(lp)} for t, lp in sampled]
    flat = _FlatPositions([[entry] for entry in sampled])
    want = [lp for _, lp in sampled]
    assert _sampled_logprobs(_Completion(maps), ids) == want
    assert _sampled_logprobs(_Completion(flat), ids) == want
    # a position holding more than the sampled token (top-k asked) reads through the maps
    topk = _FlatPositions([[(5, -0.25), (7, -2.0)], [(9, -1.5)], [(5, -0.75), (1, -3.0)]])
    assert _sampled_logprobs(_Completion(topk), ids) == want
    with pytest.raises(EngineError, match="2 logprob positions for 3 tokens"):
        _sampled_logprobs(_Completion(maps[:2]), ids)
