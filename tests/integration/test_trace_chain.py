"""One trace per task, end to end: `rft publish`, `rft train` and `rft explore` as separate
processes on the real Kafka and MinIO, each exporting its spans to a trace store: the local stack's
Zipkin server (`monitor.trace_exporter: zipkin`, read back through Zipkin's query API) in the
default suite, or one JSON-lines file (`monitor.trace_exporter: file`) in the slow one.

From the store alone the test follows one task: its publish span, the explorer's rollout of it,
the reward, the produce of its experiences, the trainer's consume of each, the train step that
links to those consumes, the weight version that step went into (upload and announce), and the
explorer's load of that version, linked to the announce. The Kafka headers of the experience and
WeightVersion events must carry the produce and announce spans. No span holds prompt or response
text (`monitor.trace_content` is off). From Zipkin, `GET /api/v2/trace/{id}` of the task's trace
returns exactly the task's spans of the chain (publish, rollout, reward, produce, the consumes).
The task feeder (`rft feed`) starts a trace per task too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, Task, WeightVersion
from rft.events.reader import Envelope
from rft.events.topics import ensure_topics
from rft.tracing.file_exporter import read_span_records
from tests.integration.browser import headless_chromium, screenshot_path
from tests.integration.test_rft_loop import run_config
from tests.integration.test_task_feeder import BATCH as FEED_BATCH
from tests.integration.test_task_feeder import ROUNDS as FEED_ROUNDS
from tests.integration.test_task_feeder import answer_tasks, feeder_config
from tests.integration.zipkin_query import run_traces, trace_records
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

STEPS = 2

Span = dict[str, Any]


def run_cli(verb: str, config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(procs: dict[str, subprocess.Popen[str]], timeout_s: float = 420) -> None:
    for name, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            raise
        assert proc.returncode == 0, f"{name} failed:\n{out[-4000:]}"


def envelopes(cfg: Any, topic: str, group: str) -> list[Envelope]:
    return read_topic(cfg.stack.kafka, topic, group)


def traceparent_span(env: Envelope) -> str:
    """The parent span id the event's `traceparent` header names."""
    header = env.header("traceparent")
    assert header is not None, f"{env.topic}@{env.offset} carries no trace context"
    return header.decode().split("-")[2]


def one(spans: list[Span], what: str) -> Span:
    assert len(spans) == 1, f"expected one {what}, found {len(spans)}: {spans}"
    return spans[0]


# the spans every process of the loop ends with, once exported
LAST_SPANS = {"task.publish", "explorer.load_weights", "trainer.announce"}


def zipkin_spans(base: str, run: str, timeout_s: float = 60) -> list[Span]:
    """The run's spans in Zipkin, once each process's last kind of span has arrived (the server
    stores what it accepted a moment after answering)."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = [s for trace in run_traces(base, run) for s in trace]
        if {s["name"] for s in spans} >= LAST_SPANS or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@dataclass(frozen=True)
class TracedRun:
    """A short loop whose three processes exported their spans to `store`, and those spans."""

    store: str
    base: str  # the Zipkin server's base URL, or the spans file
    raw: dict[str, Any]
    cfg: Any
    plan: RunPlan
    spans: list[Span]
    config: Path


def traced_run(stack: StackSettings, name: str, tmp: Path, store: str, base: str) -> TracedRun:
    raw = run_config(stack, name, tmp)
    raw["buffer"]["total_steps"] = STEPS
    raw["monitor"] = (
        {"trace_exporter": "zipkin", "trace_args": {"endpoint": f"{base}/api/v2/spans"}}
        if store == "zipkin"
        else {"trace_exporter": "file", "trace_args": {"path": base}}
    )
    config = tmp / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    plan = RunPlan(cfg)

    finish({"publisher": run_cli("publish", config)}, timeout_s=180)
    finish({"trainer": run_cli("train", config), "explorer": run_cli("explore", config)})

    spans = zipkin_spans(base, plan.run_id) if store == "zipkin" else list(read_span_records(base))
    return TracedRun(store, base, raw, cfg, plan, spans, config)


@pytest.fixture(scope="module")
def zipkin_run(
    stack: StackSettings, zipkin: str, module_unique: str, tmp_path_factory: pytest.TempPathFactory
) -> TracedRun:
    """The loop with `trace_exporter: zipkin`, once for this module's tests."""
    return traced_run(
        stack, module_unique + "z", tmp_path_factory.mktemp("zipkin"), "zipkin", zipkin
    )


@pytest.fixture(scope="module")
def file_run(
    stack: StackSettings, module_unique: str, tmp_path_factory: pytest.TempPathFactory
) -> TracedRun:
    """The loop with `trace_exporter: file`, once for this module's tests."""
    tmp = tmp_path_factory.mktemp("file")
    return traced_run(stack, module_unique + "f", tmp, "file", str(tmp / "traces.jsonl"))


def first_step(spans: list[Span]) -> Span:
    """The trainer's first optimizer step: a root span linked to the consumes it trained on."""
    return one(
        [s for s in spans if s["name"] == "trainer.step" and s["attributes"]["rft.step"] == 1],
        "train step 1",
    )


@pytest.mark.parametrize("store", ["zipkin", pytest.param("file", marks=pytest.mark.slow)])
def test_one_task_has_an_unbroken_trace_from_publish_to_an_explorer_loading_its_version(
    unique: str, request: pytest.FixtureRequest, store: str
) -> None:
    run: TracedRun = request.getfixturevalue(f"{store}_run")
    raw, cfg, plan, spans, zipkin = run.raw, run.cfg, run.plan, run.spans, run.base
    by_id = {s["span_id"]: s for s in spans}
    children: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s["parent_span_id"] is not None:
            children[s["parent_span_id"]].append(s)

    def named(name: str, among: list[Span] | None = None) -> list[Span]:
        return [s for s in (spans if among is None else among) if s["name"] == name]

    assert {s["service"] for s in spans} >= {"rft-publisher", "rft-explorer", "rft-trainer"}
    # the first optimizer step, and the version it went into, as announced
    step = first_step(spans)
    assert step["service"] == "rft-trainer" and step["parent_span_id"] is None
    assert step["attributes"]["rft.batch_size"] == len(step["links"]) > 0
    consumed = [by_id[link["span_id"]] for link in step["links"]]
    assert {c["name"] for c in consumed} == {"trainer.consume"}
    task_id = consumed[0]["attributes"]["rft.task_id"]

    # publish -> rollout -> reward / produce, in the task's own trace
    publish = one(
        [s for s in named("task.publish") if s["attributes"]["rft.task_id"] == task_id],
        f"publish span of {task_id}",
    )
    assert publish["service"] == "rft-publisher" and publish["parent_span_id"] is None
    trace_id = publish["trace_id"]
    rollout = one(named("explorer.rollout", children[publish["span_id"]]), "rollout")
    assert rollout["service"] == "rft-explorer" and rollout["status"] != "ERROR"
    assert rollout["trace_id"] == trace_id
    assert rollout["attributes"]["rft.task_id"] == task_id
    assert rollout["attributes"]["rft.rollouts"] == raw["algorithm"]["repeat_times"]
    # batched: its chunk's other task shares the engine call and the step span it links to
    assert rollout["attributes"]["rft.chunk_tasks"] == raw["buffer"]["batch_size"]
    (step_link,) = rollout["links"]
    assert by_id[step_link["span_id"]]["name"] == "explorer.step"
    reward = one(named("explorer.reward", children[rollout["span_id"]]), "reward")
    assert len(reward["attributes"]["rft.rewards"]) == raw["algorithm"]["repeat_times"]
    produce = one(named("explorer.produce", children[rollout["span_id"]]), "produce")
    experience_ids = set(produce["attributes"]["rft.experience_ids"])
    assert len(experience_ids) == raw["algorithm"]["repeat_times"]

    # produce -> consume (one per experience, in the trainer) -> the train step's links
    consumes = named("trainer.consume", children[produce["span_id"]])
    assert {c["attributes"]["rft.experience_id"] for c in consumes} == experience_ids
    assert all(c["trace_id"] == trace_id and c["service"] == "rft-trainer" for c in consumes)
    linked = {link["span_id"] for link in step["links"]}
    assert {c["span_id"] for c in consumes} <= linked
    if store == "zipkin":
        # the query API's one trace of the task: exactly its publish, rollout, reward, produce
        # and the consumes of its experiences (links to other traces resolve by the same API)
        task_trace = trace_records(zipkin, trace_id)
        chain = [publish, rollout, reward, produce, *consumes]
        assert {s["span_id"] for s in task_trace} == {s["span_id"] for s in chain}
        assert {s["name"] for s in task_trace} == {
            "task.publish",
            "explorer.rollout",
            "explorer.reward",
            "explorer.produce",
            "trainer.consume",
        }
        (step_trace,) = [
            t for t in trace_records(zipkin, step["trace_id"]) if t["span_id"] == step["span_id"]
        ]
        assert step_trace["links"] == step["links"]

    # the Kafka headers of those experiences carry the produce span
    experience_events = [
        e
        for e in envelopes(cfg, plan.experience_topic, unique + "-e")
        if isinstance(e.event, Experience) and e.event.experience_id in experience_ids
    ]
    assert len(experience_events) == len(experience_ids)
    assert {traceparent_span(e) for e in experience_events} == {produce["span_id"]}
    assert {(c["attributes"]["messaging.kafka.offset"]) for c in consumes} == {
        e.offset for e in experience_events
    }

    # step -> its weight version: publish (child of the step), upload and announce under it
    version = one(
        [
            s
            for s in named("trainer.publish")
            if step["span_id"] in {link["span_id"] for link in s["links"]}
        ],
        "version holding step 1",
    )
    assert version["parent_span_id"] == step["span_id"]
    assert version["attributes"]["rft.version"] == 1  # sync_interval 1: a version per step
    upload = one(named("trainer.checkpoint_upload", children[version["span_id"]]), "upload")
    assert upload["attributes"]["rft.bytes"] > 0 and upload["attributes"]["rft.files"] > 0
    announce = one(named("trainer.announce", children[version["span_id"]]), "announce")
    weight_events = [
        e
        for e in envelopes(cfg, plan.topics.weights, unique + "-w")
        if isinstance(e.event, WeightVersion) and e.event.version == 1
    ]
    assert [traceparent_span(e) for e in weight_events] == [announce["span_id"]]

    # -> the explorer's load of that version: its own span, linked to the announce
    load = one(
        [
            s
            for s in named("explorer.load_weights")
            if announce["span_id"] in {link["span_id"] for link in s["links"]}
        ],
        "load of version 1",
    )
    assert load["service"] == "rft-explorer" and load["status"] != "ERROR"
    assert load["attributes"]["rft.version"] == 1
    assert load["attributes"]["rft.explorer_id"]

    # trace_content is off: no prompt or response text anywhere
    assert not [s for s in spans if {"rft.prompt", "rft.responses"} & set(s["attributes"])]


def test_the_task_feeder_starts_a_trace_per_task_it_publishes(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """`rft feed` (an online selector's publisher) as a process: every task it publishes has
    its own root `task.publish` span, and the Task event's headers carry it."""
    spans_file = tmp_path / "traces.jsonl"
    config = feeder_config(stack, unique, tmp_path)
    raw = yaml.safe_load(config.read_text())
    raw["monitor"] = {"trace_exporter": "file", "trace_args": {"path": str(spans_file)}}
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    done = threading.Event()
    answerer = threading.Thread(target=answer_tasks, args=(cfg, plan, done), daemon=True)
    answerer.start()
    try:
        finish({"feeder": run_cli("feed", config)}, timeout_s=300)
    finally:
        done.set()
        answerer.join(timeout=30)

    publishes = {
        s["attributes"]["rft.task_id"]: s
        for s in read_span_records(spans_file)
        if s["name"] == "task.publish"
    }
    tasks = [
        e for e in envelopes(cfg, plan.topics.tasks, unique + "-t") if isinstance(e.event, Task)
    ]
    assert len(tasks) == FEED_ROUNDS * FEED_BATCH
    assert set(publishes) == {e.event.task_id for e in tasks}
    assert len({s["trace_id"] for s in publishes.values()}) == len(tasks)  # a trace per task
    for env in tasks:
        span = publishes[env.event.task_id]
        assert span["service"] == "rft-feeder" and span["parent_span_id"] is None
        assert traceparent_span(env) == span["span_id"]


def test_the_trace_is_listed_in_the_zipkin_ui(zipkin_run: TracedRun, tmp_path: Path) -> None:
    """A person's view: Zipkin's web UI in headless Chromium lists every span of one task's
    trace (publish, rollout, reward, produce, a consume per experience) under its service, and the
    first train step's trace with its version's spans and the `rft.links` tag naming the
    experiences it trained on. Screenshots: trace.png and trace-step.png."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    step = first_step(zipkin_run.spans)
    task_trace = step["links"][0]["trace_id"]
    repeat = zipkin_run.raw["algorithm"]["repeat_times"]
    expected = {
        task_trace: [
            "rft-publisher: task.publish",
            "rft-explorer: explorer.rollout",
            "rft-explorer: explorer.reward",
            "rft-explorer: explorer.produce",
            *["rft-trainer: trainer.consume"] * repeat,
        ],
        step["trace_id"]: [
            "rft-trainer: trainer.step",
            "rft-trainer: trainer.publish",
            "rft-trainer: trainer.checkpoint_upload",
            "rft-trainer: trainer.announce",
        ],
    }
    shots = {task_trace: "trace.png", step["trace_id"]: "trace-step.png"}
    with headless_chromium() as browser:
        for trace_id, rows in expected.items():
            browser.get(f"{zipkin_run.base}/zipkin/traces/{trace_id}")

            def listed(driver: Any, rows: list[str] = rows) -> list[str] | None:
                text = driver.find_element(By.TAG_NAME, "body").text
                lines = [line for line in text.splitlines() if line in set(rows)]
                # the title repeats the root span's row; the span list holds each row once
                return lines if sorted(lines[1:]) == sorted(rows) else None

            lines = WebDriverWait(browser, 30).until(listed)
            assert lines[0] == rows[0]  # the root span heads the trace
            body = browser.find_element(By.TAG_NAME, "body").text
            assert f"Total Spans\n{len(rows)}" in body
            if trace_id == step["trace_id"]:
                # the selected root span's tags: the links to the consumes it trained on
                assert "rft.links" in body and task_trace in body
                tag = browser.find_element(By.XPATH, "//*[text()='rft.links']")
                browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", tag)
            browser.save_screenshot(str(screenshot_path(tmp_path, shots[trace_id])))


def test_rft_status_names_the_trace_ui(
    zipkin_run: TracedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    from rft.cli.main import main as cli

    capsys.readouterr()
    assert cli(["status", "--config", str(zipkin_run.config)]) == 0
    assert f"traces: {zipkin_run.base}/zipkin/" in capsys.readouterr().out.splitlines()
    assert cli(["status", "--config", str(zipkin_run.config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["traces"] == f"{zipkin_run.base}/zipkin/"
