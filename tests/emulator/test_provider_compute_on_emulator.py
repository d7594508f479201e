"""Ring 2: the provider's Compute Engine backend, adapter pieces, trigger and shared poller against a
live dws-emulator (its REST front), through the unmodified ``compute_v1`` clients; nothing of the
provider is mocked. The switch is the one a user flips: ``DWS_EMULATOR_HOST`` (gRPC port; the REST
front is port + 1)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends import compute_groups as groups
from airflow_provider_dws.backends.compute import ComputeResizeRequestBackend, ResizeAsk, request_vms
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.testing import wait_until

pytestmark = pytest.mark.emulator

PROJECT = "emu-project"
ZONE = "us-central1-a"
H100 = "us-central1/NVIDIA_H100_80GB"


def operator(**kwargs: Any) -> CreateComputeFlexStartVMsOperator:
    args: dict[str, Any] = {
        "task_id": "ask_for_vms",
        "project_id": PROJECT,
        "zone": ZONE,
        "machine_type": "a3-highgpu-8g",
        "resize_by": 4,
        "max_run": timedelta(hours=6),
        "max_wait": timedelta(minutes=30),
        "poll_interval": 0.2,
    }
    args.update(kwargs)
    return CreateComputeFlexStartVMsOperator(**args)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Callable[..., Any]:
    def start(capacity: dict[str, int]) -> Any:
        emu = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def identity(task: str = "ask_for_vms", run: str = "manual__1") -> RequestIdentity:
    return RequestIdentity("compute_dag", task, run)


def submit(
    adapter: ComputeFlexStartAdapter, who: RequestIdentity
) -> tuple[ComputeResizeRequestBackend, Any, bool]:
    placement = Placement(ZONE)
    mig = adapter.ensure_group(who, placement)
    backend = adapter.backend(ZONE)
    status, created = backend.submit(ResizeAsk(mig, adapter.build(who)), who, who.request_uuid())
    return backend, status, created


def test_submit_adopt_wait_and_release(emulator: Callable[..., Any]) -> None:
    emu = emulator({H100: 32})
    adapter = ComputeFlexStartAdapter(operator())
    who = identity()
    backend, status, created = submit(adapter, who)
    assert created and status.name.endswith(
        f"/instanceGroupManagers/{who.group_name()}/resizeRequests/{who.resize_request_name()}"
    )
    # A retry (a lost reply, a re-run worker) adopts the same request: no second one.
    again, created_again = backend.submit(
        ResizeAsk(who.group_name(), adapter.build(who)), who, who.request_uuid()
    )
    assert not created_again and again.name == status.name
    assert adapter.ensure_group(who, Placement(ZONE)) == who.group_name()  # template and MIG adopted
    assert [s.name for s in backend.find(who)] == [status.name]
    succeeded = wait_until(
        lambda: (s := backend.get_status(status.name)) is not None and s.phase is Phase.RUNNING and s,
        what="SUCCEEDED",
    )
    assert succeeded.state == "SUCCEEDED"
    vms = request_vms(backend, succeeded)
    assert len(vms) == 4 and all(vm["internal_ip"] for vm in vms)
    assert all(
        vm["machine_type"] == "a3-highgpu-8g"
        and vm["accelerators"] == [{"type": "nvidia-h100-80gb", "count": 8}]
        for vm in vms
    )
    # The release: exactly these VMs, then the request.
    assert groups.delete_instances(backend, who.group_name(), [vm["self_link"] for vm in vms])
    assert groups.managed_instances(backend, who.group_name()) == []
    assert backend.delete(status.name)
    assert backend.get_status(status.name) is None
    assert not backend.delete(status.name)  # already gone is fine
    records = [r for r in emu.control.requests() if r.get("kind") == "ResizeRequest"]
    assert len(records) == 1 and records[0]["deleted"] and records[0]["vms_deleted"]  # one request, ever


def test_regional_mig(emulator: Callable[..., Any]) -> None:
    emulator({H100: 16})
    adapter = ComputeFlexStartAdapter(operator(zone=None, region="us-central1", resize_by=2))
    who = identity(run="manual__regional")
    placement = Placement("us-central1")
    mig = adapter.ensure_group(who, placement)
    backend = adapter.backend("us-central1")
    status, created = backend.submit(ResizeAsk(mig, adapter.build(who)), who, who.request_uuid())
    assert created and "/regions/us-central1/instanceGroupManagers/" in status.name
    done = wait_until(
        lambda: (s := backend.get_status(status.name)) is not None and s.state == "SUCCEEDED" and s,
        what="SUCCEEDED",
    )
    vms = request_vms(backend, done)
    assert len(vms) == 2 and all(vm["zone"].startswith("us-central1-") for vm in vms)
    assert groups.delete_instances(backend, mig, [vm["self_link"] for vm in vms])
    assert groups.managed_instances(backend, mig) == []
    assert backend.delete(status.name) and backend.find(who) == []


def test_capacity_never_coming_leaves_no_request(emulator: Callable[..., Any]) -> None:
    emulator({H100: 0})
    adapter = ComputeFlexStartAdapter(operator())
    who = identity(run="manual__never")
    backend, status, _ = submit(adapter, who)
    wait_until(lambda: backend.get_status(status.name).state == "ACCEPTED", what="ACCEPTED")  # type: ignore[union-attr]

    async def wait() -> dict[str, Any]:
        trigger = AttemptLoop(adapter.op, adapter).trigger(status, Placement(ZONE), timedelta(seconds=1), {})
        assert isinstance(trigger, CapacityRequestTrigger)
        return await first_event(trigger)

    # The max wait (1 s here) passes: the trigger cancels the request, the task learns why.
    event = asyncio.run(wait())
    assert (
        event["phase"] == Phase.NOT_OBTAINED.value
        and event["failure"] == FailureKind.CAPACITY_NOT_OBTAINED.value
    )
    assert backend.get_status(status.name).state == "CANCELLED"  # type: ignore[union-attr]
    from airflow_provider_dws.backends.base import RequestStatus

    adapter.release_failed(RequestStatus.from_event(event), Placement(ZONE))
    assert backend.find(who) == []  # cancelled and deleted: nothing waits, nothing is listed


def test_poller_lists_each_mig_once_per_round(emulator: Callable[..., Any]) -> None:
    emu = emulator({H100: 0})
    names = []
    for farm in ("farm-a", "farm-b"):
        # Two existing MIGs (made here as the operator makes its own), three tasks' requests in each.
        maker = ComputeFlexStartAdapter(operator())
        backend = maker.backend(ZONE)
        url = groups.ensure_template(backend, groups.flex_start_template(farm, maker.spec_for(None)))
        groups.ensure_group(backend, farm, url)
        for task in ("render_1", "render_2", "render_3"):
            adapter = ComputeFlexStartAdapter(
                operator(task_id=task, resize_by=1, machine_type=None, instance_group_manager=farm)
            )
            _, status, _ = submit(adapter, identity(task, farm))
            names.append(status.name)
        # The record of a request in an existing MIG describes the VMs of its template.
        facts = adapter.record_facts(status, Placement(ZONE))
        assert (facts["machine_type"], facts["accelerator_type"], facts["accelerator_count"]) == (
            "a3-highgpu-8g",
            "nvidia-h100-80gb",
            8,
        )
    backend = ComputeResizeRequestBackend(PROJECT, ZONE)
    lists_before = emu.calls("compute.instanceGroupManagerResizeRequests.list")
    gets_before = emu.calls("compute.instanceGroupManagerResizeRequests.get")

    async def follow() -> set[str]:
        subs = [poller.shared_poller(backend.kind, backend.spec(), n).subscribe(n, 3600.0) for n in names]
        assert len({id(s.poller) for s in subs}) == 2  # one per MIG
        states = set()
        for sub in subs:
            status = await asyncio.wait_for(sub.next(), 60)
            assert status is not None
            states.add(status.state)
        for sub in subs:
            sub.close()
        return states

    assert asyncio.run(follow()) <= {"CREATING", "ACCEPTED"}
    assert (
        emu.calls("compute.instanceGroupManagerResizeRequests.list") - lists_before == 2
    )  # six waits, two lists
    assert emu.calls("compute.instanceGroupManagerResizeRequests.get") == gets_before
    for name in names:
        ComputeResizeRequestBackend(PROJECT, ZONE).discard(name)


def test_a_request_given_up_as_it_succeeded_leaves_no_vm(emulator: Callable[..., Any]) -> None:
    """The max wait passed just as DWS created the VMs: the setup fails (no teardown runs after a
    failed setup), so the attempt's clean-up must delete the VMs, then the request."""
    emulator({H100: 16})
    adapter = ComputeFlexStartAdapter(operator(resize_by=2))
    who = identity(run="manual__late")
    backend, status, _ = submit(adapter, who)
    wait_until(lambda: backend.get_status(status.name).state == "SUCCEEDED", what="SUCCEEDED")  # type: ignore[union-attr]
    assert len(groups.managed_instances(backend, who.group_name())) == 2
    adapter.release_failed(status, Placement(ZONE))
    assert groups.managed_instances(backend, who.group_name()) == []
    assert backend.find(who) == []


def test_an_outage_is_a_transient_error_and_the_wait_survives_it(emulator: Callable[..., Any]) -> None:
    """The REST client's "connection refused" is a transient error (as gRPC's UNAVAILABLE is): the
    poller keeps the wait through an outage. Left untranslated it ended the trigger, and the
    request, never cancelled, later held its VMs with nobody to release them."""
    from airflow_provider_dws.backends.retry import is_transient
    from airflow_provider_dws.errors import TransientApiError

    emu = emulator({H100: 0})
    adapter = ComputeFlexStartAdapter(operator(resize_by=1))
    who = identity(run="manual__outage")
    backend, status, _ = submit(adapter, who)
    emu.server.outage(2)

    def refused() -> BaseException | None:
        try:
            asyncio.run(backend.aget_status(status.name))
        except Exception as err:  # the listener closes just after outage() returns
            return err
        return None

    err = wait_until(refused, what="the REST front to refuse connections")
    assert isinstance(err, TransientApiError) and is_transient(err), repr(err)
    wait_until(lambda: refused() is None, what="the outage to end")

    async def wait() -> dict[str, Any]:
        trigger = AttemptLoop(adapter.op, adapter).trigger(status, Placement(ZONE), timedelta(minutes=10), {})
        return await asyncio.wait_for(first_event(trigger), 120)

    async def scenario() -> dict[str, Any]:
        waiting = asyncio.ensure_future(wait())
        await asyncio.sleep(0.5)
        emu.server.outage(2)
        await asyncio.sleep(1)

        # The control service is down with the rest: give capacity once it answers again.
        def give() -> bool:
            try:
                emu.control.set_capacity({H100: 8})
            except Exception:  # still refused
                return False
            return True

        await asyncio.to_thread(wait_until, give, what="the control service to give capacity")
        return await waiting

    event = asyncio.run(scenario())
    assert event["phase"] == Phase.RUNNING.value, event
    vms = request_vms(backend, backend.get_status(status.name))
    assert groups.delete_instances(backend, who.group_name(), [vm["self_link"] for vm in vms])
    assert backend.delete(status.name)
