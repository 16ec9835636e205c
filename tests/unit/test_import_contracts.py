"""The import contracts of pyproject.toml, each shown breaking on a violation written for it.

The package tree (its .py files, the folder links of rft/ kept) is copied once into a temporary
directory; each case adds a module or two holding one forbidden import, runs `lint-imports` on
the copy with the project's own configuration, and checks that exactly the contracts the import
offends are reported broken (some offend more than one: a writer importing a reader is also an
upward import and a cycle between the sibling packages). The real tree keeps every contract.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rft", "consumers", "producers", "schemas", "infra")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = [
    c["name"]
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
]


def contract(start: str) -> str:
    """The one contract whose name starts with `start`."""
    (name,) = [c for c in CONTRACTS if c.startswith(start)]
    return name


LAYERS = contract("Layers:")
LIBRARY = contract("The library's order")
WRITER = contract("A writer never imports a reader")
EXPLORER_TRAINER = contract("The explorer and the trainer")
PURE = contract("Algorithms are pure")
KAFKA = contract("Kafka's clients")
S3 = contract("The S3 client")
SQL = contract("SQLAlchemy")
RAY = contract("Ray")
VLLM = contract("vLLM")
OTEL = contract("OpenTelemetry")
ACYCLIC = contract("No import cycles")

TYPE_ONLY = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    {}\n"
IN_FUNCTION = "def load() -> None:\n    {}\n"

# (case, {module file in the copy: its text}, contracts it breaks)
VIOLATIONS = [
    (
        "the ground imports the top, under TYPE_CHECKING",
        {"rft/schemas/_violation.py": TYPE_ONLY.format("from rft.cli import main")},
        {LAYERS},
    ),
    (
        "a dataset reader imports an environment, under TYPE_CHECKING",
        {
            "rft/datasets/_violation.py": TYPE_ONLY.format(
                "from rft.environments.protocol import Environment"
            )
        },
        {LIBRARY},
    ),
    (
        "the event plane imports the engines",
        {"rft/events/_violation.py": "from rft.engines import rollout\n"},
        {LIBRARY, ACYCLIC},
    ),
    (
        "a producer imports a consumer",
        {"rft/producers/_violation.py": "from rft.consumers.metrics import sinks\n"},
        {LAYERS, WRITER, ACYCLIC},
    ),
    (
        "the explorer imports the trainer",
        {"rft/consumers/explorer/_violation.py": "from rft.consumers.trainer import checkpoint\n"},
        {EXPLORER_TRAINER, ACYCLIC},  # the trainer's folder reaches the explorer's through ops
    ),
    (
        "an algorithm reads events",
        {"rft/algorithms/_violation.py": "from rft.events import models\n"},
        {PURE},
    ),
    (
        "an algorithm opens a socket",
        {"rft/algorithms/_violation.py": "import socket\n"},
        {PURE},
    ),
    (
        "a consumer imports confluent_kafka",
        {"rft/consumers/replay/_violation.py": "import confluent_kafka\n"},
        {KAFKA},
    ),
    (
        "the event plane imports kafka-python beside its backend",
        {"rft/events/_violation.py": "from kafka import KafkaConsumer\n"},
        {KAFKA},
    ),
    (
        "the checkpoint store imports minio",
        {"rft/storage/_violation.py": "from minio import Minio\n"},
        {S3},
    ),
    (
        "a metric sink imports SQLAlchemy in a function",
        {"rft/consumers/metrics/_violation.py": IN_FUNCTION.format("import sqlalchemy as sa")},
        {SQL},
    ),
    (
        "the supervisor imports Ray in a function",
        {"rft/supervisor/_violation.py": IN_FUNCTION.format("import ray")},
        {RAY},
    ),
    (
        "an engine imports vLLM in a function",
        {"rft/engines/_violation.py": IN_FUNCTION.format("from vllm import LLM")},
        {VLLM},
    ),
    (
        "a workflow imports OpenTelemetry",
        {"rft/workflows/_violation.py": "from opentelemetry import trace\n"},
        {OTEL},
    ),
    (
        "two modules of one consumer folder import each other",
        {
            "rft/consumers/ops/_cycle_a.py": "from rft.consumers.ops import _cycle_b\n",
            "rft/consumers/ops/_cycle_b.py": "from rft.consumers.ops import _cycle_a\n",
        },
        {ACYCLIC},
    ),
]


def lint(root: Path) -> tuple[int, str, dict[str, str]]:
    """Exit status, output and each contract's verdict (KEPT / BROKEN) of lint-imports on the
    tree at `root`, with the configuration there."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "1000"}
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    flat = re.sub(r"\s+", " ", out)
    verdicts = {}
    for name in CONTRACTS:
        found = re.search(re.escape(name) + r" (KEPT|BROKEN)", flat)
        assert found, f"no verdict for {name!r} in:\n{out}"
        verdicts[name] = found.group(1)
    return done.returncode, out, verdicts


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package tree's .py files, and pyproject.toml."""
    root = tmp_path_factory.mktemp("tree")

    def others(folder: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n == "__pycache__" or not (n.endswith(".py") or Path(folder, n).is_dir())
        ]

    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, symlinks=True, ignore=others)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.fixture
def violation(tree: Path) -> Iterator[dict[str, str]]:
    """Files written into the copy for one case, removed after it."""
    written: dict[str, str] = {}
    yield written
    for relative in written:
        (tree / relative).unlink(missing_ok=True)


def test_the_real_tree_keeps_every_contract() -> None:
    code, out, verdicts = lint(ROOT)
    assert code == 0, out
    assert set(verdicts.values()) == {"KEPT"}, out
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in out


@pytest.mark.parametrize(
    ("files", "broken"), [(f, b) for _, f, b in VIOLATIONS], ids=[c for c, _, _ in VIOLATIONS]
)
def test_a_violation_breaks_exactly_its_contracts(
    tree: Path, violation: dict[str, str], files: dict[str, str], broken: set[str]
) -> None:
    for relative, text in files.items():
        (tree / relative).write_text(text)
        violation[relative] = text
    code, out, verdicts = lint(tree)
    assert code == 1, out
    assert {name for name, verdict in verdicts.items() if verdict == "BROKEN"} == broken, out
    assert any(Path(f).stem in out for f in files), out  # the report names the importer


def test_every_contract_is_shown_breaking() -> None:
    assert set().union(*(b for _, _, b in VIOLATIONS)) == set(CONTRACTS)
