"""Sample strategies (`algorithm.sample_strategy`, `sample_strategy_args`): batches hold whole
groups and stay within one group of `train_batch_size`, staleness is judged when the batch forms,
groups with equal rewards are filtered and counted, and every experience read is trained, let go
with a count, or still waiting: none is lost."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.buffer.batch_metrics import batch_metrics
from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.sample_strategy import SAMPLE_STRATEGIES, build_sampler, sampler_choice
from rft.buffer.sampler import SamplerCounters
from rft.buffer.staleness import StalenessPolicy
from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL
from tests.unit.experience_log import GroupSpec, write_log

group_specs = st.integers(1, 5).flatmap(
    lambda size: st.builds(
        GroupSpec,
        st.just(size),
        st.integers(0, 6),
        st.tuples(*[st.sampled_from([0.0, 1.0])] * size),
    )
)


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(group_specs, min_size=1, max_size=25),
    batch_size=st.integers(1, 12),
    max_staleness=st.one_of(st.none(), st.integers(0, 3)),
    filter_groups=st.booleans(),
    partitions=st.integers(1, 3),
    version_steps=st.lists(st.integers(0, 2), min_size=30, max_size=30),
    rnd=st.randoms(use_true_random=False),
)
def test_batches_are_whole_groups_and_nothing_is_lost(
    groups, batch_size, max_staleness, filter_groups, partitions, version_steps, rnd
) -> None:
    log = write_log(groups, partitions, rnd)
    strategy = "default" if max_staleness is None else "staleness_control"
    args: dict = {"filter_groups": filter_groups}
    if max_staleness is not None:
        args["max_staleness"] = max_staleness
    sampler = build_sampler(strategy, args, SamplerSetup(train_batch_size=batch_size))
    largest = max(g.size for g in groups)
    version, steps = 0, iter(version_steps)
    trained, released = [], []
    for item in log:
        sampler.add(item)
        while (batch := sampler.take_batch(version)) is not None:
            sizes = Counter(r.exp.group_id for r in batch.rows)
            for row in batch.rows:  # whole groups only
                assert sizes[row.exp.group_id] == row.exp.group_size
                assert max_staleness is None or version - row.exp.model_version <= max_staleness
                if filter_groups:
                    assert (
                        len(
                            {r.exp.reward for r in batch.rows if r.exp.group_id == row.exp.group_id}
                        )
                        > 1
                    )
            assert batch_size <= len(batch.rows) < batch_size + largest
            trained.extend(r.source for r in batch.rows)
            version += next(steps, 1)
        released.extend(sampler.release())
    keys = [a.key for a in log]
    assert len({r.key for r in trained}) == len(trained)  # no experience trained twice
    let_go = {a.key for a in released} - {a.key for a in trained}
    assert {a.key for a in trained} <= {a.key for a in released}  # trained ones are settled
    c = sampler.counters
    assert len(let_go) == c.dropped_stale + c.filtered_experiences
    incomplete, untrained = sampler.waiting()
    assert len(trained) + len(let_go) + incomplete + untrained == len(keys)
    assert c.learner_rows == len(trained) and c.replayed_rows == 0


def test_staleness_is_judged_when_the_batch_forms_not_when_read() -> None:
    sampler = build_sampler(
        "staleness_control", {"max_staleness": 1}, SamplerSetup(train_batch_size=2)
    )
    log = write_log([GroupSpec(2, 0, (0.0, 1.0)), GroupSpec(2, 2, (1.0, 0.0))])
    for item in log[:2]:  # fresh when read at version 0 ...
        sampler.add(item)
    # ... but the batch forms at version 2: two versions stale
    assert sampler.take_batch(2) is None
    assert sampler.counters.dropped_stale == 2
    assert {a.key for a in sampler.release()} == {a.key for a in log[:2]}
    for item in log[2:]:
        sampler.add(item)
    batch = sampler.take_batch(3)
    assert batch is not None and {r.exp.model_version for r in batch.rows} == {2}
    values = batch_metrics(batch, SamplerCounters())
    assert values["dropped_stale"] == values["dropped_stale_total"] == 2.0
    assert values["staleness/1"] == 2.0 and values["staleness_max"] == 1.0


def test_group_filter_keeps_consuming_until_the_batch_is_full() -> None:
    sampler = build_sampler("default", {"filter_groups": True}, SamplerSetup(train_batch_size=4))
    specs = [
        GroupSpec(2, 0, (1.0, 1.0)),  # all right: no signal
        GroupSpec(2, 0, (0.0, 1.0)),
        GroupSpec(2, 0, (0.0, 0.0)),  # all wrong: no signal
        GroupSpec(2, 0, (1.0, 0.0)),
    ]
    batches = []
    for item in write_log(specs):
        sampler.add(item)
        batch = sampler.take_batch(0)
        if batch is not None:
            batches.append(batch)
    assert len(batches) == 1
    assert {r.exp.group_id for r in batches[0].rows} == {"g1", "g3"}
    c = sampler.counters
    assert (c.filtered_groups, c.filtered_experiences) == (2, 4)
    values = batch_metrics(batches[0], SamplerCounters())
    assert values["filtered_groups"] == 2.0 and values["filtered_experiences_total"] == 4.0


def test_batch_metrics_histograms_count_rows_per_bucket() -> None:
    sampler = build_sampler("default", {}, SamplerSetup(train_batch_size=6))
    specs = [GroupSpec(1, v, (0.0,)) for v in (9, 8, 7, 5, 0, 10)]
    for item in write_log(specs):
        sampler.add(item)
    batch = sampler.take_batch(10)
    assert batch is not None
    values = batch_metrics(batch, SamplerCounters())
    # staleness 1, 2, 3, 5, 10, 0
    want = {"0": 1, "1": 1, "2": 1, "3-4": 1, "5-8": 1, "9+": 1}
    assert {k: values[f"staleness/{k}"] for k in want} == {k: float(v) for k, v in want.items()}
    assert values["staleness_mean"] == pytest.approx((1 + 2 + 3 + 5 + 10 + 0) / 6)
    assert values["use_count/1"] == 6.0 and values["replayed_fraction"] == 0.0
    assert values["mix_ratio"] == 0.0


def test_the_trainer_input_alias_selects_staleness_control() -> None:
    assert sampler_choice("default", {}, None) == ("default", {})
    assert sampler_choice("default", {}, 2) == ("staleness_control", {"max_staleness": 2})
    assert sampler_choice("staleness_control", {"max_staleness": 1}, 1) == (
        "staleness_control",
        {"max_staleness": 1},
    )
    assert sampler_choice("mix", {}, 3) == ("mix", {"max_staleness": 3})
    assert set(SAMPLE_STRATEGIES.names()) >= {"default", "staleness_control", "mix"}
    assert StalenessPolicy(1).accepts(5, 4) and not StalenessPolicy(1).accepts(5, 3)


def test_strategy_args_are_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    cfg = load_config(
        path,
        [
            "algorithm.sample_strategy=staleness_control",
            "algorithm.sample_strategy_args={max_staleness: 2}",
        ],
    )
    assert cfg.algorithm.sample_strategy == "staleness_control"
    with pytest.raises(ConfigValidationError) as info:
        load_config(path, ["algorithm.sample_strategy_args={expert_data_ratio: 0.5}"])
    assert [p.path for p in info.value.problems] == [
        "algorithm.sample_strategy_args.expert_data_ratio"
    ]
    with pytest.raises(ConfigValidationError) as info:
        load_config(
            path,
            [
                "buffer.trainer_input.max_staleness=1",
                "algorithm.sample_strategy=staleness_control",
                "algorithm.sample_strategy_args={max_staleness: 2}",
            ],
        )
    assert [p.path for p in info.value.problems] == ["buffer.trainer_input.max_staleness"]
    with pytest.raises(ConfigValidationError, match="auxiliary_buffers.sft_dataset"):
        load_config(path, ["algorithm.sample_strategy=mix"])
    with pytest.raises(ConfigError, match="max_staleness"):
        build_sampler("staleness_control", {"max_staleness": -1}, SamplerSetup(2))


def test_interleaved_partitions_keep_arrival_order() -> None:
    rnd = random.Random(3)
    specs = [GroupSpec(2, 0, (0.0, 1.0)) for _ in range(6)]
    log = write_log(specs, partitions=2, rnd=rnd)
    sampler = build_sampler("default", {}, SamplerSetup(train_batch_size=2))
    completed, trained = [], []
    seen: Counter[str] = Counter()
    for item in log:
        seen[item.group_id] += 1
        if seen[item.group_id] == 2:
            completed.append(item.group_id)
        sampler.add(item)
        while (batch := sampler.take_batch(0)) is not None:
            trained.append(batch.rows[0].exp.group_id)
    assert trained == completed  # FIFO: the first group to complete trains first
