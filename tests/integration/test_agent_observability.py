"""A tool-using multi-turn run, observed: `rft publish` and `rft explore` as processes on the real
Kafka, spans exported to a file, metrics on the metrics topic.

The model is the `replay` engine (issue 17's turns need tool calls that a random model never
writes): its recording is made here by playing each task's rollout once through the real
workflow, template, parser and tokenizer with scripted replies (first turn: a good calculator
call and a call to a tool nobody offered; second turn: the answer), so the explorer process is
fed exactly those replies. From the span file: every turn is an `explorer.turn` span under the
task's `explorer.rollout`, every tool call an `explorer.tool_call` under its turn, all in the
trace the task's `task.publish` span began. From the metrics topic: the explorer's step metrics
count turns per trajectory, tool calls by tool and outcome, and truncations.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.replay.export import EXPORT_FORMATS
from rft.consumers.run_plan import RunPlan
from rft.engines.models import ModelSpec
from rft.engines.rollout import Rollout, RolloutEngineConfig, SamplingParams, create_rollout_engine
from rft.environments.multiplication import Multiplication
from rft.events.models import Experience, Metric, Task
from rft.events.topics import ensure_topics
from rft.producers.task_publisher import load_run_tasksets
from rft.replay.experience_rows import ExportRow
from rft.tools.chat_templates import tool_chat_template, tool_chat_template_path
from rft.tracing.file_exporter import read_span_records
from rft.tracing.spans import PUBLISH, ROLLOUT, TOOL_CALL, TURN
from rft.workflows import WORKFLOWS
from tests.integration.test_metrics_follow import follow, jsonl_rows
from tests.integration.test_rft_loop import read_all
from tests.integration.test_trace_chain import finish, run_cli
from tests.unit.test_tool_workflow import ScriptedHandle

pytestmark = pytest.mark.integration

TASKS = 2
ROLLOUTS = 2


class RecordingScript(ScriptedHandle):
    """Answers with the next scripted reply and keeps each turn as an Experience row of a replay
    recording."""

    def __init__(self, engine: Any, replies: Sequence[str], task: Task) -> None:
        super().__init__(engine, replies)
        self.task = task
        self.rows: list[Experience] = []

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> list[Rollout]:
        (reply,) = super().generate(prompt_ids, params)
        self.rows.append(
            Experience(
                experience_id=f"{self.task.task_id}/{len(self.rows)}",
                task_id=self.task.task_id,
                group_id=self.task.task_id,
                group_size=1,
                explorer_id="script",
                model_version=0,
                prompt_ids=reply.prompt_ids,
                response_ids=reply.response_ids,
                logprobs=reply.logprobs,
                reward=0.0,
                response_text=reply.text,
                logprob_temperature=reply.logprob_temperature,
            )
        )
        return [reply]


def record_script(cfg: Any, path: Path) -> None:
    """Play each training task once with scripted replies and write what the model was fed and
    said as a JSONL experience export, the replay engine's recording."""
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    engine.set_chat_template(
        tool_chat_template("smollm2_tools"),
        enable_thinking=cfg.explorer.rollout_model.enable_thinking,
    )
    (taskset,) = [t for t in load_run_tasksets(cfg) if not t.is_eval]
    rows: list[ExportRow] = []
    for row in taskset.rows:
        task = Task(
            task_id=f"script-{row.index}",
            taskset=taskset.name,
            epoch=0,
            index=row.index,
            payload=row.payload,
            format=taskset.format,
            workflow=taskset.workflow,
        )
        env = Multiplication()
        env.reset(int(row.payload["seed"]))
        a, b = env.factors
        good = json.dumps({"name": "calculator", "arguments": {"expression": f"{a} * {b}"}})
        unknown = json.dumps({"name": "search", "arguments": {"query": "multiplication"}})
        script = RecordingScript(
            engine,
            [f"<tool_call>{good}</tool_call><tool_call>{unknown}</tool_call>", f"Answer: {a * b}"],
            task,
        )
        WORKFLOWS.get(taskset.workflow)().run(task, script, SamplingParams(max_tokens=256), 0)
        rows.extend(
            ExportRow(exp, "script", 0, len(rows) + i, 0) for i, exp in enumerate(script.rows)
        )
    writer = EXPORT_FORMATS.get("jsonl")(str(path), decoded=False, overwrite=True, table="x")
    writer.write(rows)
    writer.close()


def test_turns_and_tool_calls_are_spans_of_the_tasks_trace_and_counted_in_step_metrics(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    spans_file = tmp_path / "traces.jsonl"
    metrics_file = tmp_path / "metrics.jsonl"
    recording = tmp_path / "script.jsonl"
    raw = {
        "project": "rft-it",
        "name": unique,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": ROLLOUTS},
        "model": {
            "model_path": "tiny",
            "max_prompt_tokens": 4096,  # the tiny model's tokenizer spends many ids on the tools
            "max_response_tokens": 256,
            "chat_template_path": str(tool_chat_template_path("smollm2_tools")),
        },
        "buffer": {
            "batch_size": TASKS,
            "total_steps": 1,
            "explorer_input": {
                "default_workflow_type": "multiplication_tool",
                "taskset": {
                    "name": "mul",
                    "storage_type": "generator",
                    "path": "multiplication",
                    "generator_args": {"num_tasks": TASKS},
                    "workflow_args": {"max_turns": 3},
                },
            },
        },
        "explorer": {
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "replay", "engine_args": {"path": str(recording)}},
        },
        "synchronizer": {"sync_style": "trainer_driven"},  # the explorer never waits for weights
        "monitor": {
            "monitor_type": "jsonl",
            "monitor_args": {"path": str(metrics_file)},
            "trace_exporter": "file",
            "trace_args": {"path": str(spans_file)},
        },
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }
    # the recording is made from the same config with a real engine, then replayed
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({**raw, "explorer": {"eval_on_startup": False}}))
    record_script(load_config(plain), recording)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)

    finish({"publisher": run_cli("publish", config)}, timeout_s=180)
    finish({"explorer": run_cli("explore", config)}, timeout_s=300)

    spans = list(read_span_records(spans_file))
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        if s["parent_span_id"] is not None:
            children[s["parent_span_id"]].append(s)
    publishes = [s for s in spans if s["name"] == PUBLISH]
    assert len(publishes) == TASKS
    for publish in publishes:
        trace_id = publish["trace_id"]
        (rollout,) = [s for s in children[publish["span_id"]] if s["name"] == ROLLOUT]
        assert rollout["status"] != "ERROR" and rollout["attributes"]["rft.rollouts"] == ROLLOUTS
        turns = [s for s in children[rollout["span_id"]] if s["name"] == TURN]
        # two turns per rollout: the tool calls, then the answer
        assert sorted(t["attributes"]["rft.turn"] for t in turns) == sorted([0, 1] * ROLLOUTS)
        assert all(t["trace_id"] == trace_id and t["service"] == "rft-explorer" for t in turns)
        for turn in turns:
            calls = [s for s in children[turn["span_id"]] if s["name"] == TOOL_CALL]
            if turn["attributes"]["rft.turn"] == 0:
                assert sorted(
                    (c["attributes"]["rft.tool"], c["attributes"]["rft.tool_outcome"])
                    for c in calls
                ) == [("calculator", "ok"), ("search", "unknown_tool")]
                assert all(c["trace_id"] == trace_id for c in calls)
            else:
                assert calls == []
    # no turn or tool call span outside a task's trace
    traces = {p["trace_id"] for p in publishes}
    assert {s["trace_id"] for s in spans if s["name"] in (TURN, TOOL_CALL)} <= traces

    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert len(experiences) == TASKS * ROLLOUTS and {e.reward for e in experiences} == {1.0}
    metrics = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m")
        if isinstance(m, Metric) and m.component == "explorer" and "turns_mean" in m.values
    ]
    (step,) = metrics
    values = step.values
    trajectories = TASKS * ROLLOUTS
    assert values["turns_mean"] == 2.0
    assert values["tool_calls_total"] == 2.0 * trajectories
    assert values["tool_calls/calculator/ok_total"] == float(trajectories)
    assert values["tool_calls/search/unknown_tool_total"] == float(trajectories)
    assert values["truncated_mean"] == 0.0 and values["prompt_limit_ends_mean"] == 0.0
    # and a sink gets them as they are on the topic
    follow(config, "--from-beginning", "--until-idle", "3")
    (sunk,) = [v for c, _, v in jsonl_rows(metrics_file) if c == "explorer" and "turns_mean" in v]
    assert {k: v for k, v in sunk.items() if k.startswith(("tool_calls", "turns"))} == {
        k: v for k, v in values.items() if k.startswith(("tool_calls", "turns"))
    }
