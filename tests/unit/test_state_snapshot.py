"""CPU copies of a trainer's tensors (rft.engines.state_snapshot): a snapshot or an owned export
is unchanged by later in-place steps; an export that need not be owned shares the live memory;
a cast is the cast of the values."""

from __future__ import annotations

import torch

from rft.engines.state_snapshot import cpu_snapshot, host_tensors


def test_a_snapshot_is_unchanged_by_later_in_place_steps() -> None:
    live = {"exp_avg": torch.arange(6.0), "nested": [{"step": torch.tensor(3.0)}], "lr": 0.1}
    snap = cpu_snapshot(live)
    live["exp_avg"].mul_(2)
    live["nested"][0]["step"].add_(1)
    assert torch.equal(snap["exp_avg"], torch.arange(6.0))
    assert float(snap["nested"][0]["step"]) == 3.0
    assert snap["lr"] == 0.1


def test_an_owned_export_is_a_copy_and_a_borrowed_one_is_the_live_memory() -> None:
    weight = torch.randn(4, 3, dtype=torch.float64)
    before = weight.clone()
    owned = host_tensors({"w": weight}, None, owned=True)["w"]
    borrowed = host_tensors({"w": weight}, None, owned=False)["w"]
    weight.add_(1.0)
    assert torch.equal(owned, before)
    assert torch.equal(borrowed, weight)
    assert borrowed.data_ptr() == weight.data_ptr()


def test_a_cast_export_holds_the_cast_values_and_not_the_live_memory() -> None:
    weight = torch.randn(5, 2, dtype=torch.float64)
    cast = host_tensors({"w": weight}, torch.bfloat16, owned=False)["w"]
    assert cast.dtype == torch.bfloat16
    assert torch.equal(cast, weight.to(torch.bfloat16))
    weight.add_(1.0)
    assert not torch.equal(cast, weight.to(torch.bfloat16))
