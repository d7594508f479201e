"""Parsing a DAG file that uses the operators loads no Google client library, grpc or providers-google.

Each case runs in a fresh interpreter, and what it loads is compared with what a plain Airflow
DAG (``airflow.sdk`` and a ``BashOperator``) loads anyway: Airflow itself registers the installed
providers' ``get_provider_info`` and with it the bare ``google`` namespace packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "google.cloud.",
    "google.api_core",
    "google.auth",
    "google.protobuf",
    "google.type",
    "grpc",
    "airflow.providers.google.cloud",
    "airflow.providers.google.common",
    "kubernetes",
    "airflow_provider_dws.emulator",
    "airflow_provider_dws.backends.tpu",
    "airflow_provider_dws.backends.vertex_ai",
    "airflow_provider_dws.hooks",
)

_PROBE = """
import json, runpy, sys
import airflow.sdk
from airflow.providers.standard.operators.bash import BashOperator
before = set(sys.modules)
target = sys.argv[1]
if target.endswith(".py"):
    runpy.run_path(target)
else:
    __import__(target)
print(json.dumps(sorted(set(sys.modules) - before)))
"""

TARGETS = [
    "airflow_provider_dws.catalog",
    "airflow_provider_dws.operators.base",
    "airflow_provider_dws.operators.request",
    "airflow_provider_dws.operators.vertex_ai",
    "airflow_provider_dws.operators.tpu",
    "airflow_provider_dws.operators.tpu_release",
    "airflow_provider_dws.operators.vertex_pools",
    "airflow_provider_dws.operators.state",
    "airflow_provider_dws.links.vertex_ai",
    "airflow_provider_dws.links.tpu",
    *(str(p) for p in sorted((ROOT / "example_dags").glob("*.py"))),
]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: Path(t).name)
def test_importing_loads_no_client_library(target: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, target],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []
