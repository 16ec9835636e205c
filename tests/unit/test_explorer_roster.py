"""ExplorerRoster: when the trainer may conclude that no more experiences can come, from the
explorers' statuses (newest per process) and the tasks its groups left uncommitted."""

from __future__ import annotations

from rft.consumers.trainer.explorer_roster import ExplorerRoster
from rft.events.models import ComponentStatus

TOPIC = "p.n.experiences"
GROUP = "p.n.explorer.explorer"


def roster(size: int = 1, left: int = 0, online: bool = False) -> ExplorerRoster:
    return ExplorerRoster(
        experience_topic=TOPIC,
        total_steps=10,
        own_group=GROUP,
        own_size=size,
        online_tasks=online,
        tasks_left=lambda group: left,
    )


def status(
    instance: str,
    state: str,
    reason: str = "",
    *,
    group: str = GROUP,
    total_steps: int = 10,
    topic: str = TOPIC,
    size: int = 1,
    at: int = 1,
) -> ComponentStatus:
    return ComponentStatus(
        "explorer",
        instance,
        group,
        state,
        reason,
        step=4,
        total_steps=total_steps,
        experience_topic=topic,
        group_size=size,
        created_at=at,
    )


def test_the_own_group_is_expected_before_it_says_anything() -> None:
    assert roster().ended() is None


def test_tasks_exhausted_ends_the_group_when_no_task_is_left() -> None:
    r = roster(left=0)
    r.saw_status(status("a", "finished", "tasks_exhausted"))
    assert r.ended() == f"explorer group {GROUP} used up its tasks (at its step 4)"


def test_tasks_left_uncommitted_keep_the_group_open() -> None:
    # another member holds tasks not committed yet, or tasks were published again
    r = roster(left=3)
    r.saw_status(status("a", "finished", "tasks_exhausted"))
    assert r.ended() is None


def test_an_online_feeder_makes_exhaustion_not_final() -> None:
    r = roster(left=0, online=True)
    r.saw_status(status("a", "finished", "tasks_exhausted"))
    assert r.ended() is None


def test_total_steps_ends_the_group_only_when_every_member_it_is_sized_for_finished() -> None:
    r = roster(size=2, left=5)
    r.saw_status(status("a", "finished", "total_steps"))
    assert r.ended() is None
    r.saw_status(status("b", "finished", "total_steps"))
    assert r.ended() == f"explorer group {GROUP}: 2 of 2 explorer(s) ran their 10 steps"


def test_a_restarted_explorer_replaces_its_finished_with_running() -> None:
    r = roster()
    r.saw_status(status("a", "finished", "total_steps", at=1))
    r.saw_status(status("a", "running", at=2))
    assert r.ended() is None
    assert "a running" in r.still_running()


def test_a_stopped_explorer_is_not_finished_for_good() -> None:
    r = roster(left=0)
    r.saw_status(status("a", "finished", "stopped"))
    assert r.ended() is None


def test_a_status_of_a_run_of_another_length_is_left_out() -> None:
    r = roster()
    r.saw_status(status("a", "finished", "total_steps", total_steps=5))
    assert r.ended() is None


def test_statuses_for_another_topic_are_left_out() -> None:
    r = roster()
    r.saw_status(status("a", "finished", "total_steps"))
    r.saw_status(
        status("x", "running", group="p.n.explorer.shadow", topic="p.n.experiences.shadow")
    )
    assert r.ended() is not None


def test_every_known_group_must_be_done() -> None:
    r = roster(left=0)
    other = "p.n.explorer.second"
    r.saw_status(status("a", "finished", "tasks_exhausted"))
    r.saw_status(status("b", "running", group=other, size=1))
    assert r.ended() is None
    assert f"explorer group {other} (0 of 1 finished: b running)" in r.still_running()
    r.saw_status(status("b", "finished", "total_steps", group=other, at=2))
    assert r.ended() == (
        f"explorer group {GROUP} used up its tasks (at its step 4); "
        f"explorer group {other}: 1 of 1 explorer(s) ran their 10 steps"
    )


def test_a_trainer_fed_by_no_own_group_waits_until_one_is_known() -> None:
    r = ExplorerRoster(TOPIC, 10, None, 1, False, lambda group: 0)
    assert r.ended() is None
    r.saw_status(status("a", "finished", "tasks_exhausted"))
    assert r.ended() is not None
