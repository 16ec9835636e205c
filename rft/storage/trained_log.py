"""The trained log of a weight version, as its saved sampler state holds it.

A version's `trainer_state/sampler.json` (rft.consumers.trainer.loop) holds `trained_log` (what the
steps after its parent trained, how many times, and what they settled) and `settled_ahead`. Its
WeightVersion carries the same as a `TrainedLog` (schema v2), and the run checker reads either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rft.events.models import TrainedLog


def trained_log_of(state: Mapping[str, Any]) -> TrainedLog | None:
    """The trained log in a version's saved sampler state (None for a state saved before
    trained logs existed)."""
    entry = state.get("trained_log")
    if entry is None:
        return None
    return TrainedLog.of_lists(
        trained=entry.get("trained", ()),
        retrained=entry.get("retrained", ()),
        settled=entry.get("settled", ()),
        settled_ahead=state.get("settled_ahead", ()),
    )
