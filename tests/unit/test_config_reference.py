"""docs/configuration.md is the reference rendered from the config dataclasses, and it is current."""

from __future__ import annotations

from pathlib import Path

from rft.catalog.part_keys import parts_keys
from rft.cli.main import main
from rft.config.key_fates import ignored_keys, implemented_keys
from rft.config.reference import PAGE_PATH, render

ROOT = Path(__file__).resolve().parents[2]


def test_committed_reference_page_is_current() -> None:
    committed = (ROOT / PAGE_PATH).read_text(encoding="utf-8")
    assert committed == render(parts_keys()), (
        f"{PAGE_PATH} is stale: run `rft config reference > {PAGE_PATH}`"
    )


def test_reference_describes_every_key_with_its_fate() -> None:
    page = render(parts_keys())
    rows = {
        line.split(" | ")[0].strip("| `") for line in page.splitlines() if line.startswith("| `")
    }
    for path, fate in implemented_keys():
        assert path.rsplit(".", 1)[-1] in rows, f"{path} has no row"
        assert f"`{fate.acts_in}` | `{fate.shown_by}`" in page, f"{path}: fate not shown"
    for path, _ in ignored_keys():
        assert f"- `{path.rsplit('.', 1)[-1]}`: " in page, f"ignored key {path} not listed"


def test_reference_shows_environment_defaults_not_this_machines(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RFT_KAFKA_BOOTSTRAP", "broker.example:1234")
    monkeypatch.setenv("RFT_TRACE_EXPORTER", "console")
    page = render(parts_keys())
    assert "broker.example" not in page
    assert "$RFT_KAFKA_BOOTSTRAP, else 127.0.0.1:39092" in page
    assert "$RFT_TRACE_EXPORTER, else none" in page


def test_rft_config_reference_prints_the_page(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["config", "reference"]) == 0
    assert capsys.readouterr().out == render(parts_keys())
