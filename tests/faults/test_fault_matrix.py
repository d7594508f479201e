"""The CI-sized fault matrix: one real Airflow deployment, the ``ci`` scenarios, every row must PASS.

``make faults`` runs every scenario; this test runs the subset that fits the CI budget (about
three minutes on two cores). It needs the local PostgreSQL server the matrix creates its
throwaway database on, and is skipped, saying so, when that server cannot be reached (outside
CI; under ``CI`` it fails instead, since CI provides the server).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults import matrix
from tests.faults.harness import HarnessError, probe_postgres

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]


@pytest.mark.timeout(600)
def test_ci_fault_matrix(tmp_path: Path) -> None:
    unreachable = probe_postgres()
    if unreachable:
        if os.environ.get("CI"):
            pytest.fail(f"CI provides PostgreSQL on 127.0.0.1:5432, but: {unreachable}")
        pytest.skip(f"the fault matrix needs PostgreSQL: {unreachable}")
    try:
        rows, report = matrix.run(ci=True, workdir=tmp_path)
    except HarnessError as err:
        pytest.fail(f"the fault-matrix deployment failed: {err} (logs in {tmp_path})")
    print(report)
    failed = [row.scenario for row in rows if not row.passed]
    assert not failed, f"FAIL: {', '.join(failed)} (logs in {tmp_path})\n{report}"
