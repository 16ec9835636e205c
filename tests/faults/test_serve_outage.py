"""The serve endpoint while its Kafka is down (issue 18's broker outage), against a private stack
(conftest.py) whose broker this test kills with `kill -9`.

An answer is given only once its call is on the calls topic, so a call made while Kafka is down
is ridden out for `stack.kafka.outage_timeout` (short here) and then refused with 503 and an
OpenAI-style error body, which the real `openai` client raises as an InternalServerError; the
server stays up. Once the broker is back, calls are answered again; the refused calls' records
were aborted, so the committed calls topic holds exactly the answered calls, and a server
restarted before the feedback rebuilds the session from them: feedback turns the answered calls,
and only those, into experiences on the log.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import openai
import pytest
import yaml

from rft.events.models import Experience, ServeCall
from rft.stack.local_stack import LocalStack
from tests.integration.test_serve import MODEL, events_of, make_server

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow]

OUTAGE_TIMEOUT_S = 8.0
CHAT = [{"role": "user", "content": "What is 2 + 3?"}]


def test_serve_answers_503_while_kafka_is_down_and_recovers(
    private_stack: LocalStack, tmp_path: Path, unique: str
) -> None:
    srv = make_server(tmp_path, private_stack.stack_settings(), unique)
    raw = yaml.safe_load(srv.config.read_text())
    raw["stack"]["kafka"]["outage_timeout"] = OUTAGE_TIMEOUT_S
    srv.config.write_text(yaml.safe_dump(raw))
    srv.start()
    try:
        client = srv.client("sess-outage", task="task-outage")
        before = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)

        pid = private_stack.status().service("kafka").pid
        assert pid
        os.kill(pid, signal.SIGKILL)
        while private_stack.status().service("kafka").pid:
            time.sleep(0.2)
        refused_at = time.monotonic()
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
        waited = time.monotonic() - refused_at
        assert info.value.status_code == 503
        error = info.value.body
        assert isinstance(error, dict)
        assert error["type"] == "server_error"
        assert error["message"].startswith("the call could not be recorded, so it is not answered")
        assert "kafka" in error["message"] and "outage_timeout" in error["message"]
        assert "Traceback" not in error["message"]
        assert srv.proc is not None and srv.proc.poll() is None, "the server stays up"

        private_stack.up(timeout_s=180, services=["kafka"])
        deadline = time.monotonic() + 120
        after = None
        refusals_after = 0
        while after is None:  # the server's clients reconnect in their own time
            try:
                after = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
            except openai.InternalServerError as exc:
                assert exc.status_code == 503
                refusals_after += 1
                assert time.monotonic() < deadline, "calls were not answered again"
                time.sleep(1.0)
        # a restart before the feedback rebuilds the session from the committed calls only
        srv.stop()
        srv.start()
        fed = srv.feedback({"session_id": "sess-outage", "reward": 1.0})
        assert fed.status_code == 200, fed.text
        assert fed.json()["experiences"] == 2  # the two answered calls, not the refused ones
    finally:
        srv.stop()

    calls = [c for c in events_of(srv, "serve-calls", unique, ServeCall)]
    answered = {c.call_id for c in calls if c.session_id == "sess-outage"}
    assert answered == {before.id, after.id}, "a refused call's record never counts"
    experiences = [
        e for e in events_of(srv, "experiences", unique, Experience) if e.task_id == "task-outage"
    ]
    assert len(experiences) == 2 and {e.reward for e in experiences} == {1.0}
    print(  # what the report quotes: how long the refusal took, and what the log kept
        f"refused after {waited:.1f}s (outage_timeout {OUTAGE_TIMEOUT_S:g}s); "
        f"{refusals_after} refusals after the broker was back; "
        f"calls of the session on the topic: {len(answered)}"
    )
