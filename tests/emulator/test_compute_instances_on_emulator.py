"""Ring 2: standalone flex-start VMs (no MIG) end to end on a live dws-emulator, through the real
``compute_v1`` clients: the worker defers without a call; the trigger (rebuilt from its serialized
form, as the triggerer does) makes the set's VMs, waits until all of them run and hands them to the
task; a second trigger adopts them; a set that gets only some VMs is deleted whole (all or
nothing); the release deletes them; a worker-side (``deferrable=False``) task does the same.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.backends.compute_instances import ComputeInstanceSetBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.compute_instances_release import DeleteComputeFlexStartInstancesOperator
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.submit import is_pending
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

PROJECT = "emu-vms"
ZONE = "us-central1-a"
H100 = "us-central1/NVIDIA_H100_80GB"
DAG = "vm_set_dag"


class TI:
    """The task instance a task and its trigger see (XComs shared by the tasks of one run)."""

    dag_id, run_id, map_index, try_number, max_tries = DAG, "manual__1", -1, 1, 0

    def __init__(self, task_id: str, xcom: dict[tuple[str, str], Any] | None = None) -> None:
        self.task_id = task_id
        self.store = {} if xcom is None else xcom

    @property
    def xcom(self) -> dict[str, Any]:
        return {k: v for (t, k), v in self.store.items() if t == self.task_id}

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
        return self.store.get((task_ids or self.task_id, key or "return_value"))


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(capacity: dict[str, int]) -> Any:
        emu = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def ask(task_id: str = "vms", **kwargs: Any) -> CreateComputeFlexStartInstancesOperator:
    args: dict[str, Any] = {
        "task_id": task_id,
        "project_id": PROJECT,
        "zone": ZONE,
        "count": 2,
        "machine_type": "a3-highgpu-8g",
        "max_run": timedelta(hours=6),
        "max_wait": timedelta(hours=1),
        "poll_interval": 0.2,
        "deferrable": True,
    }
    args.update(kwargs)
    return CreateComputeFlexStartInstancesOperator(**args)


def deferred_trigger(ti: TI, **kwargs: Any) -> tuple[CapacityRequestTrigger, str]:
    with pytest.raises(TaskDeferred) as deferred:
        ask(ti.task_id, **kwargs).execute({"ti": ti})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CapacityRequestTrigger) and trigger.submit is not None
    return CapacityRequestTrigger(**trigger.serialize()[1]), deferred.value.method_name


def vms(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r.get("kind") == "Instance"]


def test_the_trigger_makes_the_set_once_and_the_task_resumes_on_its_vms(emulator: Any) -> None:
    emu = emulator({H100: 16})
    ti = TI("vms")
    trigger, method = deferred_trigger(ti)
    assert vms(emu) == []  # the worker made no call
    [waiting] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(waiting.request_name) and waiting.accelerator_count == 16

    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert (event["phase"], event["state"]) == ("running", "RUNNING")
    who = RequestIdentity(DAG, "vms", "manual__1")
    assert event["name"] == f"projects/{PROJECT}/zones/{ZONE}/instances/{who.queued_resource_id()}"
    made = vms(emu)
    assert sorted(r["display_name"] for r in made) == [f"{who.queued_resource_id()}-{i}" for i in (0, 1)]
    assert {r["strategy"] for r in made} == {"FLEX_START"}
    assert {r["max_run_duration_seconds"] for r in made} == {6 * 3600}
    assert {r["request_valid_for_seconds"] for r in made} == {3600}
    assert made[0]["labels"]["dws_managed"] == "true" and made[0]["labels"]["dws_vms_size"] == "2"

    again, _ = deferred_trigger(TI("vms"))  # a second trigger of the same try adopts the set
    event2 = asyncio.run(asyncio.wait_for(first_event(again), 60))
    assert (event2["name"], event2["state"]) == (event["name"], "RUNNING")
    assert len(vms(emu)) == 2

    result = getattr(ask("vms"), method)({"ti": ti}, event)
    assert result["instance_set"] == event["name"] and result["count"] == 2 and result["gpus"] == 16
    assert len(result["internal_ips"]) == 2 and result["machine_type"] == "a3-highgpu-8g"
    assert ti.xcom["instance_set_name"] == event["name"]
    assert ti.xcom["dws_compute_instances_link"].endswith(
        f"/instances/{who.queued_resource_id()}-0?project={PROJECT}"
    )

    released = DeleteComputeFlexStartInstancesOperator(
        task_id="release", setup_task_id="vms", project_id=PROJECT
    ).execute({"ti": TI("release", ti.store)})
    assert released["released"] == [event["name"]] and len(released["deleted_instances"]) == 2
    assert all(r["deleted"] for r in vms(emu))
    assert emu.control.capacity()[H100]["in_use"] == 0


def test_some_vms_without_the_others_are_deleted_whole(emulator: Any) -> None:
    """8 H100 free for a set of two 8-GPU VMs: one runs, the other waits; when Compute Engine
    deletes the waiting one (its wait ended: here the test deletes it, as the API would), the set
    is INCOMPLETE, and the task deletes the running one too and fails saying so."""
    emu = emulator({H100: 8})
    ti = TI("half")
    trigger, method = deferred_trigger(ti)
    backend = ComputeInstanceSetBackend(PROJECT, ZONE)
    short = RequestIdentity(DAG, "half", "manual__1").queued_resource_id()

    async def scenario() -> dict[str, Any]:
        waiting = asyncio.ensure_future(first_event(trigger))
        for _ in range(600):  # until one VM runs and the other waits
            states = sorted(r["state"] for r in vms(emu))
            if states == ["PENDING", "RUNNING"]:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the set never had one VM running and one waiting: {vms(emu)}")
        pending = next(r["display_name"] for r in vms(emu) if r["state"] == "PENDING")
        await asyncio.to_thread(
            backend.delete_members, f"projects/{PROJECT}/zones/{ZONE}/instances/{short}", [pending]
        )
        return await asyncio.wait_for(waiting, 60)

    event = asyncio.run(scenario())
    assert (event["phase"], event["state"]) == ("not_obtained", "INCOMPLETE")
    assert "1 of 2 VMs were running" in event["message"]
    with pytest.raises(CapacityNotObtainedError, match="not all 2 VMs got capacity"):
        getattr(ask("half"), method)({"ti": ti}, event)
    assert backend.get_status(event["name"]) is None  # nothing left: all or nothing
    assert emu.control.capacity()[H100]["in_use"] == 0


def test_a_worker_side_task_makes_waits_and_returns_the_vms(emulator: Any) -> None:
    emu = emulator({H100: 16})
    ti = TI("in_worker")
    result = ask("in_worker", deferrable=False, count=1).execute({"ti": ti})
    assert result["count"] == 1 and len(result["instances"]) == 1
    assert [r["state"] for r in vms(emu)] == ["RUNNING"]


def test_the_release_finds_the_sets_of_a_setup_whose_zone_is_templated(emulator: Any) -> None:
    """The teardown renders the setup's zone (``{{ params.zone }}``) before it looks the sets up
    there (the fault matrix found a release that failed on the raw template)."""
    from airflow.sdk import DAG as Dag

    emu = emulator({H100: 16})
    store: dict[tuple[str, str], Any] = {}
    ask("vms", deferrable=False, count=1).execute({"ti": TI("vms", store)})
    store.pop(("vms", "instance_set_name"))  # as if the setup's XCom were lost: found by labels
    with Dag(DAG, schedule=None, params={"zone": ZONE}):
        ask("vms", zone="{{ params.zone }}", count=1)
        release = DeleteComputeFlexStartInstancesOperator(
            task_id="release", setup_task_id="vms", project_id=PROJECT
        )
    released = release.execute({"ti": TI("release", store), "params": {"zone": ZONE}})
    assert len(released["released"]) == 1 and len(released["deleted_instances"]) == 1
    assert all(r["deleted"] for r in vms(emu))


def test_a_second_submit_of_a_waiting_set_inserts_nothing(emulator: Any) -> None:
    """The VMs already there are skipped whatever their status (a waiting set has no result to
    list them), so a repeated submit of the same set makes no insert call."""
    emu = emulator({H100: 0})
    task = ask("waiting", count=2)
    identity = RequestIdentity(DAG, "waiting", "manual__1")
    spec = task.adapter().request_spec(identity)
    backend = ComputeInstanceSetBackend(PROJECT, ZONE)
    first, created = backend.submit_spec(spec, identity)
    assert created and first.state == "PENDING"
    inserts = emu.calls("compute.instances.insert")
    again, created = backend.submit_spec(spec, identity)
    assert (again.name, again.state, created) == (first.name, "PENDING", False)
    assert emu.calls("compute.instances.insert") == inserts
    backend.release(first.name)


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    """An emulator with no H100 free on a clock the test moves."""
    clock = FakeClock()
    emu = dws_emulator_server_factory({H100: 0}, clock=clock)
    monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
    return emu, clock


def run_until_the_wait_ends(emu: Any, clock: FakeClock, trigger: CapacityRequestTrigger, wait: float) -> Any:
    """Run the trigger until it waits on its two PENDING VMs, move the clock past their wait."""

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        for _ in range(1200):
            if len(vms(emu)) == 2 and trigger.request_name.startswith("projects/"):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the trigger never made its set: {vms(emu)}")
        listed = emu.calls("compute.instances.list")
        for _ in range(1200):  # one poll of the set made, so the next one sees the wait's end
            if emu.calls("compute.instances.list") > listed:
                break
            await asyncio.sleep(0.05)
        assert not task.done()
        clock.advance(wait + 1)
        return await asyncio.wait_for(task, 60)

    return asyncio.run(scenario())


def test_a_set_whose_wait_ends_is_capacity_not_obtained(timed: Any) -> None:
    """Compute Engine deletes every VM still PENDING when its wait ends: the set vanishes, which is
    capacity not obtained (not "deleted outside the task"), and a 2-minute wait is not asked again."""
    emu, clock = timed
    ti = TI("expiring")
    trigger, method = deferred_trigger(ti, max_wait=120)
    event = run_until_the_wait_ends(emu, clock, trigger, 120)
    assert (event["phase"], event["state"], event["failure"]) == (
        "not_obtained",
        "INCOMPLETE",
        "capacity_not_obtained",
    )
    with pytest.raises(CapacityNotObtainedError):
        getattr(ask("expiring", max_wait=120), method)({"ti": ti}, event)
    assert len(vms(emu)) == 2 and all(r["deleted"] for r in vms(emu))  # nothing made again


def test_a_max_wait_beyond_two_hours_is_kept_by_asking_again(timed: Any) -> None:
    """A 3-hour max wait: each set may wait 2 hours (``requestValidForDuration``); when the first
    is not obtained the task asks again, as attempt 2 and not as a capacity retry, with what is
    left of the 3 hours, and stops asking when too little is left."""
    emu, clock = timed
    ti = TI("patient")
    task = ask("patient", max_wait=timedelta(hours=3))
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({"ti": ti})
    first = deferred.value.trigger
    assert first.submit["request"]["wait_seconds"] == 7200
    ends = datetime.fromisoformat(first.resume["wait_ends"])
    assert timedelta(hours=2, minutes=59) < ends - datetime.now(timezone.utc) <= timedelta(hours=3)
    event = run_until_the_wait_ends(emu, clock, CapacityRequestTrigger(**first.serialize()[1]), 7200)
    assert event["phase"] == "not_obtained"

    with pytest.raises(TaskDeferred) as again:
        getattr(task, deferred.value.method_name)({"ti": ti}, event)
    second = again.value.trigger
    assert second.submit["request"]["name"].endswith("-t1-a2")
    assert second.submit["request"]["wait_seconds"] == 7200  # this test's real clock barely moved
    assert second.resume["wait_ends"] == first.resume["wait_ends"]
    [record] = second.resume["history"]
    assert record["continued"] is True and record["number"] == 1

    # With 10 minutes of the max wait left, the next set waits those 10 minutes.
    soon = dict(event, resume={**event["resume"], "wait_ends": _in(timedelta(minutes=10))})
    with pytest.raises(TaskDeferred) as last:
        getattr(task, deferred.value.method_name)({"ti": ti}, soon)
    assert 590 <= last.value.trigger.submit["request"]["wait_seconds"] <= 600
    # With less than the API's 90 s left, the wait is over: capacity not obtained.
    over = dict(event, resume={**event["resume"], "wait_ends": _in(timedelta(seconds=30))})
    with pytest.raises(CapacityNotObtainedError):
        getattr(task, deferred.value.method_name)({"ti": ti}, over)


def _in(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).isoformat()
