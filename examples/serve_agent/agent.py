"""An agent written with the plain `openai` package, trained through rft's serve endpoint.

The agent solves the multiplication tool task (3- to 4-digit products, which SmolLM2-135M cannot
compute in its head): it asks the served policy, runs the `calculator` tool itself when the reply
calls it, sends the result back as a `tool` message, and reads the final `Answer: <number>`. The
model is only ever reached through `openai.OpenAI(base_url=...)`; rft's own code here is the
problem generator (its seed splits keep evaluation problems out of training) and the calculator.

Each training episode is a session (`X-Session-Id`); the `repeat` episodes of one problem share a
task (`X-Task-Id`) and so form one GRPO group. Its score goes to `/v1/feedback`: the server turns
the session's calls into one Experience (the model's tokens trained, the tool's masked out) on the
run's experience topic, where a trainer (`mode: train`, same config) learns from them, and the
server loads each version the trainer announces. Held-out episodes (eval seeds, greedy) are scored
with `train: false`: recorded and closed, never trained on.

    rft run --config examples/serve_agent/serve.yaml                        # the endpoint
    rft run --config examples/serve_agent/serve.yaml --override mode=train  # the trainer
    python examples/serve_agent/agent.py --rounds 4                         # the agent

It prints held-out accuracy before, after each round and at the end, with the weight version that
answered.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from rft.environments.multiplication import Multiplication
from rft.environments.seed_splits import split_seeds
from rft.tools.calculator import calculator
from rft.tools.registry import tool_specs

# the worked example of examples/agents/multiplication_tool.yaml (its demonstrations use it too)
SYSTEM_PROMPT = (
    "You cannot multiply big numbers in your head, so you always call the calculator tool first."
    " Example:\nUser: What is 123 * 456?\nAssistant: <tool_call>\n"
    '{"name": "calculator", "arguments": {"expression": "123 * 456"}}\n</tool_call>\n'
    "User: <tool_response>\n56088\n</tool_response>\nAssistant: Answer: 56088"
)
TOOLS = tool_specs(["calculator"])


@dataclass
class Episode:
    seed: int
    reward: float  # 1.0 for the exact product, else 0.0
    tool_calls: int  # calculator calls the model made
    version: int  # the newest weight version that answered one of its calls
    over_limit: bool = False  # ended when the conversation outgrew the server's prompt limit


def run_tool(arguments: str) -> str:
    """The calculator on a call's JSON arguments, or what went wrong (the model reads it)."""
    try:
        expression = json.loads(arguments)["expression"]
        return str(calculator(expression))
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: {exc}"


def play(
    client: openai.OpenAI,
    model: str,
    seed: int,
    temperature: float,
    max_tokens: int = 64,
    max_turns: int = 3,
) -> Episode:
    """One episode of problem `seed`: at most `max_turns` model turns, tool calls included."""
    env = Multiplication()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": env.reset(seed)},
    ]
    calls, version = 0, 0
    for _ in range(max_turns):
        try:
            reply = client.chat.completions.create(
                model=model,
                messages=messages,
                tools=TOOLS,
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except openai.BadRequestError as exc:
            if exc.code != "context_length_exceeded":
                raise
            # long tool results and calls outgrew model.max_prompt_tokens: unsolved, and scored
            # so (the calls answered so far still become the session's experiences)
            return Episode(seed, 0.0, calls, version, over_limit=True)
        version = max(version, int((reply.model_extra or {}).get("model_version", 0)))
        message = reply.choices[0].message
        if not message.tool_calls:
            return Episode(seed, env.step(message.content or "").reward, calls, version)
        # the reply as it came, then each call's result: the server continues the same session
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            calls += 1
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": run_tool(call.function.arguments),
                }
            )
    return Episode(seed, 0.0, calls, version)


class Agent:
    """Episodes through one serve endpoint, each its own session, scored by feedback."""

    def __init__(
        self, base_url: str, api_key: str, model: str, workers: int, max_tokens: int = 64
    ) -> None:
        self.base_url, self.api_key, self.model = base_url.rstrip("/"), api_key, model
        self.max_tokens = max_tokens
        self.pool = ThreadPoolExecutor(workers)

    def episode(
        self, seed: int, task: str, temperature: float, train: bool, shaping: float
    ) -> Episode:
        session = f"{task}:{uuid.uuid4().hex[:8]}"
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            default_headers={"X-Session-Id": session, "X-Task-Id": task},
            max_retries=0,
            timeout=600,
        )
        done = play(client, self.model, seed, temperature, self.max_tokens)
        # a calculator call earns a little when training, so the first calls are reinforced
        # before the model gets products right; held-out scores are the bare accuracy
        reward = done.reward + (shaping if train and done.tool_calls else 0.0)
        answer = httpx.post(
            f"{self.base_url}/feedback",
            json={"session_id": session, "reward": reward, "train": train},
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=120,
        )
        answer.raise_for_status()
        return done

    def evaluate(self, seeds: range) -> list[Episode]:
        jobs = [
            self.pool.submit(self.episode, seed, f"eval-{seed}", 0.0, False, 0.0) for seed in seeds
        ]
        return [job.result() for job in jobs]

    def train_round(
        self, seeds: range, repeat: int, temperature: float, shaping: float
    ) -> list[Episode]:
        jobs = [
            self.pool.submit(self.episode, seed, f"train-{seed}", temperature, True, shaping)
            for seed in seeds
            for _ in range(repeat)
        ]
        return [job.result() for job in jobs]

    def served_version(self) -> int:
        """The weight version answering now (a one-token call, scored for evaluation only)."""
        session = f"probe:{uuid.uuid4().hex[:8]}"
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            default_headers={"X-Session-Id": session},
            max_retries=0,
        )
        reply = client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )
        httpx.post(
            f"{self.base_url}/feedback",
            json={"session_id": session, "reward": 0.0, "train": False},
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=60,
        ).raise_for_status()
        return int((reply.model_extra or {}).get("model_version", 0))

    def wait_for_version(self, above: int, timeout_s: float, last: int) -> int:
        """The served version once it is above `above` (or is `last`, the trainer's final one),
        or the current one after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        version = self.served_version()
        while version <= above and version < last and time.monotonic() < deadline:
            time.sleep(5)
            version = self.served_version()
        return version


def line(name: str, episodes: list[Episode]) -> str:
    n = len(episodes)
    accuracy = sum(e.reward for e in episodes) / n
    calls = sum(e.tool_calls for e in episodes) / n
    versions = sorted({e.version for e in episodes})
    over = sum(e.over_limit for e in episodes)
    return (
        f"{name:<12} accuracy {accuracy:.3f} ({int(sum(e.reward for e in episodes))}/{n})  "
        f"calculator calls/episode {calls:.2f}  versions {versions}"
        + (f"  over the prompt limit {over}" if over else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default=os.environ.get("RFT_SERVE_API_KEY", "sk-rft-example"))
    parser.add_argument("--model", default="rft-policy")
    parser.add_argument("--rounds", type=int, default=4, help="training rounds")
    parser.add_argument("--tasks", type=int, default=4, help="problems per round")
    parser.add_argument("--repeat", type=int, default=4, help="episodes per problem (the group)")
    parser.add_argument("--eval", type=int, default=16, help="held-out problems (eval seeds)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--tool-call-reward", type=float, default=0.2)
    parser.add_argument("--version-timeout", type=float, default=900.0)
    parser.add_argument(
        "--trainer-steps",
        type=int,
        default=4,
        help="the trainer's buffer.total_steps: its last version, past which no wait is useful "
        "(the trainer can step ahead of the rounds: demonstrations fill a share of its batches)",
    )
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()

    agent = Agent(args.base_url, args.api_key, args.model, args.workers)
    held_out = split_seeds("eval", args.eval)
    started = time.monotonic()
    before = agent.evaluate(held_out)
    print(line("before", before), flush=True)
    version = max(e.version for e in before)
    for r in range(args.rounds):
        seeds = split_seeds("train", args.tasks, start=r * args.tasks)
        episodes = agent.train_round(seeds, args.repeat, args.temperature, args.tool_call_reward)
        print(line(f"train {r + 1}", episodes), flush=True)
        # the trainer steps on this round's groups and announces a version; the server loads it
        version = agent.wait_for_version(version, args.version_timeout, args.trainer_steps)
        print(f"served version {version} after round {r + 1}", flush=True)
    after = agent.evaluate(held_out)
    print(line("after", after), flush=True)
    print(
        json.dumps(
            {
                "held_out": args.eval,
                "before": sum(e.reward for e in before) / len(before),
                "after": sum(e.reward for e in after) / len(after),
                "version_after": max(e.version for e in after),
                "wall_s": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
