"""Sessions of served calls: which earlier reply a call continues, and the trajectories a
session's calls make once its reward is known.

A call continues an earlier one of its session when its prompt is, token for token, that call's
prompt and one of its replies followed by more (the caller's next messages), at the same logprob
temperature: `Session.parent_of` finds the longest such sequence. The server feeds a chat that
repeats a reply it gave exactly those ids plus the new messages' (rft.workflows.turn_ids), so a
multi-turn agent's calls chain whatever its chat template does to the reply's text. The calls form
a tree: a choice no later call continues is a leaf, and each leaf's path from its root is one
trajectory. Concatenated, the path is one `Trajectory` (the caller's tokens between replies have
action mask 0 and logprob 0); step-wise, each call of the path is one step of it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rft.engines.rollout import Rollout
from rft.events.models import ServeCall
from rft.workflows.trajectory import Trajectory


@dataclass
class Session:
    """A session's answered calls, in order, and when (ms since the epoch) the last came."""

    session_id: str
    task_id: str = ""
    calls: list[ServeCall] = field(default_factory=list)
    last_at_ms: int = 0
    # where its first call lies on the calls topic, when known (a rebuilt session), for its letter
    first_offset: tuple[int, int] | None = None
    in_flight: int = 0  # calls being answered now (the server's count; not in the log)

    def add(self, call: ServeCall) -> None:
        self.calls.append(call)
        self.last_at_ms = max(self.last_at_ms, call.created_at)
        if call.task_id and not self.task_id:
            self.task_id = call.task_id

    def parent_of(
        self, prompt_ids: Sequence[int], logprob_temperature: float
    ) -> tuple[ServeCall, int] | None:
        """The call and choice whose prompt + reply `prompt_ids` extends (longest first)."""
        best: tuple[ServeCall, int] | None = None
        best_len = 0
        prompt = np.asarray(prompt_ids, dtype=np.int32)
        for call in self.calls:
            if call.logprob_temperature != logprob_temperature:
                continue
            for k, choice in enumerate(call.choices):
                n = len(call.prompt_ids) + len(choice.response_ids)
                if n <= best_len or n >= len(prompt):
                    continue
                if np.array_equal(prompt[: len(call.prompt_ids)], call.prompt_ids) and (
                    np.array_equal(prompt[len(call.prompt_ids) : n], choice.response_ids)
                ):
                    best, best_len = (call, k), n
        return best

    def replied_to(
        self, messages: Sequence[dict], tools: Sequence[dict] | None
    ) -> tuple[ServeCall, int] | None:
        """The latest chat call and choice whose messages and reply `messages` start with (and
        go on after), offering the same tools: the call a chat's next turn continues."""
        for call in reversed(self.calls):
            if call.endpoint != "chat.completions" or call.request.get("tools") != (
                list(tools) if tools else None
            ):
                continue
            before = call.request.get("messages") or []
            if len(messages) <= len(before) + 1:
                continue
            if not all(_same_message(a, b) for a, b in zip(messages, before, strict=False)):
                continue
            for k, choice in enumerate(call.choices):
                if _same_message(messages[len(before)], choice.message):
                    return call, k
        return None

    def trajectories(self, reward: float, concatenated: bool) -> list[Trajectory]:
        """One trajectory per leaf, scored `reward` (see module doc); step-wise, its steps."""
        by_id = {call.call_id: call for call in self.calls}
        continued = {(c.parent_call_id, c.parent_choice) for c in self.calls if c.parent_call_id}
        out: list[Trajectory] = []
        leaf = 0
        for call in self.calls:
            for k in range(len(call.choices)):
                if (call.call_id, k) in continued:
                    continue
                path = _path(by_id, call, k)
                info = {"session_id": self.session_id, "calls": len(path)}
                if concatenated:
                    out.append(_concatenated(path).scored(reward, info))
                else:
                    for turn, (step_call, choice) in enumerate(path):
                        step = Trajectory.of_reply(_rollout(step_call, choice))
                        out.append(step.scored(reward, info).as_step(leaf, turn, len(path)))
                leaf += 1
        return out

    @property
    def oldest_version(self) -> int:
        """The oldest weight version that answered one of its calls (what its experiences say:
        the staleness bound then holds for every token)."""
        return min(call.model_version for call in self.calls)


def _path(by_id: dict[str, ServeCall], call: ServeCall, choice: int) -> list[tuple[ServeCall, int]]:
    path = [(call, choice)]
    while path[-1][0].parent_call_id in by_id:
        tip = path[-1][0]
        path.append((by_id[tip.parent_call_id], tip.parent_choice))
    return path[::-1]


def _rollout(call: ServeCall, choice: int) -> Rollout:
    reply = call.choices[choice]
    return Rollout(
        prompt_ids=call.prompt_ids,
        response_ids=reply.response_ids,
        logprobs=reply.logprobs,
        text=reply.text,
        finish_reason=reply.finish_reason,
        logprob_temperature=call.logprob_temperature,
    )


def _concatenated(path: list[tuple[ServeCall, int]]) -> Trajectory:
    trajectory = Trajectory.of_reply(_rollout(*path[0]))
    for call, choice in path[1:]:
        between = call.prompt_ids[len(trajectory.token_ids) :]
        trajectory = trajectory.then_environment(between, "").then_model(_rollout(call, choice))
    return trajectory


def _same_message(sent: dict, ours: dict) -> bool:
    """A message a caller sent back equals one of ours: role, text and tool calls (arguments
    compared as JSON values, so a client's re-serialisation does not matter)."""
    if sent.get("role") != ours.get("role"):
        return False
    if (sent.get("content") or "") != (ours.get("content") or ""):
        return False
    return _calls(sent) == _calls(ours)


def _calls(message: dict) -> list[tuple[object, object]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        out.append((fn.get("name"), arguments))
    return out
