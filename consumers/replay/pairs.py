"""Preference pairs built from an experience topic (`rft replay pairs`), for `algorithm_type: dpo`.

Each rollout group of the range gives at most one pair: its best response (highest reward) as
the chosen one and its worst (lowest reward) as the rejected one; the first in arrival order wins
a tie. A group whose rewards are all equal has no preference and is skipped (counted). A pair is
written as a group of two experiences, chosen then rejected, with the same key, so a DPO trainer
reads it as one group (`rft train --from-topic TARGET`):

- `group_id` `pair:<original group id>`, `group_size` 2; every other field is kept, the rewards
  included (the `preference` advantage takes the higher one as the chosen response);
- `info` gains `pair.source` (`topic[partition]@offset` of the original) and `pair.side`
  (`chosen` / `rejected`).

Bad input stops the build with a ReplayError naming topic[partition]@offset: an empty response,
a response with no trained token, a step-wise experience (one per turn: a turn is not a whole
response to the prompt), or a group whose members answer different prompts. Groups still
incomplete when the range ends are counted and reported, never paired from what was read.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.rescore import Progress, kept_experiences, source_of
from rft.consumers.replay.topic_range import RangeReader
from rft.errors import ConfigError, ReplayError
from rft.events.models import Experience
from rft.events.writer import EventWriter

SOURCE_KEY = "pair.source"
SIDE_KEY = "pair.side"


@dataclass
class PairSummary:
    events: int = 0
    groups: int = 0  # complete groups read
    pairs: int = 0
    no_spread: int = 0  # groups skipped: every reward equal
    incomplete_groups: int = 0  # at the end of the range
    incomplete_experiences: int = 0
    other_events: int = 0
    seconds: float = 0.0


def checked_response(exp: Experience, source: str) -> None:
    """ReplayError naming `source` when `exp` cannot be one side of a pair."""
    if exp.turn_count > 1:
        raise ReplayError(
            f"{source}: experience {exp.experience_id!r} is step {exp.turn} of a "
            f"{exp.turn_count}-step trajectory; pairs are built from whole responses "
            "(concatenated multi-turn or single-turn experiences)"
        )
    if len(exp.response_ids) == 0:
        raise ReplayError(f"{source}: experience {exp.experience_id!r} has an empty response")
    if exp.action_mask is not None and not bool(np.any(exp.action_mask)):
        raise ReplayError(
            f"{source}: experience {exp.experience_id!r} has no trained token (its action "
            "mask is all 0)"
        )


def best_and_worst(
    members: list[tuple[Experience, str]],
) -> tuple[tuple[Experience, str], tuple[Experience, str]] | None:
    """(chosen, rejected) of one complete group, each with its source; None without a reward
    spread. ReplayError when the members answer different prompts."""
    first, first_source = members[0]
    for exp, source in members[1:]:
        if not np.array_equal(exp.prompt_ids, first.prompt_ids):
            raise ReplayError(
                f"{source}: experience {exp.experience_id!r} of group {exp.group_id!r} has "
                f"another prompt than {first_source}; a pair's responses must answer one prompt"
            )
    rewards = [exp.reward for exp, _ in members]
    best, worst = int(np.argmax(rewards)), int(np.argmin(rewards))
    if rewards[best] == rewards[worst]:
        return None
    return members[best], members[worst]


def pair_events(
    chosen: tuple[Experience, str], rejected: tuple[Experience, str]
) -> list[Experience]:
    """The two events of a pair (see the module docstring)."""
    out = []
    for (exp, source), side in ((chosen, "chosen"), (rejected, "rejected")):
        info = dict(exp.info) | {SOURCE_KEY: source, SIDE_KEY: side}
        out.append(
            dataclasses.replace(exp, group_id=f"pair:{exp.group_id}", group_size=2, info=info)
        )
    return out


@dataclass
class PairBuilder:
    """Collects experiences by group; a completed group gives its pair (or None)."""

    pending: OrderedDict[str, list[tuple[Experience, str]]] = field(default_factory=OrderedDict)

    def add(self, exp: Experience, source: str) -> list[Experience] | None:
        """Add one experience; the pair's events when this completed a group with a reward
        spread, [] when it completed one without, None while the group is incomplete."""
        checked_response(exp, source)
        members = self.pending.setdefault(exp.group_id, [])
        members.append((exp, source))
        if len(members) < exp.group_size:
            return None
        del self.pending[exp.group_id]
        pair = best_and_worst(members)
        return [] if pair is None else pair_events(*pair)


def build_pairs(
    reader: RangeReader,
    writer: EventWriter,
    target: str,
    keep: ExperienceFilter | None = None,
    *,
    progress: Progress | None = None,
) -> PairSummary:
    """The pairs of `reader`'s range (the experiences `keep` accepts) written to `target`."""
    keep = keep or ExperienceFilter()
    if keep.min_reward is not None or keep.max_reward is not None:
        raise ConfigError(
            "--min-reward/--max-reward: a reward filter splits rollout groups, and a pair is "
            "the best and the worst response of a whole group; leave it out"
        )
    summary = PairSummary()
    builder = PairBuilder()
    started = time.monotonic()
    for env, exp in kept_experiences(reader, keep, summary, progress):
        events = builder.add(exp, source_of(env))
        if events is None:
            continue
        summary.groups += 1
        if not events:
            summary.no_spread += 1
            continue
        for event in events:
            writer.send(target, event, key=event.group_id)
        summary.pairs += 1
    writer.flush()
    summary.incomplete_groups = len(builder.pending)
    summary.incomplete_experiences = sum(len(m) for m in builder.pending.values())
    summary.seconds = time.monotonic() - started
    return summary
