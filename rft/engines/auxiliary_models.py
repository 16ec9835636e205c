"""Auxiliary models (`explorer.auxiliary_models`): further models beside the policy, such as a
judge, a teacher or a user simulator, reached by name.

`AuxiliaryModels` is an explorer's roster of them; workflows hold it as
`Workflow.auxiliary_models` and reach one with `auxiliary_models["judge"]` (or by position, as
Trinity-RFT's workflows index their list). A reward function that asks one declares it as a trait
of its registry entry (`rft.rewards.registry.asked_model`), and its workflow passes it the model.

Each `AuxiliaryModel` is built on its first call, not when the explorer starts, so a run whose
rewards never ask it loads nothing: the factory its engine's ROLLOUT_ENGINES entry names in its
`auxiliary` trait (`rft.engines.auxiliary_chat`) builds it from its `AuxiliarySpec`. An
auxiliary model is frozen: nothing ever loads a weight version into it, so it answers with the
weights it was built with while the policy moves on. It counts its calls and the calls that
failed (an error or no answer within the call's timeout), which the explorer reports per step.

This module imports no engine at run time (workflows are loaded where torch never is).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rft.errors import ConfigError, EngineError
from rft.registry import load_dotted

if TYPE_CHECKING:
    from rft.engines.rollout import RolloutEngineConfig

Message = Mapping[str, Any]


class ChatModel(Protocol):
    """What an auxiliary model's engine offers: a chat answered with text."""

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
    ) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class AuxiliarySpec:
    """How one auxiliary model is built: its engine and the settings its engine reads.

    `where` is its config entry (`explorer.auxiliary_models[0]`), named in errors."""

    name: str
    engine_type: str
    where: str
    engine: RolloutEngineConfig
    chat_template: str | None = None
    enable_thinking: bool | None = None


@dataclass
class AuxiliaryCounts:
    """Calls of one auxiliary model, and those that failed (an error or a timeout)."""

    calls: int = 0
    failed_calls: int = 0


class AuxiliaryModel:
    """One auxiliary model, by name, built on its first call (see the module docstring)."""

    def __init__(self, spec: AuxiliarySpec) -> None:
        self.spec = spec
        self._model: ChatModel | None = None
        self._build_error: ConfigError | None = None
        self._lock = threading.Lock()  # the counts
        self._build_lock = threading.Lock()  # held while it is built (minutes, for a model)
        self._counts = AuxiliaryCounts()
        self._reported = AuxiliaryCounts()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def built(self) -> bool:
        """Whether it has been built (on its first call)."""
        return self._model is not None

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> str:
        """The model's text answer to `messages`. EngineError when the call fails or gives no
        whole answer within `timeout_s`; ConfigError when the model cannot be built."""
        model = self._built()
        with self._lock:
            self._counts.calls += 1
        try:
            return model.chat(
                messages, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s
            )
        except EngineError as exc:
            with self._lock:
                self._counts.failed_calls += 1
            raise EngineError(f"auxiliary model {self.name!r}: {exc}") from exc

    def counts_since_asked(self) -> AuxiliaryCounts:
        """Calls and failed calls since this was last asked."""
        with self._lock:
            now, before = self._counts, self._reported
            self._reported = AuxiliaryCounts(now.calls, now.failed_calls)
        return AuxiliaryCounts(now.calls - before.calls, now.failed_calls - before.failed_calls)

    def close(self) -> None:
        with self._build_lock:
            model, self._model = self._model, None
        if model is not None:
            model.close()

    def _built(self) -> ChatModel:
        with self._build_lock:
            if self._model is not None:
                return self._model
            if self._build_error is not None:  # a config problem: the same on every call
                raise self._build_error
            try:
                self._model = _factory(self.spec)(self.spec)
            except ConfigError as exc:
                self._build_error = ConfigError(f"{self.spec.where}: {exc}")
                raise self._build_error from exc
            return self._model


def _factory(spec: AuxiliarySpec) -> Any:
    """The factory that spec's engine's entry names in its `auxiliary` trait."""
    from rft.engines.rollout import ROLLOUT_ENGINES

    target = ROLLOUT_ENGINES.spec(spec.engine_type).auxiliary
    if target is None:  # refused at load; a roster built by hand meets it here
        raise ConfigError(f"engine_type {spec.engine_type!r} cannot serve as an auxiliary model")
    return load_dotted(target)


@dataclass
class AuxiliaryModels:
    """A roster of auxiliary models by name (in config order)."""

    models: list[AuxiliaryModel] = field(default_factory=list)

    @classmethod
    def of(cls, specs: Sequence[AuxiliarySpec]) -> AuxiliaryModels:
        return cls([AuxiliaryModel(spec) for spec in specs])

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> AuxiliaryModel:
        """The model named `name`; ConfigError naming the known ones otherwise."""
        for model in self.models:
            if model.name == name:
                return model
        known = ", ".join(repr(n) for n in self.names) or "none are configured"
        raise ConfigError(f"no auxiliary model named {name!r} (explorer.auxiliary_models: {known})")

    def __getitem__(self, key: str | int) -> AuxiliaryModel:
        if isinstance(key, int):
            if not -len(self.models) <= key < len(self.models):
                raise ConfigError(
                    f"no auxiliary model at position {key} ({len(self.models)} configured)"
                )
            return self.models[key]
        return self.get(key)

    def __len__(self) -> int:
        return len(self.models)

    def __iter__(self) -> Iterator[AuxiliaryModel]:
        return iter(self.models)

    def metrics(self) -> dict[str, float]:
        """Each model's calls and failed calls since last asked: `auxiliary_<name>_calls` and
        `auxiliary_<name>_failed_calls`."""
        out: dict[str, float] = {}
        for model in self.models:
            counts = model.counts_since_asked()
            out[f"auxiliary_{model.name}_calls"] = float(counts.calls)
            out[f"auxiliary_{model.name}_failed_calls"] = float(counts.failed_calls)
        return out

    def close(self) -> None:
        for model in self.models:
            model.close()
