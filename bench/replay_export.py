"""`rft replay export` at scale: rate and peak memory of exporting an experience topic.

Writes --events experiences (prompt 128 tokens, response --response-tokens, the shape explorers
write: keyed by task, groups of 8, in Kafka transactions of 64) to a fresh topic through the real
broker, then runs `rft replay export` as a separate process for each format, once over the first
tenth of the topic and once over all of it. Each export's peak RSS is its own (the child's
`ru_maxrss`), so the two sizes show whether memory stays flat as the topic grows.

Run: `python bench/replay_export.py [--events 100000] [--formats parquet,jsonl,sql]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from rft.config.connections import KafkaSettings
from rft.events.models import Experience
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter

POOL = 64
GROUP = 8
SUFFIX = {"parquet": ".parquet", "jsonl": ".jsonl", "sql": ".db"}


def pool(response_tokens: int) -> list[Experience]:
    rng = np.random.default_rng(0)
    return [
        Experience(
            experience_id="",
            task_id="",
            group_id="",
            group_size=GROUP,
            explorer_id="bench-explorer",
            explorer_group="bench.run.explorer.main",
            model_version=0,
            prompt_ids=rng.integers(0, 50_000, 128, dtype=np.int32),
            response_ids=rng.integers(0, 50_000, response_tokens, dtype=np.int32),
            logprobs=-rng.random(response_tokens, dtype=np.float32),
            reward=float(i % 2),
            response_text="The answer is 42.",
            info={"finish_reason": "stop"},
            logprob_temperature=1.0,
        )
        for i in range(POOL)
    ]


def produce(kafka: KafkaSettings, topic: str, events: int, response_tokens: int) -> float:
    shapes = pool(response_tokens)
    started = time.monotonic()
    with EventWriter.open(kafka, transactional_id=f"bench-{uuid.uuid4().hex[:8]}") as tx:
        for start in range(0, events, 64):
            tx.begin()
            for i in range(start, min(start + 64, events)):
                task = f"t{i // GROUP}"
                exp = dataclasses.replace(
                    shapes[i % POOL],
                    experience_id=f"{task}:{i % GROUP}",
                    task_id=task,
                    group_id=task,
                    model_version=i // 5000,
                )
                tx.send(topic, exp, key=task)
            tx.commit()
    return time.monotonic() - started


def export(args: argparse.Namespace, topic: str, out: Path, extra: list[str]) -> dict:
    """Run one export as a child process; its own peak RSS comes from wait4's rusage."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rft.cli.main",
                "replay",
                "export",
                topic,
                "-o",
                str(out),
                "--bootstrap",
                args.bootstrap,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    wall = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"export failed:\n{stderr}")
    line = next(line for line in stderr.splitlines() if "written to" in line)
    match = re.search(r"([\d,]+) experience\(s\) of [\d,]+ event\(s\) .* in ([\d.]+)s", line)
    assert match, line
    return {
        "experiences": int(match.group(1).replace(",", "")),
        "seconds": float(match.group(2)),
        "wall": wall,
        "peak_mib": usage.ru_maxrss / 1024,  # Linux reports KiB
        "size_mib": _size(out) / 2**20,
    }


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("RFT_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--response-tokens", type=int, default=256)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--formats", default="parquet,jsonl,sql")
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap, partitions=args.partitions)
    topic = f"bench.replay-{uuid.uuid4().hex[:8]}.experiences"
    ensure_topics(kafka, [topic])
    seconds = produce(kafka, topic, args.events, args.response_tokens)
    with kafka_backend(kafka).admin() as admin:
        bounds = admin.partition_bounds([topic])
    print(
        f"produced {args.events:,} experiences (prompt 128, response {args.response_tokens} "
        f"tokens) to {topic} in {seconds:.1f}s ({args.events / seconds:,.0f}/s)"
    )
    tenth = ",".join(f"{b.partition}={b.low + (b.high - b.low) // 10}" for b in bounds)
    print(
        "| format | range | experiences | export s | experiences/s | wall s (with start-up) "
        "| peak RSS MiB | output MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            for label, extra in (("first tenth", ["--to-offsets", tenth]), ("all", [])):
                out = Path(tmp) / f"{fmt}-{label.replace(' ', '-')}{SUFFIX[fmt]}"
                got = export(args, topic, out, extra)
                print(
                    f"| {fmt} | {label} | {got['experiences']:,} | {got['seconds']:.1f} | "
                    f"{got['experiences'] / got['seconds']:,.0f} | {got['wall']:.1f} | "
                    f"{got['peak_mib']:.0f} | {got['size_mib']:.0f} |",
                    flush=True,
                )
                out.unlink(missing_ok=True)
    with kafka_backend(kafka).admin() as admin:
        admin.delete_topics([topic])


if __name__ == "__main__":
    main()
