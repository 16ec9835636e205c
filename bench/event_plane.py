"""Throughput of the event plane: encode -> produce -> consume -> decode of Experience events.

For each client (confluent, kafka-python) and response length (256 / 1k / 4k tokens, prompt 128)
it measures, through the real broker, the typed path (EventWriter / EventReader, Avro) and the
broker's ceiling for the same bytes (raw records of the same size through the same clients, no
Avro). A consumer process reads while the main process writes; "end to end" is events over the
time from the first send to the last decoded event. Medians of --repeats runs are printed.

Run: `python bench/event_plane.py [--bootstrap HOST:PORT] [--events 20000] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import statistics
import time
import uuid
from typing import Any

import numpy as np

from rft.config.connections import KafkaSettings
from rft.events.codec import EventCodec
from rft.events.models import Experience
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter

POOL = 64  # distinct events cycled through, so encoding is real work but setup stays cheap


def sample_experience(response_tokens: int, seed: int) -> Experience:
    rng = np.random.default_rng(seed)
    return Experience(
        experience_id=f"task-{seed}/0",
        task_id=f"task-{seed}",
        group_id=f"task-{seed}",
        group_size=8,
        explorer_id="explorer-0",
        model_version=12,
        prompt_ids=rng.integers(0, 50_000, 128, dtype=np.int32),
        response_ids=rng.integers(0, 50_000, response_tokens, dtype=np.int32),
        logprobs=-rng.random(response_tokens, dtype=np.float32),
        action_mask=np.ones(response_tokens, dtype=bool),
        reward=1.0,
        prompt_text="What is 12 + 30?",
        response_text="The answer is 42.",
        info={"finish_reason": "stop"},
        created_at=1_767_225_600_000,
    )


def _consume(
    kafka: KafkaSettings,
    topic: str,
    count: int,
    typed: bool,
    consumer_config: dict[str, Any],
    ready: Any,
    result: Any,
) -> None:
    """Child process: join, signal ready, read `count` events, report the last arrival time."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    if typed:
        source: Any = EventReader.open(kafka, group, [topic], config=consumer_config)
    else:
        source = kafka_backend(kafka).consumer(group, [topic], config=consumer_config)
    got = 0
    nbytes = 0
    with source:
        while not source.assignment():
            source.poll(1000, 0.1)  # the topic is empty: this only joins the group
        ready.set()
        while got < count:
            batch = source.poll(5000, 1.0)
            got += len(batch)
            if not typed:
                nbytes += sum(len(r.value) for r in batch)
    result.put((time.time(), got, nbytes))


def run_once(
    kafka: KafkaSettings,
    tokens: int,
    events: int,
    typed: bool,
    producer_config: dict[str, Any],
    consumer_config: dict[str, Any],
) -> dict[str, float]:
    topic = f"bench.{uuid.uuid4().hex[:8]}.experiences"
    ensure_topics(kafka, [topic])
    codec = EventCodec.default()
    pool = [sample_experience(tokens, seed) for seed in range(POOL)]
    encoded = [codec.encode(e) for e in pool]
    size = statistics.mean(len(b) for b in encoded)
    raw = encoded  # the same bytes sent as they are: no Avro work on either side
    keys = [e.task_id for e in pool]

    ctx = mp.get_context("spawn")
    ready, result = ctx.Event(), ctx.Queue()
    child = ctx.Process(
        target=_consume, args=(kafka, topic, events, typed, consumer_config, ready, result)
    )
    child.start()
    if not ready.wait(120):
        child.kill()
        raise RuntimeError("consumer did not join its group in 120s")

    started = time.time()
    if typed:
        with EventWriter.open(kafka, config=producer_config) as writer:
            for i in range(events):
                writer.send(topic, pool[i % POOL], key=keys[i % POOL])
            writer.flush()
    else:
        with kafka_backend(kafka).producer(config=producer_config) as producer:
            for i in range(events):
                producer.produce(topic, raw[i % POOL], key=keys[i % POOL].encode())
            producer.flush()
    produced = time.time()
    finished, got, _ = result.get(timeout=600)
    child.join(30)
    with kafka_backend(kafka).admin() as admin:
        admin.delete_topics([topic])
    assert got >= events, f"consumer read {got} of {events}"
    return {
        "bytes": size,
        "produce_eps": events / (produced - started),
        "e2e_eps": events / (finished - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap (default: settings)")
    parser.add_argument("--clients", default="confluent,kafka-python")
    parser.add_argument("--tokens", default="256,1024,4096")
    parser.add_argument("--events", type=int, default=20_000, help="events per run at 1k tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--compression", default=None, help="none | lz4 | zstd ...")
    parser.add_argument("--fetch-min-bytes", type=int, default=None)
    args = parser.parse_args()

    base = KafkaSettings()
    if args.bootstrap:
        base = dataclasses.replace(base, bootstrap_servers=args.bootstrap)
    producer_config: dict[str, Any] = {}
    if args.linger_ms is not None:
        producer_config["linger.ms"] = args.linger_ms
    if args.batch_size is not None:
        producer_config["batch.size"] = args.batch_size
    if args.compression is not None:
        producer_config["compression.type"] = args.compression
    consumer_config: dict[str, Any] = {}
    if args.fetch_min_bytes is not None:
        consumer_config["fetch.min.bytes"] = args.fetch_min_bytes

    header = (
        f"{'client':<13}{'tokens':>7}{'bytes':>8}{'avro e2e/s':>12}{'MB/s':>8}"
        f"{'raw e2e/s':>11}{'MB/s':>8}{'avro/raw':>10}{'avro prod/s':>13}{'raw prod/s':>12}"
    )
    print(
        f"broker {base.bootstrap_servers}; medians of {args.repeats}; "
        f"producer {producer_config}; consumer {consumer_config}"
    )
    print(header)
    for client in args.clients.split(","):
        kafka = dataclasses.replace(base, client=client)
        for tokens in (int(t) for t in args.tokens.split(",")):
            # same bytes per run whatever the size; kafka-python is far slower, so fewer events
            events = max(2_000, args.events * 1024 // tokens)
            if client == "kafka-python":
                events = max(1_000, events // 5)
            runs = {
                typed: [
                    run_once(kafka, tokens, events, typed, producer_config, consumer_config)
                    for _ in range(args.repeats)
                ]
                for typed in (True, False)
            }

            def median(typed: bool, key: str, runs: dict = runs) -> float:
                return statistics.median(r[key] for r in runs[typed])

            size = runs[True][0]["bytes"]
            avro, raw = median(True, "e2e_eps"), median(False, "e2e_eps")
            print(
                f"{client:<13}{tokens:>7}{size:>8.0f}{avro:>12,.0f}{avro * size / 1e6:>8.1f}"
                f"{raw:>11,.0f}{raw * size / 1e6:>8.1f}{avro / raw:>10.0%}"
                f"{median(True, 'produce_eps'):>13,.0f}{median(False, 'produce_eps'):>12,.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
