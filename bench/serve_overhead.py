"""Serve mode's overhead: the endpoint against calling the engine in-process, on the CPU.

For 1 and 16 concurrent sessions, each making --calls chat calls of --tokens tokens at most:
"in-process" calls the engine through a RequestBatcher handle per session (what a workflow does in
the explorer), "endpoint" calls a real `rft run` process in mode serve with the `openai` client
(HTTP, JSON, the call recorded on Kafka before the answer). Both use the same config, so the same
model, chat template, batch cap (explorer.runner_per_model) and sampling settings. Prints p50 /
p99 latency of one call and generated tokens/s over the run, per mode and concurrency, each the
median of --repeats runs, the modes interleaved.
Needs the local stack (`rft stack up`; --bootstrap / --s3 name another).
Run: PYTHONPATH=. python bench/serve_overhead.py [--model tiny] [--calls 8] [--tokens 16]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import yaml

from rft.catalog import load_config
from rft.consumers.run_plan import RunPlan
from rft.engines.request_batcher import RequestBatcher
from rft.engines.rollout import RolloutEngine, SamplingParams, create_rollout_engine

KEY = "sk-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(args: argparse.Namespace, root: Path, port: int) -> Path:
    raw = {
        "project": "rft-bench",
        "name": f"serve{uuid.uuid4().hex[:8]}",
        "mode": "serve",
        "checkpoint_root_dir": str(root / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": args.model, "max_prompt_tokens": 512,
                  "max_response_tokens": args.tokens},
        "buffer": {"batch_size": 1, "total_steps": 1},
        "explorer": {"runner_per_model": args.batch, "serve": {"port": port, "api_key": KEY}},
        "stack": {"kafka": {"bootstrap_servers": args.bootstrap},
                  "object_store": {"endpoint": args.s3, "bucket": "rft-bench"}},
    }  # fmt: skip
    path = root / "serve.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def question(session: int, call: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Session {session}, question {call}: what is {call}+1?"}]


def run_sessions(sessions: int, calls: int, one: Callable[[int, int], int]) -> dict[str, float]:
    """`sessions` threads, each making `calls` calls one after another; latency per call."""
    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()

    def session(i: int) -> None:
        for k in range(calls):
            started = time.perf_counter()
            made = one(i, k)
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                tokens[0] += made

    threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    latencies.sort()
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        "tok_s": tokens[0] / wall,
        "tokens": tokens[0],
        "wall_s": wall,
    }


def in_process(
    config: Path, engine: RolloutEngine, args: argparse.Namespace, sessions: int
) -> dict[str, float]:
    cfg = load_config(config)
    params = SamplingParams(max_tokens=args.tokens)
    with RequestBatcher(engine, max_batch_size=cfg.explorer.runner_per_model) as batcher:

        def one(i: int, k: int) -> int:
            with batcher.handle() as handle:
                prompt = handle.chat_ids(question(i, k))
                return len(handle.generate(prompt, params)[0].response_ids)

        result = run_sessions(sessions, args.calls, one)
        result["engine_calls"] = batcher.stats.engine_calls
    return result


def endpoint(url: str, args: argparse.Namespace, sessions: int) -> dict[str, float]:
    clients = [
        openai.OpenAI(
            base_url=url, api_key=KEY, max_retries=0,
            default_headers={"X-Session-Id": f"bench-{sessions}-{i}-{uuid.uuid4().hex[:6]}"},
        )
        for i in range(sessions)
    ]  # fmt: skip

    def one(i: int, k: int) -> int:
        reply = clients[i].chat.completions.create(
            model="rft-policy", messages=question(i, k), max_tokens=args.tokens
        )
        assert reply.usage is not None
        return reply.usage.completion_tokens

    return run_sessions(sessions, args.calls, one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--calls", type=int, default=8, help="calls per session")
    parser.add_argument("--tokens", type=int, default=16, help="max tokens per call")
    parser.add_argument("--batch", type=int, default=16, help="explorer.runner_per_model")
    parser.add_argument("--repeats", type=int, default=3, help="medians of this many runs")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("RFT_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    )
    parser.add_argument("--s3", default=os.environ.get("RFT_S3_ENDPOINT", "http://127.0.0.1:39000"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rft-serve-bench-"))
    port = free_port()
    config = write_config(args, root, port)
    cfg = load_config(config)
    engine = create_rollout_engine(
        cfg.explorer.rollout_model.engine_type, RunPlan(cfg).rollout_engine_config()
    )
    log = (root / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited: {(root / 'serve.log').read_text()[-2000:]}")
            try:
                httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        endpoint(url, args, 1)  # warm-up of both sides: connections, first engine calls
        in_process(config, engine, args, 1)
        # interleaved, so that a neighbour's load on a shared machine falls on both modes alike
        for _ in range(args.repeats):
            for n in args.concurrency:
                runs.setdefault(("in-process", n), []).append(in_process(config, engine, args, n))
                runs.setdefault(("endpoint", n), []).append(endpoint(url, args, n))
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(
        f"model {args.model}, {args.calls} calls per session, max_tokens {args.tokens}, "
        f"batch cap {args.batch}, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}"
    )
    print(
        f"{'mode':<11} {'sessions':>8} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'tokens':>7} {'tok/s':>8} {'engine calls':>12}"
    )
    for (mode, n), results in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        r = {k: statistics.median(x[k] for x in results) for k in results[0]}
        calls = r.get("engine_calls")
        print(
            f"{mode:<11} {n:>8} {n * args.calls:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{int(r['tokens']):>7} {r['tok_s']:>8.1f} {'' if calls is None else int(calls):>12}"
        )


if __name__ == "__main__":
    main()
