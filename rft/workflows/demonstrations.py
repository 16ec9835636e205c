"""A tool task's demonstrations: its oracle's turns played through its tool workflow, checked.

`demonstrate(workflow, task, tokenizer)` plays the oracle (`ToolTask.oracle`) of the task's seed
as the model's replies in the workflow's own `run`, through `ScriptedModel`, a `ModelHandle` over
the tokenizer alone. A call turn is the assistant message with those `tool_calls`, rendered by the
chat template as the model is to write it; the answer turn is its text. So a demonstration's ids
are the ones the workflow feeds the model and takes from it: the first prompt with the tools
section, each call, the executor's real answer, the answer; action mask 1 on the model's turns.

Checked on every demonstration, each failure a DemonstrationError naming the task, seed and turn:
the oracle's turns are calls ending with one answer text, within `max_turns`; each call turn's
rendering reads back, with the format's `tool_call_parser`, as exactly the oracle's calls; each
reply fits `max_tokens`; every call runs (outcome `ok`); the verdict on the answer is solved
(reward 1); nothing is truncated.

`OracleDemonstrations` is the auxiliary buffer source `oracle` (`sample_strategy: mix`): `path`
names the tool task's workflow, and each row taken is the demonstration of the next `train` seed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rft.environments.seed_splits import split_seeds
from rft.environments.tool_task import SOLVED, Call, ToolTaskEnvironment, Turn
from rft.errors import ConfigError, TasksetError
from rft.events.models import Task
from rft.tools import TOOL_CALL_PARSERS, ToolCall, ToolCallParser
from rft.workflows.model_handle import Message
from rft.workflows.registry import WORKFLOWS
from rft.workflows.tool_tasks import ToolTaskWorkflow
from rft.workflows.trajectory import Trajectory

if TYPE_CHECKING:
    from rft.buffer.expert_source import ExpertContext
    from rft.config.schema import AuxiliaryBufferConfig
    from rft.engines.rollout import Rollout, SamplingParams
    from rft.events.models import Experience


class DemonstrationError(TasksetError):
    """An oracle's demonstration does not play as the workflow's turns (the message says where)."""


def oracle_turns(env: ToolTaskEnvironment, where: str) -> list[list[Call] | str]:
    """The oracle's turns for the problem `env` was reset to: lists of calls, then the answer."""
    turns = env.task.oracle(env.problem)
    if turns is None:
        raise DemonstrationError(f"{where}: {type(env.task).__name__} has no oracle")
    shaped: list[list[Call] | str] = [_shape(t, where, i) for i, t in enumerate(turns)]
    if not shaped or not isinstance(shaped[-1], str):
        raise DemonstrationError(f"{where}: the oracle's last turn must be the answer text")
    if any(isinstance(t, str) for t in shaped[:-1]):
        raise DemonstrationError(f"{where}: only the oracle's last turn may be text (the answer)")
    if len(shaped) > env.max_turns:
        raise DemonstrationError(
            f"{where}: the oracle takes {len(shaped)} turns, over max_turns {env.max_turns}"
        )
    return shaped


def _shape(turn: Turn, where: str, index: int) -> list[Call] | str:
    if isinstance(turn, str):
        return turn
    given: list[object] = (
        [turn] if isinstance(turn, Call) else list(turn) if isinstance(turn, Sequence) else []
    )
    calls = [c for c in given if isinstance(c, Call)]
    if not calls or len(calls) != len(given):
        raise DemonstrationError(
            f"{where}, turn {index}: a turn is a call(...), a list of them, or the answer text; "
            f"got {turn!r}"
        )
    return calls


class ScriptedModel:
    """A `ModelHandle` whose replies are the oracle's turns, rendered by the chat template."""

    def __init__(
        self,
        tokenizer: Any,
        turns: Sequence[list[Call] | str],
        parser: ToolCallParser,
        chat_template: str | None,
        where: str,
    ) -> None:
        self._tokenizer = tokenizer
        self._turns = list(turns)
        self._parser = parser
        self._template = chat_template
        self._where = where
        self.replies = 0

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_version(self) -> int:
        return 0

    def chat_ids(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        extra = {"tools": [dict(t) for t in tools]} if tools else {}
        ids = self._tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=True,
            add_generation_prompt=add_generation_prompt,
            return_dict=False,
            chat_template=chat_template,
            **extra,
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        from rft.engines.rollout import Rollout

        turn = self.replies
        where = f"{self._where}, turn {turn}"
        if turn >= len(self._turns):
            raise DemonstrationError(f"{where}: the workflow asks for a turn the oracle has not")
        planned = self._turns[turn]
        ids, text = self._turn_ids(planned, where)
        if len(ids) > params.max_tokens:
            raise DemonstrationError(
                f"{where}: the reply is {len(ids)} tokens, over the rollout's max_tokens "
                f"{params.max_tokens}: {text[:80]!r}"
            )
        self.replies += 1
        return [
            Rollout(
                prompt_ids=np.asarray(prompt_ids, dtype=np.int32),
                response_ids=np.asarray(ids, dtype=np.int32),
                logprobs=np.zeros(len(ids), dtype=np.float32),
                text=text,
                finish_reason="stop",
                logprob_temperature=params.logprob_temperature,
            )
        ]

    def _turn_ids(self, planned: list[Call] | str, where: str) -> tuple[list[int], str]:
        """The ids and text of the assistant turn `planned` as the chat template renders it
        (from its generation prompt through the ids that end the turn); a call turn is checked
        to read back, with the tool_call_parser, as exactly the oracle's calls."""
        message: dict[str, Any] = {"role": "assistant", "content": planned}
        if not isinstance(planned, str):
            message["content"] = ""
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                for c in planned
            ]
        asked = [{"role": "user", "content": "?"}]
        head = self.chat_ids(asked, chat_template=self._template)
        full = self.chat_ids(
            [*asked, message], chat_template=self._template, add_generation_prompt=False
        )
        if full[: len(head)] != head or len(full) == len(head):
            raise DemonstrationError(f"{where}: the chat template renders no assistant turn")
        ids = full[len(head) :]
        text = str(self._tokenizer.decode(ids, skip_special_tokens=True))
        if isinstance(planned, str):
            return ids, text
        parsed = self._parser(text)
        read = [
            (c.name, json.loads(c.arguments)) if isinstance(c, ToolCall) else ("?", c.reason)
            for c in parsed.calls
        ]
        wanted = [(c.name, json.loads(json.dumps(dict(c.arguments)))) for c in planned]
        if read != wanted:
            raise DemonstrationError(
                f"{where}: the chat template renders the oracle's calls {wanted} as {text!r}, "
                f"which the tool_call_parser reads as {read or 'no call'} (does the template "
                "render assistant tool_calls in the parser's format?)"
            )
        return ids, text


def demonstrate(
    workflow: ToolTaskWorkflow,
    task: Task,
    tokenizer: Any,
    *,
    max_tokens: int = 256,
) -> Trajectory:
    """The demonstration of `task` (see the module docstring): one concatenated trajectory."""
    from rft.engines.rollout import SamplingParams

    seed = task.payload.get("seed")
    where = f"demonstration of {task.workflow or task.taskset!r}, seed {seed}"
    task = _concatenated(task)
    args = workflow._args(task)
    env = workflow._environment(args)
    if not isinstance(env, ToolTaskEnvironment):
        raise DemonstrationError(f"{where}: workflow {task.workflow!r} plays no tool task")
    if args.get("max_turns"):
        env.max_turns = int(args["max_turns"])
    env.reset(int(task.payload["seed"]))
    turns = oracle_turns(env, where)
    parser = TOOL_CALL_PARSERS.get(
        task.format.get("tool_call_parser") or "hermes", key="format.tool_call_parser"
    )
    model = ScriptedModel(tokenizer, turns, parser, task.format.get("chat_template"), where)
    (trajectory,) = workflow.run(task, model, SamplingParams(max_tokens=max_tokens), 0)
    calls = sum(len(t) for t in turns if not isinstance(t, str))
    ran = sum(v for k, v in trajectory.metrics.items() if _outcome(k) == "ok")
    if ran != calls:
        failed = sorted(k for k, v in trajectory.metrics.items() if v and _outcome(k) != "ok")
        raise DemonstrationError(f"{where}: of {calls} calls {ran:g} ran ok; the rest: {failed}")
    if model.replies != len(turns) or trajectory.truncated:
        raise DemonstrationError(
            f"{where}: the episode ended after {model.replies} of the oracle's {len(turns)} "
            f"turns{' (truncated by max_total_tokens)' if trajectory.truncated else ''}"
        )
    if trajectory.reward < SOLVED:
        raise DemonstrationError(
            f"{where}: the verdict on the oracle's answer {turns[-1]!r} is {trajectory.reward:g}, "
            "not solved (1)"
        )
    return trajectory


def _outcome(metric: str) -> str | None:
    parts = metric.split("/")
    return parts[2] if len(parts) == 3 and parts[0] == "tool_calls" else None


def _concatenated(task: Task) -> Task:
    """`task` as one trajectory per rollout (a demonstration is the whole conversation)."""
    fmt = {**task.format, "enable_concatenated_multi_turn": "true"}
    return Task(
        task_id=task.task_id,
        taskset=task.taskset,
        epoch=task.epoch,
        index=task.index,
        payload=task.payload,
        format=fmt,
        workflow=task.workflow,
    )


class OracleDemonstrations:
    """The auxiliary buffer source `oracle`: each row is the demonstration of the next `train`
    seed of the tool task whose workflow `path` names, with the buffer's `format` (system prompt,
    tool_call_parser, chat_template; else the model's) and the task's default settings. Each
    reply is held to `model.max_response_tokens` and the first prompt to `max_prompt_tokens`, as
    the explorer holds the model's turns; the first row is played when the source opens."""

    def __init__(self, buffer: AuxiliaryBufferConfig, context: ExpertContext) -> None:
        self.name = buffer.name
        self.where = f"buffer.trainer_input.auxiliary_buffers.{buffer.name}"
        if buffer.split != "train":
            raise ConfigError(
                f"{self.where}.split: oracle demonstrations play train seeds only, "
                f"got {buffer.split!r}"
            )
        workflow = WORKFLOWS.get(buffer.path, key=f"{self.where}.path")()
        if not isinstance(workflow, ToolTaskWorkflow):
            raise ConfigError(
                f"{self.where}.path: workflow {buffer.path!r} is not a tool task's workflow "
                f"(tool tasks: {', '.join(_tool_workflows()) or 'none'})"
            )
        self.workflow, self.workflow_name = workflow, buffer.path
        fmt = buffer.format
        self.format = {
            k: v
            for k, v in (
                ("system_prompt", fmt.system_prompt),
                ("tool_call_parser", fmt.tool_call_parser),
                ("chat_template", fmt.chat_template or context.chat_template),
            )
            if v
        }
        self.context = context
        self.index = 0
        self._row(split_seeds("train", 1)[0])  # checked now, before any training step

    def take(self, n: int) -> list[Experience]:
        out = [self._row(seed) for seed in split_seeds("train", n, start=self.index)]
        self.index += n
        return out

    def _row(self, seed: int) -> Experience:
        from rft.buffer.expert_source import demonstration

        task = Task(
            task_id=f"{self.name}:{seed}",
            taskset=self.name,
            epoch=0,
            index=seed,
            payload={"seed": seed, "split": "train"},
            format=self.format,
            workflow=self.workflow_name,
        )
        try:
            made = demonstrate(
                self.workflow,
                task,
                self.context.tokenizer,
                max_tokens=self.context.max_response_tokens,
            )
        except TasksetError as exc:
            raise DemonstrationError(f"{self.where}: {exc}") from exc
        if len(made.prompt_ids) > self.context.max_prompt_tokens:
            raise DemonstrationError(
                f"{self.where}: the demonstration of seed {seed} starts from a prompt of "
                f"{len(made.prompt_ids)} tokens, over model.max_prompt_tokens "
                f"({self.context.max_prompt_tokens})"
            )
        return demonstration(
            self.name, str(seed), made.prompt_ids, made.response_ids, made.action_mask
        )

    def state(self) -> dict[str, Any]:
        return {"index": self.index}

    def restore(self, state: Mapping[str, Any]) -> None:
        if state:
            self.index = int(state["index"])

    def close(self) -> None:
        return None


def _tool_workflows() -> list[str]:
    found = []
    for name in WORKFLOWS.names():
        try:
            if issubclass(WORKFLOWS.get(name), ToolTaskWorkflow):
                found.append(name)
        except ConfigError:
            continue  # an entry whose package is missing plays no tool task
    return found
