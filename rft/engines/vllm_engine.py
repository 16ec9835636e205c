"""The vLLM rollout engine (`engine_type: vllm`): one in-process vLLM `LLM` per explorer process.

vLLM is imported only when this engine is built, so the module imports everywhere (CI has no
vLLM). What it owns:

- turning `SamplingParams` into vLLM's, one request per prompt × n row, and vLLM's outputs back
  into `Rollout`s under the house logprob convention (see `Rollout`);
- in-place weight updates: `load_state_dict` hands the HF-named tensors to the running model's
  `load_weights` (vLLM maps them onto its fused layers) and drops the prefix cache, whose KV
  entries were computed by the old weights; no restart, no new CUDA graphs. A version from the
  store (CPU tensors viewed in the downloaded buffer) and one received over the weight-sync group
  (tensors already on the explorer's GPU, `sync_method: nccl` or `memory`) take the same path;
- LoRA versions (`model.lora_configs`): the engine starts with LoRA enabled, each adapter version
  becomes a LoRARequest of its own (hot-swapped: the new one loaded, the previous removed), and
  every request names the newest; the adapter's base is checked against the loaded model's;
- the per-call deadline: requests still running when `timeout_s` runs out are aborted and end
  with finish_reason "timeout", keeping the tokens they had.
- the prefix cache's counts (`prefix_cache`): each request's prompt tokens and how many of them
  vLLM's prefix cache held (`RequestOutput.num_cached_tokens`), so a multi-turn run shows each
  turn reusing its conversation's KV cache.

Logprobs. vLLM reports either the raw distribution (`raw_logprobs`: log_softmax(logits), before
temperature, penalties and filters) or the processed one (`processed_logprobs`: after penalties,
temperature and top-k/top-p). The house convention is log_softmax(logits / T) of the unfiltered,
unpenalised distribution. At T = 1 the raw mode is exactly that, whatever the filters; at T != 1
the processed mode is exactly that when no filter or penalty is active. The engine picks the mode
from the configured temperature when it starts (vLLM fixes it per engine) and refuses, per call,
sampling settings its mode cannot report exactly, rather than hand the trainer wrong logprobs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rft.config.binding import Issue, bounded
from rft.config.fate import key
from rft.engines.lora import ADAPTER_CONFIG, ADAPTER_SAFETENSORS, AdapterVersion, base_fingerprint
from rft.engines.models import ModelSpec, materialize_model_dir
from rft.engines.rollout import (
    VLLM_INSTALL_COMMAND,
    VLLM_VERSION,
    PrefixCacheCounts,
    Rollout,
    RolloutEngine,
    RolloutEngineConfig,
    SamplingParams,
)
from rft.engines.weights import read_safetensors_dir
from rft.errors import ConfigError, EngineError

RAW = "raw_logprobs"
PROCESSED = "processed_logprobs"


@dataclasses.dataclass(frozen=True)
class VllmKeys:
    """The vllm engine's own keys, bound in `explorer.rollout_model` (Trinity-RFT's names)."""

    gpu_memory_utilization: float = key(
        bounded(0.9, gt=0, le=1),
        does="the vllm engine's share of GPU memory (weights, KV cache, graphs)",
        acts_in="rft/engines/vllm_engine.py",
        shown_by="tests/unit/test_vllm_engine.py",
    )
    enable_prefix_caching: bool = key(
        True,
        does="vllm: KV blocks of shared prompt prefixes reused",
        acts_in="rft/engines/vllm_engine.py",
        shown_by="tests/unit/test_vllm_engine.py",
    )


# RolloutEngineConfig.options this engine reads, with their defaults (vLLM's own where it has one)
DEFAULT_OPTIONS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    **dataclasses.asdict(VllmKeys()),
    "enforce_eager": False,
    "max_model_len": None,
    "max_num_seqs": 1024,
    # CUDA graphs for every decode batch the scheduler can form (None: max_num_seqs). vLLM's own
    # default, min(2 x max_num_seqs, 512), left batches above 512 without graphs: at 1024 prompts
    # a small model ran slower than at 256 (bench/vllm_overhead.py, docs/benchmarks.md)
    "max_cudagraph_capture_size": None,
    # the scheduler prepares step k+1 while the GPU runs step k: a host-bound model's gain
    "async_scheduling": True,
    "max_lora_rank": None,  # set by the plan from model.lora_configs: the engine serves adapters
    "seed": 42,
    "temperature": 1.0,  # the configured rollout temperature: picks the logprobs mode
}


def lora_args(max_rank: int | None) -> dict[str, Any]:
    """vLLM's LoRA settings for adapters up to `max_rank` (None: no adapters). vLLM accepts
    only some ranks as its maximum (its `MaxLoRARanks`): the smallest that covers the adapter's.
    Two adapters fit at once: the newest version's and, while it loads, the previous one."""
    if max_rank is None:
        return {}
    try:
        from vllm.config.lora import MaxLoRARanks

        allowed = sorted(int(r) for r in typing.get_args(MaxLoRARanks))
    except ImportError:  # another vLLM layout: the ranks it has long accepted
        allowed = [8, 16, 32, 64, 128, 256, 512]
    bound = next((r for r in allowed if r >= int(max_rank)), None)
    if bound is None:
        raise ConfigError(
            f"model.lora_configs[0].lora_rank: {max_rank} is above vLLM's largest ({allowed[-1]})"
        )
    return {"enable_lora": True, "max_lora_rank": bound, "max_loras": 2}


def logprobs_mode_for(temperature: float) -> str:
    """The vLLM logprobs mode that reports the house convention at `temperature` (see module)."""
    return RAW if temperature <= 0.0 or temperature == 1.0 else PROCESSED


def inexact_logprobs(mode: str, params: SamplingParams) -> str | None:
    """Why vLLM in `mode` cannot report `params`' logprobs under the house convention, or None."""
    if mode == RAW:
        if params.logprob_temperature != 1.0:
            return (
                f"temperature {params.temperature} (this engine started in {RAW} mode for a "
                "configured temperature of 1.0, so it reports logprobs at T=1 only)"
            )
        return None
    # greedy decoding reports before top-k/top-p (vLLM returns ahead of them), but after penalties
    active = [
        name
        for name, on in (
            ("top_p", params.top_p < 1.0 and not params.greedy),
            ("top_k", params.top_k > 0 and not params.greedy),
            ("repetition_penalty", params.repetition_penalty != 1.0),
            ("min_tokens", params.min_tokens > 0),
        )
        if on
    ]
    if active:
        return (
            f"{', '.join(active)} with temperature {params.temperature} (vLLM reports these "
            "logprobs after the filter or penalty; at temperature 1.0 it reports them before)"
        )
    return None


class VLLMRolloutEngine(RolloutEngine):
    """vLLM's offline `LLM` driven request by request, so deadlines can abort what is running."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        *,
        logprobs_mode: str,
        version: int = 0,
        model_dir: Path | None = None,
    ) -> None:
        self._llm = llm
        self._model_dir = model_dir
        self._lora: Any = None  # the LoRARequest of the newest adapter version
        self._lora_dirs: Path | None = None
        self._base_fingerprint: str | None = None
        self._tokenizer = tokenizer
        self._mode = logprobs_mode
        self._version = version
        self._next_request = 0
        self._prefix = PrefixCacheCounts()
        self.last_update_seconds = 0.0
        # the last generate's own work after vLLM's: outputs into Rollouts (arrays, decoded text)
        self.last_convert_seconds = 0.0
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def from_config(cls, config: RolloutEngineConfig) -> VLLMRolloutEngine:
        options = {**DEFAULT_OPTIONS, **config.options}
        unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
        if unknown:
            raise ConfigError(f"vllm engine: unknown options {unknown}")
        spec = config.model
        _check_device(spec, int(options["tensor_parallel_size"]))
        if int(options["tensor_parallel_size"]) == 1:
            # in-process engine core: weight updates reach the model without pickling tensors
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = import_vllm()
        from transformers import AutoTokenizer

        model_dir = materialize_model_dir(spec)
        mode = logprobs_mode_for(float(options["temperature"]))
        capture = options["max_cudagraph_capture_size"] or options["max_num_seqs"]
        optional: dict[str, Any] = {
            "async_scheduling": bool(options["async_scheduling"]),
            "compilation_config": {"max_cudagraph_capture_size": int(capture)},
        }
        if options["enforce_eager"]:
            del optional["compilation_config"]  # no graphs to size
        # one flat array of logprobs per request instead of a dict and an object per token: the
        # engine reads only the sampled token's; set before vLLM reads its environment
        os.environ.setdefault("VLLM_FLAT_LOGPROBS", "1")
        try:
            llm = vllm.LLM(
                model=str(model_dir),
                tokenizer=str(model_dir),
                dtype=spec.dtype,
                seed=int(options["seed"]),
                tensor_parallel_size=int(options["tensor_parallel_size"]),
                gpu_memory_utilization=float(options["gpu_memory_utilization"]),
                enforce_eager=bool(options["enforce_eager"]),
                enable_prefix_caching=bool(options["enable_prefix_caching"]),
                max_model_len=options["max_model_len"],
                max_num_seqs=int(options["max_num_seqs"]),
                logprobs_mode=mode,
                **optional,
                **lora_args(options["max_lora_rank"]),
            )
        except (RuntimeError, ValueError, TypeError) as exc:
            raise EngineError(f"vllm engine could not start on {model_dir}: {exc}") from exc
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return cls(llm, tokenizer, logprobs_mode=mode, model_dir=model_dir)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_version(self) -> int:
        return self._version

    @property
    def llm(self) -> Any:
        """The vLLM `LLM` this engine drives (benchmarks compare the engine against it)."""
        return self._llm

    @property
    def logprobs_mode(self) -> str:
        return self._mode

    @property
    def prefix_cache(self) -> PrefixCacheCounts:
        """Every request's prompt tokens and those vLLM's prefix cache served (all 0 hits with
        `enable_prefix_caching: false`)."""
        return dataclasses.replace(self._prefix)

    @property
    def weights_on_gpu(self) -> bool:
        return True

    def load_state_dict(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        started = time.perf_counter()
        items = list(tensors.items())

        def load(model: Any) -> None:
            model.load_weights(items)

        try:
            self._llm.apply_model(load)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise EngineError(
                f"vllm engine could not load weight version {version}: {exc}"
            ) from exc
        self._llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._version = int(version)
        self.last_update_seconds = time.perf_counter() - started

    def load_adapter(self, adapter: AdapterVersion, version: int) -> None:
        """Hot swap: the version's adapter files go to a directory of their own, vLLM loads
        them as a new LoRARequest (id = the version), every later request names it, and the
        previous adapter is removed. The base weights are never touched."""
        from vllm.lora.request import LoRARequest

        if self._model_dir is None:
            raise EngineError(f"weight version {version}: this vllm engine has no base directory")
        if self._base_fingerprint is None:
            self._base_fingerprint = base_fingerprint(read_safetensors_dir(self._model_dir))
        adapter.check_base(self._base_fingerprint, version, "this vllm engine")
        if self._lora_dirs is None:
            self._lora_dirs = Path(tempfile.mkdtemp(prefix="rft-lora-"))
        directory = self._lora_dirs / f"v{version}"
        directory.mkdir(parents=True, exist_ok=True)
        for name in (ADAPTER_CONFIG, ADAPTER_SAFETENSORS):
            (directory / name).write_bytes(bytes(adapter.files[name]))
        request = LoRARequest(f"{adapter.name}-v{version}", int(version), str(directory))
        engine = self._llm.llm_engine
        try:
            engine.add_lora(request)  # loaded now, not on the first request that names it
        except (RuntimeError, ValueError) as exc:
            raise EngineError(
                f"vllm engine could not load adapter version {version}: {exc}"
            ) from exc
        previous, self._lora = self._lora, request
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        self._version = int(version)

    def state_dict(self) -> dict[str, torch.Tensor]:
        raise EngineError(
            "the vllm engine holds its weights in fused layers and cannot export them under HF "
            "names; read the version from the checkpoint store instead"
        )

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        why = inexact_logprobs(self._mode, params)
        if why is not None:
            raise EngineError(f"vllm engine cannot report exact logprobs for {why}")
        prompts = [list(map(int, p)) for p in prompt_ids]
        for i, p in enumerate(prompts):
            if not p:
                raise EngineError(f"prompt {i} is empty")
        rows = [p for p in prompts for _ in range(params.n)]
        outputs = self._run(rows, params)
        started = time.perf_counter()
        for row, out in zip(rows, outputs, strict=True):
            self._prefix.add(len(row), cached_prompt_tokens(out))
        flat = [self._to_rollout(rows[i], out, params) for i, out in enumerate(outputs)]
        self.last_convert_seconds = time.perf_counter() - started
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def vllm_sampling_params(self, params: SamplingParams, deadline: bool) -> Any:
        """vLLM's SamplingParams for one row of `params` (n=1: the engine adds n rows)."""
        import vllm
        from vllm.sampling_params import RequestOutputKind

        eos = self._tokenizer.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        return vllm.SamplingParams(
            n=1,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            repetition_penalty=params.repetition_penalty,
            min_tokens=params.min_tokens,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            stop_token_ids=list(dict.fromkeys([*eos_ids, *params.stop_token_ids])),
            include_stop_str_in_output=True,  # the house convention keeps the stop text
            logprobs=0,  # the sampled token's own logprob only
            detokenize=bool(params.stop),  # stop strings need text; we decode once at the end
            # a deadline needs what unfinished requests have so far; otherwise only final outputs
            output_kind=RequestOutputKind.CUMULATIVE if deadline else RequestOutputKind.FINAL_ONLY,
        )

    def _run(self, rows: list[list[int]], params: SamplingParams) -> list[Any]:
        """Add one request per row, step the engine until all finish or the deadline passes."""
        engine = self._llm.llm_engine
        sampling = self.vllm_sampling_params(params, deadline=params.timeout_s is not None)
        index: dict[str, int] = {}
        for i, row in enumerate(rows):
            self._next_request += 1
            asked = f"rft-{self._next_request}"
            given = engine.add_request(
                asked, {"prompt_token_ids": row}, sampling, lora_request=self._lora
            )
            # vLLM may suffix the id it tracks; outputs carry one of the two
            index[asked] = i
            if isinstance(given, str):
                index[given] = i
        latest: list[Any] = [None] * len(rows)
        deadline = None if params.timeout_s is None else time.monotonic() + params.timeout_s
        timed_out: set[int] = set()
        try:
            while engine.has_unfinished_requests():
                if deadline is not None and time.monotonic() >= deadline:
                    open_ids = [rid for rid, i in index.items() if not _finished(latest[i])]
                    open_ids = [rid for rid in open_ids if rid.startswith("rft-")]
                    engine.abort_request(open_ids)
                    timed_out = {index[rid] for rid in open_ids}
                    break
                for out in engine.step():
                    if out.request_id in index:
                        latest[index[out.request_id]] = out
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"generation failed: {exc}") from exc
        for i in timed_out:
            latest[i] = _Timeout(latest[i])
        return latest

    def _to_rollout(self, prompt: list[int], output: Any, params: SamplingParams) -> Rollout:
        if isinstance(output, _Timeout):  # aborted at the deadline: the tokens it had so far
            completion = output.inner.outputs[0] if output.inner is not None else None
            finish = "timeout"
        else:
            completion = output.outputs[0]
            finish = "stop" if completion.finish_reason == "stop" else "length"
        ids = [] if completion is None else list(completion.token_ids)
        logprobs = [] if completion is None else _sampled_logprobs(completion, ids)
        response = np.asarray(ids, dtype=np.int32)
        return Rollout(
            prompt_ids=np.asarray(prompt, dtype=np.int32),
            response_ids=response,
            logprobs=np.asarray(logprobs, dtype=np.float32),
            text=self._tokenizer.decode(response.tolist(), skip_special_tokens=True),
            finish_reason=finish,
            logprob_temperature=params.logprob_temperature,
        )


class _Timeout:
    """A request aborted at the deadline, with its last cumulative output (None if it had none)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner


def cached_prompt_tokens(output: Any) -> int:
    """Prompt tokens of a request that vLLM's prefix cache held (its `num_cached_tokens`, set
    when the prefill was scheduled); 0 for a request aborted before that."""
    if isinstance(output, _Timeout):
        output = output.inner
    cached = None if output is None else output.num_cached_tokens
    return int(cached or 0)


def _finished(output: Any) -> bool:
    return output is not None and bool(output.finished)


def _sampled_logprobs(completion: Any, ids: list[int]) -> list[float]:
    """log p of each sampled token, from vLLM's per-position {token_id: Logprob} maps, or straight
    from its flat arrays (VLLM_FLAT_LOGPROBS) when each position holds the sampled token alone."""
    positions: Any = completion.logprobs or []
    if len(positions) != len(ids):
        raise EngineError(f"vllm returned {len(positions)} logprob positions for {len(ids)} tokens")
    flat_ids = getattr(positions, "token_ids", None)
    if flat_ids is not None and list(flat_ids) == ids:  # one entry per position, the sampled one
        return [float(x) for x in positions.logprobs]
    return [float(pos[token].logprob) for pos, token in zip(positions, ids, strict=True)]


def import_vllm() -> Any:
    """The vllm module, or EngineError with the install command."""
    try:
        import vllm
    except ImportError as exc:
        raise EngineError(
            f"explorer.rollout_model.engine_type vllm needs vLLM {VLLM_VERSION}: {VLLM_INSTALL_COMMAND}"
        ) from exc
    return vllm


def _check_device(spec: ModelSpec, tensor_parallel_size: int) -> None:
    # vLLM's in-process worker computes on the first visible GPU; a process placed on GPUs of
    # its own sees them from cuda:0 (CUDA_VISIBLE_DEVICES), as both launchers arrange.
    if not spec.device.startswith("cuda"):
        raise ConfigError(
            "explorer.rollout_model.engine_type vllm needs a GPU; this explorer computes on "
            f"{spec.device} (set cluster.gpu_per_node, or use engine_type hf on the CPU)"
        )
    if spec.device not in ("cuda", "cuda:0"):
        raise ConfigError(
            f"vllm engine: placed on {spec.device}; start the explorer with "
            "CUDA_VISIBLE_DEVICES naming its GPUs so they start at cuda:0"
        )
    if tensor_parallel_size > max(1, torch.cuda.device_count()):
        raise ConfigError(
            f"explorer.rollout_model.tensor_parallel_size {tensor_parallel_size}: only "
            f"{torch.cuda.device_count()} GPU(s) visible"
        )


def vllm_rollout_engine(config: RolloutEngineConfig) -> RolloutEngine:
    """The `vllm` entry of ROLLOUT_ENGINES: vLLM on the explorer's GPUs."""
    return VLLMRolloutEngine.from_config(config)


def exact_logprob_issues(cfg: Any, at: str = "", section: Any = None) -> list[Issue]:
    """The `vllm` entry's load-time check: the engine reports exact logprobs for a sampling setup
    only (the configured temperature picks its mode); refuse at load what would fail every step."""
    model = cfg.model
    issues = []
    inputs = cfg.buffer.explorer_input
    tasksets = [("buffer.explorer_input.taskset", inputs.taskset)] + [
        (f"buffer.explorer_input.eval_tasksets[{i}]", t) for i, t in enumerate(inputs.eval_tasksets)
    ]
    train = inputs.taskset.rollout_args if inputs.taskset is not None else None
    mode = logprobs_mode_for(train.temperature if train is not None else 1.0)
    for path, taskset in tasksets:
        if taskset is None:
            continue
        args = taskset.rollout_args
        params = SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=max(0, args.top_k),
            repetition_penalty=model.repetition_penalty,
            min_tokens=model.min_response_tokens,
        )
        why = inexact_logprobs(mode, params)
        if why is not None:
            issues.append(
                Issue(
                    f"{path}.rollout_args",
                    f"engine_type vllm cannot report exact logprobs for {why}; use engine_type "
                    "hf, or sample at temperature 1.0",
                )
            )
    return issues
