"""The house's measures for a checkout: how the code is laid out, not how fast it runs.

    python bench/house.py                      # this checkout
    python bench/house.py --before ../main     # a table with a column per checkout

Each measure is computed from the files alone (nothing is imported), so any checkout can be read:

- import cycles: strongly connected components (more than one module) of the module import graph
  of the root packages (rft, producers, consumers, schemas, infra). Every `import` and `from ...
  import` counts, also inside functions and under `if TYPE_CHECKING:`; `from pkg import name`
  counts as an import of `pkg.name` when that is a module, else of `pkg`.
- upward imports: edges of that graph from a lower layer to a higher one, in the order of
  pyproject's import contracts (LAYERS below): errors/schemas < registry < config < library <
  producers < consumers < catalog, supervisor, cli, infra, and inside the library stack,
  fault_points < tracing < events < algorithms, rewards, tools, synchronizer, storage, replay,
  datasets < engines, environments, buffer < workflows < serve, contact.
- name branches: code that decides by comparing a registry-selected config value with names of
  that registry, outside the entry's own module. The heuristic:
  1. registries are module-level `NAME = Registry(kind)`; the selector key of a registry is the
     last dotted part of its kind ("explorer.rollout_model.engine_type" -> engine_type), and so
     is any property whose last statement returns `self.<selector key>` (engine_name);
  2. a registry's names are the string literals registered with `@R.register("x")`,
     `R.add("x", ...)` and `R.lazy("x", ...)`; the module of an entry is the module that
     registers it (for `lazy`, also the target module);
  3. a branch is (a) a comparison (==, !=, in, not in) of an expression ending in a selector key
     (`cfg.trainer.trainer_type`, `engine_type`) with a string literal (or a tuple/list/set of
     them) that is a name of a registry of that key; (b) a `match` on such an expression with
     such a literal as a case; (c) a subscript or `.get()` by such an expression of a dict
     written as a module-level literal (in any module) whose keys include such names. A branch in a module that registers the
     compared name is the entry's own business and not counted.
- Kafka client twins: lines that rft/events/kafka_confluent.py and kafka_python.py share
  (difflib's matching blocks over stripped lines; blank lines and lone brackets not counted).
- event field spellings: for the fields of the newest Experience and Task schemas in schemas/,
  how often each name occurs as a word in rft/events/*.py (the sum, and the fields spelled most).
- README lines: lines of README.md.
- product size: the .py files of rft/, consumers/ and producers/ (the package links inside rft/
  not followed twice) and their lines; the largest module; modules over 500 lines; functions over
  80 lines and the longest one (from `def` to its last line).
- string trait lookups: calls `X.trait(...)` in the product code (registries' specs are typed
  fields since the registry's spec types: 0 is the aim).
- the part-check walk: lines of rft/catalog/parts.py, and of its longest function.
- duplicate pairs: the `duplicates` tool's count of pairs of places sharing six or more lines of
  the same shape, over a copy of the product code (only where the tool is on PATH).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT_PACKAGES = ("rft", "producers", "consumers", "schemas", "infra")

# Bottom to top, as in pyproject's [tool.importlinter] layers contracts (the library's order
# included). A module belongs to the layer of its longest matching prefix; an rft module that no
# layer names sits at the library's bottom.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("rft.errors", "schemas", "rft.schemas"),
    ("rft.registry",),
    ("rft.config",),
    ("rft", "rft.stack", "rft.fault_points"),  # the library, from here to serve and contact
    ("rft.tracing",),
    ("rft.events",),
    (
        "rft.algorithms",
        "rft.rewards",
        "rft.tools",
        "rft.synchronizer",
        "rft.storage",
        "rft.replay",
        "rft.datasets",
    ),
    ("rft.engines", "rft.environments", "rft.buffer"),
    ("rft.workflows",),
    ("rft.serve", "rft.contact"),
    ("producers", "rft.producers"),
    ("consumers", "rft.consumers"),
    ("rft.catalog", "rft.supervisor", "rft.cli", "infra", "rft.infra"),
)


def layer_of(module: str) -> int:
    """Index in LAYERS of the layer `module` belongs to (the longest matching prefix wins)."""
    best, best_len = 0, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


# ---- the import graph -------------------------------------------------------------------------


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file under the root packages. A top-level folder that
    `rft/` links to (rft/consumers -> ../consumers) ships as `rft.<folder>` and is named so; the
    links themselves are not walked twice."""
    modules = {}
    for package in ROOT_PACKAGES:
        base = root / package
        if not base.is_dir() or base.is_symlink():
            continue
        prefix = [package]
        if package != "rft" and (root / "rft" / package).is_symlink():
            prefix = ["rft", package]
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            if package == "rft" and (base / rel.parts[0]).is_symlink():
                continue
            parts = prefix + list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return None


def imports_of(module: str, tree: ast.AST, is_package: bool, known: set[str]) -> set[str]:
    """The known modules `module` imports (absolute and relative, at any depth of the file)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(_known_prefix(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.module, node.level)
            if base is None:
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else _known_prefix(base, known))
    found.discard("")
    found.discard(module)
    return found


def _absolute(module: str, is_package: bool, name: str | None, level: int) -> str | None:
    if level == 0:
        return name
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if not parts:
        return None
    return ".".join(parts + ([name] if name else []))


def _known_prefix(name: str, known: set[str]) -> str:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return ""


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the root packages it imports."""
    files = module_files(root)
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = _parse(path)
        is_package = path.name == "__init__.py"
        graph[module] = imports_of(module, tree, is_package, known) if tree is not None else set()
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, largest first (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found, key=lambda c: (-len(c), c))


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) where the imported module sits in a higher layer."""
    return sorted(
        (m, i) for m, targets in graph.items() for i in targets if layer_of(i) > layer_of(m)
    )


# ---- branches on registry-selected names --------------------------------------------------------


@dataclass
class RegistryFacts:
    """What the files say about registries: selector keys, names and where each is registered."""

    names_by_key: dict[str, set[str]] = field(default_factory=dict)
    modules_by_name: dict[str, set[str]] = field(default_factory=dict)


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _registry_kinds(tree: ast.Module) -> dict[str, str]:
    """Registry variable -> kind, for `NAME = Registry(kind)` / `NAME: ... = Registry(kind)`."""
    consts = _string_constants(tree)
    kinds = {}
    for names, value in _assignments(tree):
        if not (isinstance(value, ast.Call) and _callee(value.func) == "Registry" and value.args):
            continue
        arg = value.args[0]
        kind = (
            arg.value
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            else consts.get(arg.id)
            if isinstance(arg, ast.Name)
            else getattr(arg, "attr", None)
        )
        if isinstance(kind, str):
            kinds.update(dict.fromkeys(names, kind))
    return kinds


def _assignments(tree: ast.Module) -> Iterator[tuple[list[str], ast.expr]]:
    """(the names assigned, the value) of each module-level `a = b = value` / `a: T = value`."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            yield [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif (
            isinstance(node, ast.AnnAssign)
            and node.value is not None
            and isinstance(node.target, ast.Name)
        ):
            yield [node.target.id], node.value


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def selector_key(kind: str) -> str:
    """The config key that selects from a registry of `kind`: its last dotted part."""
    return kind.split(".")[-1].strip().split(" ")[-1]


def registry_facts(trees: dict[str, ast.Module]) -> RegistryFacts:
    facts = RegistryFacts()
    key_of: dict[str, str] = {}  # registry variable -> selector key
    for tree in trees.values():
        for variable, kind in _registry_kinds(tree).items():
            key_of[variable] = selector_key(kind)
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            if node.func.attr not in ("register", "add", "lazy") or not isinstance(owner, ast.Name):
                continue
            if owner.id not in key_of or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            name = first.value
            facts.names_by_key.setdefault(key_of[owner.id], set()).add(name)
            homes = facts.modules_by_name.setdefault(name, set())
            homes.add(module)
            if node.func.attr == "lazy" and len(node.args) > 1:
                target = node.args[1]
                if isinstance(target, ast.Constant) and isinstance(target.value, str):
                    homes.add(target.value.split(":")[0])
    # properties that hand a selector on: `def engine_name(self): ... return self.trainer_type`
    for tree in trees.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.body:
                continue
            last = node.body[-1]
            if (
                isinstance(last, ast.Return)
                and isinstance(last.value, ast.Attribute)
                and last.value.attr in facts.names_by_key
                and node.name not in facts.names_by_key
            ):
                facts.names_by_key[node.name] = set(facts.names_by_key[last.value.attr])
    return facts


def _selector(node: ast.expr, facts: RegistryFacts) -> str | None:
    """The selector key `node` reads (`x.engine_type` or a bare `engine_type`), if any."""
    if isinstance(node, ast.Attribute) and node.attr in facts.names_by_key:
        return node.attr
    if isinstance(node, ast.Name) and node.id in facts.names_by_key:
        return node.id
    return None


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


@dataclass(frozen=True)
class Branch:
    module: str
    line: int
    key: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.key} vs {', '.join(self.names)}"


def name_branches(trees: dict[str, ast.Module], facts: RegistryFacts) -> list[Branch]:
    branches = []
    dicts: dict[str, list[str]] = {}  # module-level dict literals, by name (usually imported)
    for tree in trees.values():
        dicts.update(_dict_literals(tree))
    for module, tree in trees.items():
        for node in ast.walk(tree):
            for key, names, line in _branch_sites(node, facts, dicts):
                named = tuple(
                    sorted(
                        n
                        for n in names
                        if n in facts.names_by_key[key]
                        and module not in facts.modules_by_name.get(n, set())
                    )
                )
                if named:
                    branches.append(Branch(module, line, key, named))
    return sorted(set(branches), key=lambda b: (b.module, b.line))


def _dict_literals(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level dicts written as literals, with their string keys."""
    found = {}
    for names, value in _assignments(tree):
        if isinstance(value, ast.Dict):
            keys = [
                k.value
                for k in value.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
            found.update(dict.fromkeys(names, keys))
    return found


def _branch_sites(
    node: ast.AST, facts: RegistryFacts, dicts: dict[str, list[str]]
) -> Iterable[tuple[str, list[str], int]]:
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            for i, side in enumerate(sides):
                key = _selector(side, facts)
                if key is None:
                    continue
                for j, other in enumerate(sides):
                    if j != i and _literals(other):
                        yield key, _literals(other), node.lineno
    elif isinstance(node, ast.Match):
        key = _selector(node.subject, facts)
        if key is not None:
            names = [
                p.value.value
                for case in node.cases
                for p in ast.walk(case.pattern)
                if isinstance(p, ast.MatchValue)
                and isinstance(p.value, ast.Constant)
                and isinstance(p.value.value, str)
            ]
            yield key, names, node.lineno
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        key = _selector(node.slice, facts)
        if key is not None and node.value.id in dicts:
            yield key, dicts[node.value.id], node.lineno
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in dicts
        and node.args
    ):
        key = _selector(node.args[0], facts)
        if key is not None:
            yield key, dicts[node.func.value.id], node.lineno


# ---- text measures --------------------------------------------------------------------------------

_TRIVIAL = re.compile(r"^[\s()\[\]{},:]*$")


def shared_lines(a: str, b: str) -> int:
    """Lines of `a` in difflib's matching blocks against `b` (stripped; blank/bracket-only not
    counted)."""
    left = [line.strip() for line in a.splitlines()]
    right = [line.strip() for line in b.splitlines()]
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    return sum(
        1
        for block in matcher.get_matching_blocks()
        for line in left[block.a : block.a + block.size]
        if not _TRIVIAL.match(line)
    )


def newest_schema_fields(schemas: Path, record: str) -> list[str]:
    """Field names of the highest version of `<record>.v<N>.avsc`."""
    versions = []
    for path in schemas.glob(f"{record}.v*.avsc"):
        match = re.fullmatch(rf"{record}\.v(\d+)\.avsc", path.name)
        if match:
            versions.append((int(match.group(1)), path))
    if not versions:
        return []
    data = json.loads(max(versions)[1].read_text(encoding="utf-8"))
    return [f["name"] for f in data.get("fields", [])]


def spellings(texts: Iterable[str], names: Iterable[str]) -> dict[str, int]:
    """How often each name occurs as a whole word in `texts`."""
    joined = "\n".join(texts)
    return {
        n: len(re.findall(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", joined))
        for n in names
    }


# ---- the report -----------------------------------------------------------------------------------


PRODUCT = ("rft", "consumers", "producers")


def product_files(root: Path) -> list[Path]:
    """The product's .py files, each once (rft/consumers etc. are links to the top folders)."""
    found: list[Path] = []
    for top in PRODUCT:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            inside = path.relative_to(base).parts
            if top == "rft" and inside and (base / inside[0]).is_symlink():
                continue
            found.append(path)
    return found


def size_facts(root: Path) -> dict[str, object]:
    """Files, lines, the largest module, long modules and functions, string trait lookups."""
    files = product_files(root)
    lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    functions: list[tuple[int, str]] = []
    traits = 0
    for path in files:
        tree = _parse(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((span, f"{path.relative_to(root)}:{node.name}"))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "trait"
            ):
                traits += 1
    largest = max(lines.items(), key=lambda kv: kv[1]) if lines else (root, 0)
    longest = max(functions) if functions else (0, "-")
    parts = root / "rft" / "catalog" / "parts.py"
    walk: tuple[int, int] = (0, 0)
    if parts.exists():
        spans = [
            (n.end_lineno or n.lineno) - n.lineno + 1
            for n in ast.walk(ast.parse(parts.read_text(encoding="utf-8")))
            if isinstance(n, ast.FunctionDef)
        ]
        walk = (len(parts.read_text(encoding="utf-8").splitlines()), max(spans, default=0))
    return {
        "files": len(files),
        "lines": sum(lines.values()),
        "largest": (largest[1], str(Path(largest[0]).relative_to(root)) if lines else "-"),
        "over_500": sum(1 for n in lines.values() if n > 500),
        "functions_over_80": sum(1 for span, _ in functions if span > 80),
        "longest_function": longest,
        "trait_lookups": traits,
        "part_walk": walk,
        "duplicate_pairs": duplicate_pairs(root, files),
    }


def duplicate_pairs(root: Path, files: list[Path]) -> int | None:
    """The `duplicates` tool's pair count over a copy of the product files (None: no tool)."""
    tool = shutil.which("duplicates")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            target = Path(tmp) / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        out = subprocess.run(
            [tool, "--repo", tmp, "--most", "1", "--seconds", "120"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    match = re.match(r"(\d+) pairs?", out)
    return int(match.group(1)) if match else 0


def measure(root: Path) -> dict[str, object]:
    graph = import_graph(root)
    trees = {m: t for m, p in module_files(root).items() if (t := _parse(p)) is not None}
    facts = registry_facts(trees)
    events = sorted((root / "rft" / "events").glob("*.py"))
    texts = [p.read_text(encoding="utf-8") for p in events]
    twins = [root / "rft" / "events" / f"kafka_{n}.py" for n in ("confluent", "python")]
    readme = root / "README.md"
    out: dict[str, object] = {
        "cycles": cycles(graph),
        "upward": upward_imports(graph),
        "branches": name_branches(trees, facts),
        "twin_lines": (
            shared_lines(*(p.read_text(encoding="utf-8") for p in twins))
            if all(p.exists() for p in twins)
            else None
        ),
        "readme_lines": len(readme.read_text(encoding="utf-8").splitlines())
        if readme.exists()
        else 0,
    }
    for record in ("experience", "task"):
        out[f"{record}_spellings"] = spellings(
            texts, newest_schema_fields(root / "schemas", record)
        )
    out["size"] = size_facts(root)
    return out


def _rows(m: dict[str, object]) -> list[tuple[str, str]]:
    def spelled(key: str) -> str:
        counts: dict[str, int] = m[key]  # type: ignore[assignment]
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
        return f"{sum(counts.values())} ({', '.join(f'{k} {v}' for k, v in top)})"

    cyc: list[list[str]] = m["cycles"]  # type: ignore[assignment]
    size: dict[str, Any] = m["size"]  # type: ignore[assignment]
    return [
        ("product files / lines", f"{size['files']} / {size['lines']:,}"),
        ("largest module", f"{size['largest'][0]:,} ({size['largest'][1]})"),
        ("modules > 500 lines", str(size["over_500"])),
        ("functions > 80 lines", str(size["functions_over_80"])),
        ("longest function", f"{size['longest_function'][0]} ({size['longest_function'][1]})"),
        ("string trait lookups", str(size["trait_lookups"])),
        (
            "part-check walk (parts.py lines; longest function)",
            f"{size['part_walk'][0]}; {size['part_walk'][1]}",
        ),
        ("duplicate pairs in product code", str(size["duplicate_pairs"])),
        (
            "import cycles (SCCs)",
            f"{len(cyc)} ({', '.join(str(len(c)) for c in cyc) or '-'} modules)",
        ),
        ("imports up a layer", str(len(m["upward"]))),  # type: ignore[arg-type]
        ("branches on a registry name", str(len(m["branches"]))),  # type: ignore[arg-type]
        ("kafka_confluent/kafka_python shared lines", str(m["twin_lines"])),
        ("Experience field spellings in rft/events", spelled("experience_spellings")),
        ("Task field spellings in rft/events", spelled("task_spellings")),
        ("README lines", str(m["readme_lines"])),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--before", type=Path, help="a checkout to show beside --root")
    parser.add_argument("--details", action="store_true", help="list cycles, edges and branches")
    args = parser.parse_args(argv)
    columns = [("before", args.before), ("after", args.root)] if args.before else [("", args.root)]
    measured = [(title, measure(path.resolve())) for title, path in columns]
    rows = [_rows(m) for _, m in measured]
    width = max(len(label) for label, _ in rows[0])
    cells = [
        max(len(title), *(len(v) for _, v in r))
        for (title, _), r in zip(measured, rows, strict=True)
    ]
    print(
        " " * width
        + "".join(f" | {title:<{w}}" for (title, _), w in zip(measured, cells, strict=True))
    )
    for i, (label, _) in enumerate(rows[0]):
        print(
            f"{label:<{width}}"
            + "".join(f" | {r[i][1]:<{w}}" for r, w in zip(rows, cells, strict=True))
        )
    if args.details:
        for title, m in measured:
            print(f"\n[{title or args.root}]")
            for c in m["cycles"]:  # type: ignore[attr-defined]
                print("cycle:", " ".join(c))
            for a, b in m["upward"]:  # type: ignore[attr-defined]
                print(f"up: {a} -> {b}")
            for branch in m["branches"]:  # type: ignore[attr-defined]
                print("branch:", branch)


if __name__ == "__main__":
    main()
