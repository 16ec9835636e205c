"""Demonstration rows for the `mix` sample strategy, from `buffer.trainer_input.auxiliary_buffers`.

An auxiliary buffer (Trinity-RFT's key) is read as supervised rows: a prompt and the response the
model should learn to give. Two sources, by the buffer's `storage_type` (the EXPERT_SOURCES
registry):
- `file`: a JSONL / JSON / Parquet / Arrow file or a local Hugging Face dataset directory, read
  with the dataset readers of `rft.datasets`. `format.prompt_key` / `response_key` (plus
  `system_prompt` / `system_prompt_key`) or `prompt_type: messages` with `messages_key` (the
  last assistant message is the response). Rows are rendered with the chat template and read in
  file order, epoch after epoch.
- `kafka` (alias `queue`): Experience events on the topic named by `path` (for example
  experiences another run curated); their prompt and response tokens are used as they are.

Each source saves its position (`state`), so a restarted trainer continues with the next row.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rft.buffer.sft_rows import conversation
from rft.config.connections import KafkaSettings
from rft.config.schema import AuxiliaryBufferConfig, TasksetConfig
from rft.errors import ConfigError, TasksetError
from rft.events.models import Experience
from rft.registry import Registry

log = logging.getLogger(__name__)


class ExpertSource(Protocol):
    name: str

    def take(self, n: int) -> list[Experience] | None:
        """The next `n` demonstration rows, or None when fewer are available yet."""

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ExpertContext:
    """What sources need beyond their own config section."""

    tokenizer: Any
    max_prompt_tokens: int
    max_response_tokens: int
    chat_template: str | None = None
    kafka: KafkaSettings | None = None
    group_prefix: str = "rft"
    dead_letter_topic: str | None = None  # where a topic source parks what it cannot decode


ExpertSourceFactory = Callable[[AuxiliaryBufferConfig, ExpertContext], ExpertSource]
EXPERT_SOURCES: Registry[ExpertSourceFactory] = Registry(
    "buffer.trainer_input.auxiliary_buffers.storage_type"
)


def demonstration(
    source: str,
    where: str,
    prompt_ids: Sequence[int] | np.ndarray,
    response_ids: Sequence[int] | np.ndarray,
    action_mask: np.ndarray | None = None,
) -> Experience:
    """An Experience carrying one demonstration of `source`, identified as `source:where`
    (a row: `epoch:index`; a topic: `partition:offset`). Reward and logprobs are unused.
    `action_mask`: the response tokens to learn (None: all); a multi-turn demonstration's
    environment and tool tokens are 0 and take no SFT loss."""
    n = len(response_ids)
    return Experience(
        experience_id=f"{source}:{where}",
        task_id=f"{source}:{where}",
        group_id=f"{source}:{where}",
        group_size=1,
        explorer_id=f"auxiliary:{source}",
        model_version=0,
        prompt_ids=np.asarray(prompt_ids, dtype=np.int32),
        response_ids=np.asarray(response_ids, dtype=np.int32),
        logprobs=np.zeros(n, dtype=np.float32),
        action_mask=action_mask,
    )


class SftRowRenderer:
    """Turns a row (under a format) into prompt and response token ids with the chat template."""

    def __init__(self, buffer: AuxiliaryBufferConfig, context: ExpertContext) -> None:
        self.fmt = buffer.format
        self.context = context
        self.template = buffer.format.chat_template or context.chat_template

    def messages(self, payload: Mapping[str, Any], origin: str) -> tuple[list[dict], str]:
        """(prompt messages, response text) of one row; TasksetError naming `origin` if unusable.
        The response is the last assistant message; the turns before it are the prompt."""
        chat = conversation(payload, origin, self.fmt)
        return chat[:-1], chat[-1]["content"]

    def token_ids(self, payload: Mapping[str, Any], origin: str) -> tuple[list[int], list[int]]:
        """Prompt ids (generation prompt included, last `max_prompt_tokens` kept) and response
        ids (the rest of the rendered conversation, first `max_response_tokens` kept)."""
        prompt, answer = self.messages(payload, origin)
        tok = self.context.tokenizer
        render = dict(tokenize=True, return_dict=False, chat_template=self.template)
        prompt_ids = [
            int(i) for i in tok.apply_chat_template(prompt, add_generation_prompt=True, **render)
        ]
        full = [
            int(i)
            for i in tok.apply_chat_template(
                prompt + [{"role": "assistant", "content": answer}], **render
            )
        ]
        if full[: len(prompt_ids)] == prompt_ids and len(full) > len(prompt_ids):
            response_ids = full[len(prompt_ids) :]
        else:  # a template that renders the prompt differently once a reply follows
            response_ids = [int(i) for i in tok(answer, add_special_tokens=False)["input_ids"]]
            if tok.eos_token_id is not None:
                response_ids.append(int(tok.eos_token_id))
        if not response_ids:
            raise TasksetError(f"{origin}: the response renders to no tokens")
        return prompt_ids[-self.context.max_prompt_tokens :], response_ids[
            : self.context.max_response_tokens
        ]


@EXPERT_SOURCES.register("file")
class FileExpertSource:
    """Rows of a dataset file, in file order, epoch after epoch (rendered once, at start)."""

    def __init__(self, buffer: AuxiliaryBufferConfig, context: ExpertContext) -> None:
        from rft.datasets.files import file_rows
        from rft.datasets.rows import BadRow

        self.name = buffer.name
        where = f"buffer.trainer_input.auxiliary_buffers.{buffer.name}"
        as_taskset = TasksetConfig(
            name=buffer.name, path=buffer.path, split=buffer.split, subset_name=buffer.subset_name
        )
        renderer = SftRowRenderer(buffer, context)
        self.rows: list[tuple[list[int], list[int]]] = []
        bad: list[str] = []
        for row in file_rows(as_taskset):
            if isinstance(row, BadRow):
                bad.append(str(row))
                continue
            try:
                self.rows.append(renderer.token_ids(row.payload, row.origin))
            except TasksetError as exc:
                bad.append(str(exc))
        if bad:
            listed = "\n".join(f"  {b}" for b in bad[:20])
            raise TasksetError(f"{where}: {len(bad)} unusable row(s):\n{listed}")
        if not self.rows:
            raise TasksetError(f"{where}: {buffer.path} has no rows")
        self.epoch, self.index = 0, 0

    def take(self, n: int) -> list[Experience] | None:
        out = []
        for _ in range(n):
            prompt, response = self.rows[self.index]
            out.append(demonstration(self.name, f"{self.epoch}:{self.index}", prompt, response))
            self.index += 1
            if self.index == len(self.rows):
                self.epoch, self.index = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def restore(self, state: Mapping[str, Any]) -> None:
        if state:
            self.epoch, self.index = int(state["epoch"]), int(state["index"]) % len(self.rows)

    def close(self) -> None:
        return None


@EXPERT_SOURCES.register("kafka")
class TopicExpertSource:
    """Experience events of a topic, in log order; positions saved per partition."""

    def __init__(self, buffer: AuxiliaryBufferConfig, context: ExpertContext) -> None:
        if context.kafka is None:
            raise ConfigError(
                f"buffer.trainer_input.auxiliary_buffers.{buffer.name}: a topic source needs Kafka"
            )
        self.name = buffer.name
        self.topic = buffer.path
        self.kafka = context.kafka
        self.group = f"{context.group_prefix}.trainer-aux.{buffer.name}"
        self.dead_letter_topic = context.dead_letter_topic
        self.max_prompt = context.max_prompt_tokens
        self.max_response = context.max_response_tokens
        self._reader: Any = None
        self._waiting: deque[tuple[Experience, tuple[str, int], int]] = deque()
        self._next: dict[tuple[str, int], int] = {}  # where the rows handed out end

    def _open(self) -> Any:
        if self._reader is None:
            from rft.events.reader import EventReader

            self._reader = EventReader.open(
                self.kafka,
                self.group,
                [self.topic],
                from_beginning=True,
                dead_letter_topic=self.dead_letter_topic,
            )
            for (topic, partition), offset in self._next.items():
                self._reader.seek(topic, partition, offset)
        return self._reader

    def take(self, n: int) -> list[Experience] | None:
        reader = self._open()
        if len(self._waiting) < n:
            for env in reader.poll(max(n, 100), timeout_s=0.2):
                if isinstance(env.event, Experience):
                    self._waiting.append((env.event, (env.topic, env.partition), env.offset))
                else:
                    log.warning(
                        "%s[%d]@%d: %s on auxiliary topic %s, skipped",
                        env.topic,
                        env.partition,
                        env.offset,
                        type(env.event).__name__,
                        self.topic,
                    )
        if len(self._waiting) < n:
            return None
        out = []
        for _ in range(n):
            exp, tp, offset = self._waiting.popleft()
            self._next[tp] = offset + 1
            out.append(
                demonstration(
                    self.name,
                    f"{tp[1]}:{offset}",
                    exp.prompt_ids[-self.max_prompt :],
                    exp.response_ids[: self.max_response],
                    exp.action_mask[: self.max_response] if exp.action_mask is not None else None,
                )
            )
        return out

    def state(self) -> dict[str, Any]:
        return {"next": [[t, p, o] for (t, p), o in sorted(self._next.items())]}

    def restore(self, state: Mapping[str, Any]) -> None:
        self._next = {(str(t), int(p)): int(o) for t, p, o in state.get("next", [])}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


EXPERT_SOURCES.add("queue", TopicExpertSource)
# a tool task's oracle, played through its workflow (rft.workflows imports this module)
EXPERT_SOURCES.lazy("oracle", "rft.workflows.demonstrations:OracleDemonstrations")


def open_expert_sources(
    buffers: Mapping[str, AuxiliaryBufferConfig], context: ExpertContext
) -> dict[str, ExpertSource]:
    """One source per auxiliary buffer, by name."""
    return {
        name: EXPERT_SOURCES.get(buf.storage_type, key=f"{_KEY}.{name}.storage_type")(buf, context)
        for name, buf in buffers.items()
    }


_KEY = "buffer.trainer_input.auxiliary_buffers"
