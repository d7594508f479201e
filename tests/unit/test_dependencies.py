"""Every library the provider imports is a declared dependency, and the README lists them all.

The imports are read from the source (``ast``), at module level and inside functions alike, plus
the ``"module:Name"`` strings the provider imports by name (its hooks' async client classes). A
pip install of the wheel brings only ``pyproject.toml``'s ``dependencies``: a library that merely
came with the development tree would be missing in a user's Airflow.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_provider_dws"

#: Imported module (longest prefix wins) -> the distribution that provides it.
DISTRIBUTIONS = {
    "airflow": "apache-airflow",
    "airflow.providers.google": "apache-airflow-providers-google",
    "airflow.providers.cncf.kubernetes": "apache-airflow-providers-cncf-kubernetes",
    "airflow.providers.common.compat": "apache-airflow-providers-common-compat",
    "asgiref": "asgiref",
    "croniter": "croniter",
    "fastapi": "fastapi",
    "google.api_core": "google-api-core",
    "google.auth": "google-auth",
    # google.auth's transport for the requests library needs that library, which google-auth
    # itself leaves to an extra.
    "google.auth.transport.requests": "requests",
    "google.cloud.aiplatform_v1": "google-cloud-aiplatform",
    "google.cloud.aiplatform_v1beta1": "google-cloud-aiplatform",
    "google.cloud.batch_v1": "google-cloud-batch",
    "google.cloud.compute_v1": "google-cloud-compute",
    "google.cloud.tpu_v2": "google-cloud-tpu",
    "google.longrunning": "googleapis-common-protos",
    "google.protobuf": "protobuf",
    "google_auth_httplib2": "google-auth-httplib2",
    "googleapiclient": "google-api-python-client",
    "httplib2": "httplib2",
    "grpc": "grpcio",
    "kubernetes": "kubernetes",
    "kubernetes_asyncio": "kubernetes-asyncio",
    "packaging": "packaging",
    "pendulum": "pendulum",
    "sqlalchemy": "sqlalchemy",
    "tenacity": "tenacity",
}

#: A ``"package.module:Name"`` string naming something outside the provider.
_BY_NAME = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+):[A-Za-z_]\w*$")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, set[str]]:
    """Module name -> the provider files importing it (absolute imports outside the provider)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # ``from google.cloud import compute_v1`` imports google.cloud.compute_v1.
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = _BY_NAME.match(node.value)
                names = [match.group(1)] if match else []
            for name in names:
                top = name.split(".")[0]
                if top == "airflow_provider_dws" or top in sys.stdlib_module_names:
                    continue
                found.setdefault(name, set()).add(where)
    return found


def _distribution(module: str) -> str | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        dist = DISTRIBUTIONS.get(".".join(parts[:end]))
        if dist is not None:
            return dist
    return None


def _declared() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def _needed() -> dict[str, set[str]]:
    needed: dict[str, set[str]] = {}
    unknown = []
    for module, files in _imported_modules().items():
        dist = _distribution(module)
        if dist is None:
            unknown.append(f"{module} ({', '.join(sorted(files))})")
            continue
        needed.setdefault(dist, set()).update(files)
    assert not unknown, f"imports with no known distribution: add them to DISTRIBUTIONS: {unknown}"
    return needed


def test_every_imported_library_is_a_declared_dependency() -> None:
    declared = {_normalize(re.match(r"[A-Za-z0-9_.-]+", req).group(0)) for req in _declared()}  # type: ignore[union-attr]
    missing = {dist: sorted(files) for dist, files in _needed().items() if _normalize(dist) not in declared}
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"


def test_the_scan_sees_function_level_and_by_name_imports() -> None:
    """The scan itself: imports inside functions and by name are found, not only module-level ones."""
    modules = _imported_modules()
    assert "airflow_provider_dws/plugins/web/app.py" in modules["fastapi.FastAPI"]
    assert "airflow_provider_dws/hooks/vertex_ai.py" in modules["google.cloud.aiplatform_v1"]


def test_the_readme_lists_every_dependency() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlisted = [req for req in _declared() if f"`{req}`" not in readme]
    assert not unlisted, (
        f"README.md's dependency list leaves out {unlisted} (write each as in pyproject.toml)"
    )
