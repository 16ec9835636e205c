"""`ServeCore`: serve mode without HTTP. It answers a read request through the request batcher
(concurrent callers share batched engine calls), records each answered call before the answer
goes back, turns a session's calls into Experience events when its feedback comes, and
dead-letters the sessions that got none within `explorer.serve.session_ttl_s`.

Sessions: a call names its session by the `X-Session-Id` header or `metadata.session_id`, its
task by `X-Task-Id` or `metadata.task_id` (rft.consumers.serve.app). A call naming none opens a
session of its own, whose id the response's `X-Session-Id` header returns. Sessions of one task
form one rollout group of `algorithm.repeat_times` trajectories (group id `serve:<task>`); a
session without a task is a group of its own trajectories. An experience carries the oldest
version that answered one of its calls.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rft.consumers.serve.session_log import SessionLog
from rft.engines.request_batcher import BatchedModelHandle, RequestBatcher
from rft.engines.rollout import Rollout
from rft.errors import EngineError, RftError, TransportError
from rft.events.codec import EventCodec
from rft.events.models import (
    DeadLetter,
    Experience,
    ServeCall,
    ServeChoice,
    ServeSessionEnd,
    now_ms,
)
from rft.events.reader import Envelope
from rft.serve.api_error import ApiError, bad_request
from rft.serve.replies import Answer, ShapedChoice, assistant_message
from rft.serve.requests import CompletionRequest, ServeLimits
from rft.serve.sessions import Session
from rft.tools.calls import ParsedReply
from rft.workflows.trajectory import Trajectory, experiences_of, rollouts_in
from rft.workflows.turn_ids import TemplateDriftError, environment_ids

log = logging.getLogger(__name__)


_ID_PREFIX = {"chat.completions": "chatcmpl", "completions": "cmpl"}


class SessionExpiredError(RftError):
    """A served session got no feedback within its time to live."""


@dataclass(frozen=True)
class ServeSettings:
    """What the core acts on, from the config (rft.consumers.serve.server builds it)."""

    limits: ServeLimits
    max_prompt_tokens: int
    max_model_len: int
    max_sessions: int
    session_ttl_s: float
    concatenated: bool
    group_size: int  # trajectories of one task's sessions: algorithm.repeat_times
    server_id: str
    explorer_group: str
    parse: Callable[[str], ParsedReply]


@dataclass(frozen=True)
class Answered:
    """A call answered and recorded: what the HTTP side shapes into its response."""

    session_id: str
    answer: Answer
    choices: list[ShapedChoice]


class ServeCore:
    def __init__(self, batcher: RequestBatcher, log_: SessionLog, settings: ServeSettings) -> None:
        self.batcher = batcher
        self.log = log_
        self.settings = settings
        self.sessions: dict[str, Session] = {}
        self.closed: dict[str, ServeSessionEnd] = {}
        self._lock = threading.Lock()  # sessions and closed
        self._closing = threading.Lock()  # one session closes at a time
        self.started = int(time.time())

    # ---- the log ----

    def rebuild(self, envelopes: Iterable[Envelope]) -> int:
        """Open sessions from the calls topic (a restart); returns how many are open."""
        for env in envelopes:
            event = env.event
            if isinstance(event, ServeCall):
                session = self.sessions.get(event.session_id)
                if session is None:
                    session = Session(event.session_id, first_offset=(env.partition, env.offset))
                    self.sessions[event.session_id] = session
                session.add(event)
            elif isinstance(event, ServeSessionEnd):
                self.closed[event.session_id] = event
        for session_id in self.closed:
            self.sessions.pop(session_id, None)
        return len(self.sessions)

    @property
    def version(self) -> int:
        return int(self.batcher.engine.model_version)

    # ---- answering ----

    def answer(
        self, request: CompletionRequest, session_id: str | None, task_id: str | None
    ) -> Answered:
        session_id = session_id or request.session_id or f"sess-{uuid.uuid4().hex}"
        task_id = task_id or request.task_id or ""
        session = self._session_for(session_id, task_id)
        try:
            call, choices = self._answer(session, request)
        finally:
            with self._lock:
                session.in_flight -= 1
                if not session.calls and not session.in_flight:
                    self.sessions.pop(session_id, None)  # nothing answered: no session
        answer = Answer(
            call.call_id,
            int(call.created_at // 1000),
            self.settings.limits.model_name,
            call.model_version,
            len(call.prompt_ids),
        )
        return Answered(session_id, answer, choices)

    def _answer(
        self, session: Session, request: CompletionRequest
    ) -> tuple[ServeCall, list[ShapedChoice]]:
        """Generate, then record the call; it joins its session once Kafka has it."""
        with self.batcher.handle() as handle:
            prompt = self._prompt_ids(handle, session, request)
            self._check_lengths(len(prompt), request)
            try:
                replies = handle.generate(prompt, request.params)
            except EngineError as exc:
                raise ApiError(
                    500, f"the engine could not answer: {exc}", code="engine_error"
                ) from exc
            version = handle.model_version
        parse = self.settings.parse if request.tools else None
        choices = [assistant_message(reply, parse) for reply in replies]
        call = self._call_event(session, request, prompt, replies, choices, version)
        try:
            self.log.record(call)
        except (TransportError, RftError) as exc:
            raise ApiError(
                503, f"the call could not be recorded, so it is not answered: {exc}"
            ) from exc
        with self._lock:
            session.add(call)
        return call, choices

    def _session_for(self, session_id: str, task_id: str) -> Session:
        with self._lock:
            if session_id in self.closed:
                raise ApiError(
                    409,
                    f"session {session_id!r} is closed ({self.closed[session_id].outcome}); "
                    "start a new session",
                    param="session_id",
                    code="session_closed",
                )
            session = self.sessions.get(session_id)
            if session is not None:
                if task_id and session.task_id and task_id != session.task_id:
                    raise bad_request(
                        f"session {session_id!r} belongs to task {session.task_id!r}, "
                        f"not {task_id!r}",
                        "task_id",
                    )
                session.in_flight += 1
                return session
            if len(self.sessions) >= self.settings.max_sessions:
                raise ApiError(
                    429,
                    f"{len(self.sessions)} sessions are open, the limit "
                    "(explorer.serve.max_sessions): give feedback to one or wait for it to "
                    "expire",
                    code="too_many_sessions",
                )
            # open from its first call on, so that the limit counts calls in flight too
            session = self.sessions[session_id] = Session(session_id, task_id, in_flight=1)
            return session

    def _prompt_ids(
        self, handle: BatchedModelHandle, session: Session, request: CompletionRequest
    ) -> list[int]:
        if request.endpoint == "completions":
            if isinstance(request.prompt, list):
                vocab = len(handle.tokenizer)
                if max(request.prompt) >= vocab:
                    raise bad_request(
                        f"prompt token id {max(request.prompt)} is not below the vocabulary "
                        f"size {vocab}",
                        "prompt",
                    )
                return list(request.prompt)
            assert request.prompt is not None  # read_completion requires one
            return self.batcher.encode(request.prompt)
        assert request.messages is not None
        found = session.replied_to(request.messages, request.tools)
        try:
            if found is not None:
                call, k = found
                so_far = [*call.prompt_ids.tolist(), *call.choices[k].response_ids.tolist()]
                before = list(call.request["messages"]) + [call.choices[k].message]
                try:
                    more = environment_ids(
                        handle,
                        so_far,
                        before,
                        request.messages[len(before) :],
                        tools=request.tools,
                    )
                    return so_far + more.ids
                except TemplateDriftError:
                    pass  # rendered afresh: the call starts a trajectory of its own
            return handle.chat_ids(request.messages, tools=request.tools)
        except EngineError as exc:
            raise bad_request(f"messages cannot be rendered: {exc}", "messages") from exc

    def _check_lengths(self, prompt_len: int, request: CompletionRequest) -> None:
        s = self.settings
        if prompt_len == 0:
            raise bad_request("the prompt has no tokens", "messages")
        if prompt_len > s.max_prompt_tokens:
            raise bad_request(
                f"the prompt is {prompt_len} tokens, over this server's limit of "
                f"{s.max_prompt_tokens} (model.max_prompt_tokens)",
                "messages" if request.endpoint == "chat.completions" else "prompt",
                "context_length_exceeded",
            )
        if prompt_len + request.params.max_tokens > s.max_model_len:
            raise bad_request(
                f"the prompt ({prompt_len} tokens) and max_tokens ({request.params.max_tokens}) "
                f"are over the model's context of {s.max_model_len} tokens (model.max_model_len)",
                "max_tokens",
                "context_length_exceeded",
            )

    def _call_event(
        self,
        session: Session,
        request: CompletionRequest,
        prompt: list[int],
        replies: list[Rollout],
        choices: list[ShapedChoice],
        version: int,
    ) -> ServeCall:
        parent = session.parent_of(prompt, replies[0].logprob_temperature)
        if request.endpoint == "chat.completions":
            body: dict[str, Any] = {"messages": request.messages, "tools": request.tools}
        else:
            body = {"prompt": request.prompt}
        return ServeCall(
            session_id=session.session_id,
            task_id=session.task_id,
            call_id=f"{_ID_PREFIX[request.endpoint]}-{uuid.uuid4().hex}",
            parent_call_id=parent[0].call_id if parent else "",
            parent_choice=parent[1] if parent else -1,
            endpoint=request.endpoint,
            request=body,
            prompt_ids=np.asarray(prompt, dtype=np.int32),
            choices=tuple(
                ServeChoice(
                    response_ids=reply.response_ids,
                    logprobs=reply.logprobs,
                    text=reply.text,
                    finish_reason=reply.finish_reason,
                    message=choice.message,
                )
                for reply, choice in zip(replies, choices, strict=True)
            ),
            logprob_temperature=replies[0].logprob_temperature,
            model_version=version,
            server_id=self.settings.server_id,
        )

    # ---- closing sessions ----

    def feedback(
        self, session_id: str, reward: float, task_id: str | None, train: bool = True
    ) -> dict[str, Any]:
        """The session's calls as Experience events, with its end, in one transaction; with
        `train` false (an evaluation) only the end, outcome `evaluated`, carrying the reward."""
        with self._closing:
            with self._lock:
                if session_id in self.closed:
                    end = self.closed[session_id]
                    raise ApiError(
                        409,
                        f"session {session_id!r} is already closed ({end.outcome}, "
                        f"{end.experiences} experiences)",
                        param="session_id",
                        code="session_closed",
                    )
                session = self.sessions.get(session_id)
                if session is not None and session.in_flight:
                    raise ApiError(
                        409,
                        f"session {session_id!r} has a call still being answered; send its "
                        "feedback once the answer came",
                        param="session_id",
                        code="session_busy",
                    )
            if session is None or not session.calls:
                raise ApiError(
                    404,
                    f"no open session {session_id!r}",
                    param="session_id",
                    code="session_not_found",
                )
            if task_id and session.task_id and task_id != session.task_id:
                raise bad_request(
                    f"session {session_id!r} belongs to task {session.task_id!r}", "task_id"
                )
            task = task_id or session.task_id
            if train:
                trajectories = session.trajectories(reward, self.settings.concatenated)
                experiences = self._experiences(session, task, trajectories)
                end = ServeSessionEnd(session_id, "feedback", float(reward), len(experiences))
            else:
                experiences = []
                end = ServeSessionEnd(
                    session_id, "evaluated", float(reward), 0, "scored with train false"
                )
            try:
                self.log.close(end, experiences)
            except RftError as exc:
                raise ApiError(
                    503, f"the session's experiences could not be written (nothing was): {exc}"
                ) from exc
            with self._lock:
                self.closed[session_id] = end
                self.sessions.pop(session_id, None)
        return {
            "session_id": session_id,
            "reward": float(reward),
            "experiences": len(experiences),
            "group_id": experiences[0].group_id if experiences else None,
            "model_version": session.oldest_version,
        }

    def _experiences(
        self, session: Session, task: str, trajectories: list[Trajectory]
    ) -> list[Experience]:
        sid = session.session_id
        if task:
            group_id, size = f"serve:{task}", self.settings.group_size
        else:
            group_id, size = f"serve:{sid}", rollouts_in(trajectories)
        return experiences_of(
            trajectories,
            id_prefix=sid,
            task_id=task or sid,
            group_id=group_id,
            group_size=size,
            explorer_id=self.settings.server_id,
            model_version=session.oldest_version,
            explorer_group=self.settings.explorer_group,
        )

    def expire_due(self, now: int | None = None) -> list[str]:
        """Dead-letter each open session whose last call is older than the TTL; their ids."""
        now = now_ms() if now is None else now
        ttl_ms = int(self.settings.session_ttl_s * 1000)
        with self._lock:
            due = [
                s
                for s in self.sessions.values()
                if s.calls and not s.in_flight and now - s.last_at_ms > ttl_ms
            ]
        expired = []
        for session in due:
            with self._closing:
                if session.session_id in self.closed:
                    continue
                if session.in_flight or now - session.last_at_ms <= ttl_ms:  # a call came
                    continue
                self._expire(session, now)
                expired.append(session.session_id)
        return expired

    def _expire(self, session: Session, now: int) -> None:
        sid = session.session_id
        reason = (
            f"session {sid}: no feedback within {self.settings.session_ttl_s:g} s of its last "
            f"call ({len(session.calls)} call(s) answered, the last "
            f"{(now - session.last_at_ms) / 1000:.0f} s ago); its calls stay on "
            f"{self.log.calls_topic} under key {sid}"
        )
        partition, offset = session.first_offset or (-1, -1)
        letter = DeadLetter.for_error(
            SessionExpiredError(reason),
            topic=self.log.calls_topic,
            partition=partition,
            offset=offset,
            payload=EventCodec.default().encode(session.calls[0]),
            consumer=self.settings.explorer_group,
            key=sid.encode(),
        )
        end = ServeSessionEnd(sid, "expired", detail=reason)
        try:
            self.log.close(end, letter=letter)
        except RftError as exc:
            log.warning("session %s: its expiry could not be written (%s); tried again", sid, exc)
            return
        log.warning("%s; dead-lettered", reason)
        with self._lock:
            self.closed[sid] = end
            self.sessions.pop(sid, None)
