"""The parse-cost benchmark's child runs Airflow's own parse: keep that call working.

``benchmarks/parse_cost.py`` gates on a child that calls the dag-processor's private
``_parse_file``; if an Airflow upgrade changes it, this fails here instead of in a benchmark run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "parse_cost.py"


@pytest.fixture(scope="module")
def parse_cost():
    spec = importlib.util.spec_from_file_location("parse_cost_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(autouse=True)
def _restore_process_context(monkeypatch):
    # The child sets it as the dag-processor's child does; this process must get its value back.
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "client")


def test_every_row_parses_as_the_dag_processor_parses_it(parse_cost, tmp_path, monkeypatch):
    # Whether each row parses, not how fast: Airflow's 30 s import timeout is not this test's limit.
    # The google provider's row imports all of google.cloud.aiplatform, from source in a fresh
    # clone (no bytecode written), which took over 30 s beside two other test workers.
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "600")
    for index, row in enumerate(parse_cost.ROWS):
        if row.name.startswith("google ") and not _has_custom_job_operator():
            continue  # a reference row only: its operator is newer than the oldest google provider allowed
        path = tmp_path / f"row{index}.py"
        path.write_text(parse_cost.dag_source(row, f"row{index}"))
        parse_cost._airflow_parse(str(path))  # raises unless the DAG serialized without import errors


def _has_custom_job_operator() -> bool:
    from airflow.providers.google.cloud.operators.vertex_ai import custom_job

    return hasattr(custom_job, "CreateCustomJobOperator")


def test_a_broken_dag_file_is_not_counted_as_a_parse(parse_cost, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from airflow.sdk import DAG\nraise RuntimeError('no')\n")
    with pytest.raises(RuntimeError, match="did not parse"):
        parse_cost._airflow_parse(str(path))
