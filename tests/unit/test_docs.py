"""The documentation stays true to the code: the site builds, and its examples still run.

* The site (``mkdocs.yml``, what ``make docs`` builds) builds with ``--strict``: a broken link or
  anchor between pages, a missing include or an unreadable docstring fails it. Marked ``slow``
  (``tests/conftest.py``'s ``SLOW_NODES``): it takes longer than the rest of this file.
* Every Python example of ``README.md`` and ``docs/`` compiles; an example that is a whole DAG file
  (``with DAG(...)``) runs, with the provider, and builds its DAG; the front page's DAG is checked
  for what the README says of it.
* Every operator the docs name is one the provider defines, or one of Airflow's own.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _examples() -> list[tuple[str, str]]:
    """(``file:line``, code) of every ```python block."""
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2  # the block's first line of code
            found.append((f"{path.relative_to(ROOT)}:{line}", match.group(1)))
    return found


EXAMPLES = _examples()
DAG_FILES = [(where, code) for where, code in EXAMPLES if re.search(r"^with DAG\(", code, re.MULTILINE)]


def _build_dags(where: str, code: str) -> list[Any]:
    """Run a whole-DAG-file example and return its DAGs: each top-level ``with DAG(...):`` gets an
    ``as`` name (the examples leave it out, as DAG files may), so the DAG can be read back."""
    tree = ast.parse(code, filename=where)
    names = []
    for node in tree.body:
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                is_dag = (
                    isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "DAG"
                )
                if is_dag and item.optional_vars is None:
                    names.append(f"_docs_dag_{len(names)}")
                    item.optional_vars = ast.Name(id=names[-1], ctx=ast.Store())
    namespace: dict[str, Any] = {"__name__": f"docs_example_{len(names)}"}
    exec(compile(ast.fix_missing_locations(tree), where, "exec"), namespace)
    return [namespace[name] for name in names]


def test_the_examples_were_found() -> None:
    assert len(EXAMPLES) >= 15
    assert any(where.startswith("README.md:") for where, _ in DAG_FILES)


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_python_example_compiles(where: str, code: str) -> None:
    compile(code, where, "exec")


@pytest.mark.parametrize(("where", "code"), DAG_FILES, ids=[where for where, _ in DAG_FILES])
def test_every_dag_file_example_builds_its_dag(where: str, code: str) -> None:
    dags = _build_dags(where, code)
    assert dags, f"{where}: no DAG built"
    from airflow.sdk import DAG

    assert all(isinstance(dag, DAG) for dag in dags)


def test_the_front_page_dag_is_what_the_readme_says() -> None:
    """The README's minimal DAG: one Cloud Batch task on a3-highgpu-8g, 2 h max wait, 6 h max run,
    deferred; built by the provider's own operator, its parse-time checks passed."""
    (where, code) = next((w, c) for w, c in DAG_FILES if w.startswith("README.md:"))
    (dag,) = _build_dags(where, code)
    from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

    (task,) = dag.tasks
    assert isinstance(task, CreateBatchFlexStartJobOperator)
    assert task.machine_type == "a3-highgpu-8g" and task.deferrable is True
    assert task.max_wait == timedelta(hours=2) and task.max_run == timedelta(hours=6)
    # "five lines": the DAG itself, imports aside, stays that short.
    body = [line for line in code.splitlines() if line.strip() and not line.startswith(("from ", "import "))]
    assert len(body) <= 5, body


#: Operators the docs name that are not the provider's: Airflow's, other providers', and one former
#: name a dated benchmark run used.
FOREIGN_OPERATORS = {
    "BaseOperator",
    "BashOperator",
    "TriggerDagRunOperator",
    "CreateCustomJobOperator",
    "KubernetesJobOperator",
    "KubernetesPodOperator",
    "SomeOperator",
    "FlexStartCustomJobOperator",
    # apache-airflow-providers-google's, compared with in docs/operators/vertex-ai-inference.md.
    "CreateBatchPredictionJobOperator",
    "DeployModelOperator",
}


def test_every_operator_the_docs_name_exists() -> None:
    defined = set()
    for path in (ROOT / "airflow_provider_dws").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    named: dict[str, set[str]] = {}
    for path in SOURCES:
        for name in re.findall(r"\b[A-Z][A-Za-z0-9]*Operator\b", path.read_text(encoding="utf-8")):
            named.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    unknown = {
        name: sorted(files) for name, files in named.items() if name not in defined | FOREIGN_OPERATORS
    }
    assert not unknown, f"the docs name operators the provider does not define: {unknown}"


def test_the_site_builds_with_no_broken_link(tmp_path: Path) -> None:
    """``make docs``'s build, strict. (No ``-q``: MkDocs counts only the warnings it prints.)"""
    pytest.importorskip("mkdocs")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert (tmp_path / "index.html").is_file() and (
        tmp_path / "reference" / "operators" / "index.html"
    ).is_file()
    # The front page is the README, and the price table's help is included, not lost.
    assert "Which operator for which surface and mode" in (tmp_path / "index.html").read_text(
        encoding="utf-8"
    )
    assert "[dws_prices]" in (tmp_path / "savings" / "index.html").read_text(encoding="utf-8")
