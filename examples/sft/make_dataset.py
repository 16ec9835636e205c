"""Writes the chat dataset of examples/sft/multiplication_sft.yaml: solved episodes of the
multiplication tool task, short enough to train on a small CPU in minutes.

Each row is one episode as a `messages` list: a one-line system prompt, the environment's
question, the model's `<tool_call>` asking the calculator for the product, the calculator's
answer (a `tool` message) and the model's `Answer: <product>`. SFT trains the two assistant
turns only. Training rows come from `train` seeds, held-out rows from `eval` seeds (never
trained on; examples/sft/heldout.py scores them).

    python examples/sft/make_dataset.py --out-dir examples/sft/data --train 128 --heldout 32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rft.environments import split_seeds
from rft.environments.multiplication import Multiplication

SYSTEM = "You call the calculator tool for every product, then give the answer."


def episode(env: Multiplication, seed: int) -> dict[str, Any]:
    question = env.reset(seed)
    a, b = env.factors
    arguments = json.dumps({"expression": f"{a} * {b}"})
    call = f'<tool_call>\n{{"name": "calculator", "arguments": {arguments}}}\n</tool_call>'
    return {
        "seed": seed,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": str(env.product)},
            {"role": "assistant", "content": f"Answer: {env.product}"},
        ],
    }


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    print(f"{len(rows)} rows -> {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--train", type=int, default=128, help="rows from train seeds")
    parser.add_argument("--heldout", type=int, default=32, help="rows from eval seeds")
    args = parser.parse_args()
    env = Multiplication()
    write(args.out_dir / "train.jsonl", [episode(env, s) for s in split_seeds("train", args.train)])
    write(
        args.out_dir / "heldout.jsonl", [episode(env, s) for s in split_seeds("eval", args.heldout)]
    )


if __name__ == "__main__":
    main()
