"""The teacher of a distillation run (`algorithm_type: on_policy_distill` or `jsd`), loaded in the
trainer: a frozen model that scores the student's sampled tokens.

The teacher is `explorer.auxiliary_models[0]` (Trinity-RFT's workflows ask the first auxiliary
model too); the trainer loads that entry's `model_path` beside the student, on the trainer's
device, and hands it to the engine as its reference model (`set_reference_model`), so the
teacher's logprobs come from the same pass that scores a KL reference elsewhere.

`load_teacher` refuses a teacher whose tokenizer differs from the student's (its logprobs would
score other tokens than the ones the student drew) and returns a `TeacherRecord`: the path and a
sha256 of the teacher's weights, which the trainer saves with every weight version, since the
experience log holds the student's samples only and the teacher's logprobs are recomputed
from those weights whenever a batch trains.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rft.engines.models import ModelSpec, load_model
from rft.errors import ConfigError

# the key of the teacher's record in the state saved with each weight version
STATE_KEY = "teacher"


@dataclass(frozen=True)
class TeacherRecord:
    """What fixes a run's teacher: its config entry, path and the sha256 of its weights."""

    where: str
    model_path: str
    weights_sha256: str

    def state(self) -> dict[str, str]:
        return asdict(self)


def weights_sha256(model: Any) -> str:
    """sha256 over the model's state dict: each tensor's name, dtype, shape and bytes, in name
    order (a tied weight counts under each name)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def same_vocabulary(student: Any, teacher: Any) -> str | None:
    """None when the two tokenizers map the same strings to the same ids; else what differs."""
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    if len(s_vocab) != len(t_vocab):
        return f"{len(t_vocab)} tokens against the student's {len(s_vocab)}"
    differing = [tok for tok, i in s_vocab.items() if t_vocab.get(tok) != i]
    if differing:
        return f"{len(differing)} tokens have other ids (first: {sorted(differing)[0]!r})"
    return None


def load_teacher(spec: ModelSpec, student_tokenizer: Any, where: str) -> tuple[Any, TeacherRecord]:
    """The teacher model (frozen, on spec.device) and its record; ConfigError naming
    `where`.model_path when its vocabulary differs from the student's."""
    try:
        model, tokenizer = load_model(spec)
    except ConfigError as exc:  # its message names model.model_path, the student's key
        raise ConfigError(f"{where}.model_path: cannot load the teacher: {exc}") from exc
    differs = same_vocabulary(student_tokenizer, tokenizer)
    if differs is not None:
        raise ConfigError(
            f"{where}.model_path: the teacher {spec.name_or_path!r} has another vocabulary than "
            f"the student ({differs}); distillation scores the student's token ids with the "
            "teacher, so both must share one tokenizer"
        )
    student_size = len(student_tokenizer)
    rows = model.get_input_embeddings().weight.shape[0]
    if rows < student_size:
        raise ConfigError(
            f"{where}.model_path: the teacher {spec.name_or_path!r} embeds {rows} token ids, "
            f"fewer than the student's tokenizer has ({student_size})"
        )
    model.requires_grad_(False)
    return model, TeacherRecord(where, spec.name_or_path, weights_sha256(model))


def check_recorded(record: TeacherRecord, saved: dict[str, Any] | None, version: int) -> None:
    """Refuse to resume with another teacher than the one the resumed version trained with."""
    if not saved or saved.get("weights_sha256") in (None, record.weights_sha256):
        return
    raise ConfigError(
        f"{record.where}.model_path: weight version {version} was trained against the teacher "
        f"{saved.get('model_path')!r} (weights sha256 {saved['weights_sha256'][:16]}...), but "
        f"{record.model_path!r} has weights sha256 {record.weights_sha256[:16]}...; resume with "
        "the same teacher, or start a new run"
    )
