"""CPU copies of a trainer's tensors (rft.engines.state_snapshot): a snapshot or an owned export
is unchanged by later in-place steps; an export that need not be owned shares the live memory;
a cast is the cast of the values; the pinned blocks set aside beforehand are the sizes a
version's copies (export, AdamW's moments, master weights) ask for."""

from __future__ import annotations

import logging

import pytest
import torch

from rft.engines.state_snapshot import (
    cpu_snapshot,
    host_tensors,
    reserve_pinned,
    version_copy_sizes,
)


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


def test_the_sizes_set_aside_are_those_of_a_versions_copies_after_a_step() -> None:
    params = [
        torch.nn.Parameter(torch.randn(5, 3)),
        torch.nn.Parameter(torch.randn(7, dtype=torch.bfloat16)),
        torch.nn.Parameter(torch.randn(2, 2, 2, dtype=torch.float64)),
    ]
    optimizer = torch.optim.AdamW(params)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    named = {str(k): p for k, p in enumerate(params)}
    copied = cpu_snapshot(optimizer.state_dict())["state"]
    moments = [t.nbytes for s in copied.values() for t in s.values() if t.dim() > 0]
    exported = [t.nbytes for t in host_tensors(named, torch.bfloat16, owned=True).values()]
    master = [t.nbytes for t in host_tensors(named, None, owned=True).values()]
    assert sorted(version_copy_sizes(params, torch.bfloat16, False)) == sorted(exported + moments)
    assert sorted(version_copy_sizes(params, torch.bfloat16, True)) == sorted(
        exported + moments + master
    )
    assert sorted(version_copy_sizes(params, None, False)) == sorted(master + moments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the failure path: no CUDA to pin with")
def test_a_reserve_that_cannot_pin_says_so_and_ends(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rft.engines.state_snapshot"):
        thread = reserve_pinned([1 << 20, 4096])
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert "could not set aside pinned host memory" in caplog.text
