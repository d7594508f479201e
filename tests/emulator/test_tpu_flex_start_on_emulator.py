"""Ring 2: Cloud TPU flex-start slices (Preview, ``v2alpha1``) end to end on a live dws-emulator,
through google-api-python-client's ``tpu.v2alpha1`` client: the deferred task's trigger makes the
queued resource with the FLEX_START model and its run duration, waits until it is ACTIVE and the
task resumes on its nodes; at the run's end Cloud TPU deletes the VMs and the queued resource is
SUSPENDED, which the release deletes; a worker-side task does the same; a second trigger adopts.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.backends.tpu import queued_resource_from_spec
from airflow_provider_dws.backends.tpu_flex import TpuFlexStartBackend
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.tpu_release import DeleteTPUQueuedResourceOperator
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.testing import FakeClock
from tests.emulator.test_tpu_submit_in_trigger_on_emulator import TI

pytestmark = pytest.mark.emulator

ZONE = "us-east5-a"
PROJECT = "emu-flex"
V6E = f"{ZONE}/v6e"


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(chips: int = 8, clock: Any = None) -> Any:
        emu = dws_emulator_server_factory({V6E: chips}, clock=clock or FakeClock())
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def flex(task_id: str = "flex", **kwargs: Any) -> CreateTPUQueuedResourceOperator:
    params: dict[str, Any] = {
        "project_id": PROJECT,
        "zone": ZONE,
        "accelerator_type": "v6e-8",
        "runtime_version": "v2-alpha-tpuv6e",
        "provisioning_model": "flex_start",
        "max_run": timedelta(hours=1),
        "max_wait": timedelta(minutes=30),
        "poll_interval": 0.2,
        "deferrable": True,
    }
    params.update(kwargs)
    return CreateTPUQueuedResourceOperator(task_id=task_id, **params)


def queued(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r["kind"] == "QueuedResource"]


def test_the_trigger_makes_a_flex_start_slice_and_the_release_deletes_it_suspended(emulator: Any) -> None:
    clock = FakeClock()
    emu = emulator(clock=clock)
    ti = TI("flex")
    with pytest.raises(TaskDeferred) as deferred:
        flex().execute({"ti": ti})
    trigger = deferred.value.trigger
    assert trigger.kind == "tpu_flex_start"
    assert trigger.submit["request"]["run_duration"] == {"maxRunDuration": "3600s"}
    rebuilt = CapacityRequestTrigger(**trigger.serialize()[1])

    async def scenario() -> dict[str, Any]:
        waiting = asyncio.ensure_future(first_event(rebuilt))
        for _ in range(1200):
            if waiting.done():
                break
            clock.advance(0.5)  # PROVISIONING lasts 0.5 s of the emulator's clock
            await asyncio.sleep(0.05)
        return await asyncio.wait_for(waiting, 60)

    event = asyncio.run(scenario())
    assert (event["phase"], event["state"]) == ("running", "ACTIVE")
    assert event["description"] == f"flex-start v6e-8 (8 chips) in {ZONE}"
    [record] = queued(emu)
    assert record["provisioning_model"] == "FLEX_START" and record["max_run_seconds"] == 3600
    assert record["tier"] == "on-demand" and record["nodes"]
    assert emu.calls("tpu.projects.locations.queuedResources.create") == 1
    with pytest.raises(TaskDeferred) as again:  # the same try deferred again: its trigger adopts
        flex().execute({"ti": TI("flex", run_id=ti.run_id)})
    event2 = asyncio.run(asyncio.wait_for(first_event(again.value.trigger), 60))
    assert (event2["name"], event2["state"]) == (event["name"], "ACTIVE")
    assert emu.calls("tpu.projects.locations.queuedResources.create") == 1

    result = getattr(flex(), deferred.value.method_name)({"ti": ti}, event)
    assert result["queued_resource"] == event["name"] and result["chips"] == 8

    clock.advance(3600)  # the run ends: Cloud TPU deletes the VMs, the request is SUSPENDED
    backend = TpuFlexStartBackend(PROJECT, ZONE)
    for _ in range(3):
        status = backend.get_status(event["name"])
    assert status is not None and status.state == "SUSPENDED"
    assert queued(emu)[0]["nodes"] == []
    assert emu.control.capacity()[V6E]["in_use"] == 0

    release = DeleteTPUQueuedResourceOperator(
        task_id="release", setup_task_id="flex", project_id=PROJECT, zone=ZONE
    )
    released = release.execute({"ti": _Pulls(ti, "flex")})
    assert released["released"] == [event["name"]] and released["state_before"] == "SUSPENDED"
    assert queued(emu)[0]["deleted"]


def test_a_worker_side_flex_start_task_waits_for_its_slice(emulator: Any) -> None:
    emu = emulator(clock=time.time)
    result = flex("in_worker", deferrable=False).execute({"ti": TI("in_worker")})
    assert result["chips"] == 8
    [record] = queued(emu)
    assert record["state"] == "ACTIVE" and record["provisioning_model"] == "FLEX_START"


class _Pulls(TI):
    """The release's task instance: it reads what the setup pushed."""

    def __init__(self, setup: TI, setup_task_id: str) -> None:
        super().__init__("release", run_id=setup.run_id)
        self._setup, self._setup_task_id = setup, setup_task_id

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None, **kwargs: Any) -> Any:
        if task_ids == self._setup_task_id:
            return self._setup.xcom.get(key) if key else None
        return super().xcom_pull(task_ids=task_ids, key=key, **kwargs)


def test_a_create_that_finds_its_queued_resource_adopts_it(emulator: Any) -> None:
    """A second create of the same id (a retry after a lost reply) is refused ALREADY_EXISTS by
    the API, which the backend reads as "adopt", never as a failure or a second request."""
    from airflow_provider_dws.scheduling.identity import RequestIdentity

    emulator(clock=time.time)
    task = flex("adopt")
    who = RequestIdentity("d", "adopt", "r")
    spec = task.adapter().request_spec(who)
    backend = TpuFlexStartBackend(PROJECT, ZONE)
    first, created = backend.submit_spec(spec, who)
    request = queued_resource_from_spec(spec["queued_resource"])
    again, created_again = backend.submit(request, who, spec["queued_resource_id"], run=spec["run_duration"])
    assert created and not created_again and again.name == first.name
