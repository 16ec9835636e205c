"""`gather_to_host` against torch's own full state dicts, on two gloo ranks of the CPU.

A small model whose first dimensions do not split evenly over two ranks (7 and 5 rows) is
sharded with `fully_shard` and takes two AdamW steps. Rank 0's gathered weights (as they are and
cast to bf16) and AdamW state must equal, bit for bit, what
`get_model_state_dict` / `get_optimizer_state_dict(full_state_dict=True, cpu_offload=True)`
return, and must be copies: a third step leaves them as they were (AdamW's step counters included, which
torch's full optimizer state shares with the live optimizer). Rank 1 gets None.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rft.engines.fsdp_ranks import free_port

pytestmark = pytest.mark.timeout(180)


def _rank(rank: int, port: int, out: str) -> None:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from rft.engines.sharded_copy import gather_to_host

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 7), torch.nn.Linear(7, 5))
        mesh = init_device_mesh("cpu", (2,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)

        def step(seed: int) -> None:
            torch.manual_seed(seed)
            model(torch.randn(4, 3)).square().sum().backward()
            optimizer.step()
            optimizer.zero_grad()

        step(1)
        step(2)
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        # copied: torch's full optimizer state holds AdamW's live step counters
        reference = copy.deepcopy(
            {
                "weights": get_model_state_dict(model, options=full),
                "optimizer": get_optimizer_state_dict(model, optimizer, options=full),
            }
        )
        keep = rank == 0
        sharded = StateDictOptions(full_state_dict=False)
        gathered = {
            "weights": gather_to_host(model.state_dict(), keep=keep),
            "bf16": gather_to_host(model.state_dict(), keep=keep, dtype=torch.bfloat16),
            "optimizer": gather_to_host(
                get_optimizer_state_dict(model, optimizer, options=sharded), keep=keep
            ),
        }
        # copies of their own: what the next step changes
        before = copy.deepcopy(gathered)
        step(3)
        if keep:
            torch.save({"reference": reference, "gathered": gathered, "before": before}, out)
        else:
            assert all(v is None for v in gathered.values())
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = Path(tmp_path_factory.mktemp("sharded")) / "rank0.pt"
    mp.spawn(_rank, args=(free_port(), str(out)), nprocs=2, join=True)
    loaded: dict = torch.load(out, weights_only=False)
    return loaded


def _assert_equal(a: object, b: object, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            _assert_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_gathered_weights_and_adamw_state_equal_torchs_full_state_dicts(results: dict) -> None:
    reference, gathered = results["reference"], results["gathered"]
    assert reference["weights"]["0.weight"].shape == (7, 3)  # uneven over two ranks
    _assert_equal(reference["weights"], gathered["weights"], "weights")
    _assert_equal(reference["optimizer"], gathered["optimizer"], "optimizer")
    assert set(reference["optimizer"]["state"]) == set(reference["weights"])


def test_a_cast_gathers_each_weight_rounded_to_the_dtype(results: dict) -> None:
    reference, bf16 = results["reference"]["weights"], results["gathered"]["bf16"]
    _assert_equal({k: v.to(torch.bfloat16) for k, v in reference.items()}, bf16, "bf16")


def test_the_gathered_copies_are_not_changed_by_the_next_step(results: dict) -> None:
    _assert_equal(results["before"], results["gathered"], "after step 3")
    assert results["gathered"]["optimizer"]["state"]["0.weight"]["step"] == 2
