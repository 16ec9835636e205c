"""What the wheel ships: one top-level package, `rft`, with the top-level folders inside it.

A wheel that installed packages named `consumers`, `producers`, `schemas` or `infra` would collide
with any other distribution using those names. The folders stay at the top of the repository and
ship through the links rft/<folder> -> ../<folder>; this reads pyproject's package discovery the
way setuptools does when it builds the wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("consumers", "producers", "schemas", "infra")


def shipped_packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    find = config["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT), include=find["include"])


def test_the_wheel_has_one_top_level_name() -> None:
    packages = shipped_packages()
    assert {p.split(".")[0] for p in packages} == {"rft"}
    for folder in FOLDERS:
        assert f"rft.{folder}" in packages
        assert (ROOT / "rft" / folder).is_symlink()
        assert (ROOT / "rft" / folder).resolve() == ROOT / folder


def test_every_consumer_folder_and_the_schemas_ship() -> None:
    packages = set(shipped_packages())
    folders = {p.name for p in (ROOT / "consumers").iterdir() if (p / "__init__.py").exists()}
    assert folders and {f"rft.consumers.{f}" for f in folders} <= packages
    assert any((ROOT / "rft" / "schemas").glob("*.avsc"))
