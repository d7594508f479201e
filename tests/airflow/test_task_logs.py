"""Ring 3: the task logs of example DAGs run by `airflow dags test` against a live dws-emulator hold no
error line that is not an error.

Every example's healthy run is checked for error lines where the suite runs it once, in
``test_dws_page_after_demo.py`` (with :func:`assert_no_error_lines`); here, a run that fails on
purpose.

Every healthy first try used to log ``[error] XCom not found ... key='dws_requests'`` (18 times in
``make demo``): the task SDK's supervisor logs each XCom the API server does not find at error level,
and the provider read its own records before it had any, a release's records and a release's console
link that never existed. A task that failed before its request existed added the same for its link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

#: An error-level line of the run's log (structlog's console format, as `airflow dags test` prints it).
ERROR_LINE = re.compile(r"^\S+ \[(error|critical)\s*\]", re.M)


#: An info-level line in the same format: a log with none is not in the format ERROR_LINE reads.
INFO_LINE = re.compile(r"^\S+ \[info\s*\]", re.M)


def error_lines(log: str) -> list[str]:
    """The run's error-level lines."""
    return [line for line in log.splitlines() if ERROR_LINE.match(line)]


def assert_no_error_lines(log: str) -> None:
    """``log`` is a run's log in structlog's console format, with no error-level line."""
    assert INFO_LINE.search(log), "no info line: the log is not in the format the error check reads"
    assert error_lines(log) == []


def test_a_task_that_failed_before_its_request_existed_reads_no_absent_link(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    """Vertex AI refuses the job (the emulator reads a run time that is not a number): the task fails
    with no job, so with no console link to store."""
    emulator = dws_emulator_factory()
    run = airflow_home.run_dag_test(
        "dws_vertex_flex_start", emulator.address, tmp_path / "run.log", conf={"run_seconds": "soon"}
    )
    assert run.returncode != 0
    assert "BadRequestError" in run.log, run.log[-4000:]
    # The failure's own error lines, and no read of the link the task never made.
    assert "XCom not found" not in run.log
