"""Rollout engines: turn prompt token ids into sampled responses with per-token logprobs.

`RolloutEngine` is the interface explorers call; `ROLLOUT_ENGINES` maps config names to
factories `(RolloutEngineConfig) -> RolloutEngine`. "hf" runs transformers `generate` over the
whole batch (prompts x n) in one call. Logprob convention: see `Rollout`. Chat prompts are
rendered with the tokenizer's template, one set with `set_chat_template`, or a per-call one.
An engine built by `create_rollout_engine` announces that it is up (`rft.engines.engine_ready`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from rft.engines.engine_ready import announce_ready
from rft.engines.lora import AdapterOnModel, AdapterVersion
from rft.engines.models import ModelSpec, load_model
from rft.engines.weights import export_state_dict, load_weights_into
from rft.errors import ConfigError, EngineError
from rft.registry import PartSpec, Registry, Requirement


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature <= 0 means greedy decoding.

    top_p / top_k (0 = off), `repetition_penalty` (1.0 = off) and `min_tokens` shape only which
    token is drawn, never the reported logprobs. `stop` strings end a response after the token
    that completes them (that token is kept); `stop_token_ids` add to the tokenizer's eos. No eos
    or stop token ends a response before `min_tokens` tokens. `seed` makes a generate call
    reproducible. `timeout_s` is the wall-clock budget of one generate call: when it runs out,
    every unfinished response ends with finish_reason "timeout" (engines must honour it).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 64
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"rollout n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ConfigError(f"rollout max_tokens must be >= 1, got {self.max_tokens}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"rollout top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"rollout top_k must be >= 0, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise ConfigError(
                f"rollout repetition_penalty must be > 0, got {self.repetition_penalty}"
            )
        if self.min_tokens < 0:
            raise ConfigError(f"rollout min_tokens must be >= 0, got {self.min_tokens}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError(f"rollout timeout_s must be > 0, got {self.timeout_s}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def logprob_temperature(self) -> float:
        """Temperature of the reported logprobs: the sampling one, or 1.0 when greedy."""
        return 1.0 if self.greedy else self.temperature


# odd, so distinct salts below 2**32 move a seed's low 32 bits to distinct values
_SEED_STEP = 0x9E3779B1


def moved_seed(seed: int, salt: int) -> int:
    """`seed` moved on by `salt` within its low 32 bits too: torch's CPU generator reads only
    those, so a salt added above them (seed + (salt << 32)) would repeat the same draws."""
    return (seed + salt * _SEED_STEP) % (1 << 63)


@dataclass
class Rollout:
    """One sampled response.

    logprobs[i] = log p(response_ids[i]) under log_softmax(logits / T) of the full, unfiltered,
    unpenalised distribution (T = SamplingParams.logprob_temperature), i.e. what `token_logprobs`
    recomputes. logprob_temperature is that T, which the experience carries so the trainer
    recomputes at it. response_ids include the eos token when finish_reason == "stop" by eos;
    pads are stripped. "timeout": the call's `timeout_s` ran out before the response ended.
    """

    prompt_ids: np.ndarray  # int32 [P]
    response_ids: np.ndarray  # int32 [R]
    logprobs: np.ndarray  # float32 [R]
    text: str
    finish_reason: str  # "stop" | "length" | "timeout"
    logprob_temperature: float


@dataclass
class PrefixCacheCounts:
    """Prompt tokens an engine with a prefix cache was asked to prefill, and how many of them its
    cache already held (their KV was reused, not recomputed)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, prompt_tokens: int, cached_tokens: int) -> None:
        if not 0 <= cached_tokens <= prompt_tokens:
            raise EngineError(
                f"prefix cache reported {cached_tokens} cached tokens of a {prompt_tokens}-token "
                "prompt"
            )
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens

    def since(self, earlier: PrefixCacheCounts) -> PrefixCacheCounts:
        """The counts added after `earlier` was copied from these."""
        return PrefixCacheCounts(
            self.prompt_tokens - earlier.prompt_tokens, self.cached_tokens - earlier.cached_tokens
        )

    @property
    def hit_rate(self) -> float | None:
        """Cached over prompt tokens; None before any prompt."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


class RolloutEngine(abc.ABC):
    """What an explorer needs from a rollout engine."""

    # extra variables every chat template rendering gets (e.g. enable_thinking)
    _chat_template_kwargs: Mapping[str, Any] = MappingProxyType({})
    # seconds spent compiling (first calls on a new shape), part of generate's wall time; an
    # explorer reports it apart from rollout time
    compile_seconds: float = 0.0

    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any: ...

    @property
    @abc.abstractmethod
    def model_version(self) -> int: ...

    def set_chat_template(self, template: str | None = None, **template_kwargs: Any) -> None:
        """Replace the tokenizer's chat template (None keeps it) and set the extra variables
        every later rendering gets; a None value is left out, so templates see it undefined."""
        if template is not None:
            self.tokenizer.chat_template = template
        kwargs = {k: v for k, v in template_kwargs.items() if v is not None}
        self._chat_template_kwargs = MappingProxyType(kwargs)

    @property
    def max_batch_size(self) -> int | None:
        """Most rows (prompts x n) one forward batch holds; None: no limit."""
        return None

    @property
    def compiled_shapes(self) -> int:
        """Shapes compiled for so far (each one's first call compiled); 0 if it never compiles."""
        return 0

    @property
    def prefix_cache(self) -> PrefixCacheCounts | None:
        """The prefix cache's counts so far (a copy), or None for an engine that has none."""
        return None

    def chat_prompt_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        chat_template: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of `messages` rendered with `chat_template`, else the tokenizer's, offering
        `tools` (OpenAI-style specs) where there are any (the template's tools section)."""
        from jinja2 import TemplateError

        extra: dict[str, Any] = dict(self._chat_template_kwargs)
        if tools:
            extra["tools"] = [dict(t) for t in tools]
        try:
            ids = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tokenize=True,
                add_generation_prompt=add_generation_prompt,
                return_dict=False,
                chat_template=chat_template,
                **extra,
            )
        except (ValueError, KeyError, TypeError, TemplateError) as exc:
            what = " with tools" if tools else ""
            raise EngineError(f"cannot apply chat template{what}: {exc}") from exc
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    @abc.abstractmethod
    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        """For each prompt, `params.n` rollouts (outer list follows prompt order)."""

    def oldest_answering_version(self) -> int | None:
        """For an engine whose weights live in a server it calls: the oldest weight version the
        server said answered one of its generate calls since this was last asked. None: no call
        answered since, or the engine answers with the weights it loaded (`model_version`)."""
        return None

    @abc.abstractmethod
    def load_state_dict(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Replace the weights (HF names) and set `model_version`. The tensors are copied in:
        once this returns the engine holds no reference to them (the explorer fills their
        memory again with the next version: rft.consumers.explorer.weight_buffers)."""

    @property
    def weights_on_gpu(self) -> bool:
        """Whether the weights `load_state_dict` takes are copied to a GPU: the explorer then
        downloads versions into pinned host memory, which that copy reads at full speed."""
        return False

    @abc.abstractmethod
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights under HF names, each storage once."""

    def load_adapter(self, adapter: AdapterVersion, version: int) -> None:
        """Sample from now on with the base model plus `adapter` (a LoRA version) and set
        `model_version`; EngineError when the adapter's base is not this engine's. Engines that
        cannot apply adapters (no `lora` trait: the load refuses model.lora_configs) refuse."""
        raise EngineError(
            f"{type(self).__name__} cannot apply LoRA adapters (weight version {version})"
        )


@dataclass(frozen=True)
class RolloutEngineConfig:
    """Settings shared by rollout engines; `options` holds engine-specific ones."""

    model: ModelSpec = field(default_factory=ModelSpec)
    num_threads: int | None = None
    max_batch_size: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


RolloutEngineFactory = Callable[[RolloutEngineConfig], RolloutEngine]


@dataclass(frozen=True)
class RolloutEngineSpec(PartSpec):
    """What a rollout engine's entry declares.

    - `reads`: the `explorer.rollout_model` settings it reads (passed in
      RolloutEngineConfig.options; the server settings base_url and api_key are refused at load
      for an engine that does not read them);
    - `args`: the `engine_args` keys it takes (others are refused at load);
    - `tensor_parallel`: one engine spans tensor_parallel_size GPUs;
    - `auxiliary`: the dotted path of the factory that serves an auxiliary model with it
      (rft.engines.auxiliary_models); None: it cannot serve one;
    - `auxiliary_args`: the engine_args an auxiliary model of it takes (None: its `args` and
      the `reads` that are not server settings);
    - `loads_weights`: it loads the trainer's versions (False: its weights live in a server,
      it is never given a version, and it reports the server's);
    - `lora`: it applies LoRA adapter versions (load_adapter); model.lora_configs needs it;
    - `keys`: the dotted path of the dataclass of its own keys, bound in the section that selects
      it (`explorer.rollout_model`) and passed in RolloutEngineConfig.options (None: it has none).
    """

    reads: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    tensor_parallel: bool = False
    auxiliary: str | None = None
    auxiliary_args: tuple[str, ...] | None = None
    loads_weights: bool = True
    lora: bool = False
    keys: str | None = None


# an entry's own check and the rule (rft.engines.rollout_checks) are given the config, the key
# path of the section that selects the engine and that section (the policy's or an auxiliary
# model's); an auxiliary model's selection answers to the rule only
ROLLOUT_ENGINES: Registry[RolloutEngineFactory, RolloutEngineSpec] = Registry(
    "explorer.rollout_model.engine_type",
    RolloutEngineSpec,
    rule="rft.engines.rollout_checks:engine_issues",
)


def create_rollout_engine(engine_type: str, config: RolloutEngineConfig) -> RolloutEngine:
    """Build the engine registered under `engine_type`, and announce that it is up."""
    started = time.monotonic()
    engine = ROLLOUT_ENGINES.get(engine_type)(config)
    announce_ready(f"{engine_type} engine up in {time.monotonic() - started:.0f}s")
    return engine


class _SampledLogprobRecorder:
    """Logits processor that records log p(sampled token) at each step, O(batch x vocab) memory.

    transformers runs its own penalty/min-length processors, then user processors, then its
    temperature/top-k/top-p warpers. The engine leaves transformers' own processors off and puts
    this recorder first in its list, so it sees the raw logits. At step t it keeps log_softmax(logits_t / T); at step t+1 (or in
    `finish`) the token drawn at t is known and its logprob is picked out.
    """

    def __init__(self, temperature: float, prompt_len: int) -> None:
        self.temperature = temperature
        self.prompt_len = prompt_len
        self._pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids)
        self._pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _take(self, sequences: torch.Tensor) -> None:
        if self._pending is not None:
            column = sequences[:, self.prompt_len + len(self.steps)]
            self.steps.append(self._pending.gather(1, column[:, None]).squeeze(1))
            self._pending = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[N, L] logprobs of the generated tokens of `sequences`."""
        self._take(sequences)
        return torch.stack(self.steps, dim=1)


class HFRolloutEngine(RolloutEngine):
    """transformers `generate` over prompts x n in one batch, left padded, under inference_mode.

    Compiled mode (the default on a GPU; `enforce_eager: true` turns it off): a static KV cache
    and transformers' automatic `torch.compile` of the decode step (CUDA graphs). Compiled graphs
    hold fixed shapes, and the decode step's shape is (rows, cache length), the cache holding the
    prompt width plus max_tokens. So each call is padded to a shape bucket: rows to a power of two,
    and the cache length to `cache_bucket(width + max_tokens)` by left-padding the prompts (the
    padding is masked). A multi-turn conversation's prompts grow each turn and its replies may be
    clamped to any max_tokens: both land in the same few length buckets (multiples of 64 up to
    512, then at most 4 per doubling), not a new graph per turn. The first call on a new bucket
    compiles, and its wall time is added to `compile_seconds`. Weight updates copy into the same
    parameter storage, so the graphs stay valid across versions.
    """

    WIDTH_BUCKET = 64
    MIN_ROWS_BUCKET = 8
    # torch recompiles a function for each new shape up to its recompile limit (8), then runs
    # it uncompiled: a multi-turn run meets more buckets (row buckets x length buckets) than that
    RECOMPILE_LIMIT = 128

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        version: int = 0,
        max_batch_size: int | None = None,
        compiled: bool = False,
    ) -> None:
        self._model = model.eval()
        self._adapter: AdapterOnModel | None = None  # the LoRA adapter, once a version has one
        self._tokenizer = tokenizer
        self._version = version
        self._max_batch_size = max_batch_size
        self._compiled = compiled
        if compiled:
            import torch._dynamo.config as dynamo_config

            dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, self.RECOMPILE_LIMIT)
        self._buckets: set[tuple[int, int]] = set()  # (rows, cache length) compiled for
        self.compile_seconds = 0.0
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def from_config(cls, config: RolloutEngineConfig) -> HFRolloutEngine:
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        model, tokenizer = load_model(config.model)
        eager = bool(config.options.get("enforce_eager", False))
        return cls(
            model,
            tokenizer,
            max_batch_size=config.max_batch_size,
            compiled=config.model.device.startswith("cuda") and not eager,
        )

    @property
    def compiled(self) -> bool:
        return self._compiled

    @property
    def compiled_shapes(self) -> int:
        return len(self._buckets)

    @property
    def max_batch_size(self) -> int | None:
        return self._max_batch_size

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model(self) -> Any:
        return self._model

    @property
    def model_version(self) -> int:
        return self._version

    @property
    def weights_on_gpu(self) -> bool:
        return next(self._model.parameters()).device.type == "cuda"

    def load_state_dict(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        if self._adapter is not None and self._adapter.wrapped is not None:
            raise EngineError(
                f"weight version {version} holds full weights, but this engine samples with a "
                "LoRA adapter: a run's versions are all adapters or all full weights"
            )
        load_weights_into(self._model, tensors)
        self._version = int(version)

    def load_adapter(self, adapter: AdapterVersion, version: int) -> None:
        """peft's adapter layers on the model, the version's tensors copied into them."""
        if self._adapter is None:
            self._adapter = AdapterOnModel(self._model)
        self._model = self._adapter.apply(adapter, version)
        self._version = int(version)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return export_state_dict(self._model)

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[list[Rollout]]:
        prompts = [list(map(int, p)) for p in prompt_ids]
        for i, p in enumerate(prompts):
            if not p:
                raise EngineError(f"prompt {i} is empty")
        rows = [p for p in prompts for _ in range(params.n)]
        step = self._max_batch_size or len(rows) or 1
        deadline = None if params.timeout_s is None else time.monotonic() + params.timeout_s
        flat: list[Rollout] = []
        with torch.random.fork_rng(devices=self._rng_devices()):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            for lo in range(0, len(rows), step):
                flat.extend(self._generate_rows(rows[lo : lo + step], params, deadline))
        return [flat[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def _rng_devices(self) -> list[Any]:
        device = next(self._model.parameters()).device
        return [device] if device.type == "cuda" else []

    def _eos_ids(self, params: SamplingParams) -> list[int]:
        eos = self._tokenizer.eos_token_id
        base = [eos] if isinstance(eos, int) else list(eos or [])
        return list(dict.fromkeys([*base, *params.stop_token_ids]))

    def _generate_rows(
        self, rows: list[list[int]], params: SamplingParams, deadline: float | None
    ) -> list[Rollout]:
        from transformers import (
            GenerationConfig,
            LogitsProcessorList,
            MinNewTokensLengthLogitsProcessor,
            StoppingCriteriaList,
        )

        from rft.engines.generation_controls import DeadlineStop, RowRepetitionPenalty

        device = next(self._model.parameters()).device
        pad = int(self._tokenizer.pad_token_id)
        wanted = len(rows)
        width = max(len(r) for r in rows)
        bucket = None
        if self._compiled:
            # pad to the shape bucket: duplicate rows fill the batch and are dropped afterwards;
            # the prompts are left-padded so that prompt + max_tokens fills the bucket's cache
            total = cache_bucket(width + params.max_tokens, self.WIDTH_BUCKET)
            width = total - params.max_tokens
            size = max(self.MIN_ROWS_BUCKET, 1 << (len(rows) - 1).bit_length())
            rows = rows + [rows[-1]] * (size - len(rows))
            bucket = (len(rows), total)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        eos_ids = self._eos_ids(params)
        # Every knob that shapes sampling is set explicitly: generate() fills unset ones from the
        # model's generation_config and library defaults (e.g. top_k=50). The repetition penalty
        # and min_tokens are ours, after the recorder (see _SampledLogprobRecorder).
        gen_config = GenerationConfig(
            do_sample=not params.greedy,
            temperature=1.0 if params.greedy else params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            typical_p=1.0,
            min_p=None,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            min_new_tokens=0,
            max_new_tokens=params.max_tokens,
            eos_token_id=eos_ids,
            pad_token_id=pad,
            return_dict_in_generate=True,
            use_cache=True,
        )
        if self._compiled:
            from transformers import CompileConfig

            gen_config.cache_implementation = "static"
            gen_config.compile_config = CompileConfig(fullgraph=False, dynamic=False)
        recorder = _SampledLogprobRecorder(params.logprob_temperature, width)
        processors: list[Any] = [recorder]
        if params.repetition_penalty != 1.0:
            starts = torch.tensor([width - len(r) for r in rows], dtype=torch.long, device=device)
            processors.append(RowRepetitionPenalty(params.repetition_penalty, starts))
        if params.min_tokens > 0:
            processors.append(
                MinNewTokensLengthLogitsProcessor(
                    width, params.min_tokens, torch.tensor(eos_ids, device=device), device=device
                )
            )
        stop = DeadlineStop(deadline) if deadline is not None else None
        first_on_bucket = bucket is not None and bucket not in self._buckets
        started = time.perf_counter()
        try:
            with torch.inference_mode():
                out = self._model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=gen_config,
                    logits_processor=LogitsProcessorList(processors),
                    stopping_criteria=StoppingCriteriaList([stop] if stop else []),
                )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"generation failed: {exc}") from exc
        if first_on_bucket and bucket is not None:
            # the first call on a shape compiles; its whole wall time is counted as compile time
            self._buckets.add(bucket)
            self.compile_seconds += time.perf_counter() - started
        rows = rows[:wanted]
        sequences = out.sequences.cpu()[:wanted]
        logprobs = recorder.finish(out.sequences).float().cpu().numpy()[:wanted]
        generated = sequences[:, width:].numpy()
        out_of_time = stop is not None and stop.fired and generated.shape[1] < params.max_tokens
        return [
            self._to_rollout(rows[i], generated[i], logprobs[i], eos_ids, params, out_of_time)
            for i in range(len(rows))
        ]

    def _to_rollout(
        self,
        prompt: list[int],
        generated: np.ndarray,
        logprobs: np.ndarray,
        eos_ids: list[int],
        params: SamplingParams,
        out_of_time: bool,
    ) -> Rollout:
        end = len(generated)
        finish = "timeout" if out_of_time else "length"
        hits = np.flatnonzero(np.isin(generated, eos_ids))
        if hits.size:
            end, finish = int(hits[0]) + 1, "stop"
        if params.stop:
            cut = _stop_string_cut(self._tokenizer, generated[:end], params.stop, params.min_tokens)
            if cut is not None:
                end, finish = cut, "stop"
        response = generated[:end].astype(np.int32)
        text = self._tokenizer.decode(response.tolist(), skip_special_tokens=True)
        return Rollout(
            prompt_ids=np.asarray(prompt, dtype=np.int32),
            response_ids=response,
            logprobs=logprobs[:end].astype(np.float32),
            text=text,
            finish_reason=finish,
            logprob_temperature=params.logprob_temperature,
        )


def cache_bucket(length: int, step: int = 64) -> int:
    """The compiled path's cache length for `length` tokens: a multiple of `step` up to
    8 x `step`, then of a step that doubles with each doubling of the length (at most 4 buckets
    per doubling, at most 25% padding)."""
    grain = max(step, 1 << max(0, (length - 1).bit_length() - 3))
    return -(-length // grain) * grain


def _stop_string_cut(
    tokenizer: Any, ids: np.ndarray, stops: tuple[str, ...], min_len: int = 0
) -> int | None:
    """Length of the shortest prefix of `ids`, at least `min_len` long, whose text contains a stop
    string, if any (a stop string, like eos, cannot end a response before min_tokens)."""
    full = tokenizer.decode(ids.tolist(), skip_special_tokens=True)
    if not any(s in full for s in stops):
        return None
    for k in range(max(1, min_len), len(ids) + 1):
        text = tokenizer.decode(ids[:k].tolist(), skip_special_tokens=True)
        if any(s in text for s in stops):
            return k
    return None


VLLM_VERSION = "0.26.0"  # the release `engine_type: vllm` is written and measured against
VLLM_INSTALL_COMMAND = f"pip install 'vllm=={VLLM_VERSION}'  (or: pip install 'rft[vllm]')"

# What each engine reads from `explorer.rollout_model` (plus the training taskset's temperature)
HF_READS = ("enforce_eager",)
VLLM_READS = (
    "enforce_eager",
    "tensor_parallel_size",
    "max_model_len",
    "seed",
    "temperature",
)


ENGINE_CHAT = "rft.engines.auxiliary_chat:engine_chat_model"


@ROLLOUT_ENGINES.register(
    "hf", reads=HF_READS, tensor_parallel=False, auxiliary=ENGINE_CHAT, lora=True
)
def hf_rollout_engine(config: RolloutEngineConfig) -> RolloutEngine:
    """transformers generate on CPU or one GPU (config.model.device)."""
    return HFRolloutEngine.from_config(config)


ROLLOUT_ENGINES.lazy(
    "vllm",
    "rft.engines.vllm_engine:vllm_rollout_engine",
    requires=[Requirement("vllm", VLLM_INSTALL_COMMAND)],
    check="rft.engines.vllm_engine:exact_logprob_issues",
    reads=VLLM_READS,
    keys="rft.engines.vllm_engine:VllmKeys",
    # engine_args: scheduler and CUDA-graph settings (bench/vllm_overhead.py measures them)
    args=("max_num_seqs", "max_cudagraph_capture_size", "async_scheduling"),
    tensor_parallel=True,
    auxiliary=ENGINE_CHAT,
    lora=True,
)
OPENAI_INSTALL_COMMAND = "pip install 'openai>=1.40'  (or: pip install 'rft[openai]')"
ROLLOUT_ENGINES.lazy(
    "openai",
    "rft.engines.openai_engine:openai_rollout_engine",
    requires=[Requirement("openai", OPENAI_INSTALL_COMMAND)],
    check="rft.engines.openai_engine_checks:server_issues",
    reads=("base_url", "api_key"),
    args=("model", "returns_token_ids"),
    loads_weights=False,
    auxiliary="rft.engines.auxiliary_chat:server_chat_model",
    auxiliary_args=("model",),  # an auxiliary model reads only text: no token ids asked
)
ROLLOUT_ENGINES.lazy(
    "replay",
    "rft.engines.replay_engine:replay_rollout_engine",
    check="rft.engines.replay_engine:recording_issues",
    args=("path",),
)
