"""Ring 2: the request records (``dws_requests``) the Vertex AI and Cloud Batch operators write,
end to end against the in-process emulator: ``waiting`` in XCom when the task defers, the final
phase once the trigger's event resumes it (a new operator, as in a new worker process, reading the
XCom back), and a capacity-not-obtained end in the worker."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.records import XCOM_KEY, RequestRecord, parse_time, read_records
from airflow_provider_dws.triggers.capacity_request import first_event
from airflow_provider_dws.triggers.submit import is_pending
from dws_emulator.testing import FakeClock, InProcessEmulator
from tests.emulator.test_provider_batch_on_emulator import L4, ticking
from tests.emulator.test_provider_on_emulator import H100, pools

pytestmark = pytest.mark.emulator

_runs = itertools.count()


class TI:
    """A task instance whose XComs outlive the operator (a resumed task is a new process)."""

    def __init__(
        self, dag_id: str, task_id: str, store: dict[str, Any] | None = None, run_id: str = ""
    ) -> None:
        self.dag_id = dag_id
        self.task_id = task_id
        self.run_id = run_id or f"manual__{next(_runs)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.try_number = 1
        self.xcom: dict[str, Any] = store if store is not None else {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, *, key: str, task_ids: str, map_indexes: int) -> Any:
        assert (task_ids, map_indexes) == (self.task_id, self.map_index)
        return self.xcom.get(key)

    def again(self) -> TI:
        """The same task instance, resumed."""
        return TI(self.dag_id, self.task_id, self.xcom, self.run_id)


def records(ti: TI) -> list[RequestRecord]:
    return read_records(ti.xcom[XCOM_KEY])


def resume(make: Any, ti: TI, deferred: TaskDeferred, clock: FakeClock | None = None) -> Any:
    """Run the trigger in this process, then resume a new operator with its event."""
    if clock is not None:
        with ticking(clock):
            event = asyncio.run(asyncio.wait_for(first_event(deferred.trigger), 120))
    else:
        event = asyncio.run(asyncio.wait_for(first_event(deferred.trigger), 120))
    resumed = ti.again()
    return getattr(make(), deferred.method_name)({"ti": resumed}, event), resumed


# -- Vertex AI ------------------------------------------------------------------------------------


def vertex(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    params: dict[str, Any] = {
        "task_id": "train",
        "project_id": "emu-project",
        "region": "us-central1",
        "worker_pool_specs": pools(run_seconds=0.3),
        "max_wait": timedelta(minutes=30),
        "poll_interval": 0.2,
        "deferrable": True,
    }
    return CreateVertexAIFlexStartJobOperator(**{**params, **kwargs})


def test_a_deferred_vertex_job_is_waiting_in_xcom_then_succeeded(vertex_emulator: Any) -> None:
    vertex_emulator()
    ti = TI("records_on_emulator", "train")
    with pytest.raises(TaskDeferred) as deferred:
        vertex().execute({"ti": ti})
    # The trigger makes the job: until then it is recorded waiting under a provisional name.
    [waiting] = records(ti)
    assert waiting.phase == "waiting" and is_pending(waiting.request_name)
    assert "job_name" not in ti.xcom and waiting.console_url is None
    assert (waiting.api, waiting.kind) == ("vertex_custom_job", "Vertex AI custom job")
    assert (waiting.project, waiting.location) == ("emu-project", "us-central1")
    assert (waiting.accelerator_type, waiting.accelerator_count) == ("NVIDIA_H100_80GB", 8)
    assert waiting.max_wait_seconds == 1800 and waiting.submitted and waiting.wait_deadline

    result, resumed = resume(vertex, ti, deferred.value)
    assert result["state"] == "JOB_STATE_SUCCEEDED"
    [done] = records(resumed)
    assert (done.request_name, done.phase, done.outcome) == (result["name"], "succeeded", "succeeded")
    assert resumed.xcom["job_name"] == result["name"]
    assert done.console_url == resumed.xcom["dws_vertex_job_link"] and result["name"].endswith(
        done.console_url.split("/training/")[1].split("/")[0]
    )
    started, ended = parse_time(done.started), parse_time(done.ended)
    submitted = parse_time(done.submitted)
    assert submitted is not None and started is not None and ended is not None
    assert (started - submitted).total_seconds() == pytest.approx(resumed.xcom["wait_seconds"], abs=1e-3)
    assert (ended - started).total_seconds() == pytest.approx(resumed.xcom["run_seconds"], abs=1e-3)


def test_a_vertex_job_without_capacity_ends_not_obtained(vertex_emulator: Any) -> None:
    vertex_emulator({H100: 0})
    ti = TI("records_on_emulator", "no_capacity")
    with pytest.raises(CapacityNotObtainedError):
        vertex(task_id=ti.task_id, max_wait=2, deferrable=False).execute({"ti": ti})
    [record] = records(ti)
    assert (record.phase, record.outcome) == ("not_obtained", "capacity_not_obtained")
    assert record.started is None and record.ended is not None and not record.live


# -- Cloud Batch ----------------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def batch(**kwargs: Any) -> CreateBatchFlexStartJobOperator:
    params: dict[str, Any] = {
        "task_id": "crunch",
        "project_id": "emu-project",
        "region": "us-central1",
        "image_uri": "us-docker.pkg.dev/p/r/train:1",
        "machine_type": "g2-standard-8",
        "task_count": 4,
        "parallelism": 2,
        "environment": {"DWS_EMULATOR_RUN_SECONDS": "60"},
        "max_wait": timedelta(hours=1),
        "poll_interval": 0.05,
        "deferrable": True,
    }
    return CreateBatchFlexStartJobOperator(**{**params, **kwargs})


def test_a_deferred_batch_job_is_waiting_in_xcom_then_succeeded(
    monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, clock: FakeClock
) -> None:
    emulator: InProcessEmulator = dws_emulator_server_factory({L4: 2}, clock=clock)
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    ti = TI("records_on_emulator", "crunch")
    with pytest.raises(TaskDeferred) as deferred:
        batch().execute({"ti": ti})
    # The trigger makes the job: until then it is recorded waiting under a provisional name.
    [waiting] = records(ti)
    assert waiting.phase == "waiting" and is_pending(waiting.request_name)
    assert "job_name" not in ti.xcom and waiting.console_url is None
    assert (waiting.api, waiting.kind, waiting.machine_type) == (
        "batch_job",
        "Cloud Batch job",
        "g2-standard-8",
    )
    assert (waiting.accelerator_type, waiting.accelerator_count) == ("nvidia-l4", 2)  # 2 VMs at once

    result, resumed = resume(batch, ti, deferred.value, clock)
    assert result["state"] == "SUCCEEDED"
    [done] = records(resumed)
    assert (done.request_name, done.phase, done.outcome) == (result["name"], "succeeded", "succeeded")
    assert resumed.xcom["job_name"] == result["name"]
    assert done.console_url == resumed.xcom["dws_batch_job_link"]
    assert result["job_id"] in done.console_url and result["uid"] in unquote(
        resumed.xcom["dws_batch_logs_link"]
    )
    assert done.started is not None and done.ended is not None and not done.live


def test_a_batch_job_without_capacity_ends_not_obtained(
    monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, clock: FakeClock
) -> None:
    clock.advance(-3600)  # the max wait has passed at the first read (as in the Batch ring's test)
    emulator: InProcessEmulator = dws_emulator_server_factory({L4: 0}, clock=clock)
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    ti = TI("records_on_emulator", "no_capacity")
    with pytest.raises(CapacityNotObtainedError):
        batch(task_id=ti.task_id, max_wait=timedelta(minutes=10), deferrable=False).execute({"ti": ti})
    [record] = records(ti)
    assert (record.phase, record.outcome) == ("not_obtained", "capacity_not_obtained")
