"""Task selectors: offline_easy2hard's curriculum from `feature_keys` columns, and the online
difficulty_based selector's estimate, choice and order independence (what makes the task feeder
exactly resumable). The feeder itself runs against the real broker in
tests/integration/test_task_feeder.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.config.loader import ConfigValidationError
from rft.config.schema import FormatConfig, TaskSelectorConfig, TasksetConfig
from rft.errors import ConfigError
from rft.events.topics import TopicNames
from rft.producers.task_publisher import epoch_order, publish_tasksets
from rft.producers.task_selectors import ONLINE_TASK_SELECTORS, TASK_SELECTORS, selector_part
from rft.producers.taskset_reader import BadTasksetError, load_taskset


def rated_taskset(tmp: Path, rates: list[object], **selector: object) -> TasksetConfig:
    """A JSONL taskset whose rows carry a `pass_rate` column."""
    path = tmp / "rated.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1), "pass_rate": r})
            + "\n"
            for i, r in enumerate(rates)
        )
    )
    return TasksetConfig(
        name="rated",
        path=str(path),
        format=FormatConfig(prompt_key="question", response_key="answer"),
        task_selector=TaskSelectorConfig(**selector),  # type: ignore[arg-type]
    )


# -- offline_easy2hard ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=15))
def test_offline_easy2hard_orders_by_the_columns_then_file_order(rows) -> None:
    features = [tuple(float(v) for v in r) for r in rows]
    got = TASK_SELECTORS.get("offline_easy2hard")(len(rows), 0, 0, features)
    # reference: a comparison of each pair by hand (higher first, ties by the next column,
    # then by position)
    for a, b in zip(got, got[1:], strict=False):
        fa, fb = features[a], features[b]
        assert fa > fb or (fa == fb and a < b), (fa, fb, a, b)
    assert sorted(got) == list(range(len(rows)))
    hard_first = TASK_SELECTORS.get("offline_easy2hard")(
        len(rows), 0, 0, features, higher_is_easier=False
    )
    for a, b in zip(hard_first, hard_first[1:], strict=False):
        fa, fb = features[a], features[b]
        assert fa < fb or (fa == fb and a < b)


def test_offline_easy2hard_publishes_easiest_first_every_epoch(tmp_path: Path) -> None:
    loaded = load_taskset(
        rated_taskset(
            tmp_path,
            [0.2, 0.9, 0.5, 0.9, 0.0],
            selector_type="offline_easy2hard",
            feature_keys=["pass_rate"],
        )
    )
    assert loaded.selector_features == [(0.2,), (0.9,), (0.5,), (0.9,), (0.0,)]
    assert epoch_order(loaded, 7, 0) == [1, 3, 2, 0, 4] == epoch_order(loaded, 7, 1)


def test_a_row_without_a_numeric_feature_column_is_a_bad_row(tmp_path: Path) -> None:
    config = rated_taskset(
        tmp_path, [0.5, "easy", None], selector_type="offline_easy2hard", feature_keys=["pass_rate"]
    )
    with pytest.raises(BadTasksetError) as err:
        load_taskset(config)
    text = str(err.value)
    assert "rated.jsonl:2" in text and "'pass_rate' must be a number, got 'easy'" in text
    assert "rated.jsonl:3" in text


def test_offline_easy2hard_without_feature_keys_says_so(tmp_path: Path) -> None:
    loaded = load_taskset(rated_taskset(tmp_path, [0.1, 0.2], selector_type="offline_easy2hard"))
    with pytest.raises(ConfigError, match="feature_keys"):
        epoch_order(loaded, 0, 0)


# -- difficulty_based ------------------------------------------------------------------------------


def make(num_rows: int = 12, **kwargs):
    return ONLINE_TASK_SELECTORS.get("difficulty_based")(num_rows, 3, None, **kwargs)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.floats(-1.0, 2.0)), max_size=30),
    st.randoms(use_true_random=False),
)
def test_difficulty_based_state_depends_on_what_was_observed_not_the_order(obs, rnd) -> None:
    """The feeder re-reads a log whose partitions may interleave differently: same choices."""
    a, b = make(6), make(6)
    for position, reward in obs:
        a.observe(position, reward)
    shuffled = list(obs)
    rnd.shuffle(shuffled)
    for position, reward in shuffled:
        b.observe(position, reward)
    assert np.array_equal(a.predicted_pass_rate(), b.predicted_pass_rate())
    for r in range(3):
        assert a.select(4, r) == b.select(4, r)


def test_difficulty_based_predicts_the_beta_posterior_mean() -> None:
    sel = make(3, prior_strength=4.0)
    for reward in (1.0, 1.0, 0.0, 2.0, -1.0):  # clipped to [0, 1]: 1, 1, 0, 1, 0
        sel.observe(1, reward)
    # no features: prior Beta(1, 1); row 1 has S = 3 of n = 5
    np.testing.assert_allclose(sel.predicted_pass_rate(), [0.5, (1 + 3) / (2 + 5), 0.5])
    with_prior = ONLINE_TASK_SELECTORS.get("difficulty_based")(
        2, 0, [(0.9,), (0.1,)], prior_strength=4.0
    )
    np.testing.assert_allclose(with_prior.predicted_pass_rate(), [4.6 / 6, 1.4 / 6])


def test_difficulty_based_greedy_picks_the_rows_nearest_the_target() -> None:
    sel = make(6, tau=0.0, target_reward=0.5)
    observed = {0: [1, 1, 1], 1: [0, 0, 0], 2: [1, 0], 3: [1, 1, 0], 4: [0], 5: [1, 0, 1, 0]}
    for position, rewards in observed.items():
        for r in rewards:
            sel.observe(position, r)
    # posterior means: 0.8, 0.2, 0.5, 0.6, 0.333, 0.5 -> distance to 0.5 ranks 2 = 5, 3, 4, 0 = 1
    assert sel.select(3, 0) == [2, 5, 3]
    assert sel.select(3, 0) == sel.select(3, 99)  # greedy ignores the round


def test_difficulty_based_sampling_is_seeded_by_round_and_follows_the_scores() -> None:
    sel = make(10, tau=0.05)
    for p in range(10):
        for r in [1, 0] if p < 5 else [1, 1, 1, 1]:
            sel.observe(p, r)
    assert sel.select(5, 4) == sel.select(5, 4)  # reproducible per round
    draws = [set(sel.select(5, r)) for r in range(40)]
    assert len({frozenset(d) for d in draws}) >= 1
    # rows 0-4 sit on the target (score 0), rows 5-9 far from it (-0.33): exp(-0.33/0.05) ~ 1e-3
    share = np.mean([len(d & {0, 1, 2, 3, 4}) / 5 for d in draws])
    assert share > 0.95
    uniform = make(10, tau=1e6)
    picked = [p for r in range(200) for p in uniform.select(1, r)]
    assert set(picked) == set(range(10))  # a huge tau samples (nearly) uniformly


def test_difficulty_based_checks_its_args() -> None:
    with pytest.raises(ConfigError, match="target_reward"):
        make(target_reward=1.5)
    with pytest.raises(ConfigError, match="lookahead_batches"):
        make(lookahead_batches=0)


# -- config and publishing -------------------------------------------------------------------------


def test_selector_names_come_from_both_registries() -> None:
    assert selector_part("shuffle") is TASK_SELECTORS.get("shuffle")
    assert selector_part("difficulty_based") is ONLINE_TASK_SELECTORS.get("difficulty_based")
    with pytest.raises(ConfigError, match="did you mean 'difficulty_based'.*sequential"):
        selector_part("difficulty_base")


def test_selector_args_are_checked_at_load(tmp_path: Path) -> None:
    base = (
        "project: p\nname: n\nmode: explore\nmodel: {model_path: tiny}\n"
        "algorithm: {repeat_times: 2}\nbuffer:\n  batch_size: 2\n"
        "  explorer_input:\n    default_workflow_type: math_workflow\n"
        "    taskset:\n      name: a\n      storage_type: generator\n"
        "      path: arithmetic\n      task_selector:\n        selector_type: difficulty_based\n"
    )
    path = tmp_path / "run.yaml"
    path.write_text(base + "        kwargs: {target_reward: 0.7, tau: 0.2}\n")
    load_config(path)
    path.write_text(base + "        kwargs: {target: 0.7}\n")
    with pytest.raises(ConfigValidationError, match="kwargs.target` is not an argument"):
        load_config(path)


def test_an_online_taskset_is_left_to_the_feeder_by_the_publisher(tmp_path: Path) -> None:
    online = load_taskset(rated_taskset(tmp_path, [0.1, 0.2], selector_type="difficulty_based"))

    class Sink:
        sent: list = []

        def send(self, topic, event, key=None):
            self.sent.append(event)

        def flush(self):
            pass

    from rft.producers.task_publisher import TaskPublisher

    sink = Sink()
    summary = publish_tasksets(
        TaskPublisher(sink), [online], TopicNames.for_run("p", "n"), epochs=1, seed=0
    )
    assert sink.sent == [] and summary.fed_online == ["rated"]
    assert any("rft feed" in line for line in summary.lines())
    with pytest.raises(ConfigError, match="task feeder"):
        epoch_order(online, 0, 0)
    random.seed(0)  # nothing above drew from the global generator
