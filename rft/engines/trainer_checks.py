"""The load-time rule every trainer engine answers to (`TRAINER_ENGINES`' rule), read off its spec.

A config asks things of its trainer engine that the engine's spec says it can or cannot do: run
over several ranks, train a LoRA adapter, offload parameters, train a critic beside the policy
(an algorithm whose advantage fn reads a critic's values), score a distillation teacher. Each
refusal names the key that asked and the engines that can. The rule is given the config and the
algorithm the config resolves to (None when the algorithm keys are wrong: those are said
already).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rft.config.binding import Issue
from rft.config.derived import trainer_gpus
from rft.engines.trainer import TRAINER_ENGINES, TrainerEngineSpec

LORA_INSTALL_COMMAND = "pip install 'peft>=0.17'  (or: pip install 'rft[lora]')"


def engine_issues(name: str, spec: TrainerEngineSpec, cfg: Any, algorithm: Any) -> list[Issue]:
    """Every problem of running `cfg` on trainer engine `name`."""
    issues = rank_issues(name, spec, cfg)
    issues += lora_issues(name, spec, cfg)
    if cfg.trainer.param_offload and not spec.param_offload:
        issues.append(
            Issue(
                "trainer.param_offload",
                f"the {name} engine keeps its parameters on its device; parameter "
                "offload needs trainer_type fsdp2 (FSDP2's CPU offload policy)",
            )
        )
    if algorithm is not None and algorithm.use_critic:
        issues += critic_issues(name, spec, cfg)
    if algorithm is not None and algorithm.uses_teacher:
        issues += teacher_issues(name, spec, cfg)
    return issues


def rank_issues(name: str, spec: TrainerEngineSpec, cfg: Any) -> list[Issue]:
    """trainer.world_size: one rank for an engine that does not run over ranks; on GPUs, one GPU
    per rank."""
    ranks = cfg.trainer.world_size or 1
    if ranks > 1 and not spec.many_ranks:
        return [
            Issue(
                "trainer.world_size",
                f"{ranks} ranks, but the {name} engine runs one; set "
                "trainer.trainer_type: fsdp2 (or trainer_strategy: fsdp2) to shard over several",
            )
        ]
    gpus = cfg.cluster.gpu_per_node
    if gpus > 0 and ranks > max(1, trainer_gpus(cfg)):
        rollout = cfg.explorer.rollout_model
        return [
            Issue(
                "trainer.world_size",
                f"{ranks} ranks need a GPU each, but cluster.gpu_per_node {gpus} leaves "
                f"{trainer_gpus(cfg)} after rollout (engine_num {rollout.engine_num} x "
                f"tensor_parallel_size {rollout.tensor_parallel_size})",
            )
        ]
    return []


def lora_issues(name: str, spec: TrainerEngineSpec, cfg: Any) -> list[Issue]:
    """model.lora_configs: the trainer engine must train adapters, and peft must be installed
    (the rollout engine's half is its own rule's)."""
    if not cfg.model.lora_configs:
        return []
    issues = []
    if not spec.lora:
        able = ", ".join(TRAINER_ENGINES.having(lambda s: s.lora))
        issues.append(
            Issue(
                "model.lora_configs",
                f"the {name} trainer engine trains full models only; LoRA trains with "
                f"trainer_type {able}",
            )
        )
    if importlib.util.find_spec("peft") is None:
        issues.append(Issue("model.lora_configs", f"needs peft: {LORA_INSTALL_COMMAND}"))
    return issues


def critic_issues(name: str, spec: TrainerEngineSpec, cfg: Any) -> list[Issue]:
    """A critic is trained: the engine must carry one, and its model must be one rft can load
    (critic.loss_agg_mode is a selection of its own)."""
    from rft.engines.models import MODEL_SOURCES

    issues = []
    if not spec.critic:
        issues.append(
            Issue(
                "trainer.trainer_type",
                f"the {name} engine cannot train a critic beside the policy yet, and "
                f"algorithm_type {cfg.algorithm.algorithm_type!r} needs one (its advantage fn "
                "reads a critic's values); use trainer_type: torch (one process)",
            )
        )
    path = cfg.model.critic_model_path
    if path is not None and path not in MODEL_SOURCES and not Path(path).expanduser().is_dir():
        issues.append(
            Issue(
                "model.critic_model_path",
                f"{path!r} is neither a model source ({', '.join(MODEL_SOURCES.names())}) nor "
                "an existing local directory",
            )
        )
    return issues


def teacher_issues(name: str, spec: TrainerEngineSpec, cfg: Any) -> list[Issue]:
    """A distillation algorithm's teacher, `explorer.auxiliary_models[0]`, is loaded by the
    trainer from its model_path (rft.engines.teacher): it must name one, other than the
    student, for an engine that loads weights, and the trainer engine must score it."""
    from rft.engines.rollout import ROLLOUT_ENGINES

    algorithm = cfg.algorithm.algorithm_type
    entries = cfg.explorer.auxiliary_models
    if not entries:
        return [
            Issue(
                "explorer.auxiliary_models",
                f"algorithm {algorithm!r} needs a teacher: its first entry, with the teacher's "
                "model_path (the trainer scores the student's samples with it)",
            )
        ]
    issues = []
    at = "explorer.auxiliary_models[0]"
    teacher = entries[0]
    if (
        teacher.engine_type in ROLLOUT_ENGINES
        and not ROLLOUT_ENGINES.spec(teacher.engine_type).loads_weights
    ):
        issues.append(
            Issue(
                f"{at}.engine_type",
                f"{teacher.engine_type!r} has no local weights, and algorithm {algorithm!r} "
                "scores the student's tokens with the teacher's weights in the trainer: give "
                "the teacher as an hf entry with its model_path",
            )
        )
    elif teacher.model_path in (None, cfg.model.model_path):
        issues.append(
            Issue(
                f"{at}.model_path",
                f"is the student's own model (model.model_path); algorithm {algorithm!r} needs "
                "the teacher's path here",
            )
        )
    if not spec.teacher:
        takes = TRAINER_ENGINES.having(lambda s: s.teacher)
        issues.append(
            Issue(
                "trainer.trainer_type",
                f"engine {name!r} cannot score a teacher for algorithm {algorithm!r} yet "
                f"(engines that can: {', '.join(takes)})",
            )
        )
    return issues


def filled_trainer_type(cfg: Any) -> None:
    """Values that follow from the trainer engine a config selects, in place: the entry that
    runs the chosen one with Trinity's `trainer_strategy` (its spec's `sharded_by`), and
    trainer.world_size: the GPUs left after rollout for an engine that runs over ranks (on
    GPUs), else 1."""
    trainer = cfg.trainer
    if trainer.trainer_strategy is not None and trainer.trainer_type in TRAINER_ENGINES:
        sharded_by = TRAINER_ENGINES.spec(trainer.trainer_type).sharded_by
        trainer.trainer_type = sharded_by.get(trainer.trainer_strategy, trainer.trainer_type)
    if trainer.world_size is None and trainer.engine_name in TRAINER_ENGINES:
        many = TRAINER_ENGINES.spec(trainer.engine_name).many_ranks
        sharded = many and cfg.cluster.gpu_per_node > 0
        trainer.world_size = max(1, trainer_gpus(cfg)) if sharded else 1
