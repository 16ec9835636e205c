"""A training state as files (rft.engines.state_files): tensors stream from their memory into
safetensors shards, the rest into a small skeleton, and the files read back into the same
structure; an AdamW trainer resumed from them continues exactly as the one that wrote them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.engines.models import ModelSpec, load_model
from rft.engines.state_files import SKELETON, state_from_files, state_payloads
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.errors import EngineError
from tests.unit.test_engines_trainer import _batch, maximise_logprob


def _files(state: Any, shard_bytes: int = 1 << 20) -> dict[str, memoryview]:
    """What a download hands back: each file's bytes in a buffer of its own."""
    out = {}
    for name, payload in state_payloads(state, shard_bytes).items():
        stream, chunks = payload.open(), []
        while chunk := stream.read(1 << 16):
            chunks.append(bytes(chunk))
        data = b"".join(chunks)
        assert len(data) == payload.size
        out[name] = memoryview(bytearray(data))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_an_optimizer_state_reads_back_as_it_was_with_its_keys_and_types() -> None:
    g = torch.Generator().manual_seed(0)
    state = {
        "optimizer": {
            "state": {  # int keys, as torch optimizers have them; a str key "0" beside one
                0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(300, 70, generator=g)},
                1: {"step": torch.tensor(3.0), "exp_avg": torch.randn(5, generator=g).bfloat16()},
                "0": {"count": torch.arange(4)},
            },
            "param_groups": [{"lr": 1e-5, "betas": (0.9, 0.999), "params": [0, 1]}],
        },
        "scheduler": {"last_epoch": 3, "_last_lr": [1e-5], "lr_lambdas": [None]},
        "step": 3,
        "format": "test",
        "empty": torch.empty(0, 4),
        "complex": torch.ones(
            2, dtype=torch.complex64
        ),  # no safetensors dtype: kept in the skeleton
    }
    files = _files(state, shard_bytes=16 << 10)
    assert SKELETON in files and len(files) > 3  # cut into shards and an index
    # the skeleton holds no streamed tensor's bytes: it stays small
    assert len(files[SKELETON]) < 4096
    back = state_from_files(files, "v1/trainer_state/optimizer/")
    assert _same(state, back)


@settings(max_examples=30, deadline=None)
@given(
    st.recursive(
        st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.floats(allow_nan=False)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.one_of(st.integers(0, 3), st.text(max_size=2)), inner, max_size=3),
            st.builds(lambda n: torch.arange(n, dtype=torch.float32), st.integers(0, 40)),
        ),
        max_leaves=12,
    )
)
def test_any_nesting_of_plain_values_and_tensors_round_trips(state: Any) -> None:
    assert _same(state, state_from_files(_files(state), "s/"))


def test_a_missing_or_corrupt_piece_is_refused_naming_where() -> None:
    files = _files({"a": torch.ones(3), "b": torch.zeros(2)})
    shards = {k: v for k, v in files.items() if k != SKELETON}
    with pytest.raises(EngineError, match=r"s/: no skeleton.pt"):
        state_from_files(shards, "s/")
    with pytest.raises(EngineError, match=r"s/skeleton.pt: unreadable"):
        state_from_files({**files, SKELETON: memoryview(b"not a torch file")}, "s/")
    emptied = _files({"a": {"x": torch.ones(1)}})
    other = _files({"a": {"y": torch.ones(1)}})
    with pytest.raises(EngineError, match=r"names tensor .*'x'.*which is not there"):
        state_from_files({**other, SKELETON: emptied[SKELETON]}, "s/")


def test_a_trainer_resumed_from_the_files_steps_exactly_as_the_one_that_wrote_them() -> None:
    def engine() -> TorchTrainerEngine:
        model, _ = load_model(ModelSpec("tiny", seed=3))
        return TorchTrainerEngine(model, TorchTrainerConfig(warmup_steps=2, lr=1e-2))

    first = engine()
    first.train_step(_batch(4, seed=1), maximise_logprob)
    files = _files(first.training_state())
    weights = first.export_weights(owned=True)
    resumed, fresh = engine(), engine()
    resumed.load_weights(weights)
    resumed.restore_training_state(state_from_files(files, "s/"), "s/")
    fresh.load_weights(weights)
    fresh.skip_to_step(1)  # the same weights and schedule, AdamW's moments from zero
    assert resumed.step == 1
    for e in (first, resumed, fresh):
        e.train_step(_batch(4, seed=2), maximise_logprob)
    after = [e.export_weights() for e in (first, resumed, fresh)]
    assert all(torch.equal(after[0][k], after[1][k]) for k in after[0])
    assert not all(torch.equal(after[0][k], after[2][k]) for k in after[0])  # moments mattered
