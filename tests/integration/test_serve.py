"""Serve mode end to end: a real `rft run` process in mode serve on the tiny model and the real
stack, called with the real `openai` client. Chat (with tools offered and a tool's result sent
back), streaming and logprobs; a session's feedback turning its calls into one Experience with the
caller's tokens masked out, read back from the experience topic; a session left without feedback
dead-lettered with its reason; 401 and each bad request with the body a client receives; and
`kill -9` between the answers and the feedback losing nothing: the restarted server writes the
session's experiences exactly once, as the topics show."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.events.models import DeadLetter, Experience, ServeCall, ServeSessionEnd
from rft.tools.chat_templates import tool_chat_template_path
from tests.integration.test_rft_loop import read_all

pytestmark = pytest.mark.integration

KEY = "sk-rft-test"
MODEL = "rft-policy"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


@dataclass
class Server:
    config: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, env: dict[str, str] | None = None) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rft.cli.main", "run", "--config", str(self.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        started = self.log.read_text().count("rft serve:")
        deadline = time.monotonic() + 180
        while self.log.read_text().count("rft serve:") == started:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        while True:  # uvicorn binds just after the line
            try:
                httpx.get(f"{self.url}/models", timeout=2)
                return
            except httpx.TransportError:
                time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def client(self, session: str, task: str | None = None, **kw: Any) -> openai.OpenAI:
        headers = {"X-Session-Id": session, **({"X-Task-Id": task} if task else {})}
        return openai.OpenAI(
            base_url=self.url, api_key=KEY, default_headers=headers, max_retries=0, **kw
        )

    def feedback(self, body: dict[str, Any], key: str = KEY) -> httpx.Response:
        return httpx.post(
            f"{self.url}/feedback", json=body, headers={"Authorization": f"Bearer {key}"}
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_server(tmp_path: Path, stack: StackSettings, name: str, **serve: Any) -> Server:
    port = free_port()
    raw = {
        "project": "rft-it",
        "name": name,
        "mode": "serve",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {
            "model_path": "tiny",
            "max_prompt_tokens": 2048,
            "max_response_tokens": 8,
            "chat_template_path": str(tool_chat_template_path("smollm2_tools")),
        },
        "buffer": {"batch_size": 1, "total_steps": 1},
        "explorer": {"serve": {"port": port, **serve}},
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return Server(path, port, tmp_path / f"{name}.log")


@pytest.fixture(scope="module")
def server(
    stack: StackSettings, module_unique: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One server process for the module's tests that need no server of their own (each starts
    an `rft run` and loads a model): they call it with session ids of their own."""
    srv = make_server(
        tmp_path_factory.mktemp("serve"),
        stack,
        module_unique,
        api_key=KEY,
        session_ttl_s=10.0,
        max_n=4,
        max_body_bytes=100_000,
    )
    srv.start()
    yield srv
    srv.stop()


def events_of(srv: Server, short: str, unique: str, kind: type) -> list[Any]:
    cfg = load_config(srv.config)
    topic = f"rft-it.{cfg.name}.{short}"
    return [
        e for e in read_all(cfg, topic, f"{unique}-{short}-{time.time_ns()}") if isinstance(e, kind)
    ]


def lp32(values: list[float]) -> list[float]:
    return np.asarray(values, dtype=np.float32).tolist()


def test_chat_with_tools_streaming_logprobs_and_feedback_into_one_masked_experience(
    server: Server, unique: str
) -> None:
    client = server.client("sess-a", task="task-1")
    first = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        tools=TOOLS,
        logprobs=True,
        temperature=1.0,
        max_tokens=6,
    )
    bare = client.chat.completions.create(  # the same chat without tools, another session
        model=MODEL,
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=1,
        extra_headers={"X-Session-Id": "sess-bare"},
    )
    assert first.usage is not None and bare.usage is not None
    # the tools section of the template was rendered into the prompt
    assert first.usage.prompt_tokens > bare.usage.prompt_tokens + 20
    assert first.system_fingerprint == "rft-v0" and first.model_extra["model_version"] == 0
    (choice,) = first.choices
    assert choice.logprobs is not None and choice.logprobs.content is not None
    lps1 = [t.logprob for t in choice.logprobs.content]
    assert len(lps1) == first.usage.completion_tokens and all(lp < 0 for lp in lps1)

    # the agent answers as if the model had called the tool, and sends the tool's result
    said = choice.message.model_dump(exclude_none=True)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": "2+3"})},
    }
    messages = [
        {"role": "user", "content": "What is 2 + 3?"},
        said,
        {"role": "user", "content": "Use the tool."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    # turn 2 continues turn 1 (its reply sent back as it came); streamed with logprobs
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages[:3],
        tools=TOOLS,
        logprobs=True,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    lps2 = [
        t.logprob
        for c in chunks
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content
        for t in c.choices[0].logprobs.content
    ]
    usage2 = chunks[-1].usage
    assert usage2 is not None and len(lps2) == usage2.completion_tokens
    assert all(c.system_fingerprint == "rft-v0" for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert text  # the stream carried the reply's text

    # the caller goes on from turn 1 another way: its own tool call and the tool's result
    third = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, max_tokens=4
    )
    assert third.usage is not None

    fed = server.feedback({"session_id": "sess-a", "reward": 0.75})
    assert fed.status_code == 200, fed.text
    # the calls form a tree: call 1, continued by call 2 and by call 3: two leaves
    assert fed.json() == {
        "session_id": "sess-a",
        "reward": 0.75,
        "experiences": 2,
        "group_id": "serve:task-1",
        "model_version": 0,
    }
    experiences = [
        e for e in events_of(server, "experiences", unique, Experience) if e.task_id == "task-1"
    ]
    assert len(experiences) == 2
    # the chain starts with the first call's prompt; the third call's prompt is its own
    n1 = first.usage.completion_tokens
    between = usage2.prompt_tokens - first.usage.prompt_tokens - n1
    assert between > 0  # the caller's "Use the tool." turn, in the chain, masked out
    # both chains start with call 1: call 2 sent its reply back, and so did call 3 (with the
    # caller's own tool call and result after it, tokens the model did not write: masked out)
    assert [e.prompt_length for e in experiences] == [first.usage.prompt_tokens] * 2
    two, three = sorted(experiences, key=lambda e: e.response_length)
    assert two.action_mask.tolist() == [True] * n1 + [False] * between + [True] * len(lps2)
    assert two.logprobs.tolist() == lp32(lps1) + [0.0] * between + lp32(lps2)
    later = third.usage.prompt_tokens - first.usage.prompt_tokens - n1
    n3 = third.usage.completion_tokens
    assert three.action_mask.tolist() == [True] * n1 + [False] * later + [True] * n3
    assert three.logprobs[:n1].tolist() == lp32(lps1)
    assert all(e.reward == 0.75 and e.model_version == 0 for e in experiences)
    assert all(e.group_id == "serve:task-1" and e.group_size == 2 for e in experiences)

    # a second feedback is refused: the session is closed, its experiences written once
    again = server.feedback({"session_id": "sess-a", "reward": 1.0})
    assert again.status_code == 409 and again.json()["error"]["code"] == "session_closed"


def test_concurrent_completions_are_recorded_with_the_ids_and_logprobs_the_caller_got(
    server: Server, unique: str
) -> None:
    def ask(i: int) -> Any:
        client = server.client(f"conc-{i}")
        reply = client.completions.create(
            model=MODEL,
            prompt=f"{i} + {i} =",
            max_tokens=4,
            n=2,
            logprobs=0,
            extra_body={"return_token_ids": True},
        )
        assert len(reply.choices) == 2 and reply.model_extra["model_version"] == 0
        return reply

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(ask, range(8)))
    calls = {c.call_id: c for c in events_of(server, "serve-calls", unique, ServeCall)}
    for reply in replies:
        call = calls[reply.id]  # each answered call is on the log
        assert call.endpoint == "completions" and len(call.choices) == 2
        for choice, logged in zip(reply.choices, call.choices, strict=True):
            # the ids and logprobs the caller got are the ones the log keeps
            assert choice.model_extra["prompt_token_ids"] == call.prompt_ids.tolist()
            assert choice.model_extra["token_ids"] == logged.response_ids.tolist()
            assert choice.logprobs is not None and choice.logprobs.token_logprobs is not None
            assert lp32(choice.logprobs.token_logprobs) == logged.logprobs.tolist()
            assert choice.text == logged.text


def test_a_session_without_feedback_is_dead_lettered_with_its_reason(
    server: Server, unique: str
) -> None:
    client = server.client("sess-quiet")
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=2
    )
    deadline = time.monotonic() + 60
    letters: list[DeadLetter] = []
    while not letters and time.monotonic() < deadline:
        time.sleep(3)
        letters = [
            d
            for d in events_of(server, "dead-letter", unique, DeadLetter)
            if d.source_key == b"sess-quiet"
        ]
    (letter,) = letters
    assert letter.error_class.endswith("SessionExpiredError")
    assert "no feedback within 10 s" in letter.error_message
    assert letter.source_topic.endswith(".serve-calls")
    ends = [e for e in events_of(server, "serve-calls", unique, ServeSessionEnd)]
    assert [e.outcome for e in ends if e.session_id == "sess-quiet"] == ["expired"]
    late = server.feedback({"session_id": "sess-quiet", "reward": 1.0})
    assert late.status_code == 409 and "expired" in late.json()["error"]["message"]
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=2
        )


def test_an_evaluation_feedback_closes_the_session_without_experiences(
    server: Server, unique: str
) -> None:
    """`train: false`: the agent scores a held-out episode; its end keeps the reward, and no
    experience of it reaches the trainer's topic."""
    client = server.client("sess-eval", task="eval-3")
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is 4 * 5?"}], max_tokens=3
    )
    bad = server.feedback({"session_id": "sess-eval", "reward": 1.0, "train": "no"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "train"
    scored = server.feedback({"session_id": "sess-eval", "reward": 0.5, "train": False})
    assert scored.status_code == 200, scored.text
    assert scored.json()["experiences"] == 0 and scored.json()["group_id"] is None
    ends = [e for e in events_of(server, "serve-calls", unique, ServeSessionEnd)]
    (end,) = [e for e in ends if e.session_id == "sess-eval"]
    assert (end.outcome, end.reward, end.experiences) == ("evaluated", 0.5, 0)
    experiences = events_of(server, "experiences", unique, Experience)
    assert not [e for e in experiences if e.experience_id.startswith("sess-eval:")]
    again = server.feedback({"session_id": "sess-eval", "reward": 1.0})
    assert again.status_code == 409 and "evaluated" in again.json()["error"]["message"]


def load_example_agent() -> Any:
    """examples/serve_agent/agent.py, the example agent written with the plain `openai` client."""
    path = Path(__file__).resolve().parents[2] / "examples" / "serve_agent" / "agent.py"
    spec = importlib.util.spec_from_file_location("serve_agent_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_example_agent_trains_through_feedback_and_evaluates_without(
    server: Server, unique: str
) -> None:
    """The example's episodes against a real server: a training round's sessions become one
    group of experiences per problem (the tool's result masked out when the model called it);
    held-out episodes are closed as evaluations and never reach the experience topic."""
    example = load_example_agent()
    agent = example.Agent(server.url, KEY, MODEL, workers=4, max_tokens=8)
    (seed,) = example.split_seeds("train", 1)
    played = agent.train_round(range(seed, seed + 1), repeat=2, temperature=1.0, shaping=0.2)
    held_out = agent.evaluate(example.split_seeds("eval", 2))
    assert len(played) == 2 and len(held_out) == 2
    assert all(e.reward in (0.0, 1.0) and e.version == 0 for e in played + held_out)
    rows = [
        e
        for e in events_of(server, "experiences", unique, Experience)
        if e.task_id == f"train-{seed}"
    ]
    assert len(rows) == 2 and {e.group_id for e in rows} == {f"serve:train-{seed}"}
    assert all(e.group_size == 2 and e.action_mask.sum() > 0 for e in rows)
    ends = [e for e in events_of(server, "serve-calls", unique, ServeSessionEnd)]
    outcomes = {e.session_id.split(":")[0]: e.outcome for e in ends}
    assert outcomes[f"train-{seed}"] == "feedback"
    assert {outcomes[f"eval-{s}"] for s in example.split_seeds("eval", 2)} == {"evaluated"}
    evaluated = {e.session_id.split(":")[0] for e in ends if e.outcome == "evaluated"}
    assert not {e.task_id for e in events_of(server, "experiences", unique, Experience)} & evaluated


def test_the_example_agent_ends_an_episode_the_server_refuses_as_too_long(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation over the server's prompt limit (`context_length_exceeded`) ends the episode
    unsolved and marked, instead of stopping the agent; other bad requests still raise."""
    example = load_example_agent()
    (seed,) = example.split_seeds("train", 1)
    monkeypatch.setattr(example, "SYSTEM_PROMPT", "x " * 3000)
    episode = example.play(server.client("sess-long"), MODEL, seed, 0.0, max_tokens=8)
    assert (episode.reward, episode.over_limit, episode.tool_calls) == (0.0, True, 0)
    assert "over the prompt limit 1" in example.line("round", [episode])
    with pytest.raises(openai.BadRequestError):  # max_tokens over the server's limit
        example.play(server.client("sess-long-2"), MODEL, seed, 0.0, max_tokens=100)


def test_401_and_bad_requests_get_openai_error_bodies(server: Server) -> None:
    with pytest.raises(openai.AuthenticationError) as no_key:
        openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
    assert no_key.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    assert server.feedback({"session_id": "x", "reward": 1}, key="wrong").status_code == 401

    client = server.client("sess-bad")
    chat = [{"role": "user", "content": "hi"}]
    cases: list[tuple[type[Exception], dict[str, Any], str | None, str | None]] = [
        (openai.NotFoundError, {"model": "gpt-4"}, "model", "model_not_found"),
        (openai.BadRequestError, {"presence_penalty": 0.5}, "presence_penalty",
         "unsupported_parameter"),
        (openai.BadRequestError, {"logprobs": True, "top_logprobs": 3}, "top_logprobs",
         "unsupported_parameter"),
        (openai.BadRequestError, {"max_tokens": 100}, "max_tokens", "max_tokens_exceeded"),
        (openai.BadRequestError, {"messages": [{"role": "user", "content": "x " * 3000}]},
         "messages", "context_length_exceeded"),
    ]  # fmt: skip
    for error, change, param, code in cases:
        with pytest.raises(error) as info:
            client.chat.completions.create(**{"model": MODEL, "messages": chat, **change})
        body = info.value.body
        assert isinstance(body, dict) and (body["param"], body["code"]) == (param, code), body
        assert "Traceback" not in body["message"]

    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    broken = httpx.post(f"{server.url}/chat/completions", content=b"{not json", headers=auth)
    assert broken.status_code == 400
    assert broken.json()["error"]["message"].startswith("the request body is not valid JSON")
    huge = httpx.post(f"{server.url}/chat/completions", content=b"x" * 200_000, headers=auth)
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    nowhere = httpx.get(f"{server.url}/nowhere", headers=auth)
    assert nowhere.status_code == 404 and set(nowhere.json()["error"]) == {
        "message", "type", "param", "code"
    }  # fmt: skip
    unknown = server.feedback({"session_id": "never", "reward": 1})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "session_not_found"
    for text in (broken.text, huge.text, nowhere.text, unknown.text):
        assert "Traceback" not in text


# a kill -9 fault run (38 s): make test-all and make test-faults run it
@pytest.mark.slow
@pytest.mark.faults
def test_kill_9_between_answers_and_feedback_loses_nothing(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """The server dies by SIGKILL after answering a two-turn session; restarted, it rebuilds the
    session from the calls topic, and the feedback writes its experience exactly once."""
    srv = make_server(tmp_path, stack, unique, max_sessions=2)
    env = {"RFT_SERVE_API_KEY": KEY}  # the key from the environment this time
    srv.start(env)
    try:
        client = srv.client("sess-k", task="task-k")
        chat = [{"role": "user", "content": "Count to three."}]
        first = client.chat.completions.create(model=MODEL, messages=chat, max_tokens=5)
        chat += [first.choices[0].message.model_dump(exclude_none=True)]
        chat += [{"role": "user", "content": "Go on."}]
        second = client.chat.completions.create(model=MODEL, messages=chat, max_tokens=5)
        srv.stop(signal.SIGKILL)
        srv.start(env)
        assert "1 open session(s) rebuilt" in srv.log.read_text().split("rft serve:")[-1]
        fed = srv.feedback({"session_id": "sess-k", "reward": 1.0})
        assert fed.status_code == 200, fed.text
        assert fed.json()["experiences"] == 1
        assert srv.feedback({"session_id": "sess-k", "reward": 1.0}).status_code == 409
        # the limit on open sessions: two open, a third is refused
        for i in range(2):
            srv.client(f"open-{i}").completions.create(model=MODEL, prompt="a", max_tokens=1)
        with pytest.raises(openai.RateLimitError) as full:
            srv.client("open-2").completions.create(model=MODEL, prompt="a", max_tokens=1)
        assert full.value.body["code"] == "too_many_sessions"  # type: ignore[index]
        # restarted once more: the closed session stays closed
        srv.stop(signal.SIGKILL)
        srv.start(env)
        assert srv.feedback({"session_id": "sess-k", "reward": 1.0}).status_code == 409
    finally:
        srv.stop(signal.SIGKILL)
    assert first.usage is not None and second.usage is not None
    mine = [e for e in events_of(srv, "experiences", unique, Experience) if e.task_id == "task-k"]
    assert len(mine) == 1  # exactly once, across two kills
    (exp,) = mine
    n1, n2 = first.usage.completion_tokens, second.usage.completion_tokens
    between = second.usage.prompt_tokens - first.usage.prompt_tokens - n1
    assert exp.action_mask.tolist() == [True] * n1 + [False] * between + [True] * n2
    ends = [
        e
        for e in events_of(srv, "serve-calls", unique, ServeSessionEnd)
        if e.session_id == "sess-k"
    ]
    assert [(e.outcome, e.experiences) for e in ends] == [("feedback", 1)]


def test_the_served_policy_follows_weight_versions_and_answers_name_theirs(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """A version announced while the server runs is loaded between engine calls; a session
    whose calls two versions answered becomes an experience tagged with the older one."""
    from rft.engines.models import ModelSpec
    from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
    from rft.events.topics import TopicNames
    from rft.storage.checkpoint_store import CheckpointStore
    from rft.storage.object_store import S3ObjectStore
    from tests.integration.test_weight_follower import announce, perturbed_checkpoint

    srv = make_server(tmp_path, stack, unique, api_key=KEY)
    srv.start()
    try:
        client = srv.client("sess-v", task="task-v")
        chat = [{"role": "user", "content": "Which version are you?"}]
        before = client.chat.completions.create(model=MODEL, messages=chat, max_tokens=3)
        assert before.system_fingerprint == "rft-v0"

        engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
        store = CheckpointStore(
            S3ObjectStore(stack.object_store, bucket="rft-it"), "rft-it", unique
        )
        store.write(1, 1, perturbed_checkpoint(engine, tmp_path / "v1", 0.01))
        announce(stack, TopicNames.for_run("rft-it", unique).weights, store, 1)
        deadline = time.monotonic() + 120
        version = 0
        while version != 1 and time.monotonic() < deadline:
            time.sleep(1)
            version = srv.client("probe").models.list().data[0].model_extra["model_version"]
        assert version == 1, "the announced version was not loaded"

        chat += [before.choices[0].message.model_dump(exclude_none=True)]
        chat += [{"role": "user", "content": "And now?"}]
        after = client.chat.completions.create(model=MODEL, messages=chat, max_tokens=3)
        assert after.system_fingerprint == "rft-v1" and after.model_extra["model_version"] == 1
        fed = srv.feedback({"session_id": "sess-v", "reward": 1.0})
        assert fed.status_code == 200 and fed.json()["model_version"] == 0, fed.text
    finally:
        srv.stop()
    (exp,) = [e for e in events_of(srv, "experiences", unique, Experience) if e.task_id == "task-v"]
    assert exp.model_version == 0  # the oldest version that answered one of its calls
    calls = [
        c for c in events_of(srv, "serve-calls", unique, ServeCall) if c.session_id == "sess-v"
    ]
    assert [c.model_version for c in calls] == [0, 1]
