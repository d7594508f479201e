"""Ring 3: the wait forecast across real task runs. A first run of the Vertex AI example waits for
capacity the test holds back; a second run of the same shape, in the same Airflow deployment, reads
that wait from the wait history and says it in its task log at submit, with the most it can cost.

The example runs in a region no other test of the session uses, so the history it reads is its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.compat import MISSING_VARIABLE_LOGS_ERROR
from airflow_provider_dws.forecast import span
from airflow_provider_dws.records import parse_time
from tests.airflow.conftest import AirflowHome, finish, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_vertex_flex_start"
REGION = "europe-west4"
H100 = f"{REGION}/NVIDIA_H100_80GB"
PRICES = {"NVIDIA_H100_80GB": {"flex_start": 2.5, "standard": 5.0, "spot": 1.5}, "_as_of": "2026-11-01"}


def _pending(emulator: Any) -> bool:
    return any(
        r.get("kind") == "CustomJob" and r.get("state") == "JOB_STATE_PENDING"
        for r in emulator.control.requests()
    )


def test_a_second_request_is_told_what_the_first_one_waited(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({H100: 0})
    env = {"DWS_EXAMPLE_REGION": REGION}
    first_log = tmp_path / "first.log"
    proc = airflow_home.start_dag_test(DAG_ID, emulator.address, first_log, env=env)
    try:
        deadline = time.monotonic() + 180
        while not _pending(emulator):
            assert time.monotonic() < deadline, first_log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2.0)  # the job waits in the queue at least this long
        emulator.control.set_capacity({H100: 8})
    finally:
        first = finish(proc, first_log)
    assert first.returncode == 0, first.log[-4000:]
    if MISSING_VARIABLE_LOGS_ERROR:
        # Airflow 3.1: no Variable that may be absent is read, so no error line, and no forecast.
        assert "Variable not found" not in first.log and "Expected wait" not in first.log
        return
    assert "Expected wait: too little history for a forecast (0 similar requests" in first.log
    [record] = records(airflow_home.home, DAG_ID)["fine_tune"]
    waited = (parse_time(record.started) - parse_time(record.submitted)).total_seconds()  # type: ignore[operator]
    assert waited >= 2.0

    second_log = tmp_path / "second.log"
    second = airflow_home.run_dag_test(
        DAG_ID, emulator.address, second_log, env={**env, "AIRFLOW_VAR_DWS_PRICES": json.dumps(PRICES)}
    )
    assert second.returncode == 0, second.log[-4000:]
    assert (
        "Expected wait: too little history for a forecast (1 similar request in the last 30 days, 5 needed; "
        f"Vertex AI custom job in {REGION}, nvidia_h100_80gb x 5-8); it waited {span(waited)}"
    ) in second.log, second.log[-4000:]
    # The most it can cost: 8 GPUs x 6 h (the example's max_run) at the table's prices.
    assert (
        "At most $120.00 for this request: 8 accelerators x 6 h (max_run) x $2.50 (flex_start); "
        "on demand $240.00, Spot $72.00 (prices: Airflow Variable dws_prices, as of 2026-11-01)"
    ) in second.log
    [again] = records(airflow_home.home, DAG_ID)["fine_tune"]
    assert again.max_run_seconds == 6 * 3600
    # Too little history: no forecast figures are kept on the record, so none is judged later.
    assert again.expected_wait_p50_seconds is None and again.expected_wait_basis == 0
