"""The scheduling modules are imported at every DAG parse: stdlib only, no cycles, small files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import airflow_provider_dws
from tests.probe import Probe

PACKAGE = Path(airflow_provider_dws.__file__).parent
SCHEDULING = sorted(p for p in (PACKAGE / "scheduling").glob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_scheduling_imports_nothing_but_the_stdlib(probe: Probe) -> None:
    names = [module_name(p) for p in SCHEDULING]
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"for name in {names!r}:\n"
        "    __import__(name)\n"
        # _sysconfigdata_* is the stdlib's sysconfig data (zoneinfo reads its search path)
        "new = {m.split('.')[0] for m in set(sys.modules) - before if not m.startswith('_sysconfigdata_')}\n"
        "print(json.dumps(sorted(new - set(sys.stdlib_module_names))))\n"
    )
    out = probe.run(code).check()
    assert json.loads(out.stdout) == ["airflow_provider_dws"]


def module_level_imports(path: Path) -> set[str]:
    """The provider modules ``path`` imports at module level (not in functions or TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("airflow_provider_dws")
        ):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("airflow_provider_dws"))
    return found


def test_no_import_cycles_and_no_long_files() -> None:
    mine = [*SCHEDULING, *(PACKAGE / "timetables").glob("*.py"), *(PACKAGE / "plugins").glob("*.py")]
    graph = {module_name(p): module_level_imports(p) for p in mine}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done or name not in graph:
            return
        for dep in graph[name]:
            visit(dep, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())
    long = {p.name: n for p in mine if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
