"""README.md stays a front door: short, and every link it makes into the repository resolves
(mkdocs build --strict checks the links inside docs/; the README is outside its docs_dir)."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slugify(h.replace("`", ""), "-") for h in HEADING.findall(text)}


def test_readme_is_at_most_150_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_readme_links_resolve() -> None:
    links = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t]
    assert links, "the README links into docs/"
    for target in links:
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.is_file(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in anchors(page), f"README links to {target}: no such heading"
