"""The `fsdp2` trainer engine: one optimizer step sharded over N ranks with FSDP2 (`fully_shard`).

`Fsdp2TrainerEngine` is the `TrainerEngine` the trainer loop holds on rank 0. Rank 0 alone reads
experiences: the trainer loop, its offset ledger and the checkpoint manifests stay exactly what
they are with one process (a batch is formed from whole rollout groups across partitions, so
ranks reading their own partitions would first have to agree on every batch and on the offsets
each one settles). Each step, rank 0 splits the batch into N contiguous shards of near-equal
rows, every rank trains on its own (`rft.engines.fsdp_worker`), and the gradients are summed.

Weight versions are consolidated on rank 0 and written once, by rank 0, in the rollout dtype; the
training state (AdamW moments and float32 master weights, gathered from their shards, with the
schedule and step) goes into the version's `trainer_state/` the same way, and a restart with any
number of ranks loads it back exactly.

The factory (`build_fsdp2_engine`, `TRAINER_ENGINES["fsdp2"]`) starts the other ranks as local processes, or, when
this process already belongs to a process group (a launcher such as Ray called
`rft.engines.fsdp_ranks.init_rank` and runs `serve_rank` on the others), uses that group.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rft.algorithms.expert_rows import BatchUnits
from rft.algorithms.objective import Advantages, LossFn
from rft.engines.fsdp_ranks import (
    SETUP,
    STOP,
    Command,
    CommandChannel,
    free_port,
    init_rank,
    spawn_local_followers,
)
from rft.engines.fsdp_worker import ShardedWorker, setup_of
from rft.engines.state_snapshot import reserve_pinned, version_copy_sizes
from rft.engines.trainer import (
    TorchTrainerConfig,
    TrainBatch,
    TrainerPlacement,
    accumulation_of,
    fill_advantages,
    rows_per_unit,
    split_micro_batches,
)
from rft.errors import ConfigError, EngineError

log = logging.getLogger(__name__)


def shard_rows(n: int, world_size: int, unit: int = 1) -> list[range]:
    """Rows of each rank: contiguous runs of whole units of `unit` rows (a pair for a loss over
    pairs), the ranks' unit counts differing by at most one (rank 0 gets extras first)."""
    if n % unit:
        raise EngineError(f"a batch of {n} rows is not whole units of {unit} rows")
    base, extra = divmod(n // unit, world_size)
    bounds = [0]
    for rank in range(world_size):
        bounds.append(bounds[-1] + unit * (base + (1 if rank < extra else 0)))
    return [range(bounds[r], bounds[r + 1]) for r in range(world_size)]


def take_rows(batch: TrainBatch, rows: range) -> TrainBatch:
    """The sub-batch of `rows` for one rank: every column cut alike, the rewards left behind
    (advantages are computed on rank 0 before the batch is cut)."""
    shard = batch.select(rows)
    shard.rewards = None
    return shard


class Fsdp2TrainerEngine:
    """The TrainerEngine of rank 0: commands every rank's worker and merges what they return."""

    def __init__(
        self,
        worker: ShardedWorker,
        channel: CommandChannel,
        *,
        tokenizer: Any = None,
        followers: list[Any] | None = None,
        owns_group: bool = False,
    ) -> None:
        self.worker = worker
        self.channel = channel
        self.tokenizer = tokenizer
        self.world_size = channel.world_size
        self._followers = followers or []
        self._owns_group = owns_group
        self._closed = False
        self._broken = False  # a command failed part-way: the ranks may be out of step
        # the consolidated weights gathered at (step, dtype)
        self._full_weights: dict[tuple[int, torch.dtype | None], dict[str, torch.Tensor]] = {}
        self.restore_threads: int | None = None  # this process's torch threads before sharing

    @property
    def step(self) -> int:
        return self.worker.step

    @step.setter
    def step(self, value: int) -> None:
        self.skip_to_step(value)

    @property
    def dtype(self) -> torch.dtype:
        return self.worker.dtype

    @property
    def follower_pids(self) -> list[int]:
        """Process ids of the ranks this engine started (none when a launcher started them)."""
        return [p.pid for p in self._followers]

    @property
    def config(self) -> TorchTrainerConfig:
        return self.worker.config

    def _call(self, name: str, kwargs: list[dict[str, Any]] | dict[str, Any]) -> list[Any]:
        """Run worker method `name` on every rank (rank r with kwargs[r], or all with one dict);
        the results in rank order."""
        if self._closed:
            raise EngineError(f"the fsdp2 engine is closed; cannot run {name}")
        per_rank = kwargs if isinstance(kwargs, list) else [kwargs] * self.world_size
        try:
            # rank 0's own arguments and result stay here: only the others' are pickled (a
            # gathered state of a 1.5B model took 90 s to pickle and unpickle)
            self.channel.send([Command(name)] + [Command(name, k) for k in per_rank[1:]])
            result = getattr(self.worker, name)(**per_rank[0])
            gathered = self.channel.gather(None)
        except BaseException:
            self._broken = True
            raise
        assert gathered is not None  # rank 0 gathers
        gathered[0] = result
        return gathered

    # -- training ---------------------------------------------------------------------------------

    def train_step(
        self, batch: TrainBatch, loss_fn: LossFn, advantages: Advantages | None = None
    ) -> dict[str, float]:
        """One optimizer step over `batch`, sharded by rows over the ranks (see the module doc).

        With `advantages` they are computed first, here on rank 0 (`fill_advantages`; the
        reference pass, when a reward KL penalty needs it, is sharded like the step).
        `loss_fn` is pickled to every rank: a module-level function or an object of a
        module-level class. On GPUs the metrics hold `gpu_peak_gib`, the step's peak of memory
        torch allocated, on the rank that allocated most (as the one-process engine's).
        """
        batch.validate()
        if len(batch) == 0:
            raise EngineError("train_step needs at least one sequence")
        values = (
            {}
            if advantages is None
            else fill_advantages(batch, advantages, self.reference_logprobs)
        )
        tokens = sum(int(np.sum(m)) for m in batch.action_mask)
        # the same weighting as the one-process engine: token shares, or sequence shares
        token = accumulation_of(loss_fn, self.config) == "token"
        unit = "token" if token and tokens > 0 else "sequence"
        total = tokens if unit == "token" else len(batch)
        units = BatchUnits.of(batch.action_mask, batch.expert)  # of the whole batch
        # a loss over adjacent pairs (dpo) gets whole pairs on every rank
        unit_rows = rows_per_unit(loss_fn)
        shards = [
            take_rows(batch, rows) for rows in shard_rows(len(batch), self.world_size, unit_rows)
        ]
        passes = max(len(split_micro_batches(s, self.config, unit_rows)) for s in shards)
        results = self._call(
            "train_shard",
            [
                {
                    "shard": s,
                    "loss_fn": loss_fn,
                    "unit": unit,
                    "total": total,
                    "passes": passes,
                    "batch_units": units,
                }
                for s in shards
            ],
        )
        self._full_weights = {}
        sums: dict[str, float] = {}
        for r in results:
            for name, value in r["sums"].items():
                sums[name] = sums.get(name, 0.0) + value
        head = results[0]
        if "gpu_peak" in head:  # on GPUs: the step's peak of torch-allocated memory, largest rank
            values["gpu_peak_gib"] = max(int(r["gpu_peak"]) for r in results) / 2**30
        return {
            **values,
            **sums,
            "loss": sum(r["loss"] for r in results),
            "grad_norm": head["grad_norm"],
            "lr": head["lr"],
            "skipped": float(head["skipped"]),
            "sequences": float(len(batch)),
            "action_tokens": float(tokens),
        }

    def reference_logprobs(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        """The reference model's logprobs of every response token, each rank scoring its rows."""
        if self.worker.ref_model is None:
            raise EngineError("reference_logprobs needs a reference model (use_ref_model)")
        batch.validate()
        rows = shard_rows(len(batch), self.world_size)
        shards = [take_rows(batch, r) for r in rows]
        passes = max(len(split_micro_batches(s, self.config)) for s in shards)
        results = self._call("reference_shard", [{"shard": s, "passes": passes} for s in shards])
        width = max(len(r) for r in batch.response_ids)
        out = {
            name: torch.zeros((len(batch), width), dtype=torch.float32)
            for name in ("ref_logprobs", "old_logprobs", "action_mask")
        }
        for span, part in zip(rows, results, strict=True):
            if part is None:
                continue
            for name, tensor in part.items():
                out[name][span.start : span.stop, : tensor.shape[1]] = tensor
        return out

    # -- weights and training state ---------------------------------------------------------------

    def state_dict_for_export(self) -> dict[str, torch.Tensor]:
        """The consolidated weights under HF names on CPU (gathered once per step)."""
        return self._gathered(None)

    def _gathered(self, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
        """The consolidated weights in `dtype` (None: the model's), cast on the device before
        they cross to the host; gathered once per step and dtype (a version and its float32
        master weights are two)."""
        key = (self.step, dtype)
        if key not in self._full_weights:
            # an earlier step's copies go first: kept, they would hold host memory for nothing
            self._full_weights = {k: v for k, v in self._full_weights.items() if k[0] == self.step}
            self._full_weights[key] = self._call("full_weights", {"dtype": dtype})[0]
        return self._full_weights[key]

    def save_weights(self, file: str | Path, dtype: torch.dtype | None = None) -> None:
        from safetensors.torch import save_file

        tensors = self._gathered(dtype)
        try:
            save_file(tensors, str(file), metadata={"format": "pt"})
        except (OSError, RuntimeError, ValueError) as exc:
            raise EngineError(f"{file}: cannot save weights: {exc}") from exc

    def export_weights(
        self, dtype: torch.dtype | None = None, *, owned: bool = False
    ) -> dict[str, torch.Tensor]:
        # always owned: the gathered copy is the step's own, replaced (not changed) by the next
        return self._gathered(dtype)

    def save_hf(
        self, directory: str | Path, dtype: torch.dtype | None = None, *, weights: bool = True
    ) -> Path:
        """An HF directory of the consolidated weights in `dtype`, written by rank 0 alone
        (without `weights`: its config and tokenizer files only)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if weights:
            self.save_weights(path / "model.safetensors", dtype)
        try:
            self.worker.lm.config.save_pretrained(str(path))
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(str(path))
        except (OSError, RuntimeError, ValueError) as exc:
            raise EngineError(f"{path}: cannot save model: {exc}") from exc
        return path

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.worker.check_weights(tensors)  # before any rank starts: a bad file fails here
        self._call(
            "load_full_weights",
            [{"tensors": tensors}] + [{"tensors": None}] * (self.world_size - 1),
        )
        self._full_weights = {}

    def version_extra(self) -> dict[str, str]:
        """Full weights (the fsdp2 engine trains no adapters): nothing to add to a manifest."""
        return {}

    def training_state(self) -> dict[str, Any]:
        """The consolidated training state (rank 0 gathers it to the CPU): any world size can
        load it."""
        state: dict[str, Any] = self._call("full_training_state", {})[0]
        return state

    def reserve_version_copies(
        self, export_dtype: torch.dtype | None, with_master: bool
    ) -> threading.Thread | None:
        """On a GPU: pinned blocks for rank 0's copies of every trained parameter, whole
        (`version_copy_sizes`: exported, AdamW's two moments, the master copy), set aside by
        rft.engines.state_snapshot.reserve_pinned. Nothing on the CPU, nor when an offload
        keeps shards on the host: then torch's state-dict functions gather into pageable
        memory that no pinned block would serve."""
        worker = self.worker
        config = worker.config
        if worker.device.type != "cuda" or config.param_offload or config.optimizer_offload:
            return None
        # a sharded parameter's numel is the whole parameter's
        trained = [p for p in worker.model.parameters() if p.requires_grad]
        return reserve_pinned(version_copy_sizes(trained, export_dtype, with_master))

    def restore_training_state(self, state: dict[str, Any], source: str) -> None:
        try:
            optimizer, scheduler, step = state["optimizer"], state["scheduler"], int(state["step"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineError(f"{source}: cannot load optimizer state: {exc}") from exc
        if state.get("format") != "fsdp2-full":
            raise EngineError(
                f"{source}: training state of another engine (format {state.get('format')!r}); "
                "resume it with the engine that wrote it"
            )
        first = {"optimizer": optimizer, "scheduler": scheduler, "step": step}
        rest = {"optimizer": None, "scheduler": scheduler, "step": step}
        self._call("load_training_state", [first] + [rest] * (self.world_size - 1))

    def skip_to_step(self, step: int) -> None:
        self._call("skip_to_step", {"step": step})

    def peak_memory(self) -> list[int]:
        """Each rank's peak GPU bytes since the last call (0 on the CPU), in rank order."""
        return [int(m) for m in self._call("peak_memory", {})]

    # -- the ranks --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the other ranks and leave the process group (if this engine joined it)."""
        if self._closed:
            return
        self._closed = True
        if self._broken:
            # the ranks may be inside a collective that will never complete: end ours
            for process in self._followers:
                process.kill()
        elif self.world_size > 1:
            self.channel.send([Command(STOP)] * self.world_size)
            self.channel.gather(None)
        # leave the group before waiting: over NCCL a follower's destroy_process_group waits for
        # rank 0's teardown too, so waiting first deadlocks until the timeout (gloo does not)
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        for process in self._followers:
            process.wait(timeout=60)
        if self.restore_threads is not None:
            torch.set_num_threads(self.restore_threads)

    def __enter__(self) -> Fsdp2TrainerEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_fsdp2_engine(
    model: Any, tokenizer: Any, config: TorchTrainerConfig, placement: TrainerPlacement
) -> Fsdp2TrainerEngine:
    """FSDP2 over placement.world_size ranks: gloo on the CPU, NCCL on GPUs.

    Joins the process group this process already belongs to (another launcher started the
    ranks), or starts ranks 1..N-1 on this machine, on placement.devices[1:].
    """
    if config.lora is not None:  # the load refuses it; a direct caller hears it here
        raise ConfigError("model.lora_configs: the fsdp2 engine trains full models only")
    device = placement.devices[0]
    followers: list[Any] = []
    threads = torch.get_num_threads()
    owns_group = not dist.is_initialized()
    if owns_group:
        port = free_port()
        if placement.world_size > 1:
            followers = spawn_local_followers(placement.devices, "127.0.0.1", port)
            if torch.device(device).type == "cpu":
                # the ranks share this machine's cores
                torch.set_num_threads(max(1, threads // placement.world_size))
        init_rank(0, placement.world_size, "127.0.0.1", port, device)
    elif dist.get_world_size() != placement.world_size:
        raise EngineError(
            f"trainer.world_size is {placement.world_size} but the process group has "
            f"{dist.get_world_size()} ranks"
        )
    if dist.get_rank() != 0:
        raise EngineError(f"the fsdp2 engine is driven from rank 0, not {dist.get_rank()}")
    try:
        channel = CommandChannel(device)
        setup = setup_of(model, tokenizer, config)
        channel.send([Command(SETUP, {"setup": setup})] * channel.world_size)
        worker = ShardedWorker(setup, device, model)
        channel.gather(None)
    except BaseException:
        for process in followers:
            process.kill()
        if owns_group and dist.is_initialized():
            dist.destroy_process_group()
        torch.set_num_threads(threads)
        raise
    log.info(
        "fsdp2 trainer engine: %d ranks on %s", channel.world_size, ", ".join(placement.devices)
    )
    engine = Fsdp2TrainerEngine(
        worker, channel, tokenizer=tokenizer, followers=followers, owns_group=owns_group
    )
    engine.restore_threads = threads
    return engine
