"""Ring 2: a deferrable Compute Engine flex-start VMs task whose trigger makes its request (issue 36),
end to end on a live dws-emulator: the task defers without a call; the trigger (rebuilt from its
serialized form, as the triggerer does) looks the task instance's resize requests up in every MIG
it may have grown, deletes the ended ones the API keeps listed, makes the flex-start template and
MIG, creates the attempt's resize request, waits until it SUCCEEDED and reads its VMs; the resumed
task returns them without a call. A second trigger of the same try adopts the request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.backends.compute import ComputeResizeRequestBackend, ResizeAsk
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.submit import is_pending
from dws_emulator.testing import wait_until
from tests.emulator.test_provider_compute_on_emulator import H100, PROJECT, ZONE, operator

pytestmark = pytest.mark.emulator

#: What the resumed task may not call: it has the VMs from the trigger's event.
READS = (
    "compute.instanceGroupManagerResizeRequests.get",
    "compute.instanceGroupManagerResizeRequests.list",
    "compute.instanceGroupManagers.listManagedInstances",
    "compute.instances.get",
    "compute.instanceGroupManagerResizeRequests.insert",
)
DAG = "compute_trigger_dag"


class TI:
    """The task instance a task and its trigger see."""

    dag_id, run_id, map_index, try_number, max_tries = DAG, "manual__1", -1, 1, 0

    def __init__(self, task_id: str, run_id: str = "manual__1") -> None:
        self.task_id, self.run_id = task_id, run_id
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
        return self.xcom.get(key) if key else None


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(capacity: dict[str, int]) -> Any:
        emu = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def ask(task_id: str, **kwargs: Any) -> Any:
    return operator(task_id=task_id, deferrable=True, resize_by=2, **kwargs)


def deferred_trigger(ti: TI, **kwargs: Any) -> tuple[CapacityRequestTrigger, str]:
    with pytest.raises(TaskDeferred) as deferred:
        ask(ti.task_id, **kwargs).execute({"ti": ti})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CapacityRequestTrigger) and trigger.submit is not None
    return CapacityRequestTrigger(**trigger.serialize()[1]), deferred.value.method_name


def resize_requests(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r.get("kind") == "ResizeRequest"]


def test_the_trigger_makes_the_mig_and_request_once_and_the_task_resumes_on_its_vms(emulator: Any) -> None:
    emu = emulator({H100: 16})
    ti = TI("vms_by_trigger")
    trigger, method = deferred_trigger(ti)
    assert resize_requests(emu) == []  # the worker made no call
    [waiting] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(waiting.request_name) and waiting.accelerator_count == 16

    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert (event["phase"], event["state"]) == ("running", "SUCCEEDED") and "result" in event
    who = RequestIdentity(DAG, ti.task_id, ti.run_id)
    assert event["name"].endswith(
        f"/instanceGroupManagers/{who.group_name()}/resizeRequests/{who.resize_request_name()}"
    )
    assert len(event["result"]["instances"]) == 2

    # A second trigger of the same try (a triggerer restarted before it reported) adopts it.
    again, _ = deferred_trigger(TI(ti.task_id))
    event2 = asyncio.run(asyncio.wait_for(first_event(again), 60))
    assert (event2["name"], event2["state"]) == (event["name"], "SUCCEEDED")
    assert len(resize_requests(emu)) == 1  # found, not made twice

    resumed = TI(ti.task_id)
    resumed.xcom = ti.xcom
    calls = [emu.calls(m) for m in READS]
    result = getattr(ask(ti.task_id), method)({"ti": resumed}, event)
    assert result["resize_request"] == event["name"] and result["gpus"] == 16
    assert len(result["internal_ips"]) == 2 and result["run_duration_seconds"] == 6 * 3600
    assert result["machine_type"] == "a3-highgpu-8g" and result["resize_by"] == 2
    assert [emu.calls(m) for m in READS] == calls  # no call at all
    assert resumed.xcom["resize_request_name"] == event["name"]
    [done] = read_records(resumed.xcom[XCOM_KEY])
    assert done.request_name == event["name"] and done.phase == "running"


def test_the_trigger_deletes_the_ended_requests_it_finds_before_it_creates(emulator: Any) -> None:
    emu = emulator({H100: 0})
    ti = TI("after_a_failure")
    earlier = RequestIdentity(DAG, ti.task_id, ti.run_id, attempt=2)
    adapter = ComputeFlexStartAdapter(ask(ti.task_id))
    mig = adapter.ensure_group(earlier, Placement(ZONE))
    backend = ComputeResizeRequestBackend(PROJECT, ZONE)
    failed, _ = backend.submit(ResizeAsk(mig, adapter.build(earlier)), earlier, earlier.request_uuid())
    assert backend.cancel(failed.name)
    wait_until(lambda: (s := backend.get_status(failed.name)) is not None and s.state == "CANCELLED")
    emu.control.set_capacity({H100: 16})

    trigger, _ = deferred_trigger(ti)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert event["state"] == "SUCCEEDED" and event["name"] != failed.name
    assert backend.get(failed.name) is None  # deleted by the lookup, not adopted


def test_a_failover_machine_type_is_looked_up_in_its_own_mig(emulator: Any) -> None:
    emu = emulator({H100: 16})
    ti = TI("failover_vms")
    failover = [Placement(ZONE, machine_type="a3-highgpu-4g")]
    # Try 1 grew the failover machine type's MIG, in the same zone; try 2 must adopt it.
    first = ask(ti.task_id, failover=failover, capacity_retry=1)
    adapter = ComputeFlexStartAdapter(first)
    who = RequestIdentity(DAG, ti.task_id, ti.run_id)
    place = next(p for p in first.placements() if p.machine_type == "a3-highgpu-4g")
    mig = adapter.ensure_group(who, place)
    made, _ = adapter.backend(ZONE).submit(ResizeAsk(mig, adapter.build(who)), who, who.request_uuid())
    assert mig != who.group_name()

    trigger, _ = deferred_trigger(ti, failover=failover, capacity_retry=1)
    lookup = trigger.submission.lookup if trigger.submission else []
    assert [entry["find"]["mig"] for entry in lookup] == [who.group_name(), mig]
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert event["name"] == made.name and len(resize_requests(emu)) == 1
