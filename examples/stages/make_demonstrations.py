"""Writes the demonstration set of examples/stages/stages_sft_grpo.yaml's SFT stage: problems of the
arithmetic example's train part (never its held-out eval problems), each a chat of the example's
system prompt, the question and the exact answer alone, as the GRPO stage's reward wants it.

    python examples/stages/make_demonstrations.py --out examples/stages/data/demos.jsonl --rows 64
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rft.producers.generators.arithmetic import arithmetic

SYSTEM = "Answer with only the final number."  # the system prompt of the GRPO stage's tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="examples/stages/data/demos.jsonl")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = arithmetic(
        seed=args.seed,
        num_tasks=args.rows,
        digits=1,
        max_operand=19,
        operators=["+"],
        holdout="train",
    ).rows
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for row in rows:
            chat = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": row["question"]},
                {"role": "assistant", "content": str(row["answer"])},
            ]
            f.write(json.dumps({"messages": chat}) + "\n")
    print(f"{out}: {len(rows)} demonstrations")


if __name__ == "__main__":
    main()
