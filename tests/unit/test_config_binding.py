"""ConfigBinder: how YAML values bind onto list fields (a bare item reads as a list of one)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rft.config.binding import MISSING_VALUE, ConfigBinder, bounded


@dataclass
class Section:
    names: list[str] = field(default_factory=list)
    rates: list[float] = bounded([0.5], ge=0, lt=1)
    maybe: list[int] | None = None


def bind(data: dict) -> tuple[Section, ConfigBinder]:
    binder = ConfigBinder()
    return binder.bind(Section, data, "sec"), binder


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"names": "console"}, Section(names=["console"])),
        ({"names": ["console", "jsonl"]}, Section(names=["console", "jsonl"])),
        ({"rates": 0.25}, Section(rates=[0.25])),
        ({"rates": "0.25"}, Section(rates=[0.25])),  # `${oc.env:...}` yields text
        ({"maybe": 3}, Section(maybe=[3])),
        ({"maybe": None}, Section(maybe=None)),
    ],
)
def test_a_bare_item_binds_as_a_list_of_one(data: dict, expected: Section) -> None:
    section, binder = bind(data)
    assert binder.issues == []
    assert section == expected


def test_a_bad_bare_item_is_reported_at_the_key_written() -> None:
    section, binder = bind({"rates": 1.5, "maybe": "many"})
    assert section is MISSING_VALUE
    assert {(i.path, i.message.split(",")[0]) for i in binder.issues} == {
        ("sec.rates", "expected a value >= 0 and < 1"),
        ("sec.maybe", "expected an integer"),
    }


def test_a_mapping_is_not_a_list() -> None:
    section, binder = bind({"names": {"a": 1}})
    assert section is MISSING_VALUE
    assert [i.path for i in binder.issues] == ["sec.names"]
    assert "a list of a string" in binder.issues[0].message
