"""Writes demonstrations of the agent examples' tasks, for `sample_strategy: mix`.

`--task multiplication` (examples/agents/multiplication_tool.yaml; SmolLM2-135M makes no
well-formed calculator call on its own, so GRPO alone has nothing to reinforce): each `train`-split seed (never an eval one) gives two rows, the two model turns of a solved
episode, as `messages` lists whose last message is the turn to learn:
1. the system prompt and the environment's question -> `<tool_call>` asking the calculator for
   the product;
2. the same, the call, and the calculator's real answer (a `tool` message, from the executor) ->
   `Answer: <product>`.
The rows are rendered by the trainer with the model's chat template, which offers tools only
when asked to: so the system message here already holds the tools section that template
appends for the calculator, and a demonstration's prompt is the same text the workflow's
rollouts start from.

`--task guess_number` (examples/agents/guess_number_cpu.yaml; greedy, the base model answers the
game with prose, and a small CPU batch rarely samples a game won): each `train`-split seed is played
by a binary search, one row per guess, the conversation so far (the game's feedback as `user`
messages, as the workflow sends it) ending with the guess to learn.

    python examples/agents/make_demonstrations.py --out examples/agents/data/multiplication_demonstrations.jsonl --num 512
    python examples/agents/make_demonstrations.py --task guess_number --out examples/agents/data/guess_number_demonstrations.jsonl --num 256
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rft.environments import split_seeds
from rft.environments.guess_number import GuessNumber
from rft.environments.multiplication import Multiplication
from rft.tools import ToolExecutor
from rft.tools.calls import ToolCall
from rft.tools.chat_templates import tool_chat_template

# the worked example of examples/agents/multiplication_tool.yaml
SYSTEM_PROMPT = (
    "You cannot multiply big numbers in your head, so you always call the calculator tool first."
    " Example:\nUser: What is 123 * 456?\nAssistant: <tool_call>\n"
    '{"name": "calculator", "arguments": {"expression": "123 * 456"}}\n</tool_call>\n'
    "User: <tool_response>\n56088\n</tool_response>\nAssistant: Answer: 56088"
)
# the system prompt of examples/agents/guess_number*.yaml
GUESS_PROMPT = "You are playing a guessing game. Reply with only your guess, one whole number."
_SYSTEM_START, _END = "<|im_start|>system\n", "<|im_end|>\n"


def system_with_tools(tokenizer: Any, system_prompt: str, tools: list[dict[str, Any]]) -> str:
    """`system_prompt` as the SmolLM2 tools template renders it when `tools` are offered."""
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": system_prompt}],
        tools=tools,
        chat_template=tool_chat_template("smollm2_tools"),
        tokenize=False,
    )
    if not (text.startswith(_SYSTEM_START) and text.endswith(_END)):
        raise ValueError(f"unexpected rendering of the system turn: {text[:80]!r}")
    return str(text[len(_SYSTEM_START) : -len(_END)])


def demonstrations(tokenizer: Any, num: int, start: int = 0) -> list[dict[str, Any]]:
    """Two rows (see the module docstring) for each of `num` train seeds from the `start`-th."""
    executor = ToolExecutor.offering(["calculator"], key="demonstrations")
    tools = [entry.spec() for entry in executor.tools.values()]
    system = {"role": "system", "content": system_with_tools(tokenizer, SYSTEM_PROMPT, tools)}
    env = Multiplication()
    rows = []
    for seed in split_seeds("train", num, start=start):
        question = {"role": "user", "content": env.reset(seed)}
        a, b = env.factors
        arguments = json.dumps({"expression": f"{a} * {b}"})
        call = f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'
        result = executor.execute(ToolCall("calculator", arguments, f"call-{seed}"))
        if result.outcome != "ok":
            raise RuntimeError(f"seed {seed}: the calculator answered {result.content!r}")
        tool = {"role": "tool", "content": result.content}
        first = [system, question, {"role": "assistant", "content": call}]
        answer = {"role": "assistant", "content": f"Answer: {env.product}"}
        rows.append({"seed": seed, "messages": first})
        rows.append({"seed": seed, "messages": [*first, tool, answer]})
    return rows


def guess_number_demonstrations(num: int, start: int = 0, high: int = 20) -> list[dict[str, Any]]:
    """One row per guess of a binary search over [1, `high`], for each of `num` train seeds."""
    rows = []
    for seed in split_seeds("train", num, start=start):
        env = GuessNumber(1, high)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": GUESS_PROMPT},
            {"role": "user", "content": env.reset(seed)},
        ]
        low, top = env.low, env.high
        while True:
            guess = (low + top) // 2
            messages.append({"role": "assistant", "content": str(guess)})
            rows.append({"seed": seed, "messages": list(messages)})
            result = env.step(str(guess))
            if result.done:
                if result.info["outcome"] != "correct":
                    raise RuntimeError(
                        f"seed {seed}: the binary search lost ({result.observation})"
                    )
                break
            if result.info["outcome"] == "higher":
                low = guess + 1
            else:
                top = guess - 1
            messages.append({"role": "user", "content": result.observation})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", choices=["multiplication", "guess_number"], default="multiplication"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--num",
        type=int,
        default=512,
        help="train seeds (rows: two each for multiplication, one a guess for guess_number)",
    )
    parser.add_argument("--start", type=int, default=0, help="first train seed's index")
    args = parser.parse_args()
    from rft.engines.models import load_model

    if args.task == "guess_number":
        rows = guess_number_demonstrations(args.num, args.start)
    else:
        _, tokenizer = load_model("smollm2")
        rows = demonstrations(tokenizer, args.num, args.start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    print(f"{len(rows)} demonstration rows from {args.num} train seeds -> {args.out}")


if __name__ == "__main__":
    main()
