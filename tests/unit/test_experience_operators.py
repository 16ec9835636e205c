"""The experience operators (pure logic, with property tests), the pipeline that applies them to a
sampled batch, and the config section that names them (checked at load)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.buffer.experience_mappers import (
    mask_response_truncated,
    pass_rate_calculator,
    reward_shaping_mapper,
)
from rft.buffer.experience_operators import EXPERIENCE_OPERATORS
from rft.buffer.experience_pipeline import ExperiencePipeline, OperatorOutputError, Stage
from rft.buffer.reward_filters import (
    dapo_dynamic_sampling,
    invalid_reward_filter,
    reward_filter,
    reward_std_filter,
)
from rft.buffer.sampler import Admitted, BatchRow, SampledBatch, SamplerCounters
from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.errors import ConfigError
from rft.events.models import Experience
from tests.unit.config_samples import MINIMAL
from tests.unit.experience_log import TOPIC, experience

OPS = "data_processor.experience_pipeline.operators"

# rollout groups as lists of rewards (NaN and infinities included)
reward_values = st.one_of(
    st.floats(-5, 5, allow_nan=False),
    st.sampled_from([0.0, 1.0, math.nan, math.inf, -math.inf]),
)
group_rewards = st.lists(st.lists(reward_values, min_size=1, max_size=5), min_size=0, max_size=6)


def batch_of(groups: list[list[float]]) -> list[Experience]:
    return [
        experience(f"g{g}", len(rewards), m, 0, reward)
        for g, rewards in enumerate(groups)
        for m, reward in enumerate(rewards)
    ]


def ids(exps: list[Experience]) -> list[str]:
    return [e.experience_id for e in exps]


def is_subsequence(kept: list[str], of: list[str]) -> bool:
    it = iter(of)
    return all(any(x == y for y in it) for x in kept)


@given(group_rewards, st.floats(0, 2))
@settings(max_examples=200, deadline=None)
def test_reward_std_filter_keeps_exactly_the_spread_groups_whole(
    groups: list[list[float]], threshold: float
) -> None:
    finite = [[r for r in g if math.isfinite(r)] or [0.0] for g in groups]
    exps = batch_of(finite)
    kept, metrics = reward_std_filter(exps, threshold=threshold)
    assert is_subsequence(ids(kept), ids(exps))
    for g, rewards in enumerate(finite):
        members = [e for e in kept if e.group_id == f"g{g}"]
        spread = len(rewards) > 1 and float(np.std(rewards)) > threshold
        assert len(members) == (len(rewards) if spread else 0)  # whole groups or none
    assert metrics["dropped"] == len(exps) - len(kept)
    assert metrics["kept_groups"] + metrics["dropped_groups"] == len(finite)


def test_reward_std_filter_refuses_a_negative_threshold() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        reward_std_filter(batch_of([[0.0, 1.0]]), threshold=-0.1)


@given(group_rewards)
@settings(max_examples=200, deadline=None)
def test_invalid_reward_filter_drops_exactly_the_non_finite(groups: list[list[float]]) -> None:
    exps = batch_of(groups)
    kept, metrics = invalid_reward_filter(exps)
    assert ids(kept) == [e.experience_id for e in exps if math.isfinite(e.reward)]
    assert metrics == {"dropped": float(len(exps) - len(kept))}


@given(group_rewards, st.floats(-2, 2))
@settings(max_examples=200, deadline=None)
def test_reward_filter_keeps_exactly_the_rewards_at_or_above(
    groups: list[list[float]], threshold: float
) -> None:
    exps = batch_of(groups)
    kept, metrics = reward_filter(exps, threshold=threshold)
    assert ids(kept) == [e.experience_id for e in exps if e.reward >= threshold]
    assert metrics == {"dropped": float(len(exps) - len(kept))}


@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=5), max_size=6), st.booleans())
@settings(max_examples=200, deadline=None)
def test_dapo_dynamic_sampling_keeps_the_groups_partly_right(
    groups: list[list[bool]], in_info: bool
) -> None:
    # correctness in the reward info (as the math rewards write it), while the reward itself says
    # the opposite: the statistic decides, the reward only stands in when it is absent
    exps = []
    for g, rights in enumerate(groups):
        for m, right in enumerate(rights):
            exp = experience(
                f"g{g}", len(rights), m, 0, float(not right) if in_info else float(right)
            )
            exps.append(
                dataclasses.replace(exp, info={"accuracy": str(float(right))}) if in_info else exp
            )
    kept, metrics = dapo_dynamic_sampling(exps)
    partly = {f"g{g}" for g, rights in enumerate(groups) if any(rights) and not all(rights)}
    assert ids(kept) == [e.experience_id for e in exps if e.group_id in partly]
    assert metrics["dropped_all_correct"] == sum(len(r) for r in groups if all(r))
    assert metrics["dropped_all_wrong"] == sum(len(r) for r in groups if not any(r))
    assert metrics["dropped"] == len(exps) - len(kept)


@given(st.lists(st.booleans(), max_size=8))
def test_mask_response_truncated_zeroes_only_truncated_masks(truncated: list[bool]) -> None:
    exps = [
        dataclasses.replace(experience("g", len(truncated), i, 0, 1.0), truncated=t)
        for i, t in enumerate(truncated)
    ]
    out, metrics = mask_response_truncated(exps)
    assert ids(out) == ids(exps)
    for before, after, t in zip(exps, out, truncated, strict=True):
        assert after.action_mask is not None and before.action_mask is not None
        assert after.action_mask.sum() == (0 if t else before.action_mask.sum())
        assert after.reward == before.reward and np.array_equal(
            after.response_ids, before.response_ids
        )
        assert before.action_mask.all()  # the input experience is not changed in place
    assert metrics == {"masked": float(sum(truncated))}


def test_reward_shaping_mapper_applies_rules_in_order_and_counts_what_it_skips() -> None:
    base = experience("g", 3, 0, 0, 1.0)
    with_stats = dataclasses.replace(base, metrics={"quality": 0.5}, info={"length": "4"})
    no_stats = dataclasses.replace(experience("g", 3, 1, 0, 2.0), info={"quality": "n/a"})
    zero = dataclasses.replace(experience("g", 3, 2, 0, 3.0), metrics={"quality": 0.0})
    rules = [
        {"stats_key": "quality", "op_type": "ADD", "weight": 2.0},  # metric: 1 + 2*0.5 = 2
        {"stats_key": "length", "op_type": "MUL", "weight": 0.5},  # info text: 2 * 0.5*4 = 4
        {"stats_key": "quality", "op_type": "DIV"},
    ]
    out, metrics = reward_shaping_mapper([with_stats, no_stats, zero], rules)
    # with_stats: (1 + 1) * 2 / 0.5 = 8; no_stats: 3 rules skipped; zero: ADD 0, length missing,
    # DIV by 0 skipped
    assert [e.reward for e in out] == [8.0, 2.0, 3.0]
    assert metrics["missing_stats"] == 4.0 and metrics["zero_divisors"] == 1.0
    assert metrics["reward_diff_max"] == 7.0 and metrics["reward_diff_min"] == 0.0
    assert with_stats.reward == 1.0  # a copy was changed


@given(st.lists(st.tuples(st.floats(-3, 3), st.floats(-3, 3)), max_size=6))
def test_reward_shaping_add_then_sub_of_the_same_stat_is_the_identity(
    pairs: list[tuple[float, float]],
) -> None:
    exps = [
        dataclasses.replace(experience("g", len(pairs), i, 0, r), metrics={"s": s})
        for i, (r, s) in enumerate(pairs)
    ]
    rules = [
        {"stats_key": "s", "op_type": "ADD", "weight": 1.5},
        {"stats_key": "s", "op_type": "SUB", "weight": 1.5},
    ]
    out, _ = reward_shaping_mapper(exps, rules)
    for before, after in zip(exps, out, strict=True):
        assert after.reward == pytest.approx(before.reward, abs=1e-9)


def test_pass_rate_calculator_reports_per_task_means_and_changes_nothing() -> None:
    exps = batch_of([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0], [1.0]])
    out, metrics = pass_rate_calculator(exps)
    assert out == exps
    assert metrics == {
        "tasks": 3.0,
        "pass_rate_mean": pytest.approx((0.75 + 0.0 + 1.0) / 3),
        "pass_rate_min": 0.0,
        "pass_rate_max": 1.0,
    }


def sampled(groups: list[list[float]], expert_at: tuple[int, ...] = ()) -> SampledBatch:
    rows = [
        BatchRow(e, Admitted(e, (TOPIC, 0), i), use_count=1) for i, e in enumerate(batch_of(groups))
    ]
    for at in expert_at:
        demo = experience("demo", 1, at, 0, math.nan)
        rows.insert(at, BatchRow(demo, None, expert=True))
    return SampledBatch(rows, 3, SamplerCounters())


def test_the_pipeline_applies_operators_in_order_and_says_what_each_dropped() -> None:
    batch = sampled([[1.0, 1.0], [0.0, 1.0], [math.nan, 1.0]], expert_at=(1,))
    pipeline = ExperiencePipeline.of(
        [
            ("invalid_reward_filter", {}),
            ("reward_std_filter", {"threshold": 0.0}),
            ("reward_std_filter", {"threshold": 0.0}),
        ]
    )
    kept, metrics = pipeline.apply(batch)
    # invalid drops g2/0; std drops g0 (equal) and g2 (one left): g1 and the demonstration remain
    assert [r.exp.experience_id for r in kept.rows] == ["demo/1", "g1/0", "g1/1"]
    assert [r.source.offset for r in kept.rows if r.source] == [2, 3]
    assert metrics["pipeline/invalid_reward_filter/dropped"] == 1.0
    assert metrics["pipeline/reward_std_filter/dropped"] == 3.0
    assert metrics["pipeline/reward_std_filter#2/dropped"] == 0.0
    assert metrics["pipeline/reward_std_filter/dropped_groups"] == 2.0
    assert metrics["pipeline/dropped"] == 4.0
    assert (kept.version, kept.counters) == (batch.version, batch.counters)


@given(group_rewards)
@settings(max_examples=100, deadline=None)
def test_the_pipeline_loses_nothing_silently(groups: list[list[float]]) -> None:
    batch = sampled(groups)
    pipeline = ExperiencePipeline.of(
        [("invalid_reward_filter", {}), ("mask_response_truncated", {}), ("reward_std_filter", {})]
    )
    kept, metrics = pipeline.apply(batch)
    assert len(kept.rows) + metrics["pipeline/dropped"] == len(batch.rows)
    per_stage = sum(v for k, v in metrics.items() if k.count("/") == 2 and k.endswith("/dropped"))
    assert per_stage == metrics["pipeline/dropped"]


def test_a_batch_the_pipeline_empties_trains_nothing_and_its_drops_reach_the_next_step() -> None:
    pipeline = ExperiencePipeline.of([("reward_std_filter", {})])
    kept, metrics = pipeline.run(sampled([[1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert (kept, metrics) == (None, {})
    kept, metrics = pipeline.run(sampled([[0.0, 1.0], [2.0, 2.0]]))
    assert kept is not None and len(kept.rows) == 2
    assert metrics["pipeline/reward_std_filter/dropped"] == 5 + 2
    assert metrics["pipeline/dropped"] == 7
    assert metrics["pipeline/reward_std_filter/kept_groups"] == 1  # this batch's own
    kept, metrics = pipeline.run(sampled([[0.0, 1.0]]))
    assert metrics["pipeline/dropped"] == 0  # said once, not again
    assert pipeline.dropped_total == 7


def test_an_operator_that_invents_or_reorders_experiences_is_named() -> None:
    def reorder(experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        return list(reversed(experiences)), {}

    pipeline = ExperiencePipeline([Stage("reorder", reorder, {}, "reorder")])
    with pytest.raises(OperatorOutputError, match="'reorder' returned experience 'g0/0'"):
        pipeline.apply(sampled([[0.0, 1.0]]))


def test_changed_experiences_keep_their_rows() -> None:
    batch = sampled([[1.0, 0.0]])
    truncated = [
        dataclasses.replace(r, exp=dataclasses.replace(r.exp, truncated=True)) for r in batch.rows
    ]
    batch = SampledBatch(truncated, batch.version, batch.counters)
    kept, metrics = ExperiencePipeline.of([("mask_response_truncated", {})]).apply(batch)
    assert [r.source for r in kept.rows] == [r.source for r in batch.rows]
    assert all(r.exp.action_mask is not None and not r.exp.action_mask.any() for r in kept.rows)
    assert metrics["pipeline/mask_response_truncated/masked"] == 2.0


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def pipeline_yaml(operators: str) -> str:
    return MINIMAL + f"data_processor:\n  experience_pipeline:\n    operators:\n{operators}"


def test_operators_load_typed_in_order(tmp_path: Path) -> None:
    text = pipeline_yaml(
        "      - name: invalid_reward_filter\n"
        "      - name: reward_std_filter\n"
        "        args: {threshold: 0.1}\n"
        "      - name: reward_shaping_mapper\n"
        "        args:\n"
        "          reward_shaping_configs: [{stats_key: accuracy, op_type: MUL, weight: 2}]\n"
    )
    cfg = load_config(write(tmp_path, text))
    ops = cfg.data_processor.experience_pipeline.operators
    assert [(o.name, o.args) for o in ops] == [
        ("invalid_reward_filter", {}),
        ("reward_std_filter", {"threshold": 0.1}),
        (
            "reward_shaping_mapper",
            {"reward_shaping_configs": [{"stats_key": "accuracy", "op_type": "MUL", "weight": 2}]},
        ),
    ]
    assert load_config(write(tmp_path, cfg.to_yaml(include_secrets=True))) == cfg


def test_operator_names_and_args_are_checked_at_load(tmp_path: Path) -> None:
    text = pipeline_yaml(
        "      - name: reward_std_filtr\n"
        "      - name: reward_std_filter\n"
        "        args: {threshold: 0.1, window: 3}\n"
        "      - name: reward_shaping_mapper\n"
        "        args:\n"
        "          reward_shaping_configs: [{stats_key: accuracy, op_type: POW}]\n"
    )
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, text))
    by_key = {p.path: str(p) for p in info.value.problems}
    assert set(by_key) == {
        f"{OPS}[0].name",
        f"{OPS}[1].args.window",
        f"{OPS}[2].args.reward_shaping_configs[0].op_type",
    }
    assert "did you mean 'reward_std_filter'?" in by_key[f"{OPS}[0].name"]
    assert "accepts: threshold" in by_key[f"{OPS}[1].args.window"]
    assert "ADD, SUB, MUL, DIV" in by_key[f"{OPS}[2].args.reward_shaping_configs[0].op_type"]


def test_the_parts_not_built_are_said(tmp_path: Path) -> None:
    text = MINIMAL + (
        "data_processor:\n"
        "  task_pipeline: {operators: []}\n"
        "  experience_pipeline:\n"
        "    save_input: true\n"
        "    operators: [{name: pass_rate_calculator}]\n"
    )
    with pytest.warns(Warning) as caught:
        cfg = load_config(write(tmp_path, text))
    said = " ".join(str(w.message) for w in caught)
    assert "`data_processor.task_pipeline` is accepted but ignored by rft: task pipelines" in said
    assert "`data_processor.experience_pipeline.save_input` is accepted but ignored" in said
    assert [o.name for o in cfg.data_processor.experience_pipeline.operators] == [
        "pass_rate_calculator"
    ]


def test_every_trinity_operator_name_but_data_juicer_is_registered() -> None:
    for name in (
        "reward_filter",
        "dapo_dynamic_sampling",
        "reward_std_filter",
        "invalid_reward_filter",
        "mask_response_truncated",
        "reward_shaping_mapper",
        "pass_rate_calculator",
    ):
        assert callable(EXPERIENCE_OPERATORS.get(name))
