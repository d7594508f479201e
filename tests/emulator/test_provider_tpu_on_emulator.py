"""Ring 2: the TPU backend, trigger and operators against a live dws-emulator (real TPU clients)."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend, queued_resource_status
from airflow_provider_dws.errors import ConflictError
from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event

pytestmark = pytest.mark.emulator

V5E = "us-west4-a/v5litepod"
PROJECT = "emu-project"
ZONE = "us-west4-a"
_ids = itertools.count()


class FakeTI:
    """Enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str, run_id: str | None = None) -> None:
        self.dag_id = "tpu_on_emulator"
        self.task_id = task_id
        self.run_id = run_id or f"manual__{next(_ids)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None) -> Any:
        return None  # as if the setup's worker died before it pushed anything


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_factory: Any) -> Any:
    def start(capacity: dict[str, int] | None = None) -> Any:
        emu = dws_emulator_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def ask(task_id: str = "ask", **kwargs: Any) -> CreateTPUQueuedResourceOperator:
    params: dict[str, Any] = {
        "project_id": PROJECT,
        "zone": ZONE,
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
        "max_wait": timedelta(seconds=30),
        "poll_interval": 0.2,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateTPUQueuedResourceOperator(task_id=task_id, **params)


def live(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r["kind"] == "QueuedResource" and not r["deleted"]]


def test_operator_gets_an_active_slice_and_delete_operator_releases_it(emulator: Any) -> None:
    emu = emulator()
    op = ask()
    ti = FakeTI("ask")
    result = op.execute({"ti": ti})
    assert result["chips"] == 16
    assert len(result["nodes"]) == 1 and result["nodes"][0]["state"] == "READY"
    assert len(result["ip_addresses"]) == 4
    assert ti.xcom["queued_resource_name"] == result["queued_resource"]
    assert result["queued_resource_id"] == RequestIdentity(ti.dag_id, "ask", ti.run_id).queued_resource_id()
    assert [r["state"] for r in live(emu)] == ["ACTIVE"]
    # Same task instance again (a retry): reattaches to the ACTIVE slice, no second request.
    again = ask().execute({"ti": FakeTI("ask", run_id=ti.run_id)})
    assert again["queued_resource"] == result["queued_resource"]
    assert len(emu.control.requests()) == 1
    # The teardown derives the same id from setup_task_id.
    release = DeleteTPUQueuedResourceOperator(
        task_id="release", project_id=PROJECT, zone=ZONE, setup_task_id="ask"
    )
    out = release.execute({"ti": FakeTI("release", run_id=ti.run_id)})
    assert out["deleted"] is True
    assert live(emu) == []
    # Already gone is success.
    assert release.execute({"ti": FakeTI("release", run_id=ti.run_id)})["deleted"] is False


def test_operator_cleans_up_when_capacity_never_comes(emulator: Any) -> None:
    emu = emulator({V5E: 0})
    with pytest.raises(
        CapacityNotObtainedError, match=r"no TPU capacity within max wait 0:00:02 in us-west4-a"
    ):
        ask(max_wait=2).execute({"ti": FakeTI("ask")})
    records = emu.control.requests()
    assert len(records) == 1 and records[0]["deleted"]
    assert "FAILED" in [step["state"] for step in records[0]["history"]]


def test_backend_create_is_idempotent_and_delete_needs_force_while_nodes_exist(emulator: Any) -> None:
    emulator()
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    identity = RequestIdentity("dag", "idem", f"run-{time.monotonic_ns()}")
    qr_id = identity.queued_resource_id()
    request = ask().adapter().build(identity.labels(), backend.parent, qr_id)
    first, created = backend.submit(request, identity, qr_id)
    second, created_again = backend.submit(request, identity, qr_id)
    assert created and not created_again
    assert first.name == second.name == backend.name_of(qr_id)
    deadline = time.monotonic() + 10
    while queued_resource_status(backend.get(first.name)).phase is not Phase.RUNNING:  # type: ignore[arg-type]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(ConflictError, match="still has node"):
        backend.delete(first.name, force=False)
    assert backend.delete(first.name, force=True) is True
    assert backend.get(first.name) is None
    assert backend.delete(first.name) is False


def test_trigger_waits_until_active_then_on_kill_deletes(emulator: Any) -> None:
    emu = emulator({V5E: 0})
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    identity = RequestIdentity("dag", "trig", f"run-{time.monotonic_ns()}")
    qr_id = identity.queued_resource_id()
    qr, _ = backend.submit(ask().adapter().build(identity.labels(), backend.parent, qr_id), identity, qr_id)
    trigger = CapacityRequestTrigger(
        kind=backend.kind,
        backend_spec=backend.spec(),
        request_name=qr.name,
        poll_interval=0.2,
        target="running",
    )

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        await asyncio.sleep(1.5)
        assert not task.done()
        await asyncio.to_thread(emu.control.set_capacity, {V5E: 16})
        event = await asyncio.wait_for(task, 30)
        await trigger.on_kill()  # what a user "mark failed" does after this point
        return event

    event = asyncio.run(scenario())
    assert event["phase"] == "running" and event["state"] == "ACTIVE"
    assert event["timings"]["wait_seconds"] >= 1.0
    deadline = time.monotonic() + 10
    while live(emu):
        assert time.monotonic() < deadline, live(emu)
        time.sleep(0.2)


def test_valid_after_delays_the_slice_and_max_wait_still_applies(emulator: Any) -> None:
    emu = emulator()
    started = time.monotonic()
    result = ask(valid_after=2, max_wait=30).execute({"ti": FakeTI("ask")})
    assert time.monotonic() - started >= 2.0
    assert result["wait_seconds"] >= 1.5
    [record] = emu.control.requests()
    assert record["state"] == "ACTIVE"
    # The API-side deadline survives the delayed start (an interval, not a lost valid-until).
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    status = queued_resource_status(backend.get(result["queued_resource"]))  # type: ignore[arg-type]
    assert status.details["max_wait_seconds"] == 30
    backend.delete(result["queued_resource"])


@pytest.fixture
def slow_deletes(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An in-process emulator whose queued resources stay DELETING for 2 s."""
    from dws_emulator.server import EmulatorServer

    server = EmulatorServer({V5E: 16})
    server.state.tpu.delete_seconds = 2.0
    server.start()
    monkeypatch.setenv("DWS_EMULATOR_HOST", server.address)
    yield server
    server.stop()


def test_deleting_what_is_already_being_deleted_is_success(slow_deletes: Any) -> None:
    """D4: a user clears a deferred task, its trigger's on_kill starts the delete, and the next try
    (or the teardown) deletes the same resource again: that must not fail the task."""
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    identity = RequestIdentity("dag", "d4", f"run-{time.monotonic_ns()}")
    qr_id = identity.queued_resource_id()
    qr, _ = backend.submit(ask().adapter().build(identity.labels(), backend.parent, qr_id), identity, qr_id)
    assert backend.release(qr.name) is True  # DELETING now, for 2 s
    assert backend.get_status(qr.name).state == "DELETING"  # type: ignore[union-attr]
    assert backend.release(qr.name) is True  # refused by the API as in progress: success

    async def twice() -> list[bool]:
        return [await backend.arelease(qr.name), await backend.arelease(qr.name)]

    assert asyncio.run(twice()) == [True, True]
    # The teardown deletes it once more and waits until it is gone.
    op = DeleteTPUQueuedResourceOperator(
        task_id="release", project_id=PROJECT, zone=ZONE, queued_resource_id=qr_id
    )
    result = op.execute({"ti": FakeTI("release")})
    assert result["deleted"] is True and result["state_before"] == "DELETING"
    assert backend.get(qr.name) is None
    assert backend.release(qr.name) is False  # gone
    [record] = [r for r in slow_deletes.state.requests() if r["name"] == qr.name]
    assert record["deleted"]
