"""Writes a GSM8K-shaped local dataset folder for the asynchronous example, with no download.

The layout is a Hugging Face dataset repo's: `<out>/main/{train,test}-00000-of-00001.parquet`,
rows `{question, answer}` where the answer ends in GSM8K's `#### <number>` line. The questions are
short word problems over generated arithmetic, so the example runs offline on any machine.

    python examples/trinity_async_gsm8k/make_dataset.py --out /tmp/gsm8k --train 256 --test 32
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ITEMS = ("apples", "books", "coins", "marbles", "stamps", "shells")
NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Farah")


def problem(rng: random.Random) -> dict[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    have, more = rng.randint(2, 40), rng.randint(2, 40)
    question = f"{name} has {have} {item} and finds {more} more. How many {item} does {name} have?"
    answer = f"{name} has {have} + {more} = {have + more} {item}.\n#### {have + more}"
    return {"question": question, "answer": answer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    subset = args.out / "main"
    subset.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", args.train), ("test", args.test)):
        rows = [problem(rng) for _ in range(count)]
        table = pa.Table.from_pylist(rows)
        pq.write_table(table, subset / f"{split}-00000-of-00001.parquet")
        print(f"{subset / split}: {count} rows")


if __name__ == "__main__":
    main()
