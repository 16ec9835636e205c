"""The offline trainer's rules (rft.consumers.trainer.offline_input): the saved range, the step bound, the
set-aside staleness bound, and what filters do to rollout groups."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.cli.main import build_parser
from rft.cli.train_cmd import offline_source
from rft.config import RftConfig
from rft.config.connections import KafkaSettings
from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.topic_range import RangeBound
from rft.consumers.trainer.offline_input import (
    STATE_KEY,
    OfflineSource,
    admit_rule,
    offline_state,
    offline_total_steps,
    resolve_range,
    spans_from_state,
    without_staleness,
)
from rft.errors import ConfigError
from tests.unit.experience_log import experience

SPANS = {("src.experiences", 0): (3, 40), ("src.experiences", 1): (0, 17)}
# never contacted: a saved range is read without asking the broker
NO_BROKER = KafkaSettings(bootstrap_servers="127.0.0.1:9")


spans_strategy = st.dictionaries(
    st.tuples(st.sampled_from(["a.experiences", "b.x"]), st.integers(0, 63)),
    st.tuples(st.integers(0, 10**9), st.integers(0, 10**6)).map(lambda t: (t[0], t[0] + t[1])),
)


@given(spans_strategy)
def test_the_saved_range_reads_back_as_it_was(spans: dict) -> None:
    assert spans_from_state(offline_state("t", spans)) == spans


def test_a_resume_reads_the_saved_range_not_the_topic_now() -> None:
    source = OfflineSource("src.experiences", end=RangeBound(offsets={0: 5}))
    saved = {STATE_KEY: offline_state("src.experiences", SPANS), "sampler": {}}
    assert resolve_range(NO_BROKER, source, saved) == SPANS


def test_a_resume_refuses_an_online_run_or_another_topic() -> None:
    source = OfflineSource("src.experiences")
    with pytest.raises(ConfigError, match="published by an online trainer"):
        resolve_range(NO_BROKER, source, {"sampler": {}})
    with pytest.raises(ConfigError, match="trained from other.experiences"):
        resolve_range(NO_BROKER, source, {STATE_KEY: offline_state("other.experiences", SPANS)})


@given(spans_strategy, st.integers(1, 300), st.one_of(st.none(), st.integers(1, 50)))
def test_total_steps_bound_the_batches_the_range_can_hold(
    spans: dict, batch: int, configured: int | None
) -> None:
    steps = offline_total_steps(configured, spans, batch)
    offsets = sum(end - first for first, end in spans.values())
    assert steps >= 1
    # enough steps for every full batch the range could hold (each experience takes an offset)
    assert configured is not None or steps * batch >= offsets
    assert steps <= max(1, -(-offsets // batch))
    if configured is not None:
        assert steps <= configured


def test_staleness_is_set_aside_offline_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        args = without_staleness({"max_staleness": 1, "filter_groups": True})
    assert args == {"max_staleness": None, "filter_groups": True}
    assert "max_staleness 1 is not applied offline" in caplog.text
    caplog.clear()
    assert without_staleness({"filter_groups": False}) == {"filter_groups": False}
    assert not caplog.text


def test_without_filters_nothing_is_rewritten() -> None:
    assert admit_rule(OfflineSource("t"), uses_advantage=True, algorithm="grpo") is None


def test_version_filters_keep_whole_groups() -> None:
    rule = admit_rule(OfflineSource("t", keep=ExperienceFilter(max_version=1)), True, "grpo")
    assert rule is not None
    young, old = experience("g", 4, 0, 1, 0.5), experience("h", 4, 0, 2, 0.5)
    assert rule(young) is young and rule(old) is None


def test_a_reward_filter_trains_each_kept_response_alone_without_advantages() -> None:
    keep = OfflineSource("t", keep=ExperienceFilter(min_reward=1.0))
    rule = admit_rule(keep, uses_advantage=False, algorithm="raft")
    assert rule is not None
    members = [experience("g", 4, k, 0, float(k % 2)) for k in range(4)]
    kept = [e for e in map(rule, members) if e is not None]
    assert [e.experience_id for e in kept] == ["g/1", "g/3"]
    assert all(e.group_size == 1 for e in kept)
    assert len({e.group_id for e in kept}) == 2  # each a group of its own
    assert [e.reward for e in kept] == [1.0, 1.0]


def test_a_reward_filter_is_refused_by_group_advantages() -> None:
    keep = OfflineSource("t", keep=ExperienceFilter(max_reward=0.0))
    with pytest.raises(ConfigError, match="algorithm 'grpo' computes advantages"):
        admit_rule(keep, uses_advantage=True, algorithm="grpo")


# -- the command line: rft train's range options ------------------------------------------------


def parsed(tmp_path: Path, *argv: str) -> tuple[argparse.Namespace, RftConfig]:
    path = tmp_path / "run.yaml"
    path.write_text(
        "project: p\nname: n\nmode: train\nmodel: {model_path: tiny}\nbuffer: {batch_size: 2}\n"
        "algorithm: {algorithm_type: grpo, repeat_times: 2}\n"
    )
    args = build_parser().parse_args(["train", "--config", str(path), *argv])
    return args, load_config(path)


def test_from_topic_takes_a_short_name_of_the_run_or_a_full_name(tmp_path: Path) -> None:
    args, cfg = parsed(tmp_path, "--from-topic", "experiences", "--to-offsets", "0=9")
    source = offline_source(args, cfg)
    assert source.topic == "p.n.experiences" and source.end.offsets == {0: 9}
    args, cfg = parsed(tmp_path, "--from-topic", "q.m.experiences", "--min-version", "2")
    source = offline_source(args, cfg)
    assert source.topic == "q.m.experiences" and source.keep.min_version == 2


def test_range_options_without_from_topic_are_refused(tmp_path: Path) -> None:
    args, cfg = parsed(tmp_path, "--min-reward", "1")
    with pytest.raises(ConfigError, match="need --from-topic"):
        offline_source(args, cfg)
    args, cfg = parsed(tmp_path)
    assert offline_source(args, cfg) is None
    # `rft run` (mode train) calls the verb with its own arguments, which have no range options
    assert offline_source(argparse.Namespace(config=args.config), cfg) is None
