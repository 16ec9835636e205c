"""Publishing a training dataset as Experience events, for the algorithms that train on one (sft,
cpt, dpo: the preset's `dataset` trait names the renderer).

The dataset of `buffer.trainer_input.experience_buffer` (storage_type file) is read with
rft.datasets, every row rendered by rft.buffer.sft_rows with the model's tokenizer and chat
template, and written to the run's experience topic for `total_epochs` epochs, each a seeded
shuffle (seed + epoch), in one Kafka transaction: a reader sees the whole dataset or none of it.
The topic then holds exactly the token ids the trainer trains, and the trainer records what it
trained against their offsets as it does for rollouts. Everything is read and rendered before
anything is sent; with on_bad_rows "fail" one bad row publishes nothing.

Each event: experience_id `<name>:<epoch>:<row>` (`.<window>` appended for a long text's later
windows), a group of its own (size 1, keyed by its id), explorer_id `dataset:<name>`, model
version 0, reward 0 and zero logprobs (the supervised loss reads neither). A preference pair (a
renderer with the trait `grouped`) is one group `<name>:<epoch>:<row>` of two events `.0` (the
chosen response, reward 1) and `.1` (the rejected one, reward 0), keyed by the group, so both
land in one partition, next to each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rft.buffer.sft_rows import SFT_ROW_RENDERERS, RenderContext, RenderedRow
from rft.config.connections import KafkaSettings
from rft.config.schema import ExperienceBufferConfig, TasksetConfig
from rft.datasets.files import file_rows
from rft.datasets.rows import BadRow
from rft.errors import ConfigError, TasksetError
from rft.events.models import Experience
from rft.producers.task_publisher import publish_transaction
from rft.producers.task_selectors import shuffle

BAD_ROW_POLICIES = ("fail", "skip-and-report")


@dataclass
class RenderedDataset:
    """A dataset's rows, each rendered to its sequences (a long text gives several). `grouped`
    (the renderer's trait): a row's sequences form one group (a preference pair), instead of
    each being a group of its own."""

    name: str
    rows: list[list[RenderedRow]]
    bad_rows: list[str] = field(default_factory=list)
    grouped: bool = False

    @property
    def sequences(self) -> int:
        return sum(len(r) for r in self.rows)

    @property
    def truncated(self) -> int:
        return sum(any(s.truncated for s in r) for r in self.rows)


@dataclass
class DatasetSummary:
    topic: str
    rows: int
    epochs: int
    events: int
    trained_tokens: int
    truncated: int
    bad_rows: list[str]

    def lines(self) -> list[str]:
        out = [
            f"{self.topic}: {self.events} experiences from {self.rows} rows x {self.epochs} "
            f"epoch(s), {self.trained_tokens} trained tokens"
        ]
        if self.truncated:
            out.append(f"{self.truncated} row(s) longer than the token limits were cut")
        out += [f"skipped bad row {bad}" for bad in self.bad_rows]
        return out


def render_dataset(
    buffer: ExperienceBufferConfig,
    renderer: str,
    context: RenderContext,
    *,
    on_bad_rows: str = "fail",
) -> RenderedDataset:
    """Every row of the buffer's dataset rendered; TasksetError listing the bad rows (fail)."""
    if on_bad_rows not in BAD_ROW_POLICIES:
        raise ConfigError(f"on_bad_rows must be one of {BAD_ROW_POLICIES}, got {on_bad_rows!r}")
    where = "buffer.trainer_input.experience_buffer"
    if not buffer.path:
        raise ConfigError(f"{where}.path: the dataset to publish is not set")
    render = SFT_ROW_RENDERERS.get(renderer)
    source = TasksetConfig(
        name=buffer.name, path=buffer.path, split=buffer.split, subset_name=buffer.subset_name
    )
    grouped = SFT_ROW_RENDERERS.spec(renderer).grouped
    rendered = RenderedDataset(buffer.name, [], grouped=grouped)
    for row in file_rows(source):
        if isinstance(row, BadRow):
            rendered.bad_rows.append(str(row))
            continue
        try:
            rendered.rows.append(render(row.payload, row.origin, buffer.format, context))
        except TasksetError as exc:
            rendered.bad_rows.append(str(exc))
    if rendered.bad_rows and on_bad_rows == "fail":
        listed = "\n".join(f"  {b}" for b in rendered.bad_rows[:20])
        raise TasksetError(
            f"{where}: {len(rendered.bad_rows)} unusable row(s) of {buffer.path}, nothing "
            f"published:\n{listed}"
        )
    if not rendered.rows:
        raise TasksetError(f"{where}: {buffer.path} has no usable rows")
    return rendered


def dataset_experience(
    name: str, epoch: int, index: int, window: int, row: RenderedRow, group_size: int = 0
) -> Experience:
    """The event of one rendered sequence (see the module docstring for its fields); with
    `group_size` > 0 it is member `window` of the row's group of that size (a pair)."""
    row_id = f"{name}:{epoch}:{index}"
    ident = row_id + (f".{window}" if window or group_size else "")
    group = row_id if group_size else ident
    n = len(row.response_ids)
    return Experience(
        experience_id=ident,
        task_id=group,
        group_id=group,
        group_size=group_size or 1,
        explorer_id=f"dataset:{name}",
        model_version=0,
        prompt_ids=np.asarray(row.prompt_ids, dtype=np.int32),
        response_ids=np.asarray(row.response_ids, dtype=np.int32),
        logprobs=np.zeros(n, dtype=np.float32),
        action_mask=np.asarray(row.mask, dtype=bool),
        reward=row.reward,
    )


def dataset_events(dataset: RenderedDataset, epochs: int, seed: int) -> list[Experience]:
    """The events of `epochs` epochs, each in its seeded shuffle of the rows."""
    return [
        dataset_experience(
            dataset.name,
            epoch,
            index,
            window,
            seq,
            len(dataset.rows[index]) if dataset.grouped else 0,
        )
        for epoch in range(epochs)
        for index in shuffle(len(dataset.rows), epoch, seed)
        for window, seq in enumerate(dataset.rows[index])
    ]


def publish_dataset(
    kafka: KafkaSettings,
    dataset: RenderedDataset,
    topic: str,
    *,
    epochs: int,
    seed: int,
    transactional_id: str,
) -> DatasetSummary:
    """`dataset_events` written to `topic` in one transaction (all of them or, after a crash or
    an error part-way, none)."""
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    events = dataset_events(dataset, epochs, seed)
    with publish_transaction(kafka, transactional_id) as writer:
        for exp in events:
            writer.send(topic, exp, key=exp.group_id)
    return DatasetSummary(
        topic=topic,
        rows=len(dataset.rows),
        epochs=epochs,
        events=len(events),
        trained_tokens=sum(int(np.sum(e.action_mask)) for e in events if e.action_mask is not None),
        truncated=dataset.truncated,
        bad_rows=dataset.bad_rows,
    )
