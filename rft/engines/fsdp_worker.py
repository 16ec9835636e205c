"""One rank's part of the FSDP2 trainer engine: a sharded model, its AdamW shard and the collectives.

Every rank holds a `ShardedWorker` and calls the same method at the same time (rank 0's engine
makes them: `rft.engines.fsdp_engine`). The model is wrapped with `fully_shard`
(`torch.distributed.fsdp`): each decoder layer is one unit and the rest (embeddings, final norm,
the head, tied or not) belongs to the root, a `LogprobModule` whose forward computes the response
logprobs, so that the chunked head of `token_logprobs` runs while the root's parameters are
gathered. AdamW keeps each rank's shard of the float32 master weights and moments.

Gradients are summed over ranks, not averaged: each micro-batch loss is already weighted by its
share of the *whole* batch (tokens or sequences), so the sum is the batch's gradient, the same as
the one-process engine's. FSDP needs every rank to run the same number of forward/backward passes;
a rank with fewer micro-batches runs idle passes whose loss is multiplied by zero.

Weights and training state leave and enter as full (consolidated) tensors on rank 0:
`rft.engines.sharded_copy` gathers them one tensor at a time into pinned host memory (torch's
`get_*_state_dict(full_state_dict=True, cpu_offload=True)` when an offload keeps shards on the
host of a GPU rank), and loading broadcasts them from rank 0 and each rank keeps its shard. A
full state does not depend on how many ranks wrote it, so a restart may use another world size.

A world of one rank gathers each layer's weights once per step and reduces the gradients once,
after the last micro-batch's backward (FSDP2's `reshard_after_forward=False`, with gradient sync
and resharding after backward off until that micro-batch), and frees the gathered weights before
the optimizer step or a load changes the shards. Each gather and reduction costs the host FSDP2's
hooks and a copy per parameter, and the loop's step is bound by its host: its host work per step
fell a quarter without gradient checkpointing and 9-18% with it (bench/step_host_work.py,
docs/trainer-memory.md). The cost is one compute-dtype copy of the weights held through the step. A step that raises ends the trainer,
so gradients a failed step left in the gathered weights are never added to another's.

Memory (trainer.*): `enable_gradient_checkpointing` checkpoints each decoder layer before it is
sharded; `param_offload` shards with FSDP2's CPU offload policy (shards, gradients and the AdamW
step on the CPU, each layer copied to the device for its forward and backward); and
`optimizer_offload` keeps AdamW's moments on the CPU between steps (the torch engine's).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from rft.algorithms.expert_rows import BatchUnits
from rft.algorithms.objective import LossFn
from rft.engines.activation_checkpointing import checkpoint_decoder_layers
from rft.engines.logprobs import token_logprobs
from rft.engines.sharded_copy import gather_to_host
from rft.engines.state_snapshot import cpu_snapshot
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine, TrainBatch, rows_per_unit
from rft.engines.weights import export_state_dict_names
from rft.errors import EngineError

ROOT_PREFIX = "lm."  # the causal LM's names inside the FSDP root (`LogprobModule.lm`)


@dataclass(frozen=True)
class WorkerSetup:
    """What every rank needs to build the same sharded model; rank 0 sends it to the others.

    The model's class and HF config rebuild its structure; the weights themselves then come from
    rank 0, so the other ranks need no model files.
    """

    model_class: type
    model_config: Any
    dtype: torch.dtype
    config: TorchTrainerConfig
    pad_token_id: int


class LogprobModule(torch.nn.Module):
    """The FSDP root: response logprobs and entropy of the wrapped causal LM (`token_logprobs`)."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        temperature: torch.Tensor,
        start: int,
        chunk_tokens: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs(
            self.lm,
            input_ids,
            attention_mask,
            temperature,
            start=start,
            chunk_tokens=chunk_tokens,
        )


def setup_of(model: Any, tokenizer: Any, config: TorchTrainerConfig) -> WorkerSetup:
    """The setup that rebuilds `model`'s structure on another rank."""
    pad = getattr(tokenizer, "pad_token_id", None)
    dtype = next(model.parameters()).dtype
    return WorkerSetup(type(model), model.config, dtype, config, int(pad or 0))


def empty_model(setup: WorkerSetup, device: str) -> Any:
    """The model's structure on `device`, weights left as allocated (rank 0 sends them)."""
    from transformers.initialization import no_init_weights

    with torch.device(device), no_init_weights():
        model = setup.model_class(setup.model_config)
    # skipping the init also skips tying: tie as rank 0's model is, or the shards differ
    tie = getattr(model, "tie_weights", None)
    if tie is not None:
        tie()
    return model.to(setup.dtype)


class ShardedWorker(TorchTrainerEngine):
    """A rank's sharded model and optimizer; every public method is a collective."""

    def __init__(self, setup: WorkerSetup, device: str, model: Any | None = None) -> None:
        """Shard `model` (rank 0) or an empty copy of it (the others) and give every rank rank
        0's weights; the KL reference (when configured) is a second sharded copy of them."""
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        # the peak of GPU bytes since `peak_memory` was last asked, across the steps' own peaks
        self._peak_bytes = 0
        config = setup.config
        if model is None:
            model = empty_model(setup, device)
        names = export_state_dict_names(model.state_dict())
        self._export_names = names
        # each model tensor that shares storage with an exported one, mapped to that one (a tied
        # lm_head is the input embedding)
        self._aliases = _alias_sources(model)
        full = self._named_full_state(model) if self.rank == 0 else {}
        ref = None
        if config.use_ref_model:
            ref = copy.deepcopy(model) if self.rank == 0 else empty_model(setup, device)
        mesh = init_device_mesh(torch.device(device).type, (self.world_size,))
        # one gather and one reduction per step at one rank (module docstring); parameter
        # offload keeps FSDP2's per-layer way, which is what saves its memory
        self._one_gather = self.world_size == 1 and not config.param_offload
        root = self._shard(model, mesh, config, keep_gathered=self._one_gather)
        _broadcast_full_state(root, full)
        ref_root = None
        if ref is not None:
            ref_root = self._shard(ref, mesh, config, keep_gathered=self._one_gather)
            _broadcast_full_state(ref_root, full)
        del full
        self._compute_device = torch.device(device)
        super().__init__(root, config, ref_model=ref_root)
        self.pad_token_id = setup.pad_token_id
        self.lm = model

    @property
    def device(self) -> torch.device:
        """Where this rank computes: its device, even when param_offload keeps the shards on
        the CPU."""
        return self._compute_device

    @staticmethod
    def _shard(
        model: Any, mesh: Any, config: TorchTrainerConfig, *, keep_gathered: bool = False
    ) -> LogprobModule:
        """fully_shard each decoder layer (the model's `_no_split_modules`), then the root;
        `keep_gathered`: a layer's weights stay gathered after its forward."""
        compute = torch.bfloat16 if config.autocast_dtype == "bfloat16" else None
        layers = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        # the root's inputs include each row's temperature: they keep their precision
        root_policy = MixedPrecisionPolicy(
            param_dtype=compute, reduce_dtype=torch.float32, cast_forward_inputs=False
        )
        # parameter offload: each shard, its gradient and the AdamW step live on the CPU, and a
        # layer's shards are copied to the device only while its forward or backward runs
        offload = (
            CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
            if config.param_offload
            else OffloadPolicy()
        )
        if config.gradient_checkpointing:
            checkpoint_decoder_layers(model)  # before fully_shard, which wraps the layers
        split = set(getattr(model, "_no_split_modules", None) or ())
        for module in model.modules():
            if type(module).__name__ in split:
                fully_shard(
                    module,
                    mesh=mesh,
                    mp_policy=layers,
                    offload_policy=offload,
                    reshard_after_forward=not keep_gathered,
                )
        root = LogprobModule(model)
        fully_shard(
            root,
            mesh=mesh,
            mp_policy=root_policy,
            offload_policy=offload,
            reshard_after_forward=not keep_gathered,
        )
        for module in root.modules():
            # the loss is weighted by each micro-batch's share of the whole batch: sum, not mean
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        return root

    def _named_full_state(self, model: Any) -> dict[str, torch.Tensor]:
        state = model.state_dict()
        return {ROOT_PREFIX + name: value for name, value in state.items()}

    # -- the engine's pieces, routed through the FSDP root ---------------------------------------

    def _autocast(self) -> Any:
        """No autocast: FSDP's mixed-precision policy computes in bf16 when configured."""
        import contextlib

        return contextlib.nullcontext()

    def _logprobs(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        start: int,
        temperature: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out: tuple[torch.Tensor, torch.Tensor] = model(
            input_ids, attention_mask, temperature, start, self.config.logprob_chunk_tokens
        )
        return out

    def _before_backward(self, *, last: bool) -> None:
        if self._one_gather:
            # gradients add up in the gathered weights' own (float32 where the reduction is)
            # until the last micro-batch's backward reduces them and frees the gathered weights
            self.model.set_requires_gradient_sync(last)
            self.model.set_reshard_after_backward(last)

    def _release_gathered(self) -> None:
        """Free every gathered weight, so that the next forward gathers the shards' current
        values: kept weights would go stale under an optimizer step or a load. A layer whose
        backward did not run (no gradient reached it), and any forward without gradients, keep
        theirs until this."""
        if not self._one_gather:
            return
        roots = [root for root in (self.model, self.ref_model) if root is not None]
        for module in (m for root in roots for m in root.modules()):
            if isinstance(module, FSDPModule):
                module.reshard()

    def _idle_pass(self, *, backward: bool, with_ref: bool) -> None:
        """A forward (and backward) that moves no weight: keeps this rank's collectives paired
        with the ranks that have one more micro-batch."""
        ids = torch.full((1, 2), self.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        temperature = torch.ones(1, dtype=torch.float32, device=self.device)
        if with_ref and self.ref_model is not None:
            with torch.no_grad():
                self._logprobs(self.ref_model, ids, mask, 0, temperature)
        if backward:
            logprob, _ = self._logprobs(self.model, ids, mask, 0, temperature)
            (logprob.sum() * 0.0).backward()

    # -- collectives ------------------------------------------------------------------------------

    def train_shard(
        self,
        shard: TrainBatch,
        loss_fn: LossFn,
        unit: str,
        total: int,
        passes: int,
        batch_units: BatchUnits | None = None,
    ) -> dict[str, Any]:
        """This rank's micro-batches of one optimizer step, then the step (on every rank).

        Micro-batch k of this rank is weighted by its count (action tokens for unit "token",
        sequences for "sequence") over the whole batch's `total`. Returns this rank's weighted
        loss and metric sums, and the (shared) gradient norm, skip flag and learning rate; on a
        GPU also `gpu_peak`, the step's peak of bytes torch allocated on this rank.
        """
        on_gpu = self.device.type == "cuda"
        if on_gpu:  # the step's own peak, kept in the running one `peak_memory` reports
            self._peak_bytes = max(self._peak_bytes, torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
        lr = float(self.scheduler.get_last_lr()[0])
        self.optimizer.zero_grad(set_to_none=True)
        groups = self._micro_batches(shard, rows_per_unit(loss_fn))
        if unit == "token":
            counts = [sum(int(np.sum(shard.action_mask[i])) for i in g) for g in groups]
        else:
            counts = [len(g) for g in groups]
        loss, sums = self._accumulate(shard, loss_fn, [c / total for c in counts], batch_units)
        with_ref = self.config.ref_in_loss
        for _ in range(passes - len(groups)):
            self._idle_pass(backward=True, with_ref=with_ref)
        self._release_gathered()  # before the update changes the shards
        grad_norm, skipped = self._apply_gradients()
        out: dict[str, Any] = {
            "loss": loss,
            "sums": sums,
            "grad_norm": grad_norm,
            "skipped": skipped,
            "lr": lr,
        }
        if on_gpu:
            step_peak = int(torch.cuda.max_memory_allocated(self.device))
            self._peak_bytes = max(self._peak_bytes, step_peak)
            out["gpu_peak"] = step_peak
        return out

    def reference_shard(self, shard: TrainBatch, passes: int) -> dict[str, torch.Tensor] | None:
        """`reference_logprobs` of this rank's rows (None for none), plus idle passes."""
        out = self.reference_logprobs(shard) if len(shard) else None
        for _ in range(passes - len(self._micro_batches(shard))):
            self._idle_pass(backward=False, with_ref=True)
        return out

    def peak_memory(self) -> int:
        """Peak bytes allocated on this rank's GPU since the last call (0 on the CPU)."""
        if self.device.type != "cuda":
            return 0
        peak = max(self._peak_bytes, int(torch.cuda.max_memory_allocated(self.device)))
        torch.cuda.reset_peak_memory_stats(self.device)
        self._peak_bytes = 0
        return peak

    def full_weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor] | None:
        """The consolidated weights (HF names, each storage once) on rank 0's CPU, in `dtype`
        (None: the model's own), copies of their own; None elsewhere."""
        if self._shards_on_host:
            state = get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            if self.rank != 0:
                return None
            out: dict[str, torch.Tensor] = {}
            for name in self._export_names:
                tensor = state[ROOT_PREFIX + name]
                assert isinstance(tensor, torch.Tensor)  # full_state_dict: plain CPU tensors
                out[name] = tensor if dtype is None else tensor.to(dtype)
            return out
        live = self.model.state_dict()
        named = {name: live[ROOT_PREFIX + name] for name in self._export_names}
        full: dict[str, torch.Tensor] | None = gather_to_host(
            named, keep=self.rank == 0, dtype=dtype
        )
        return full

    def load_full_weights(self, tensors: dict[str, torch.Tensor] | None) -> None:
        """Rank 0's `tensors` (every exported name) become every rank's shards."""
        full: dict[str, torch.Tensor] = {}
        if self.rank == 0:
            if tensors is None:
                raise EngineError("rank 0 must give the weights to load")
            for name, source in self._aliases.items():
                full[ROOT_PREFIX + name] = tensors[source].to(self.dtype)
        self._release_gathered()
        _broadcast_full_state(self.model, full)

    def check_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """The names and shapes `load_full_weights` needs, checked before any rank starts."""
        unknown = sorted(set(tensors) - set(self._aliases))
        if unknown:
            raise EngineError(f"weights name tensors the model doesn't have: {unknown[:5]}")
        missing = sorted(set(self._export_names) - set(tensors))
        if missing:
            raise EngineError(f"weights miss {len(missing)} model tensors, e.g. {missing[:5]}")
        shapes = self._shapes
        for name, value in tensors.items():
            if tuple(value.shape) != shapes[name]:
                raise EngineError(
                    f"weight {name}: shape {tuple(value.shape)} != model's {shapes[name]}"
                )

    @property
    def _shards_on_host(self) -> bool:
        """Whether the weights' shards live on the host while the ranks' collectives run on a
        GPU (`param_offload`; `optimizer_offload` does the same to AdamW's moments between
        steps): then `full_tensor` cannot gather them, and torch's state-dict functions, which
        move each shard to the device first, do."""
        return self.config.param_offload and self.device.type != "cpu"

    @property
    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {
            name: tuple(int(d) for d in value.shape) for name, value in self.lm.state_dict().items()
        }

    def full_training_state(self) -> dict[str, Any] | None:
        """AdamW's consolidated state (keyed by HF parameter name), the schedule and the step, on
        rank 0; None elsewhere."""
        state: dict[str, Any] | None
        if self._shards_on_host or (self.config.optimizer_offload and self.device.type != "cpu"):
            state = get_optimizer_state_dict(
                self.model,
                self.optimizer,
                options=StateDictOptions(full_state_dict=True, cpu_offload=True),
            )
            # copied again: the gathered moments are fresh, but AdamW's step counters (CPU
            # tensors, never sharded) are the live ones, which the next step changes while the
            # state is being written
            state = cpu_snapshot(state) if self.rank == 0 else None
        else:
            # the sharded state keyed by name (no gather), then gathered tensor by tensor
            sharded = get_optimizer_state_dict(
                self.model, self.optimizer, options=StateDictOptions(full_state_dict=False)
            )
            state = gather_to_host(sharded, keep=self.rank == 0)
        if state is None:
            return None
        return {
            "optimizer": _strip_prefix(state),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "format": "fsdp2-full",
        }

    def load_training_state(
        self, optimizer: dict[str, Any] | None, scheduler: dict[str, Any], step: int
    ) -> None:
        """Rank 0's consolidated AdamW state becomes every rank's shard; schedule and step too."""
        state = _add_prefix(optimizer) if self.rank == 0 and optimizer is not None else {}
        self._release_gathered()
        set_optimizer_state_dict(
            self.model,
            self.optimizer,
            optim_state_dict=state,
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        self.scheduler.load_state_dict(scheduler)
        self.step = step


def _alias_sources(model: Any) -> dict[str, str]:
    """Every state-dict name mapped to the exported name holding its storage (itself if any)."""
    state = model.state_dict()
    by_storage: dict[tuple[int, int, tuple[int, ...]], str] = {}
    out: dict[str, str] = {}
    for name, tensor in state.items():
        key = (
            tensor.untyped_storage().data_ptr(),
            int(tensor.storage_offset()),
            tuple(int(d) for d in tensor.shape),
        )
        out[name] = by_storage.setdefault(key, name)
    return out


def _broadcast_full_state(root: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
    set_model_state_dict(
        root,
        dict(full),  # a copy: the call puts the loaded shards into the dict it is given
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )


def _strip_prefix(state: dict[str, Any]) -> dict[str, Any]:
    """Optimizer state keyed by the LM's own parameter names (without the root's prefix)."""
    return {
        "state": {k.removeprefix(ROOT_PREFIX): v for k, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [p.removeprefix(ROOT_PREFIX) for p in g["params"]]}
            for g in state["param_groups"]
        ],
    }


def _add_prefix(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": {ROOT_PREFIX + k: v for k, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [ROOT_PREFIX + p for p in g["params"]]} for g in state["param_groups"]
        ],
    }
