"""Ring 2: a deferrable TPU queued resource task whose trigger makes its request (issue 36), end to
end on a live dws-emulator: the task defers without a call, the trigger (run here in-process,
rebuilt from its serialized form as the triggerer does) looks the task instance's queued resources
up in every zone it may use, deletes the ended ones the API keeps listed, creates the attempt's
queued resource, waits until it is ACTIVE and reads its nodes; the resumed task returns the slice
without another call. A second trigger for the same try adopts the slice: never a duplicate.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend, queued_resource_status
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.submit import is_pending
from tests.emulator.test_provider_tpu_on_emulator import PROJECT, V5E, ZONE, FakeTI, ask

pytestmark = pytest.mark.emulator

#: What the resumed task may not call: it has the slice from the trigger's event.
READS = ("GetQueuedResource", "ListQueuedResources", "GetNode", "CreateQueuedResource")


class TI(FakeTI):
    """A task instance the resumed task can read its records from."""

    try_number = 1
    max_tries = 0

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
        return self.xcom.get(key) if key else None


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(capacity: dict[str, int] | None = None) -> Any:
        emu = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def deferred_trigger(ti: TI) -> tuple[CapacityRequestTrigger, str]:
    with pytest.raises(TaskDeferred) as deferred:
        ask(ti.task_id, deferrable=True).execute({"ti": ti})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CapacityRequestTrigger) and trigger.submit is not None
    # Rebuilt from serialize(), as the triggerer does.
    return CapacityRequestTrigger(**trigger.serialize()[1]), deferred.value.method_name


def queued(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r["kind"] == "QueuedResource"]


def test_the_trigger_makes_the_slice_once_and_the_task_resumes_on_its_nodes(emulator: Any) -> None:
    emu = emulator()
    ti = TI("made_by_trigger")
    trigger, method = deferred_trigger(ti)
    assert queued(emu) == []  # the worker made no call
    [waiting] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(waiting.request_name) and waiting.accelerator_count == 16

    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert (event["phase"], event["state"]) == ("running", "ACTIVE") and "result" in event
    who = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    assert event["name"].endswith("/queuedResources/" + who.queued_resource_id())
    assert len(queued(emu)) == 1

    # A second trigger of the same try (a triggerer restarted before it reported) adopts the slice.
    again, _ = deferred_trigger(TI(ti.task_id, run_id=ti.run_id))
    event2 = asyncio.run(asyncio.wait_for(first_event(again), 60))
    assert (event2["name"], event2["state"]) == (event["name"], "ACTIVE")
    assert len(queued(emu)) == 1  # found, not made twice

    resumed = TI(ti.task_id, run_id=ti.run_id)
    resumed.xcom = ti.xcom
    calls = [emu.calls(method) for method in READS]
    result = getattr(ask(ti.task_id, deferrable=True), method)({"ti": resumed}, event)
    assert result["queued_resource"] == event["name"] and result["chips"] == 16
    assert len(result["nodes"]) == 1 and len(result["ip_addresses"]) == 4
    assert resumed.xcom["queued_resource_name"] == event["name"]
    assert [emu.calls(method) for method in READS] == calls  # no call at all
    [done] = read_records(resumed.xcom[XCOM_KEY])
    assert done.request_name == event["name"] and done.phase == "running"


def test_the_trigger_deletes_the_ended_requests_it_finds_before_it_creates(emulator: Any) -> None:
    emu = emulator({V5E: 0})
    ti = TI("after_a_failure")
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    # An earlier attempt of this task instance that ended FAILED (its max wait passed unserved).
    earlier = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id, attempt=2)
    qr_id = earlier.queued_resource_id()
    request = ask(max_wait=timedelta(seconds=1)).adapter().build(earlier.labels(), backend.parent, qr_id)
    failed, _ = backend.submit(request, earlier, qr_id)
    deadline = time.monotonic() + 20
    while (status := backend.get_status(failed.name)) is not None and not status.phase.terminal:
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    emu.control.set_capacity({V5E: 16})

    trigger, _ = deferred_trigger(ti)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert event["state"] == "ACTIVE" and event["name"] != failed.name
    # The ended request was deleted by the lookup (gone, or on its way out), not adopted.
    left = backend.get(failed.name)
    assert left is None or queued_resource_status(left).state == "DELETING"
