"""Layers that import only downward: the provider's import graph, read from its source with ``ast``.

Every import counts, at module level and inside functions alike (a function-level import is how a
module stays cheap to parse, not a way around the layers), relative imports resolved; so does every
use of a :mod:`airflow_provider_dws.registry` entry, the one place a ``"module:Name"`` string
routes a class or function that must load lazily: a module naming an entry depends on the module
the entry names. Imports under ``if TYPE_CHECKING:`` run only for the type checker and are left
out (:data:`TYPE_ONLY` says why and counts them apart).

The layer table is :data:`LAYERS`, top to bottom; ``docs/architecture.md`` shows the same table
(a test compares them). A module may import its own layer or any layer below, never one above,
and no two modules may import each other, directly or round a loop.

Run this file as a script to print the graph's edges per layer pair and its cycles:
``python tests/unit/test_layers.py``.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_dws"
#: Not part of the provider's graph: the emulator is its own program (and is leaving the package).
EXCLUDED = (f"{PACKAGE}.emulator",)
REGISTRY = f"{PACKAGE}.registry"

#: The layers, top to bottom: (layer, the modules or packages in it, relative to the package).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry points", ("", "get_provider_info", "plugins", "timetables")),
    ("operators", ("operators",)),
    ("runtime", ("runtime",)),
    ("triggers", ("triggers",)),
    ("registry", ("registry",)),
    ("backends", ("backends",)),
    ("hooks", ("hooks",)),
    ("specs", ("specs",)),
    (
        "base",
        (
            "scheduling",
            "records",
            "savings",
            "upfront",
            "forecast",
            "wait_history",
            "carbon",
            "metrics",
            "links",
            "console",
            "catalog",
            "facts",
            "errors",
            "exceptions",
            "patterns",
            "compat",
        ),
    ),
)

#: Why imports under ``if TYPE_CHECKING:`` are not edges: they never run, so they cannot make a
#: module load another or an import loop; they let an adapter name its operator's class in a type.
TYPE_ONLY = "imports under `if TYPE_CHECKING:` run only for the type checker"


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the provider (but :data:`EXCLUDED`) by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not name.startswith(EXCLUDED):
            found[name] = path
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (the longest matching entry)."""
    relative = module[len(PACKAGE) + 1 :] if module != PACKAGE else ""
    best, best_len = -1, -1
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            matches = relative == member or (member and relative.startswith(member + "."))
            if matches and len(member) > best_len:
                best, best_len = index, len(member)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it to the table (and the docs)")
    return best


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST, type_only: bool = False) -> Iterator[ast.AST]:
    """Every node of ``tree`` but what sits under ``if TYPE_CHECKING:`` (with ``type_only``: those too)."""
    for node in ast.iter_child_nodes(tree):
        if not type_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield child
                yield from _nodes(child)
            continue
        yield node
        yield from _nodes(node, type_only)


def registry_entries(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each registry entry (a module-level name of ``registry.py``) -> the modules its strings name."""
    path = known.get(REGISTRY)
    if path is None:
        return {}
    entries: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                named = {s.partition(":")[0] for s in _route_strings(value)}
                if named:
                    entries[target.id] = named
    return entries


def _route_strings(tree: ast.AST) -> list[str]:
    """The ``"airflow_provider_dws.x:Name"`` strings in ``tree``."""
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(rf"{PACKAGE}(\.\w+)*:\w*", node.value)
    ]


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The deepest module of the provider that ``name`` (a module or a name in one) falls in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the provider modules it imports (see the module's docstring); with ``type_only``,
    the imports under ``if TYPE_CHECKING:`` too."""
    known = modules(root)
    entries = registry_entries(known)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: list[str] = []
        uses_registry = module == REGISTRY
        names: set[str] = set()
        for node in _nodes(tree, type_only):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets += [f"{base}.{alias.name}" for alias in node.names]
                if base == REGISTRY or (base == PACKAGE and any(a.name == "registry" for a in node.names)):
                    uses_registry = True
                    names |= {alias.asname or alias.name for alias in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
        if module != REGISTRY:  # the registry's own strings are edges of the modules that use them
            targets += [s.partition(":")[0] for s in _route_strings(tree)]
        if uses_registry:
            for entry in names & entries.keys():
                targets += entries[entry]
        resolved = {_resolve(t, known) for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}
        graph[module] = {t for t in resolved if t is not None and t != module}
    return graph


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a layer above the importer's: ``a -> b (layer -> layer above)``."""
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            low, high = layer_of(module), layer_of(target)
            if high < low:
                found.append(f"{module} -> {target} ({LAYERS[low][0]} -> {LAYERS[high][0]})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import each other round a loop (a strongly connected component of
    more than one module), as one loop through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iteratively (the graph may be deeper than the recursion limit).
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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
                        found.append(_loop_through(sorted(component), graph))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _loop_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest loop from the component's first module back to itself, for the report."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, ())):
            if child == start:
                return [*paths[node], start]
            if child in members and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    return component  # pragma: no cover - a component always has a loop through each member


def edge_counts(graph: dict[str, set[str]]) -> Counter[tuple[str, str]]:
    """Edges per (importer's layer, imported layer)."""
    return Counter(
        (LAYERS[layer_of(a)][0], LAYERS[layer_of(b)][0]) for a, targets in graph.items() for b in targets
    )


# -- the tests -------------------------------------------------------------------------------------


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = upward_edges(import_graph())
    assert upward == [], "imports upward:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(loop) for loop in found)


def test_type_only_imports_go_up_only_from_runtime_to_the_operators_classes() -> None:
    # The one exception the graph leaves out (TYPE_ONLY): an adapter or a release names the
    # operator it serves in its types. Nothing else may reach upward, even for the type checker.
    upward = upward_edges(import_graph(type_only=True))
    others = [edge for edge in upward if not edge.endswith("(runtime -> operators)")]
    assert others == [], "type-only imports upward:\n" + "\n".join(others)


def test_every_module_is_in_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_module_name_strings_live_only_in_the_registry() -> None:
    outside = {
        f"{name}: {string}"
        for name, path in modules().items()
        if name != REGISTRY
        for string in _route_strings(ast.parse(path.read_text()))
    }
    assert outside == set(), "route a lazy class through a registry entry instead:\n" + "\n".join(
        sorted(outside)
    )


def test_every_registry_entry_names_something_that_exists() -> None:
    from airflow_provider_dws import registry

    for entry in registry_entries(modules()):
        value = getattr(registry, entry)
        for target in value.values() if isinstance(value, dict) else [value]:
            assert callable(registry.load(target)), f"registry.{entry}: {target}"


def test_the_docs_show_the_same_layer_table() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+?) \| ([^|]+?) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(re.findall(r"`([^`]*)`", members))) for _, name, members in rows]
    expected = [(name, tuple(m if m else PACKAGE for m in members)) for name, members in LAYERS]
    assert documented == expected


def test_the_graph_sees_function_level_registry_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    for sub in ("operators", "runtime"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "registry.py").write_text(f'ADAPTER = "{PACKAGE}.operators.b:B"\n')
    (package / "runtime" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..operators import c\n"
        "def f():\n    from ..operators import b\n"
    )
    (package / "runtime" / "r.py").write_text(f"from {PACKAGE} import registry\nX = registry.ADAPTER\n")
    (package / "operators" / "b.py").write_text(f"import {PACKAGE}.runtime.a\n")
    (package / "operators" / "c.py").write_text("")
    graph = import_graph(tmp_path)
    assert graph[f"{PACKAGE}.runtime.a"] == {f"{PACKAGE}.operators.b"}
    assert graph[f"{PACKAGE}.runtime.r"] == {f"{PACKAGE}.registry", f"{PACKAGE}.operators.b"}
    assert cycles(graph) == [[f"{PACKAGE}.operators.b", f"{PACKAGE}.runtime.a", f"{PACKAGE}.operators.b"]]
    assert len(upward_edges(graph)) == 2
    typed = import_graph(tmp_path, type_only=True)[f"{PACKAGE}.runtime.a"]
    assert typed == {f"{PACKAGE}.operators.b", f"{PACKAGE}.operators.c"}


if __name__ == "__main__":
    GRAPH = import_graph()
    for (importer, imported), count in sorted(edge_counts(GRAPH).items()):
        print(f"{importer:>14} -> {imported:<14} {count}")
    print("\n".join(upward_edges(GRAPH)))
    LOOPS = cycles(GRAPH)
    print(f"{len(LOOPS)} cycle(s)")
    for LOOP in LOOPS:
        print(" -> ".join(LOOP))
    sys.exit(1 if LOOPS or upward_edges(GRAPH) else 0)
