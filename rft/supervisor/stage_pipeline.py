"""StagePipeline: `rft run` of a config with `stages:` — its stages in order, each a run.

The pipeline owns the order of the stages and what passes between them; each stage runs as
`rft run` runs one config (the caller's `run_one`). A stage that finishes gets a record in the
object store (rft.storage.stage_progress) naming its run's last weight version. The next stage
starts from that version: it is downloaded from the previous stage's checkpoint store, every file
checked against the manifest's sha256 and the manifest against the record's, into the stage's
job directory, and the stage runs with `model.model_path` set to it. Its own versions count from
there (its version 0 is that model). Rerunning the pipeline skips the recorded stages and resumes
the first unrecorded one exactly as a single run resumes (its trainer from its newest version,
its explorers from their committed offsets, its tasks and dataset not published again).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rft.config.run_stages import RunStage
from rft.config.schema import RftConfig
from rft.consumers.run_plan import RunPlan
from rft.errors import CheckpointError, RftError
from rft.storage.checkpoint_manifest import MANIFEST_NAME
from rft.storage.checkpoint_store import BASE_VERSION, TRAINER_STATE_DIR, CheckpointStore
from rft.storage.stage_progress import StageProgress, StageRecord, manifest_digest

# runs one stage as `rft run` runs a config, with these overrides added; its exit code
RunOne = Callable[[RunStage, list[str]], int]

START_MODEL_DIR = "start-model"


@dataclass(frozen=True)
class StageState:
    """Where one stage stands: its record if it finished."""

    stage: RunStage
    cfg: RftConfig
    record: StageRecord | None


class StagePipeline:
    """The stages of one config, each `(stage, its checked config)`, in order."""

    def __init__(self, stages: Sequence[tuple[RunStage, RftConfig]]) -> None:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.stages = list(stages)
        first, cfg = self.stages[0]
        self.project = cfg.project
        self.name = cfg.name.removesuffix(f"-{first.name}")
        self.progress = StageProgress(
            RunPlan(cfg).checkpoint_store().store, self.project, self.name
        )

    def states(self) -> list[StageState]:
        return [StageState(s, c, self.progress.finished(s.index, s.name)) for s, c in self.stages]

    def _say(self, stage: RunStage, text: str) -> None:
        print(
            f"rft run: stage {stage.index + 1}/{len(self.stages)} {stage.name!r}: {text}",
            flush=True,
        )

    def run(self, run_one: RunOne) -> int:
        """Run the stages not finished yet, in order; the first non-zero exit code stops it."""
        previous: StageRecord | None = None
        for state in self.states():
            stage, cfg = state.stage, state.cfg
            if state.record is not None:
                self._say(
                    stage,
                    f"finished earlier (run {cfg.project}.{state.record.run_name}, last version "
                    f"v{state.record.last_version}); not run again",
                )
                previous = state.record
                continue
            extra: list[str] = []
            if previous is not None:
                start = self.start_model(previous, cfg)
                extra.append(f"model.model_path={start}")
                self._say(
                    stage,
                    f"starts from run {cfg.project}.{previous.run_name} v{previous.last_version} "
                    f"(checked, in {start})",
                )
            self._say(stage, f"running as run {cfg.project}.{cfg.name}")
            code = run_one(stage, extra)
            if code != 0:
                self._say(stage, f"ended with exit code {code}; `rft run` again resumes it")
                return code
            previous = self.finish(stage, cfg)
            self._say(stage, f"finished: last version v{previous.last_version}")
        return 0

    def finish(self, stage: RunStage, cfg: RftConfig) -> StageRecord:
        """Record `stage` as finished at its run's newest version."""
        store = RunPlan(cfg).checkpoint_store()
        version = store.latest_version()
        if version == BASE_VERSION:
            raise RftError(
                f"stage {stage.name!r} (run {cfg.project}.{cfg.name}) finished without a weight "
                "version: the next stage has nothing to start from"
            )
        manifest = store.read_manifest(version).to_json()
        return self.progress.record(stage.index, stage.name, cfg.name, version, manifest)

    def start_model(self, previous: StageRecord, cfg: RftConfig) -> Path:
        """The previous stage's last version as a local HF directory for the stage of `cfg`:
        downloaded once (each file's sha256 checked against the manifest), the manifest checked
        against the record. A directory from an earlier start is reused when its manifest is the
        recorded one."""
        store = CheckpointStore(self.progress.store, cfg.project, previous.run_name)
        dest = (
            cfg.job_dir.absolute()
            / START_MODEL_DIR
            / f"{previous.run_name}-v{previous.last_version:06d}"
        )
        held = dest / MANIFEST_NAME
        if held.is_file() and manifest_digest(held.read_bytes()) == previous.manifest_sha256:
            return dest
        manifest = store.read_manifest(previous.last_version).to_json()
        if manifest_digest(manifest) != previous.manifest_sha256:
            raise CheckpointError(
                f"{store.uri(previous.last_version)}: the manifest is not the one "
                f"{self.progress.uri(previous.index, previous.stage_name)} recorded "
                f"(sha256 {previous.manifest_sha256})"
            )
        if dest.exists():
            shutil.rmtree(dest)
        store.download(previous.last_version, dest, skip_prefixes=(TRAINER_STATE_DIR,))
        if manifest_digest((dest / MANIFEST_NAME).read_bytes()) != previous.manifest_sha256:
            raise CheckpointError(f"{dest}: downloaded manifest differs from the recorded one")
        return dest

    def status_lines(self) -> tuple[list[str], StageState | None]:
        """One line per stage, and the stage that runs now (the first not finished; None when
        all are)."""
        lines = [f"pipeline {self.project}.{self.name}: {len(self.stages)} stages"]
        current: StageState | None = None
        for state in self.states():
            stage, cfg = state.stage, state.cfg
            head = f"  stage {stage.index + 1} {stage.name!r} (run {cfg.project}.{cfg.name}, mode {cfg.mode})"
            if state.record is not None:
                lines.append(f"{head}: finished, last version v{state.record.last_version}")
            elif current is None:
                current = state
                newest = RunPlan(cfg).checkpoint_store().latest_version()
                lines.append(f"{head}: running (or next to run), newest version v{newest}")
            else:
                lines.append(f"{head}: waiting")
        if current is None:
            lines.append("  every stage finished")
        return lines, current
