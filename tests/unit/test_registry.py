"""Registry behaviour: lookup, suggestions on typos, user plug-ins by one decorator."""

from __future__ import annotations

import difflib
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.objective import LossBatch, build_loss, compute_advantages
from rft.algorithms.presets import ALGORITHM_TYPES, AlgorithmSpec
from rft.errors import ConfigError
from rft.registry import PartSpec, Registry, Requirement

# the keywords difflib.get_close_matches takes, as argument_issues lists them
ACCEPTED = ", ".join(sorted(inspect.signature(difflib.get_close_matches).parameters))


def test_unknown_name_raises_config_error_with_suggestion_and_known_names() -> None:
    with pytest.raises(ConfigError) as info:
        ADVANTAGE_FN.get("grop")
    message = str(info.value)
    assert "algorithm.advantage_fn" in message
    assert "did you mean 'grpo'" in message
    assert "rloo" in message and "opmd" in message


def test_unknown_name_without_close_match_lists_known() -> None:
    reg: Registry[int] = Registry("thing")
    reg.add("alpha", 1)
    with pytest.raises(ConfigError, match=r"unknown thing 'zzzzzz' \(known: alpha\)"):
        reg.get("zzzzzz")


def test_get_names_the_config_key_when_given() -> None:
    reg: Registry[int] = Registry("algorithm.kl_loss_fn")
    with pytest.raises(ConfigError, match="unknown algorithm.kl_penalty_fn 'x'"):
        reg.get("x", key="algorithm.kl_penalty_fn")


def test_duplicate_registration_is_refused_unless_replace() -> None:
    reg: Registry[object] = Registry("thing")

    @reg.register("a")
    def first() -> None: ...

    with pytest.raises(ConfigError, match="already registered"):

        @reg.register("a")
        def second() -> None: ...

    def third() -> None: ...

    reg.register("a", replace=True)(third)
    assert reg.get("a") is third
    assert reg.names() == ["a"] and "a" in reg and len(reg) == 1


def test_user_advantage_fn_plugs_in_with_one_decorator() -> None:
    @ADVANTAGE_FN.register("test_sign_only")
    def sign_advantage(
        rewards: torch.Tensor, group_index: torch.Tensor, scale: float = 1.0
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return scale * torch.sign(rewards), {}

    try:
        assert ADVANTAGE_FN.get("test_sign_only") is sign_advantage
        spec = AlgorithmSpec(
            "custom",
            policy_loss_fn="ppo",
            advantage_fn="test_sign_only",
            advantage_fn_args={"scale": 2.0},
        )
        mask = torch.ones(3, 2)
        adv, _ = compute_advantages(
            spec, torch.tensor([-1.0, 0.0, 5.0]), torch.zeros(3).long(), mask
        )
        assert adv.tolist() == [[-2.0, -2.0], [0.0, 0.0], [2.0, 2.0]]
    finally:
        ADVANTAGE_FN._entries.pop("test_sign_only")


def test_algorithm_type_registry_has_the_presets() -> None:
    assert {"grpo", "rloo", "reinforceplusplus", "reinforce_plus_plus", "opmd", "raft"} <= set(
        ALGORITHM_TYPES.names()
    )
    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        build_loss("grpoo")


def test_registry_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, rft.registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_built_loss_runs_end_to_end() -> None:
    loss_fn = build_loss("grpo")
    lp = torch.zeros(2, 3, requires_grad=True)
    batch = LossBatch(
        action_mask=torch.ones(2, 3),
        old_logprob=torch.zeros(2, 3),
        advantages=torch.ones(2, 3),
        ref_logprob=torch.zeros(2, 3),
    )
    loss, metrics = loss_fn(lp, None, batch)
    loss.backward()
    assert metrics["loss"] == pytest.approx(-1.0)
    assert lp.grad is not None


@dataclass(frozen=True)
class ThingSpec(PartSpec):
    speed: str = "slow"
    colour: str = "none"
    sizes: tuple[int, ...] = ()
    names: Mapping[str, str] = field(default_factory=dict)
    build: Callable[..., Any] | None = None
    unit: Literal["tokens", "rows"] = "rows"


@pytest.mark.parametrize(
    ("traits", "problem"),
    [
        ({"sped": "fast"}, r"thing 'x': sped is not a field of ThingSpec \(its fields: build, "),
        ({"speed": 3}, r"speed=3 is not of ThingSpec.speed's type str"),
        (
            {"sizes": [1, 2]},
            r"sizes=\[1, 2\] is not of ThingSpec.sizes's type tuple\[int, \.\.\.\]",
        ),
        ({"sizes": (1, "2")}, r"sizes=\(1, '2'\) is not of"),
        (
            {"names": {"a": 1}},
            r"names=\{'a': 1\} is not of ThingSpec.names's type Mapping\[str, str\]",
        ),
        ({"build": "not callable"}, r"build='not callable' is not of"),
        (
            {"unit": "pairs"},
            r"unit='pairs' is not of ThingSpec.unit's type Literal\['tokens', 'rows'\]",
        ),
    ],
)
def test_a_registration_trait_must_be_a_field_of_the_spec_and_of_its_type(
    traits: dict[str, Any], problem: str
) -> None:
    reg: Registry[Any, ThingSpec] = Registry("thing", ThingSpec)
    for register in (
        lambda: reg.register("x", **traits)(lambda: None),
        lambda: reg.lazy("x", "some.module:part", **traits),
        lambda: reg.add("x", object(), **traits),
    ):
        with pytest.raises(ConfigError, match=problem):
            register()
    assert "x" not in reg  # nothing half-registered


def test_a_spec_holds_the_registered_traits_and_the_defaults_of_the_rest() -> None:
    reg: Registry[Any, ThingSpec] = Registry("thing", ThingSpec)
    reg.add("a", 1, speed="fast", sizes=(1, 2), names={"k": "v"}, build=print, unit="tokens")
    reg.add("b", 2)
    assert reg.spec("a") == ThingSpec("fast", "none", (1, 2), {"k": "v"}, print, "tokens")
    assert reg.spec("b") == ThingSpec()
    assert reg.having(lambda s: s.unit == "tokens") == ["a"]
    with pytest.raises(ConfigError, match="unknown thing 'c'"):
        reg.spec("c")
    plain: Registry[int] = Registry("plain")  # a registry whose entries declare nothing
    with pytest.raises(
        ConfigError, match="speed is not a field of PartSpec \\(its fields: none\\)"
    ):
        plain.add("a", 1, speed="fast")


def test_a_lazy_entry_is_imported_on_first_get_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rft_lazy_part.py").write_text("def part():\n    return 'loaded'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[Any, ThingSpec] = Registry("thing", ThingSpec)
    reg.lazy("lazy", "rft_lazy_part:part", speed="fast")
    assert "lazy" in reg and reg.spec("lazy").speed == "fast"
    assert reg.spec("lazy").colour == "none"  # the spec's default
    assert "rft_lazy_part" not in sys.modules  # declared, looked at, not imported
    assert reg.get("lazy")() == "loaded"
    assert "rft_lazy_part" in sys.modules
    # the module registering the same object itself fills the entry instead of clashing
    reg.register("lazy")(sys.modules["rft_lazy_part"].part)
    with pytest.raises(ConfigError, match="already registered to rft_lazy_part:part"):
        reg.lazy("lazy", "rft_lazy_part:other")


def test_a_missing_package_is_named_with_its_install_command() -> None:
    reg: Registry[Any] = Registry("explorer.rollout_model.engine_type")
    need = Requirement("rft_no_such_package_x", "pip install rft-no-such-package-x")
    reg.lazy("ghost", "rft_no_such_package_x.engine:Engine", requires=[need])
    assert reg.entry("ghost").missing_packages() == [need]
    with pytest.raises(ConfigError) as info:
        reg.get("ghost")
    assert str(info.value) == (
        "explorer.rollout_model.engine_type 'ghost' needs the rft_no_such_package_x package, "
        "which is not installed: pip install rft-no-such-package-x"
    )


def test_an_entry_checks_what_its_registry_hands_it() -> None:
    reg: Registry[Any] = Registry("thing")

    def positive(value: int) -> list[str]:
        return [] if value > 0 else [f"must be > 0, got {value}"]

    reg.add("checked", object(), check=positive)
    reg.lazy("by_path", "difflib:get_close_matches", check="rft.registry:argument_issues")
    assert reg.entry("checked").issues(-1) == ["must be > 0, got -1"]
    assert reg.entry("checked").issues(3) == []
    assert reg.entry("by_path").issues("x", reg.get("by_path"), ["cutoff", "colour"]) == [
        ("x.colour", f"is not an argument of get_close_matches (accepts: {ACCEPTED})")
    ]
    with pytest.raises(ConfigError, match="did you mean 'checked'"):
        reg.entry("chekced")
