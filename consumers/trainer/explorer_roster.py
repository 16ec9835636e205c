"""ExplorerRoster: what the trainer knows of the explorer groups that feed its experience topic,
and whether any more experiences can come from them.

The trainer reads each explorer's ComponentStatus on the control topic (the newest one of a
process is its state: a restarted explorer announces `running`, which replaces its `finished`). A
group can send nothing more when

- its tasks are exhausted: a member finished with `tasks_exhausted` and the group has no task
  left uncommitted on the tasks topic now (checked live when asked, so tasks published again
  after that status count). Experiences commit with their task offsets, so a group with every
  task committed has written all it will. Not for an online selector: its feeder publishes more
  tasks as rewards come in, so an empty tasks topic is not the end there;
- or every member it is sized for (its plan's explorer count) finished its `total_steps`.

The run's own explorer group is expected from the trainer's plan even before it says anything;
a status of the own group that names other total_steps than the trainer's is from a run of
another length (before a resume that changed it) and is left out. Other groups of the run (other
`explorer.name`s writing to this topic) are known from their statuses. No more experiences can
come when every known group can send nothing more. Explorers announce on their own run's control
topic: those of another run that write to this topic (`explorer.experiences_to`) are not seen
here, so a trainer fed by another run's explorers should not rely on this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rft.events.models import ComponentStatus

DONE_REASONS = ("total_steps", "tasks_exhausted")


@dataclass
class GroupView:
    size: int
    statuses: dict[str, ComponentStatus] = field(default_factory=dict)  # explorer id -> newest

    def finished(self) -> dict[str, ComponentStatus]:
        return {i: s for i, s in self.statuses.items() if s.finished and s.reason in DONE_REASONS}


@dataclass
class ExplorerRoster:
    experience_topic: str
    total_steps: int
    own_group: str | None  # the run's explorer group, when it feeds this topic
    own_size: int
    online_tasks: bool  # a feeder publishes the tasks as rewards come in
    tasks_left: Callable[[str], int | None]  # explorer group -> tasks not committed, now
    groups: dict[str, GroupView] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.own_group is not None:
            self.groups[self.own_group] = GroupView(self.own_size)

    def saw_status(self, status: ComponentStatus) -> None:
        if status.component != "explorer" or status.experience_topic != self.experience_topic:
            return
        own = status.group == self.own_group
        if own and status.total_steps != self.total_steps:
            return  # from a run of another length
        view = self.groups.setdefault(status.group, GroupView(max(1, status.group_size)))
        if not own:
            view.size = max(view.size, status.group_size)
        view.statuses[status.instance] = status

    def group_ended(self, name: str) -> str | None:
        """Why group `name` can send nothing more, or None while it may."""
        view = self.groups[name]
        finished = view.finished()
        exhausted = [s for s in finished.values() if s.reason == "tasks_exhausted"]
        if exhausted and not self.online_tasks and self.tasks_left(name) == 0:
            return f"explorer group {name} used up its tasks (at its step {exhausted[0].step})"
        by_steps = [s for s in finished.values() if s.reason == "total_steps"]
        if len(by_steps) >= view.size:
            return (
                f"explorer group {name}: {len(by_steps)} of {view.size} explorer(s) ran their "
                f"{self.total_steps} steps"
            )
        return None

    def ended(self) -> str | None:
        """Why no more experiences can come to the topic, or None while some may."""
        if not self.groups:
            return None
        reasons = []
        for name in sorted(self.groups):
            why = self.group_ended(name)
            if why is None:
                return None
            reasons.append(why)
        return "; ".join(reasons)

    def still_running(self) -> str:
        """The groups that may still send experiences, with what they last said, for a wait
        line."""
        parts = []
        for name in sorted(self.groups):
            view = self.groups[name]
            finished = view.finished()
            said = [
                f"{i} {s.state}" + (f" ({s.reason})" if s.reason else "")
                for i, s in sorted(view.statuses.items())
            ]
            parts.append(
                f"explorer group {name} ({len(finished)} of {view.size} finished"
                + (f": {', '.join(said)}" if said else ", none announced")
                + ")"
            )
        return "; ".join(parts) or "no explorer group known yet"
