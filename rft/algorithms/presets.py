"""Algorithm presets (the `algorithm.algorithm_type` registry, ALGORITHM_TYPES) and their resolution.

An AlgorithmSpec names the parts of one algorithm (advantage fn, policy loss, KL, entropy) and their
default args. `resolve_algorithm(cfg)` overlays a user's `algorithm` config section on the preset of
its `algorithm_type`, checks every name and arg against the registries, and returns the final spec.

Presets carry Trinity-RFT's names. Those that need data or a model the trainer does not have yet
are registered with the reason, so selecting
one fails when the config loads, saying what is missing, instead of training something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.aggregation import LOSS_AGG_MODES
from rft.algorithms.entropy import ENTROPY_LOSS_FN
from rft.algorithms.kl import KL_ESTIMATORS, KL_FN
from rft.algorithms.overlong import overlong_penalty
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.verl_library import verl_counterparts
from rft.errors import ConfigError
from rft.registry import Registry, unknown_arguments

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(args: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(args or {}))


@dataclass(frozen=True)
class AlgorithmSpec:
    """The parts of one RL algorithm, by registry name, with their args (Trinity-RFT key names).

    advantage_fn None means the algorithm uses no advantages (sft). Coefficients live in the args:
    kl_loss_fn_args["kl_coef"], kl_penalty_fn_args["kl_coef"], entropy_loss_fn_args["entropy_coef"].
    A loss_agg_mode given in policy_loss_fn_args (Trinity-RFT's place for it) takes precedence.
    """

    algorithm_type: str
    policy_loss_fn: str
    advantage_fn: str | None = None
    kl_loss_fn: str = "none"
    kl_penalty_fn: str = "none"
    entropy_loss_fn: str = "none"
    sample_strategy: str = "default"
    loss_agg_mode: str = "token-mean"
    advantage_fn_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    policy_loss_fn_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    kl_loss_fn_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    kl_penalty_fn_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    entropy_loss_fn_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # args of the sample strategy (rft.buffer.sample_strategy), e.g. DAPO's filter_groups
    sample_strategy_args: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    min_repeat_times: int = 1
    # args of rft.algorithms.overlong.overlong_penalty (empty: no penalty); max_response_length
    # may be left out here and given to compute_advantages
    overlong_penalty: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # why this algorithm cannot run yet (what it needs that rft lacks); None: it can
    unavailable: str | None = None
    # the SFT_ROW_RENDERERS entry (rft.buffer.sft_rows) of an algorithm that trains on a dataset
    # published as experiences (buffer.trainer_input.experience_buffer storage_type file); None:
    # it trains on rollouts
    dataset: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "advantage_fn_args",
            "policy_loss_fn_args",
            "kl_loss_fn_args",
            "kl_penalty_fn_args",
            "entropy_loss_fn_args",
            "overlong_penalty",
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # the frozen arg mappings do not pickle; the fsdp2 trainer engine sends losses built from
        # a spec to its other ranks, so it travels as plain dicts and is frozen again on arrival
        values = (getattr(self, f.name) for f in fields(self))
        return type(self), tuple(dict(v) if isinstance(v, Mapping) else v for v in values)

    @property
    def kl_coef(self) -> float:
        """Weight of the KL loss term (kl_loss_fn_args.kl_coef, default 0)."""
        return float(self.kl_loss_fn_args.get("kl_coef", 0.0))

    @property
    def kl_penalty_coef(self) -> float:
        """Weight of the KL penalty folded into rewards (kl_penalty_fn_args.kl_coef, default 0)."""
        return float(self.kl_penalty_fn_args.get("kl_coef", 0.0))

    @property
    def entropy_coef(self) -> float:
        """Weight of the entropy bonus (entropy_loss_fn_args.entropy_coef, default 0)."""
        return float(self.entropy_loss_fn_args.get("entropy_coef", 0.0))

    @property
    def uses_kl_loss(self) -> bool:
        return not KL_FN.spec(self.kl_loss_fn).zero and self.kl_coef != 0.0

    @property
    def uses_kl_penalty(self) -> bool:
        zero = KL_ESTIMATORS.spec(self.kl_penalty_fn).zero
        return not zero and self.kl_penalty_coef != 0.0

    @property
    def policy_reads_reference(self) -> bool:
        """Whether the policy loss itself reads the reference logprobs (its entry's trait: dpo)."""
        return POLICY_LOSS_FN.spec(self.policy_loss_fn).reads_reference

    @property
    def use_reference(self) -> bool:
        """Whether reference-model log-probabilities are needed (a KL term with nonzero coef,
        or a policy loss that reads them)."""
        return self.uses_kl_loss or self.uses_kl_penalty or self.policy_reads_reference

    @property
    def use_entropy(self) -> bool:
        """Whether the trainer must compute token entropy for the loss."""
        reads = ENTROPY_LOSS_FN.spec(self.entropy_loss_fn).reads_entropy
        return bool(reads) and self.entropy_coef != 0.0

    @property
    def use_critic(self) -> bool:
        """Whether the advantage fn reads a critic's values (its trait `critic`, e.g. GAE)."""
        return self.advantage_fn is not None and bool(ADVANTAGE_FN.spec(self.advantage_fn).critic)

    @property
    def use_advantage(self) -> bool:
        return self.advantage_fn is not None

    @property
    def uses_teacher(self) -> bool:
        """Whether the advantages need a teacher model's logprobs of the student's samples (the
        advantage fn's trait `teacher`: on_policy_distill, jsd)."""
        return self.advantage_fn is not None and bool(ADVANTAGE_FN.spec(self.advantage_fn).teacher)

    @property
    def uses_overlong_penalty(self) -> bool:
        return bool(self.overlong_penalty)

    @property
    def effective_loss_agg_mode(self) -> str:
        return str(self.policy_loss_fn_args.get("loss_agg_mode", self.loss_agg_mode))

    def policy_args(self) -> dict[str, Any]:
        """policy_loss_fn_args without loss_agg_mode (which is passed positionally)."""
        return {k: v for k, v in self.policy_loss_fn_args.items() if k != "loss_agg_mode"}

    def kl_loss_args(self) -> dict[str, Any]:
        """kl_loss_fn_args without kl_coef (which weights the term, outside the function)."""
        return {k: v for k, v in self.kl_loss_fn_args.items() if k != "kl_coef"}

    def entropy_args(self) -> dict[str, Any]:
        return {**self.entropy_loss_fn_args, "entropy_coef": self.entropy_coef}


# the algorithm keys that name a part each, with the registry they select from
ALGORITHM_PART_KEYS: Mapping[str, Registry[Any, Any]] = MappingProxyType(
    {
        "advantage_fn": ADVANTAGE_FN,
        "policy_loss_fn": POLICY_LOSS_FN,
        "kl_loss_fn": KL_FN,
        "kl_penalty_fn": KL_ESTIMATORS,
        "entropy_loss_fn": ENTROPY_LOSS_FN,
        "loss_agg_mode": LOSS_AGG_MODES,
    }
)
# the rule every algorithm answers to is given the config, the resolved AlgorithmSpec and
# whether it trains offline: the dataset an algorithm trains on, if any (by its `dataset`)
ALGORITHM_TYPES: Registry[AlgorithmSpec] = Registry(
    "algorithm.algorithm_type", rule="rft.buffer.sft_rows:dataset_issues"
)


def _policy_gradient_preset(
    name: str,
    advantage_fn: str,
    policy_loss_fn: str = "ppo",
    min_repeat_times: int = 1,
    **changes: Any,
) -> AlgorithmSpec:
    """A preset with a k2 KL loss (kl_coef 0.001) and an entropy term that is off (coef 0)."""
    spec = AlgorithmSpec(
        name,
        policy_loss_fn=policy_loss_fn,
        advantage_fn=advantage_fn,
        kl_loss_fn="k2",
        kl_loss_fn_args={"kl_coef": 0.001},
        entropy_loss_fn="default",
        entropy_loss_fn_args={"entropy_coef": 0.0},
        min_repeat_times=min_repeat_times,
    )
    return replace(spec, **changes)


def _unavailable(name: str, policy_loss_fn: str, why: str) -> AlgorithmSpec:
    return AlgorithmSpec(name, policy_loss_fn=policy_loss_fn, unavailable=why)


# Group-relative algorithms need >= 2 rollouts per task; a lone rollout gets advantage 0.
for _spec in (
    _policy_gradient_preset("grpo", "grpo", min_repeat_times=2),
    # Trinity-RFT's multi-step GRPO: one experience per turn, GRPO over each task's trajectories
    # (their last step's reward), the trajectory's advantage on every one of its steps
    _policy_gradient_preset("multi_step_grpo", "step_wise_grpo", min_repeat_times=2),
    _policy_gradient_preset("rloo", "rloo", min_repeat_times=2),
    _policy_gradient_preset("reinforceplusplus", "reinforceplusplus"),
    _policy_gradient_preset("opmd", "opmd", "opmd", min_repeat_times=2),
    # GSPO: sequence-level ratio, averaged per sequence
    _policy_gradient_preset(
        "gspo", "grpo", "gspo", min_repeat_times=2, loss_agg_mode="seq-mean-token-mean"
    ),
    # CISPO: clipped IS weights, every token keeps its gradient
    _policy_gradient_preset("cispo", "grpo", "cispo", min_repeat_times=2),
    # SAPO: a soft gate on the ratio instead of the clip
    _policy_gradient_preset("sapo", "grpo", "sapo", min_repeat_times=2),
    # TOPR: REINFORCE on the rewards, negatives tapered by their truncated ratio
    _policy_gradient_preset("topr", "reinforce", "topr"),
    # DAPO: clip-higher, token-level loss, soft overlong punishment and no KL. Its dynamic
    # sampling (dropping groups whose rewards are all equal, reading on until the batch is full)
    # is the trainer's group filter, on in any sample strategy (filter_groups: false turns it off)
    _policy_gradient_preset(
        "dapo",
        "grpo",
        "ppo",
        min_repeat_times=2,
        policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28},
        loss_agg_mode="token-mean",
        kl_loss_fn="none",
        kl_loss_fn_args={},
        overlong_penalty={"penalty_factor": 1.0},
        sample_strategy_args={"filter_groups": True},
    ),
    # AsymRE: REINFORCE with a lowered group baseline, the OPMD surrogate, no KL or entropy
    AlgorithmSpec("asymre", policy_loss_fn="opmd", advantage_fn="asymre"),
    # RAFT: supervised loss on the explorer's own rollouts
    AlgorithmSpec("raft", policy_loss_fn="sft"),
    # PPO with a critic: GAE advantages from a value model trained beside the policy
    # (rft.algorithms.gae; Trinity-RFT's defaults gamma = lam = 1), the clipped surrogate
    _policy_gradient_preset("ppo", "ppo", advantage_fn_args={"gamma": 1.0, "lam": 1.0}),
    _unavailable(
        "gigpo",
        "ppo",
        "GiGPO's step-level advantage groups the steps of a task's trajectories by identical "
        "environment state (its anchor states), and rft's step-wise experiences do not carry an "
        "environment state key yet; for step-wise training use multi_step_grpo",
    ),
    # DPO: pairs of a chosen and a rejected response (groups of two; the higher reward is the
    # chosen one), against the reference model (the base weights); a preference dataset is
    # published as experiences like an SFT one, or pairs come from a topic (rft replay pairs)
    AlgorithmSpec("dpo", policy_loss_fn="dpo", advantage_fn="preference", dataset="pair"),
    # SFT: -log p of the assistant's tokens of a chat dataset; CPT: of every token of a text one.
    # Both datasets are published as experiences (rft.producers.dataset_publisher) and trained
    # without an explorer
    AlgorithmSpec("sft", policy_loss_fn="sft", dataset="chat"),
    AlgorithmSpec("cpt", policy_loss_fn="sft", dataset="text"),
    # MIX: GRPO on the rollouts, the SFT loss on the demonstrations the mix sample strategy puts
    # in every batch (buffer.trainer_input.auxiliary_buffers), (1 - mu) L_grpo + mu L_sft
    _policy_gradient_preset(
        "mix",
        "grpo",
        "mix",
        min_repeat_times=2,
        sample_strategy="mix",
        policy_loss_fn_args={"mu": 0.1},
    ),
    # CHORD: as mix, with mu on a warmup / cosine-decay schedule of the train step and the SFT
    # loss of each demonstration token weighted by p (1 - p) (rft.algorithms.chord)
    _policy_gradient_preset(
        "mix_chord",
        "grpo",
        "mix_chord",
        min_repeat_times=2,
        sample_strategy="mix",
        policy_loss_fn_args={
            "mu_warmup_steps": 0,
            "mu_decay_steps": 0,
            "mu_peak": 0.1,
            "mu_valley": 0.1,
            "enable_phi_function": True,
            "clip_range": 0.2,
        },
    ),
    # On-policy distillation: token advantages from a teacher's logprobs of the student's own
    # samples (the teacher is explorer.auxiliary_models[0], scored in the trainer), the PPO
    # surrogate on them; no KL to the base model, no entropy term, no groups needed
    AlgorithmSpec(
        "on_policy_distill",
        policy_loss_fn="ppo",
        advantage_fn="on_policy_distill",
        advantage_fn_args={"kl_coef": 1.0},
    ),
    AlgorithmSpec(
        "jsd",
        policy_loss_fn="ppo",
        advantage_fn="jsd",
        advantage_fn_args={"kl_coef": 1.0, "lambda_coef": 0.5},
    ),
):
    ALGORITHM_TYPES.add(_spec.algorithm_type, _spec)
# rft's first spelling of Trinity-RFT's reinforceplusplus; CHORD by its short name
ALGORITHM_TYPES.add("reinforce_plus_plus", ALGORITHM_TYPES.get("reinforceplusplus"))
ALGORITHM_TYPES.add("chord", ALGORITHM_TYPES.get("mix_chord"))


def require_available(spec: AlgorithmSpec) -> None:
    """Raise ConfigError naming what the algorithm needs, when rft cannot run it yet."""
    if spec.unavailable is not None:
        raise ConfigError(f"algorithm.algorithm_type: {spec.algorithm_type!r} {spec.unavailable}")


def _read(cfg: Any, key: str) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(key)
    return getattr(cfg, key, None)


# Positional parameters each registry's functions take before their configurable args.
_FIXED_PARAMS: dict[str, frozenset[str]] = {
    # trajectory_index / turn: filled for step-wise advantage fns (trait `steps`), never config
    # token_rewards / values / action_mask: filled for advantage fns that read a critic (`critic`)
    # old_logprob / teacher_logprob / action_mask: filled for teacher advantage fns (trait
    # `teacher`) by the trainer
    "advantage_fn": frozenset(
        {
            "rewards",
            "group_index",
            "trajectory_index",
            "turn",
            "token_rewards",
            "values",
            "action_mask",
            "old_logprob",
            "teacher_logprob",
        }
    ),
    # prox_logprob / ref_logprob: filled by AlgorithmLoss for the losses that declare them (the
    # latter by the trait reads_reference), never config args
    "policy_loss_fn": frozenset(
        {
            "logprob",
            "old_logprob",
            "advantages",
            "action_mask",
            "loss_agg_mode",
            "prox_logprob",
            "ref_logprob",
        }
    ),
    "kl_loss_fn": frozenset({"logprob", "ref_logprob", "action_mask", "loss_agg_mode"}),
    "entropy_loss_fn": frozenset({"entropy", "action_mask", "loss_agg_mode"}),
}


def check_args(
    fn: Callable[..., Any], args: Mapping[str, Any], key: str, fixed: frozenset[str]
) -> None:
    """Raise ConfigError if `args` holds a name that `fn` does not accept as a keyword."""
    unknown, accepted = unknown_arguments(fn, args, fixed)
    if unknown:
        raise ConfigError(
            f"algorithm.{key}_args.{unknown[0]}: not an argument of {key} "
            f"(accepts: {', '.join(accepted) or 'nothing'})"
        )


def resolve_algorithm(
    cfg: Any, repeat_times: int | None = None, *, check_repeat_times: bool = True
) -> AlgorithmSpec:
    """Overlay an `algorithm` config section (mapping or object) on its algorithm_type's preset.

    Keys read: algorithm_type, advantage_fn, policy_loss_fn, kl_loss_fn, kl_penalty_fn,
    entropy_loss_fn, sample_strategy, loss_agg_mode and the matching *_args dicts (with
    sample_strategy_args), implementation, and use_critic (checked against the advantage fn).
    A key that is None/absent keeps the preset's value; a given *_args dict is merged over the preset's args. With implementation "verl" the advantage fn and policy loss
    become their verl-backed entries (rft.algorithms.verl_library), same args.
    Every name is looked up in its registry and every arg checked against the function's
    signature, so a typo fails here with a ConfigError naming the key. `repeat_times` (default:
    cfg.repeat_times) is checked against the preset's minimum unless `check_repeat_times` is
    False (a config that never trains, such as mode bench).
    """
    algorithm_type = _read(cfg, "algorithm_type") or "grpo"
    preset = ALGORITHM_TYPES.get(algorithm_type)
    require_available(preset)
    changes: dict[str, Any] = {}
    for key in (
        "advantage_fn",
        "policy_loss_fn",
        "kl_loss_fn",
        "kl_penalty_fn",
        "entropy_loss_fn",
        "sample_strategy",
        "loss_agg_mode",
    ):
        value = _read(cfg, key)
        if value is not None:
            changes[key] = value
    for key in (
        "advantage_fn_args",
        "policy_loss_fn_args",
        "kl_loss_fn_args",
        "kl_penalty_fn_args",
        "entropy_loss_fn_args",
        "sample_strategy_args",
    ):
        value = _read(cfg, key)
        if value:
            if not isinstance(value, Mapping):
                raise ConfigError(f"algorithm.{key}: expected a mapping, got {value!r}")
            changes[key] = {**getattr(preset, key), **value}
    spec = replace(preset, **changes)
    if _read(cfg, "implementation") == "verl":
        advantage_fn, policy_loss_fn = verl_counterparts(spec.advantage_fn, spec.policy_loss_fn)
        spec = replace(spec, advantage_fn=advantage_fn, policy_loss_fn=policy_loss_fn)
    validate_spec(spec)
    _check_use_critic(_read(cfg, "use_critic"), spec)
    if repeat_times is None:
        repeat_times = _read(cfg, "repeat_times")
    if check_repeat_times and repeat_times is not None and repeat_times < spec.min_repeat_times:
        raise ConfigError(
            f"algorithm.repeat_times: {algorithm_type!r} needs at least "
            f"{spec.min_repeat_times} rollouts per task, got {repeat_times}"
        )
    return spec


def _check_use_critic(use_critic: bool | None, spec: AlgorithmSpec) -> None:
    """`algorithm.use_critic` (Trinity-RFT's key) must agree with the advantage fn: a critic is
    trained exactly when the advantages read its values; None follows the advantage fn."""
    if use_critic is None or bool(use_critic) == spec.use_critic:
        return
    if use_critic:
        raise ConfigError(
            f"algorithm.use_critic: true, but advantage_fn {spec.advantage_fn!r} reads no "
            "critic's values, so a critic would be trained for nothing; use algorithm_type ppo "
            "(advantage_fn ppo: GAE) or leave use_critic out"
        )
    raise ConfigError(
        f"algorithm.use_critic: false, but advantage_fn {spec.advantage_fn!r} computes "
        "advantages from a critic's values; choose a critic-free advantage_fn (grpo, rloo, "
        "reinforceplusplus) or leave use_critic out"
    )


def validate_spec(spec: AlgorithmSpec) -> None:
    """Check every registry name and arg of `spec`; raise ConfigError naming the bad key."""
    require_available(spec)
    if spec.advantage_fn is not None:
        adv_fn = ADVANTAGE_FN.get(spec.advantage_fn)
        check_args(adv_fn, spec.advantage_fn_args, "advantage_fn", _FIXED_PARAMS["advantage_fn"])
    policy_fn = POLICY_LOSS_FN.get(spec.policy_loss_fn)
    check_args(policy_fn, spec.policy_args(), "policy_loss_fn", _FIXED_PARAMS["policy_loss_fn"])
    kl_fn = KL_FN.get(spec.kl_loss_fn)
    check_args(kl_fn, spec.kl_loss_args(), "kl_loss_fn", _FIXED_PARAMS["kl_loss_fn"])
    KL_ESTIMATORS.get(spec.kl_penalty_fn, key="algorithm.kl_penalty_fn")
    extra_penalty = set(spec.kl_penalty_fn_args) - {"kl_coef"}
    if extra_penalty:
        raise ConfigError(
            f"algorithm.kl_penalty_fn_args.{sorted(extra_penalty)[0]}: not an argument of "
            f"kl_penalty_fn (accepts: kl_coef)"
        )
    entropy_fn = ENTROPY_LOSS_FN.get(spec.entropy_loss_fn)
    check_args(
        entropy_fn, spec.entropy_loss_fn_args, "entropy_loss_fn", _FIXED_PARAMS["entropy_loss_fn"]
    )
    LOSS_AGG_MODES.get(spec.effective_loss_agg_mode)
    if spec.uses_teacher and spec.use_reference:
        key = "kl_loss_fn" if spec.uses_kl_loss else "kl_penalty_fn"
        raise ConfigError(
            f"algorithm.{key}: advantage_fn {spec.advantage_fn!r} scores a teacher in the "
            "trainer's reference-model place, so a KL term to the base model cannot be added "
            "(set its kl_coef to 0 or the fn to none)"
        )
    for key, coef in (
        ("kl_loss_fn_args.kl_coef", spec.kl_loss_fn_args.get("kl_coef", 0.0)),
        ("kl_penalty_fn_args.kl_coef", spec.kl_penalty_fn_args.get("kl_coef", 0.0)),
        ("entropy_loss_fn_args.entropy_coef", spec.entropy_loss_fn_args.get("entropy_coef", 0.0)),
    ):
        if isinstance(coef, bool) or not isinstance(coef, int | float):
            raise ConfigError(f"algorithm.{key}: expected a number, got {coef!r}")
    if spec.overlong_penalty:
        unknown, accepted = unknown_arguments(
            overlong_penalty, spec.overlong_penalty, frozenset({"response_lengths"})
        )
        if unknown:
            raise ConfigError(
                f"overlong_penalty.{unknown[0]}: not an argument of the overlong penalty "
                f"(accepts: {', '.join(accepted)})"
            )
