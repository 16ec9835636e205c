"""Train and held-out evaluation seeds, which never overlap: seeds below `EVAL_SEED_START` train,
seeds from it up to `SEED_LIMIT` evaluate.

Every environment derives its instance from `(environment name, settings, seed)` alone
(`instance_random`), so a seed names one instance in every process, and an evaluation seed names an
instance no training seed was asked for (small instance spaces, such as a number from 1 to 100,
still repeat values across seeds).
"""

from __future__ import annotations

import random

EVAL_SEED_START = 1 << 30
SEED_LIMIT = 1 << 31
SPLITS = ("train", "eval")


def split_of(seed: int) -> str:
    """ "train" or "eval"; ValueError for a seed outside [0, SEED_LIMIT)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seeds are integers in [0, {SEED_LIMIT}), got {seed!r}")
    return "train" if seed < EVAL_SEED_START else "eval"


def split_seeds(split: str, count: int, start: int = 0) -> range:
    """`count` consecutive seeds of `split`, from its `start`-th seed on."""
    if split not in SPLITS:
        raise ValueError(f"unknown seed split {split!r} (known: {', '.join(SPLITS)})")
    first = start if split == "train" else EVAL_SEED_START + start
    end = EVAL_SEED_START if split == "train" else SEED_LIMIT
    if start < 0 or count < 0 or first + count > end:
        raise ValueError(
            f"{split} seeds {start}..{start + count - 1} leave the split "
            f"({end - (first - start)} seeds in it)"
        )
    return range(first, first + count)


def instance_random(name: str, settings: str, seed: int) -> random.Random:
    """The random generator of one instance; string seeding is stable across processes."""
    split_of(seed)
    return random.Random(f"{name}|{settings}|{seed}")
