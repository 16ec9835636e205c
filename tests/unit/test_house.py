"""bench/house.py's counting on small synthetic checkouts: cycles, upward imports, branches on
registry-selected names, shared lines of the Kafka twins, field spellings and README lines."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

HOUSE = Path(__file__).resolve().parents[2] / "bench" / "house.py"


@pytest.fixture(scope="module")
def house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_under_test", HOUSE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> Path:
    """The files, and the links rft/<folder> -> ../<folder> of the repository's own layout."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in ("producers", "consumers"):
        if (root / folder).is_dir() and (root / "rft").is_dir():
            (root / "rft" / folder).symlink_to(f"../{folder}")
    return root


def test_a_cycle_through_a_function_level_import_is_one_component(
    house: ModuleType, tmp_path: Path
) -> None:
    root = write(
        tmp_path,
        {
            "rft/__init__.py": "",
            "rft/engines/__init__.py": "",
            "rft/engines/a.py": "from rft.engines import b\n",
            "rft/engines/b.py": "def f():\n    from rft.engines.c import g\n",
            "rft/engines/c.py": "from . import a\ng = 1\n",
            "rft/engines/d.py": "import rft.engines.a\n",  # into the cycle, not part of it
        },
    )
    graph = house.import_graph(root)
    assert graph["rft.engines.c"] == {"rft.engines.a"}  # the relative import resolved
    assert house.cycles(graph) == [["rft.engines.a", "rft.engines.b", "rft.engines.c"]]


def test_imports_up_a_layer_are_listed_and_imports_down_are_not(
    house: ModuleType, tmp_path: Path
) -> None:
    root = write(
        tmp_path,
        {
            "rft/__init__.py": "",
            "rft/errors.py": "",
            "rft/config/__init__.py": "from rft.errors import x\nfrom rft.engines import rollout\n",
            "rft/engines/__init__.py": "",
            "rft/engines/rollout.py": "from rft.config import y\n",
            "producers/__init__.py": "",
            "producers/publish.py": "import rft.consumers.explorer.explorer\nimport rft.engines.rollout\n",
            "consumers/__init__.py": "",
            "consumers/explorer/__init__.py": "",
            "consumers/explorer/explorer.py": "from rft.producers import publish\n",
        },
    )
    graph = house.import_graph(root)
    assert house.upward_imports(graph) == [
        ("rft.config", "rft.engines.rollout"),
        ("rft.producers.publish", "rft.consumers.explorer.explorer"),
    ]
    assert house.layer_of("rft.catalog.parts") > house.layer_of("rft.consumers.explorer.explorer")
    assert house.layer_of("rft.registry") < house.layer_of("rft.config.schema")


REGISTRY_MODULE = """
from rft.registry import Registry
ENGINES = Registry("explorer.rollout_model.engine_type")

@ENGINES.register("hf")
def hf(): ...

ENGINES.lazy("vllm", "rft.engines.vllm:make")
PACKAGES = {"vllm": "pip install vllm"}

class Section:
    @property
    def engine_name(self):
        return self.engine_type
"""

USER_MODULE = """
def plan(cfg, rm):
    if rm.engine_type == "vllm":            # 1: a comparison
        pass
    if cfg.section.engine_name in ("hf", "other"):  # 2: through the property, in a tuple
        pass
    match rm.engine_type:                   # 3: a match
        case "hf":
            pass
    extra = PACKAGES.get(rm.engine_type)    # 4: a lookup in a dict keyed by names
    if rm.engine_type == "not-a-name":      # not a registered name: not counted
        pass
    if rm.other == "vllm":                  # not a selector key: not counted
        pass
"""

OWN_MODULE = """
def make(cfg):
    if cfg.engine_type == "vllm":  # the entry's own module: its business
        pass
"""


def test_branches_on_registry_names_outside_the_entry_are_counted(
    house: ModuleType, tmp_path: Path
) -> None:
    root = write(
        tmp_path,
        {
            "rft/__init__.py": "",
            "rft/engines/__init__.py": "",
            "rft/engines/rollout.py": REGISTRY_MODULE,
            "rft/engines/vllm.py": OWN_MODULE,
            "consumers/__init__.py": "",
            "consumers/plan.py": "from rft.engines.rollout import PACKAGES\n" + USER_MODULE,
        },
    )
    trees = {m: house._parse(p) for m, p in house.module_files(root).items()}
    facts = house.registry_facts(trees)
    assert facts.names_by_key["engine_type"] == {"hf", "vllm"}
    assert facts.names_by_key["engine_name"] == {"hf", "vllm"}
    found = house.name_branches(trees, facts)
    assert all(b.module == "rft.consumers.plan" for b in found)
    assert [b.names for b in found] == [("vllm",), ("hf",), ("hf",), ("vllm",)]
    # the dict literal itself, in the registry's module, is no lookup
    assert house.measure(root)["branches"] == found


def test_shared_lines_spellings_and_readme(house: ModuleType, tmp_path: Path) -> None:
    common = ["def poll(self):", "    return self.fetch()", "", ")"]
    left = ["import confluent_kafka", *common, "x = 1"]
    right = ["import kafka", *common, "y = 2"]
    experience = {"name": "Experience", "fields": [{"name": "task_id"}, {"name": "reward"}]}
    old = {"name": "Experience", "fields": [{"name": "gone"}]}
    task = {"name": "Task", "fields": [{"name": "task_id"}]}
    root = write(
        tmp_path,
        {
            "rft/__init__.py": "",
            "rft/events/__init__.py": "",
            "rft/events/kafka_confluent.py": "\n".join(left) + "\n",
            "rft/events/kafka_python.py": "\n".join(right) + "\n",
            "rft/events/models.py": "task_id = 1\nreward = task_id\nmy_task_id = 2\n",
            "schemas/experience.v1.avsc": json.dumps(old),
            "schemas/experience.v2.avsc": json.dumps(experience),
            "schemas/task.v1.avsc": json.dumps(task),
            "README.md": "# title\n\ntext\n",
        },
    )
    # the two code lines in common count; the blank line and the lone bracket do not
    assert house.shared_lines("\n".join(left), "\n".join(right)) == 2
    measured = house.measure(root)
    assert measured["twin_lines"] == 2
    # newest schema only; whole words only (my_task_id is not task_id)
    assert measured["experience_spellings"] == {"task_id": 2, "reward": 1}
    assert measured["task_spellings"] == {"task_id": 2}
    assert measured["readme_lines"] == 3
    assert measured["cycles"] == [] and measured["upward"] == []
