"""The serve app's HTTP face without a server process: the order of its checks (key, size, JSON,
request) and that an unexpected failure reaches the caller as a 500 body without its traceback,
with FastAPI's in-process test client over a core whose answers fail on purpose."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rft.consumers.serve.app import build_app
from rft.serve.requests import ServeLimits

KEY = "sk-unit"


class FailingCore:
    """What the app reads of a core; every answer and feedback fails unexpectedly."""

    def __init__(self) -> None:
        self.settings = SimpleNamespace(limits=ServeLimits("m", 16, 2))
        self.batcher = SimpleNamespace(decode=lambda ids: "")
        self.started = 0
        self.version = 3
        self.asked: list[Any] = []

    def answer(self, request: Any, session: str | None, task: str | None) -> Any:
        self.asked.append((request, session, task))
        raise RuntimeError("secret internals at /srv/app.py line 12")

    def feedback(self, session_id: str, reward: float, task_id: str | None) -> Any:
        self.asked.append((session_id, reward, task_id))
        raise RuntimeError("secret internals")


@pytest.fixture
def app() -> tuple[TestClient, FailingCore]:
    core = FailingCore()
    return TestClient(build_app(core, KEY, 2048), raise_server_exceptions=False), core  # type: ignore[arg-type]


AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_an_unexpected_failure_is_a_500_body_without_the_traceback(app) -> None:
    client, core = app
    reply = client.post(
        "/v1/chat/completions", json=CHAT, headers={**AUTH, "X-Session-Id": "s", "X-Task-Id": "t"}
    )
    assert reply.status_code == 500
    error = reply.json()["error"]
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]
    assert "secret" not in reply.text and "Traceback" not in reply.text
    (asked,) = core.asked
    assert asked[1:] == ("s", "t")  # the headers name the session and task


def test_the_key_is_checked_before_anything_is_read(app) -> None:
    client, core = app
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        reply = client.post("/v1/chat/completions", content=b"{broken", headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/v1/models").status_code == 401
    models = client.get("/v1/models", headers=AUTH).json()
    assert models["data"][0]["id"] == "m" and models["data"][0]["model_version"] == 3
    assert core.asked == []


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"x" * 3000, 413, None),
        (b"{broken", 400, None),
        (b'{"reward": 1}', 400, "session_id"),
        (b'{"session_id": "s"}', 400, "reward"),
        (b'{"session_id": "s", "reward": true}', 400, "reward"),
        (b'{"session_id": "s", "reward": NaN}', 400, "reward"),
        (b'{"session_id": "s", "reward": 1, "bonus": 2}', 400, "bonus"),
    ],
)
def test_bad_feedback_is_refused_before_the_core_sees_it(
    app, body: bytes, status: int, param: str | None
) -> None:
    client, core = app
    reply = client.post("/v1/feedback", content=body, headers=AUTH)
    assert reply.status_code == status and reply.json()["error"]["param"] == param
    assert core.asked == []
    # Trinity-RFT's name for the route is the same route
    assert client.post("/feedback", content=body, headers=AUTH).status_code == status
