"""Fault points: silent and free without RFT_FAULT_PAUSE; with it, the named point announces
itself on stderr (the fault driver waits for that line) before it sleeps; other points do nothing."""

from __future__ import annotations

import pytest

from rft.fault_points import ENV, fault_point, pauses


def test_spec_parsing_keeps_points_with_numbers() -> None:
    assert pauses("a:1.5, b:2,c,d:x") == {"a": 1.5, "b": 2.0}
    assert pauses(None) == {} and pauses("") == {}


def test_named_point_announces_and_sleeps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV, "trainer.after_step:0.2,explorer.in_transaction:5")
    fault_point("trainer.after_step")
    assert "rft fault point trainer.after_step: pausing 0.2s" in capsys.readouterr().err
    fault_point("checkpoint.before_manifest")  # not named: returns at once, says nothing
    assert capsys.readouterr().err == ""


def test_without_the_variable_nothing_happens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    fault_point("trainer.after_step")
    assert capsys.readouterr().err == ""
