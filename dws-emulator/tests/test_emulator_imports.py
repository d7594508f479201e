"""The emulator's layering, read from its source: the core imports no API package, and no cycles.

Every ``import`` statement counts, function-local and ``TYPE_CHECKING`` ones included: a cycle
hidden in a function is still a cycle between the modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dws_emulator as emulator_package

ROOT = Path(emulator_package.__file__).parent
PREFIX = "dws_emulator"
API_PACKAGES = ("vertex", "tpu", "batch", "compute", "calendar", "kube", "vertex_inference")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PREFIX, *parts])


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The emulator modules ``name`` imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def test_the_walk_sees_the_packages() -> None:
    edges = graph()
    assert f"{PREFIX}.core.state" in edges
    assert f"{PREFIX}.core.capacity" in edges[f"{PREFIX}.core.state"]
    assert f"{PREFIX}.vertex.state" in edges[f"{PREFIX}.state"]


def test_the_core_imports_no_api_package_and_nothing_above_it() -> None:
    core = f"{PREFIX}.core"
    bad = {
        (name, target)
        for name, targets in graph().items()
        if name == core or name.startswith(core + ".")
        for target in targets
        if not (target == core or target.startswith(core + "."))
    }
    assert not bad, f"core modules import outside the core: {sorted(bad)}"


def test_api_packages_do_not_import_each_other() -> None:
    def api_of(name: str) -> str | None:
        rest = name.removeprefix(PREFIX + ".").split(".")[0]
        return rest if rest in API_PACKAGES else None

    bad = {
        (name, target)
        for name, targets in graph().items()
        for target in targets
        if api_of(name) and api_of(target) and api_of(name) != api_of(target)
    }
    assert not bad, f"API packages import each other: {sorted(bad)}"


def test_no_import_cycles_among_emulator_modules() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(edges[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def imported_names(path: Path) -> set[str]:
    """Every absolute module ``path`` imports, at any depth (module level, functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            found.update(
                a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            )
    return found


def test_the_walk_sees_an_import_inside_a_function() -> None:
    seen = imported_names(ROOT / "testing" / "__init__.py") | imported_names(ROOT / "cli.py")
    assert "threading" in seen and "grpc" in seen


def test_no_module_imports_the_provider() -> None:
    """The emulator knows each API from Google's documents, never from its client's tables."""
    bad = {
        (name, target)
        for name, path in modules().items()
        for target in imported_names(path)
        if target == "airflow_provider_dws" or target.startswith("airflow_provider_dws.")
    }
    assert not bad, f"emulator modules import the provider: {sorted(bad)}"


def test_relative_imports_stay_inside_the_package() -> None:
    """``from ... import`` above ``dws_emulator`` would reach whatever package it is installed beside."""
    escaping = []
    for name, path in modules().items():
        depth = name.count(".") + (1 if path.name == "__init__.py" else 0)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level > depth:
                escaping.append(f"{name}: {'.' * node.level}{node.module or ''}")
    assert not escaping, f"relative imports leave the package: {escaping}"
