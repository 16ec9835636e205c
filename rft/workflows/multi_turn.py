"""`MultiTurnWorkflow`: a workflow that drives the model turn by turn through a `ModelHandle`.

`run(task, model, params, index)` plays one rollout (`index` of the task's `repeat_times`): it
renders the first messages with the task's chat template (offering the episode's tools), then
loops: the model answers from the whole sequence of ids so far; a reply with tool calls (read by
the episode's `tool_call_parser`) gets one `tool` message per call from the `ToolExecutor` (a bad
call becomes a message, never an error); any other reply is the episode's to answer
(`Episode.step`, bounded by `env_step_timeout_s`). Environment and tool messages are appended as
ids from the template's rendering (`rft.workflows.turn_ids`), so the sequence is the one the model
was fed.

With `enable_concatenated_multi_turn` (the format key, default on) the rollout is one trajectory:
the first prompt, then every turn, the model's tokens with action_mask 1 and the others' 0. Off,
it is one trajectory per model turn (that turn's prompt ids and reply), each with the rollout's
reward, and info `turn` (0-based) and `trajectory` (the rollout's index) to group a rollout's
steps by, until the experience schema has fields for them.

Limits: `max_turns` model turns; `max_total_tokens` ids in all (a reply is cut to fit, and a
rollout that reaches the limit ends with finish_reason "length", i.e. truncated; a reply cut by
its own `max_tokens` is still answered, and counted in `cut_turns`); the model's prompt limits,
when the handle holds turns to them (`LimitedModelHandle`, as the explorer's runner does): a turn
whose conversation is over them ends the rollout, truncated, counted in `prompt_limit_ends` (the
first turn's refusal is the task's: PromptTooLongError); an episode step
longer than `env_step_timeout_s` fails the rollout with WorkflowTimeoutError (it is retried and
dead-lettered as any failed task is). Shaping: an episode's `call_reward` (a tool workflow's
`workflow_args.tool_call_reward`) is added to the reward of a rollout in which at least one tool
call ran (outcome "ok"), and metric `call_rewarded` says so. Each turn and each tool call is a
span (`explorer.turn`, `explorer.tool_call`) under whatever span is current, the task's rollout
span in the explorer.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rft.engines.model_handle import Message, ModelHandle
from rft.engines.prompt_limits import PromptTooLongError
from rft.errors import ConfigError, TasksetError
from rft.events.models import Task
from rft.tools import ToolExecutor
from rft.tools.call_parsers import ToolCallParser
from rft.tools.calls import ParsedReply
from rft.tracing.otel import trace
from rft.tracing.spans import TOOL_CALL, TURN
from rft.workflows.deadline import CallTimedOut, WorkflowTimeoutError, call_with_timeout
from rft.workflows.trajectory import Trajectory
from rft.workflows.turn_ids import environment_ids
from rft.workflows.workflow import Workflow, format_object

if TYPE_CHECKING:
    from rft.engines.rollout import Rollout, SamplingParams

CONCATENATED_KEY = "enable_concatenated_multi_turn"

_Param = inspect.Parameter
# the workflow_args every multi-turn workflow reads (see `limits`)
LIMIT_PARAMS = [
    _Param("max_turns", _Param.KEYWORD_ONLY, default=None, annotation="int | None"),
    _Param("max_total_tokens", _Param.KEYWORD_ONLY, default=None, annotation="int | None"),
    _Param("env_step_timeout_s", _Param.KEYWORD_ONLY, default=30.0, annotation="float"),
]


@dataclass(frozen=True)
class StepAnswer:
    """The episode's answer to a reply: messages for the model, reward of this step, done."""

    messages: Sequence[Message]
    reward: float
    done: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """One rollout's game: its first messages, the tools it offers, and `step(reply text)`."""

    messages: list[Message]
    step: Callable[[str], StepAnswer]
    max_turns: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    executor: ToolExecutor | None = None
    parser: ToolCallParser | None = None
    # added to the reward of a rollout in which at least one tool call ran (outcome "ok")
    call_reward: float = 0.0


@dataclass(frozen=True)
class TurnLimits:
    max_turns: int
    max_total_tokens: int | None
    env_step_timeout_s: float


@dataclass
class _Rollout:
    """What one rollout has built so far."""

    trajectory: Trajectory
    messages: list[Message]
    replied: Trajectory | None = None  # the trajectory as the model's last reply left it
    steps: list[Trajectory] = field(default_factory=list)
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)


class MultiTurnWorkflow(Workflow):
    """A workflow whose rollout loops model turns; subclasses make the `Episode` of a task."""

    drives_model: ClassVar[bool] = True
    # where the turn and tool-call spans go (None: the process's tracer provider)
    tracer: trace.Tracer | None = None

    def messages(self, task: Task) -> list[dict[str, str]]:
        """No single prompt: a runner of single-turn workflows gives such a task up with this."""
        raise TasksetError(
            f"task {task.task_id}: workflow {task.workflow!r} drives the model turn by turn "
            "(workflow.run with a ModelHandle); this runner rolls out single-turn workflows only"
        )

    @abc.abstractmethod
    def episode(self, task: Task, index: int) -> Episode:
        """The game rollout `index` of `task` plays."""

    def limits(self, task: Task, episode: Episode) -> TurnLimits:
        """The episode's `max_turns`; `max_total_tokens` and `env_step_timeout_s` (default 30)
        from the task's workflow_args."""
        args = format_object(task.format, "workflow_args")
        max_total = args.get("max_total_tokens")
        timeout = float(args.get("env_step_timeout_s", 30.0))
        positive("max_total_tokens", max_total)
        positive("env_step_timeout_s", timeout)
        return TurnLimits(episode.max_turns, max_total, timeout)

    def concatenated(self, task: Task) -> bool:
        text = task.format.get(CONCATENATED_KEY, "True")
        return text.strip().lower() not in ("false", "0", "no")

    def run(
        self, task: Task, model: ModelHandle, params: SamplingParams, index: int
    ) -> list[Trajectory]:
        """The trajectories of rollout `index` of `task` (see the module docstring)."""
        self._require_valid(task)
        episode = self.episode(task, index)
        limits = self.limits(task, episode)
        template = task.format.get("chat_template") or None
        first = model.chat_ids(
            episode.messages, tools=episode.tools or None, chat_template=template
        )
        state = _Rollout(_starting(first, params.logprob_temperature), list(episode.messages))
        one = dataclasses.replace(params, n=1)
        for turn in range(limits.max_turns):
            with self._tracer().start_as_current_span(TURN, attributes={"rft.turn": turn}) as span:
                done = self._turn(task, model, episode, limits, one, template, state, turn)
                span.set_attribute("rft.turn_tokens", len(state.trajectory.token_ids))
            if done:
                break
        if episode.call_reward and any(
            k.startswith("tool_calls/") and k.endswith("/ok") for k in state.counts
        ):
            state.reward += episode.call_reward
            state.counts["call_reward"] = 1
        return self._finished(task, state, index)

    def _turn(
        self,
        task: Task,
        model: ModelHandle,
        episode: Episode,
        limits: TurnLimits,
        params: SamplingParams,
        template: str | None,
        state: _Rollout,
        turn: int,
    ) -> bool:
        """One model turn and its answer; True when the rollout ends."""
        so_far = state.trajectory.token_ids
        if limits.max_total_tokens is not None:
            room = limits.max_total_tokens - len(so_far)
            if room <= 0:
                return self._truncate(state)
            params = dataclasses.replace(params, max_tokens=min(params.max_tokens, room))
        try:
            reply = model.generate(so_far.tolist(), params)[0]
        except PromptTooLongError as exc:
            if turn == 0:  # no trajectory to end: the task itself does not fit
                raise PromptTooLongError(f"task {task.task_id}: first prompt: {exc}") from exc
            state.counts["prompt_limit_ends"] += 1
            trace.get_current_span().set_attribute("rft.prompt_limit", str(exc))
            # no reply follows the last environment message: the trajectory ends at the model's
            assert state.replied is not None  # a turn after the first follows a reply
            state.trajectory = state.replied
            return self._truncate(state)
        state.trajectory = state.trajectory.then_model(reply)
        state.counts["turns"] += 1
        state.steps.append(Trajectory.of_reply(reply))
        if reply.finish_reason == "length":
            state.counts["cut_turns"] += 1  # still answered: a cut reply may hold its move
        elif reply.finish_reason != "stop":
            return True  # the engine's time ran out: the rollout ends here, marked by the reply
        parsed = episode.parser(reply.text) if episode.parser is not None else None
        if parsed is not None and parsed.has_calls:
            said: Message = parsed.assistant_message()
            new = self._tool_messages(episode, parsed, state)
        else:
            said = {"role": "assistant", "content": reply.text.rstrip()}
            answer = self._step(task, episode, limits, reply, turn)
            state.reward += answer.reward
            state.info.update(answer.info)
            state.steps[-1] = dataclasses.replace(
                state.steps[-1], info={"step_reward": answer.reward}
            )
            if answer.done or not answer.messages:
                state.messages.append(said)
                return True
            new = list(answer.messages)
        state.messages.append(said)
        if turn + 1 >= limits.max_turns:
            return True  # no turn follows, so nothing more is fed to the model
        found = environment_ids(
            model,
            state.trajectory.token_ids.tolist(),
            state.messages,
            new,
            tools=episode.tools or None,
            chat_template=template,
        )
        state.counts[f"template_{found.how}"] += 1
        state.messages.extend(new)
        total = len(state.trajectory.token_ids) + len(found.ids)
        if limits.max_total_tokens is not None and total >= limits.max_total_tokens:
            return self._truncate(state)
        state.replied = state.trajectory
        state.trajectory = state.trajectory.then_environment(found.ids, _text(model, found.ids))
        return False

    def _step(
        self, task: Task, episode: Episode, limits: TurnLimits, reply: Rollout, turn: int
    ) -> StepAnswer:
        try:
            return call_with_timeout(
                lambda: episode.step(reply.text), limits.env_step_timeout_s, "environment-step"
            )
        except CallTimedOut:
            raise WorkflowTimeoutError(
                f"task {task.task_id}: the environment's step of turn {turn} ran past "
                f"env_step_timeout_s ({limits.env_step_timeout_s:g} s)"
            ) from None

    def _tool_messages(
        self, episode: Episode, parsed: ParsedReply, state: _Rollout
    ) -> list[Message]:
        executor = episode.executor or ToolExecutor([])  # tools offered by none: every call unknown
        messages: list[Message] = []
        for call in parsed.calls:
            name = getattr(call, "name", "") or "malformed"
            with self._tracer().start_as_current_span(
                TOOL_CALL, attributes={"rft.tool": name}
            ) as span:
                result = executor.execute(call)
                span.set_attribute("rft.tool_outcome", result.outcome)
            state.counts["tool_calls"] += 1
            state.counts[f"tool_calls/{name}/{result.outcome}"] += 1
            messages.append(result.message())
        return messages

    def _tracer(self) -> trace.Tracer:
        return self.tracer or trace.get_tracer("rft.explorer")

    @staticmethod
    def _truncate(state: _Rollout) -> bool:
        state.trajectory = dataclasses.replace(state.trajectory, finish_reason="length")
        return True

    def _finished(self, task: Task, state: _Rollout, index: int) -> list[Trajectory]:
        counts = state.counts
        metrics: dict[str, float] = {
            "turns": float(counts["turns"]),
            "tool_calls": float(counts["tool_calls"]),
            "cut_turns": float(counts["cut_turns"]),
            "prompt_limit_ends": float(counts["prompt_limit_ends"]),
            "truncated": float(state.trajectory.truncated),
            "call_rewarded": float(counts["call_reward"]),
        }
        metrics.update({k: float(v) for k, v in counts.items() if k.startswith("tool_calls/")})
        metrics.update({k: float(v) for k, v in counts.items() if k.startswith("template_")})
        info = {k: v for k, v in state.info.items()}
        if self.concatenated(task):
            return [state.trajectory.scored(state.reward, info, metrics)]
        return [
            step.scored(state.reward, {**info, **step.info}, metrics).as_step(
                index, turn, len(state.steps)
            )
            for turn, step in enumerate(state.steps)
        ]


def _starting(prompt: Sequence[int], temperature: float) -> Trajectory:
    """A trajectory of the first prompt alone, which the turns extend."""
    return Trajectory(
        prompt_ids=np.asarray(prompt, dtype=np.int32),
        response_ids=np.zeros(0, np.int32),
        logprobs=np.zeros(0, np.float32),
        action_mask=np.zeros(0, np.bool_),
        response_text="",
        finish_reason="stop",
        logprob_temperature=temperature,
    )


def _text(model: ModelHandle, ids: Sequence[int]) -> str:
    return str(model.tokenizer.decode(list(ids), skip_special_tokens=False))


def positive(name: str, value: float | None) -> None:
    """ConfigError unless `value` (a workflow_args entry) is None or above 0."""
    if value is not None and value <= 0:
        raise ConfigError(f"workflow_args.{name} must be above 0, got {value!r}")


def args_signature(name: str, *groups: Sequence[inspect.Parameter]) -> Callable[..., Any]:
    """A callable named `name` taking the keyword parameters of `groups` (the first of a name
    wins): what a workflow's `workflow_args` are checked against at load."""
    params: dict[str, inspect.Parameter] = {}
    for group in groups:
        for p in group:
            params.setdefault(p.name, p.replace(kind=_Param.KEYWORD_ONLY))

    def accepts(**kwargs: Any) -> None:
        del kwargs

    accepts.__signature__ = inspect.Signature(list(params.values()))  # type: ignore[attr-defined]
    accepts.__name__ = name
    return accepts
