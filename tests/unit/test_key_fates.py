"""Every config field has a fate (the module acting on it and a test showing it), and every
Trinity-RFT key rft accepts without acting on is warned about with a reason."""

from __future__ import annotations

import re
from pathlib import Path

from rft.cli.main import main
from rft.config.key_fates import config_fields, ignored_keys, implemented_keys, key_fates

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_has_exactly_one_fate() -> None:
    fields = {key for key, _ in config_fields()}
    assert fields - set(key_fates()) == set(), (
        "fields without a fate: declare it with key(does=..., acts_in=..., shown_by=...)"
    )
    assert set(key_fates()) - fields == set(), "fates of fields that no longer exist"


def test_each_fate_names_a_module_and_a_test_that_mention_the_key() -> None:
    for key, fate in key_fates().items():
        field = key.split(".", 1)[1]
        word = re.compile(rf"\b{re.escape(field)}\b")
        for path in (fate.acts_in, fate.shown_by):
            file = ROOT / path
            assert file.is_file(), f"{key}: {path} does not exist"
            assert word.search(file.read_text(encoding="utf-8")), f"{key}: {path} never names it"
        assert fate.shown_by.startswith("tests/") and fate.does


def test_ignored_keys_are_not_fields_and_say_why() -> None:
    fields = {path.rsplit(".", 1)[-1] for _, path in config_fields()}
    for path, reason in ignored_keys():
        assert reason.strip(), f"{path}: no reason given"
        section_fields = {
            p.rsplit(".", 1)[-1]
            for _, p in config_fields()
            if p.rsplit(".", 1)[0] == path.rsplit(".", 1)[0]
        }
        assert path.rsplit(".", 1)[-1] not in section_fields, f"{path} is both a field and ignored"
    assert fields  # the walk found the config


def test_config_keys_prints_every_key(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["config", "keys"]) == 0
    out = capsys.readouterr().out
    for path, _ in implemented_keys():
        assert f"`{path}`" in out
    for path, _ in ignored_keys():
        assert f"`{path}` | ignored, with a warning" in out
