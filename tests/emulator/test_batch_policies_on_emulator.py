"""Ring 2: the Batch operator's scheduling policies through the shared attempt loop, on the emulator.

Failover and capacity retries are not Batch code: the attempt loop decides them. These tests show
that a Batch job plugs into it unchanged: the job that found no capacity in its home region is
cancelled (Batch has no max-wait field of its own), the next attempt runs in the failover region
under its own attempt-numbered job id, and the task's XComs tell the whole story.
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from dws_emulator.testing import InProcessEmulator, wait_until

pytestmark = pytest.mark.emulator

HOME, FAILOVER = "us-central1/NVIDIA_L4", "us-east4/NVIDIA_L4"
_ids = itertools.count()


class FakeTI:
    """Just enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str) -> None:
        self.dag_id = "batch_policies_on_emulator"
        self.task_id = task_id
        self.run_id = f"manual__{next(_ids)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.try_number = 1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> InProcessEmulator:
    emulator: InProcessEmulator = dws_emulator_server_factory({HOME: 0, FAILOVER: 4})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    return emulator


def operator(task_id: str, **kwargs: Any) -> CreateBatchFlexStartJobOperator:
    params: dict[str, Any] = {
        "project_id": "emu-project",
        "region": "us-central1",
        "image_uri": "us-docker.pkg.dev/p/r/infer:1",
        "task_count": 4,
        "parallelism": 4,
        "machine_type": "g2-standard-8",
        "accelerator_type": "nvidia-l4",
        "accelerator_count": 1,
        "environment": {"DWS_EMULATOR_RUN_SECONDS": "0.5"},
        "max_wait": timedelta(seconds=2),
        "poll_interval": 0.2,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateBatchFlexStartJobOperator(task_id=task_id, **params)


def _batch_jobs(emulator: InProcessEmulator) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "BatchJob"]


def _cancelled(emulator: InProcessEmulator, name: str) -> dict[str, Any]:
    """The job once its cancel has landed (CANCELLATION_IN_PROGRESS lasts a moment, as in Batch)."""
    return wait_until(
        lambda: next(
            (r for r in _batch_jobs(emulator) if r["name"] == name and r["state"] == "CANCELLED"), None
        ),
        timeout=60,
        what=f"{name} to be CANCELLED",
    )


def test_failover_runs_the_next_attempt_in_the_next_region(emulator: InProcessEmulator) -> None:
    op = operator("failover", failover=["us-east4"], capacity_retry=1)
    ti = FakeTI(op.task_id)
    result = op.execute({"ti": ti})
    assert result["state"] == "SUCCEEDED"
    first, second = _batch_jobs(emulator)
    # Attempt 1 waited in its home region until the max wait, then the provider cancelled it.
    first = _cancelled(emulator, first["name"])
    assert first["location"] == "us-central1"
    assert "RUNNING" not in [step["state"] for step in first["history"]]
    assert first["name"].endswith("-t1-a1")
    # Attempt 2: the failover region, its own job id, the same identity key.
    assert (second["location"], second["state"]) == ("us-east4", "SUCCEEDED")
    assert second["name"].endswith("-t1-a2")
    assert second["labels"]["dws_key"] == first["labels"]["dws_key"]
    assert result["name"] == second["name"]
    attempts = ti.xcom["dws_attempts"]
    assert [a["placement"]["location"] for a in attempts] == ["us-central1", "us-east4"]
    assert [a["outcome"] for a in attempts] == ["not_obtained", "succeeded"]
    assert emulator.control.capacity()[HOME]["queued"] == 0


def test_without_failover_the_cancelled_wait_is_capacity_not_obtained(emulator: InProcessEmulator) -> None:
    op = operator("no_failover")
    with pytest.raises(CapacityNotObtainedError, match=r"no capacity within max wait 0:00:02 in us-central1"):
        op.execute({"ti": FakeTI(op.task_id)})
    [job] = _batch_jobs(emulator)
    assert job["state"] in ("CANCELLATION_IN_PROGRESS", "CANCELLED")
    _cancelled(emulator, job["name"])
    assert emulator.control.capacity()[HOME]["queued"] == 0
