"""Python 3.10 and the import rule, checked on the source: no provider module uses an asyncio or
exception API newer than 3.10, and the modules operators import at DAG-parse time import no Google
client, grpc, providers-google or the emulator."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_dws"
PROVIDER = sorted(PACKAGE.rglob("*.py"))
#: asyncio names that arrived in 3.11 (asyncio.timeout raised AttributeError in every wait on 3.10).
NEWER_ASYNCIO = {"timeout", "timeout_at", "TaskGroup", "Timeout", "Runner"}
NEWER_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
PARSE_TIME = ("backends", "hooks", "triggers", "links", "operators", "scheduling", "timetables", "plugins")
FORBIDDEN = ("google", "grpc", "airflow.providers.google", "dws_emulator", "kubernetes")


def newer_than_310(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if type(node).__name__ == "TryStar":  # except* (only parses on 3.11+)
            found.append(f"line {node.lineno}: except*")
        elif isinstance(node, ast.Attribute) and node.attr in NEWER_ASYNCIO:
            if isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"line {node.lineno}: asyncio.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            found += [
                f"line {node.lineno}: from asyncio import {a.name}"
                for a in node.names
                if a.name in NEWER_ASYNCIO
            ]
        elif isinstance(node, ast.Name) and node.id in NEWER_BUILTINS:
            found.append(f"line {node.lineno}: {node.id}")
    return found


def test_the_scan_finds_what_it_looks_for() -> None:
    source = "import asyncio\nasync def f():\n    async with asyncio.timeout(1):\n        pass\n"
    source += "from asyncio import TaskGroup\nraise ExceptionGroup('x', [])\n"
    assert len(newer_than_310(ast.parse(source))) == 3


@pytest.mark.parametrize("path", PROVIDER, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_api_newer_than_python_310(path: Path) -> None:
    assert newer_than_310(ast.parse(path.read_text())) == []


def module_level_imports(tree: ast.Module) -> list[str]:
    """Imports run when the module is imported: top level, and not under ``if TYPE_CHECKING:``."""
    names: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.append(node.module)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return names


PARSE_TIME_FILES = [p for p in PROVIDER if p.relative_to(PACKAGE).parts[0] in PARSE_TIME]


@pytest.mark.parametrize("path", PARSE_TIME_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_parse_time_modules_import_no_client_library(path: Path) -> None:
    imported = module_level_imports(ast.parse(path.read_text()))
    assert [
        m
        for m in imported
        if m == "grpc" or m.startswith(tuple(f + "." for f in FORBIDDEN)) or m in FORBIDDEN
    ] == []
