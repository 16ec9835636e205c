"""Writes the golden single-object bytes of every schema version: `<record>.v<N>.bin`.

Run once per new schema version (`python -m tests.unit.golden.make_golden`); existing files are
never rewritten, because they pin what events written by earlier releases look like on the wire.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rft.events.catalog import SchemaCatalog
from rft.events.codec import EventCodec
from rft.events.models import (
    Claim,
    ComponentStatus,
    DeadLetter,
    Experience,
    ManifestEntry,
    Metric,
    ServeCall,
    ServeChoice,
    ServeSessionEnd,
    SyncRequest,
    Task,
    TopicOffset,
    TrainedLog,
    WeightVersion,
)

HERE = Path(__file__).parent
CREATED_AT = 1_767_225_600_000  # 2026-01-01T00:00:00Z

SAMPLES = {
    "rft.events.Task": Task(
        task_id="arith-0-17",
        taskset="arithmetic",
        epoch=0,
        index=17,
        payload={"question": "What is 12 + 30?", "answer": 42, "tags": ["add", "two-digit"]},
        format={"prompt_key": "question", "response_key": "answer"},
        workflow="math_workflow",
        reward_fn="math_reward",
        rollout_args={"temperature": 1.0, "max_tokens": 64},
        repeat_times=8,
        is_eval=False,
        created_at=CREATED_AT,
        position=3,
    ),
    "rft.events.Experience": Experience(
        experience_id="arith-0-17/3",
        task_id="arith-0-17",
        group_id="arith-0-17",
        group_size=8,
        explorer_id="explorer-0",
        model_version=5,
        prompt_ids=np.array([1, 2040, 33, -1, 2**31 - 1], dtype=np.int32),
        response_ids=np.array([19, 20, 2], dtype=np.int32),
        logprobs=np.array([-0.25, -1.5, -0.0], dtype=np.float32),
        action_mask=np.array([True, True, False]),
        reward=1.0,
        token_rewards=np.array([0.0, 0.5, 0.5], dtype=np.float32),
        prompt_text="What is 12 + 30?",
        response_text="42 ✓",
        info={"finish_reason": "stop"},
        truncated=True,
        metrics={"format_reward": 0.5, "generate_s": 0.125},
        logprob_temperature=0.7,
        explorer_group="demo.run1.explorer.explorer",
        trajectory_id="arith-0-17/3",
        turn=1,
        turn_count=3,
        created_at=CREATED_AT,
    ),
    "rft.events.WeightVersion": WeightVersion(
        version=5,
        train_step=40,
        uri="s3://rft/demo/run1/v000005/",
        manifest=(
            ManifestEntry("model.safetensors", 270_000_000, "ab" * 32),
            ManifestEntry("config.json", 812, "cd" * 32),
        ),
        consumed_offsets=(TopicOffset("demo.run1.experiences", 0, 1200),),
        parent_version=4,
        created_at=CREATED_AT,
        trained_log=TrainedLog.of_lists(
            trained=[["demo.run1.experiences", 0, [[1100, 1163], [1180, 1199]]]],
            retrained=[["demo.run1.experiences", 0, 1101, 2]],
            settled=[["demo.run1.experiences", 0, [[1100, 1199]]]],
            settled_ahead=[["demo.run1.experiences", 0, [[1210, 1211]]]],
        ),
    ),
    "rft.events.Metric": Metric(
        component="trainer",
        run="demo.run1",
        step=40,
        values={"loss": 0.75, "reward/mean": 0.375},
        tags={"split": "train"},
        timestamp=CREATED_AT,
    ),
    "rft.events.DeadLetter": DeadLetter(
        source_topic="demo.run1.experiences",
        source_partition=2,
        source_offset=99,
        payload=b"\xc3\x01\x00\xff",
        error_class="rft.errors.UnknownSchemaError",
        error_message="unknown schema fingerprint 00ff",
        consumer="trainer",
        source_key=b"arith-0-17",
        headers={"traceparent": b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        created_at=CREATED_AT,
    ),
    "rft.events.SyncRequest": SyncRequest(
        explorer_id="explorer-0", current_version=4, step=120, requested_at=CREATED_AT
    ),
    "rft.events.Claim": Claim(
        holder="arith.explorer.main.explorer-0",
        token="host-a:4242:1f2e3d",
        host="host-a",
        pid=4242,
        claimed_at=CREATED_AT,
    ),
    "rft.events.ComponentStatus": ComponentStatus(
        component="explorer",
        instance="explorer-0",
        group="demo.run.explorer.explorer",
        state="finished",
        reason="tasks_exhausted",
        detail="explorer explorer-0 found no more tasks at step 12 of 25",
        step=12,
        total_steps=25,
        experience_topic="demo.run.experiences",
        group_size=1,
        tasks_left=0,
        created_at=CREATED_AT,
    ),
    "rft.events.ServeCall": ServeCall(
        session_id="episode-17",
        task_id="task-3",
        call_id="chatcmpl-2",
        parent_call_id="chatcmpl-1",
        parent_choice=0,
        endpoint="chat.completions",
        request={"messages": [{"role": "user", "content": "What is 12 + 30?"}], "tools": None},
        prompt_ids=np.array([1, 2, 3, 4, 5, 6], dtype=np.int32),
        choices=(
            ServeChoice(
                response_ids=np.array([7, 8], dtype=np.int32),
                logprobs=np.array([-0.5, -0.25], dtype=np.float32),
                text="42",
                finish_reason="stop",
                message={"role": "assistant", "content": "42"},
            ),
        ),
        logprob_temperature=1.0,
        model_version=3,
        server_id="host-a-4242",
        created_at=CREATED_AT,
    ),
    "rft.events.ServeSessionEnd": ServeSessionEnd(
        session_id="episode-17",
        outcome="feedback",
        reward=1.0,
        experiences=1,
        detail="",
        created_at=CREATED_AT,
    ),
}


def golden_path(name: str, version: int) -> Path:
    return HERE / f"{name.rsplit('.', 1)[-1]}.v{version}.bin"


def golden_codec(name: str, version: int) -> EventCodec:
    """A codec that writes `name` at `version` (and everything else at the latest)."""
    return EventCodec(SchemaCatalog.default(), write_versions={name: version})


def main() -> None:
    for schema in SchemaCatalog.default():
        path = golden_path(schema.name, schema.version)
        if path.exists():
            continue
        path.write_bytes(golden_codec(schema.name, schema.version).encode(SAMPLES[schema.name]))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
