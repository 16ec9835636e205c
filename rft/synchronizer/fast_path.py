"""Whether a run has a fast weight path, and its two ends as the config sets them.

`synchronizer.sync_method` names an entry of WEIGHT_TRANSPORTS (rft.synchronizer.transport).
With a transport (`nccl`, `memory`) the trainer gets a weight-sync group host and each explorer a
member (rft.synchronizer.weight_group) that move versions with it; `checkpoint` gives neither
(its entry says it has no fast path), and versions travel through the object store only. Each version sent over the group carries a token
that its manifest keeps too (`FAST_TOKEN`), so an explorer can tell that the weights it sampled
with are the ones that became durable under that version number, not those of a trainer that
died before its manifest and whose successor wrote the same number again.
"""

from __future__ import annotations

import secrets

import torch

from rft.config.schema import SynchronizerConfig
from rft.synchronizer import transport
from rft.synchronizer.weight_group import WeightGroupHost, WeightGroupMember

#: The manifest's extra key that holds the token of a version sent over the group.
FAST_TOKEN = "fast_sync_token"


def new_token() -> int:
    """A version's token: random, so two trainers that write the same version number differ."""
    return secrets.randbits(62) + 1


def has_fast_path(settings: SynchronizerConfig) -> bool:
    return transport.has_fast_path(settings.sync_method)


def trainer_end(settings: SynchronizerConfig, device: str | torch.device) -> WeightGroupHost | None:
    """The trainer's end of the group (it hosts the rendezvous), or None without a fast path."""
    if not has_fast_path(settings):
        return None
    return WeightGroupHost(
        settings.weight_group_address,
        settings.weight_group_timeout,
        device=device,
        sync_method=settings.sync_method,
    )


def explorer_end(
    settings: SynchronizerConfig, explorer_id: str, device: str | torch.device
) -> WeightGroupMember | None:
    """An explorer's end of the group (it joins on a thread of its own), or None."""
    if not has_fast_path(settings):
        return None
    return WeightGroupMember(
        settings.weight_group_address,
        settings.weight_group_timeout,
        explorer_id,
        device=device,
        sync_method=settings.sync_method,
    )
