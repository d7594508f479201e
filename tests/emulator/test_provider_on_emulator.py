"""Ring 2: the provider's hooks, backend, trigger and operator against a live dws-emulator.

The emulator runs in this process; where a test is about time its clock is a ``FakeClock`` the
test moves, so waits and run times are exact. Timings the provider reports are compared with the
ones the emulator recorded, never with a wall-clock range.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError, WorkloadFailedError
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.testing import FakeClock, InProcessEmulator
from tests.tcp_proxy import OutageProxy

pytestmark = pytest.mark.emulator

H100 = "us-central1/NVIDIA_H100_80GB"
_ids = itertools.count()


def pools(run_seconds: float = 0.5, exit_code: int = 0, count: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "machine_spec": {
                "machine_type": "a3-highgpu-8g",
                "accelerator_type": "NVIDIA_H100_80GB",
                "accelerator_count": count,
            },
            "replica_count": 1,
            "container_spec": {
                "image_uri": "us-docker.pkg.dev/p/r/train:1",
                "env": [
                    {"name": "DWS_EMULATOR_RUN_SECONDS", "value": str(run_seconds)},
                    {"name": "DWS_EMULATOR_EXIT_CODE", "value": str(exit_code)},
                ],
            },
        }
    ]


class FakeTI:
    """Just enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str) -> None:
        self.dag_id = "provider_on_emulator"
        self.task_id = task_id
        self.run_id = f"manual__{next(_ids)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@pytest.fixture
def emulator_env(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(capacity: dict[str, int] | None = None, clock: Any = time.time) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity, clock=clock)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        return emulator

    return start


async def until(predicate: Any, what: str, timeout: float = 60.0) -> None:
    """Wait in the event loop until ``predicate()`` holds; fail after a generous ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        await asyncio.sleep(0.02)


def recorded(emulator: InProcessEmulator, name: str) -> tuple[float, float | None, float | None]:
    """(created, started, ended) as the emulator recorded them, epoch seconds."""
    rec = emulator.server.state.vertex.jobs[name]
    ended = rec.job.end_time.ToNanoseconds() / 1e9 if rec.job.HasField("end_time") else None
    return rec.created_at, rec.started_at, ended


def operator(task_id: str, **kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    params: dict[str, Any] = {
        "project_id": "emu-project",
        "region": "us-central1",
        "worker_pool_specs": pools(),
        "max_wait": timedelta(seconds=30),
        "poll_interval": 0.2,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateVertexAIFlexStartJobOperator(task_id=task_id, **params)


def test_non_deferrable_operator_waits_in_worker_and_returns_the_job(emulator_env: Any) -> None:
    emulator = emulator_env()
    op = operator("nd_success", worker_pool_specs=pools(run_seconds=1.0))
    ti = FakeTI(op.task_id)
    result = op.execute({"ti": ti})
    assert result["state"] == "JOB_STATE_SUCCEEDED"
    assert result["job_spec"]["scheduling"]["strategy"] == "FLEX_START"
    assert ti.xcom["job_name"] == result["name"]
    # The timings are the job's own (start - create, end - start), not the worker's clock.
    created, started, ended = recorded(emulator, result["name"])
    assert started is not None and ended is not None
    assert ti.xcom["wait_seconds"] == pytest.approx(started - created, abs=1e-3)
    assert ti.xcom["run_seconds"] == pytest.approx(ended - started, abs=1e-3)
    assert ti.xcom["run_seconds"] >= 1.0  # it ran its whole run time
    assert ti.xcom["dws_vertex_job_link"].startswith("https://console.cloud.google.com/vertex-ai/locations/")
    assert len(emulator.control.requests()) == 1


def test_non_deferrable_operator_raises_capacity_error_when_max_wait_passes(emulator_env: Any) -> None:
    emulator = emulator_env({H100: 0})
    op = operator("nd_no_capacity", max_wait=2)
    with pytest.raises(CapacityNotObtainedError, match=r"no capacity within max wait 0:00:02 in us-central1"):
        op.execute({"ti": FakeTI(op.task_id)})
    [job] = emulator.control.requests()
    assert job["state"] == "JOB_STATE_FAILED"
    assert job["start_time"] is None


def test_non_deferrable_operator_raises_workload_error(emulator_env: Any) -> None:
    emulator_env()
    op = operator("nd_exit", worker_pool_specs=pools(exit_code=7))
    with pytest.raises(WorkloadFailedError, match="workload failed: exit code 7"):
        op.execute({"ti": FakeTI(op.task_id)})


def test_backend_submit_find_decide_and_cancel(emulator_env: Any) -> None:
    emulator = emulator_env({H100: 0})
    backend = VertexCustomJobBackend("emu-project", "us-central1")
    identity = RequestIdentity("dag", "task", f"run-{time.monotonic_ns()}")
    op = operator("unused")
    job, created = backend.submit(op.adapter().build(identity), identity)
    assert created
    decision = backend.decide(identity)
    assert decision.action == "wait" and decision.name == job.name
    assert [found.name for found in backend.find(identity)] == [job.name]
    other = RequestIdentity("dag", "task", "another-run")
    assert backend.find(other) == []
    status = backend.get_status(job.name)
    assert status.phase is Phase.WAITING
    assert status.description == "8 x NVIDIA_H100_80GB in us-central1"
    assert backend.release(job.name) is True
    assert backend.get_status(job.name).phase is Phase.CANCELLED  # every RPC ticks the model first
    assert backend.release(job.name) is False  # cancelling an ended job is not an error
    decision = backend.decide(identity)
    assert decision.action == "submit"
    assert [r["state"] for r in emulator.control.requests()] == ["JOB_STATE_CANCELLED"]


def _trigger_for(backend: VertexCustomJobBackend, job: CustomJob, **kwargs: Any) -> CapacityRequestTrigger:
    return CapacityRequestTrigger(
        kind=backend.kind,
        backend_spec=backend.spec(),
        request_name=job.name,
        poll_interval=0.2,
        **kwargs,
    )


def test_trigger_waits_through_queue_to_success_via_async_client(emulator_env: Any) -> None:
    clock = FakeClock()
    emulator = emulator_env({H100: 0}, clock=clock)
    backend = VertexCustomJobBackend("emu-project", "us-central1")
    identity = RequestIdentity("dag", "trigger", f"run-{time.monotonic_ns()}")
    job, _ = backend.submit(operator("unused").adapter().build(identity), identity)
    trigger = _trigger_for(backend, job)
    # Rebuild from serialize(), as the triggerer does.
    classpath, kwargs = trigger.serialize()
    assert classpath.endswith("CapacityRequestTrigger")
    trigger = CapacityRequestTrigger(**kwargs)

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        polls = emulator.calls("ListCustomJobs")
        await until(lambda: emulator.calls("ListCustomJobs") >= polls + 3, "three polls of the queued job")
        assert not task.done()
        clock.advance(20)  # 20 s pass in the queue
        await asyncio.to_thread(emulator.control.set_capacity, {H100: 8})
        rec = emulator.server.state.vertex.jobs[job.name]
        await until(lambda: rec.started_at is not None, "the job to start")
        assert not task.done()
        clock.advance(1)  # longer than its 0.5 s run: it ends on the next tick
        return await asyncio.wait_for(task, 60)

    event = asyncio.run(scenario())
    assert event["phase"] == "succeeded"
    assert event["name"] == job.name
    assert event["failure"] is None
    # Exactly the emulator's time: 20 s queued, then 1 s (its next tick after the 0.5 s run).
    assert event["timings"]["wait_seconds"] == pytest.approx(20.0, abs=1e-3)
    assert event["timings"]["run_seconds"] == pytest.approx(1.0, abs=1e-3)


def test_trigger_reports_not_obtained_when_max_wait_expires(emulator_env: Any) -> None:
    clock = FakeClock()
    emulator = emulator_env({H100: 0}, clock=clock)
    backend = VertexCustomJobBackend("emu-project", "us-central1")
    identity = RequestIdentity("dag", "expire", f"run-{time.monotonic_ns()}")
    job, _ = backend.submit(operator("unused", max_wait=60).adapter().build(identity), identity)

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(_trigger_for(backend, job)))
        await until(lambda: emulator.calls("ListCustomJobs") >= 1, "the first poll")
        assert not task.done()
        clock.advance(61)  # the max wait passes in the queue
        return await asyncio.wait_for(task, 60)

    event = asyncio.run(scenario())
    assert event["phase"] == "not_obtained"
    assert event["failure"] == FailureKind.CAPACITY_NOT_OBTAINED.value
    assert event["timings"]["run_seconds"] == 0.0
    assert event["timings"]["wait_seconds"] == pytest.approx(61.0, abs=1e-3)


def test_trigger_on_kill_cancels_the_waiting_job(emulator_env: Any) -> None:
    emulator = emulator_env({H100: 0})
    backend = VertexCustomJobBackend("emu-project", "us-central1")
    identity = RequestIdentity("dag", "kill", f"run-{time.monotonic_ns()}")
    job, _ = backend.submit(operator("unused").adapter().build(identity), identity)
    trigger = _trigger_for(backend, job)

    async def scenario() -> None:
        task = asyncio.ensure_future(first_event(trigger))
        await until(lambda: emulator.calls("ListCustomJobs") >= 1, "the first poll")
        task.cancel()
        await trigger.on_kill()

    asyncio.run(scenario())
    # CANCELLING becomes CANCELLED on the next tick, which listing the requests makes first.
    [record] = emulator.control.requests()
    assert record["state"] == "JOB_STATE_CANCELLED"


def test_trigger_survives_an_emulator_outage(
    dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections refused and cut (UNAVAILABLE) while waiting are retried, never a failure."""
    emulator = dws_emulator_server_factory({H100: 0})
    proxy = OutageProxy(emulator.address)
    monkeypatch.setenv("DWS_EMULATOR_HOST", proxy.address)
    backend = VertexCustomJobBackend("emu-project", "us-central1")
    identity = RequestIdentity("dag", "outage", f"run-{time.monotonic_ns()}")
    job, _ = backend.submit(operator("unused").adapter().build(identity), identity)
    trigger = _trigger_for(backend, job)

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        await until(lambda: emulator.calls("ListCustomJobs") >= 2, "two polls through the proxy")
        proxy.down()
        await asyncio.to_thread(emulator.control.set_capacity, {H100: 8})
        shared = poller.shared_poller(backend.kind, backend.spec())
        rounds = shared.stats["cycles"]
        await until(lambda: shared.stats["cycles"] >= rounds + 5, "five poll rounds during the outage")
        assert not task.done(), "an outage must not end the wait"
        proxy.up()
        return await asyncio.wait_for(task, 60)

    try:
        event = asyncio.run(scenario())
    finally:
        proxy.down()
    assert event["phase"] == "succeeded"
    assert datetime.fromisoformat(event["timings"]["finished"]) <= datetime.now(timezone.utc)
    assert len(emulator.control.requests()) == 1
