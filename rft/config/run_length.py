"""Load-time rules on whether a run can reach its total_steps: enough tasks, and no staleness
bound that drops the batches the steps need.

- Tasks: each explorer step takes `buffer.batch_size` tasks and each train step needs one step's
  experiences, so a run of `total_steps` needs total_steps × batch_size tasks; a taskset of R
  rows published for E epochs gives R × E. Fewer is refused, with the numbers and the step the run
  would stop at. Without a configured total_steps the run derives floor(R × E / batch_size) steps
  (a last, partial batch could never fill a train batch); the tasks left over are said. The count
  is taken where it is known at load: file tasksets and generators (their rows are read or
  generated). A taskset that cannot be read at load is reported when it is published, not here;
  an online selector's feeder publishes total_steps × batch_size tasks itself, so no count applies.
  Nor does it to an explorer group that does not feed the trainer (`explorer.experiences_to` a
  topic of its own: its total_steps only caps it) or that starts later in the tasks topic
  (`explorer.tasks_from` other than earliest: it reads an unknown part of it), nor when the
  replay buffer trains groups again (`replay_buffer.enable` with a `reuse_cooldown_time`): its
  steps need not all come from new tasks.
- Staleness: an explorer samples a batch with weights at most `bound` versions older than the ones
  the trainer holds when it trains that batch (the sync style's bound: η =
  `synchronizer.max_head_offpolicyness`, and for `fixed` sync_offset + sync_interval - 1). The
  trainer drops experiences staler than `buffer.trainer_input.max_staleness`. With bound >
  max_staleness every batch sampled at the bound is dropped; one explorer stops at total_steps,
  so each dropped batch is a train step that never comes: refused. With several explorers in the
  group (each runs its own total_steps) the others may make up for drops: a warning. With no
  bound (fully_async or trainer_driven without η) nothing limits how stale batches get: a warning.

The rules here are pure; `rft.catalog.run_length` takes the count (producers) and the bound
(rft.synchronizer) and applies them when a config loads.
"""

from __future__ import annotations

from rft.config.binding import Issue, Notice
from rft.config.derived import TRAINER_EXPERIENCES
from rft.config.schema import RftConfig

STEPS_KEY = "buffer.total_steps"
TASKSET_KEY = "buffer.explorer_input.taskset"
STALENESS_KEY = "buffer.trainer_input.max_staleness"
ETA_KEY = "synchronizer.max_head_offpolicyness"


def configured_steps(cfg: RftConfig) -> tuple[str, int] | None:
    """(key, value) of the configured total_steps, or None when the run derives it."""
    if cfg.trainer.total_steps is not None and cfg.trainer.total_steps != cfg.buffer.total_steps:
        return "trainer.total_steps", cfg.trainer.total_steps
    if cfg.buffer.total_steps is not None:
        return STEPS_KEY, cfg.buffer.total_steps
    return None


def counts_tasks(cfg: RftConfig) -> bool:
    """Whether the task rule applies: the explorers feed the trainer from the whole taskset, and
    every train step needs new experiences."""
    replay = cfg.buffer.trainer_input.experience_buffer.replay_buffer
    if replay.enable and replay.reuse_cooldown_time is not None:
        return False
    target = cfg.explorer.experiences_to
    trainer_topic = (
        cfg.buffer.trainer_input.experience_buffer.topic or f"{cfg.project}.{cfg.name}.experiences"
    )
    return target in (TRAINER_EXPERIENCES, trainer_topic) and cfg.explorer.tasks_from == "earliest"


def task_supply(cfg: RftConfig, rows: int) -> tuple[list[Issue], list[Notice]]:
    """Whether `rows` tasks per epoch over `buffer.total_epochs` cover the run's steps."""
    batch = cfg.buffer.batch_size
    if batch is None or cfg.buffer.explorer_input.taskset is None:
        return [], []
    epochs = cfg.buffer.total_epochs
    tasks = rows * epochs
    name = cfg.buffer.explorer_input.taskset.name
    have = f"taskset {name!r} has {rows} task(s) × buffer.total_epochs {epochs} = {tasks}"
    full, left = divmod(tasks, batch)
    steps = configured_steps(cfg)
    if steps is not None:
        key, total = steps
        need = total * batch
        if tasks >= need:
            return [], []
        return [
            Issue(
                key,
                f"{total} steps × buffer.batch_size {batch} = {need} tasks, but {have}: the "
                f"explorers run out after {full} full step(s)"
                + (f" ({left} task(s) left over, less than a batch)" if left else "")
                + f" and the trainer could complete at most {full} of {total} steps; set "
                f"{key} <= {full}, raise buffer.total_epochs to "
                f">= {-(-need // rows) if rows else '?'}, or give more tasks",
            )
        ], []
    if full == 0:
        return [
            Issue(
                TASKSET_KEY,
                f"{have}, fewer than one batch (buffer.batch_size {batch}): no train step could "
                "complete",
            )
        ], []
    if left:
        return [], [
            Notice(
                TASKSET_KEY,
                f"{have}: the run derives {full} steps of buffer.batch_size {batch} (no "
                f"{STEPS_KEY} given); the last {left} task(s) make no full batch and are not "
                "explored",
            )
        ]
    return [], []


def staleness_supply(cfg: RftConfig, bound: int | None) -> tuple[list[Issue], list[Notice]]:
    """Whether the sync style's staleness `bound` (None: unbounded) lets batches be dropped."""
    limit = cfg.buffer.trainer_input.max_staleness
    if limit is None or (bound is not None and bound <= limit):
        return [], []
    sync = cfg.synchronizer
    explorers = cfg.explorer.max_explorers or cfg.explorer.rollout_model.engine_num
    if bound is None:
        return [], [
            Notice(
                STALENESS_KEY,
                f"{limit}: under sync_style {sync.sync_style} without {ETA_KEY} nothing bounds "
                "how many versions an explorer runs ahead; experiences staler than "
                f"{limit} are dropped and each dropped batch is a train step the explorers do "
                f"not make up (they stop at their total_steps); set {ETA_KEY} <= {limit} to "
                "bound it",
            )
        ]
    key = ETA_KEY if sync.max_head_offpolicyness == bound else "synchronizer.sync_offset"
    how = (
        f"{ETA_KEY} {bound}"
        if key == ETA_KEY
        else f"sync_style fixed with sync_offset {sync.sync_offset} + sync_interval "
        f"{sync.sync_interval} - 1 = {bound}"
    )
    text = (
        f"{how} lets an explorer sample a batch with weights {bound} versions older than the "
        f"trainer's when it trains it, but {STALENESS_KEY} {limit} drops experiences staler than "
        f"{limit}: every batch sampled at that bound is dropped"
    )
    if explorers > 1:
        return [], [
            Notice(
                key,
                f"{text}; the group's {explorers} explorers each run their total_steps, so the "
                "others may make up for dropped batches, or the trainer stops short",
            )
        ]
    return [
        Issue(
            key,
            f"{text}, and the explorer stops at its total_steps, so each dropped batch is a "
            f"train step that never comes; set {key} so the bound is <= {limit}, or "
            f"{STALENESS_KEY} >= {bound}",
        )
    ], []
