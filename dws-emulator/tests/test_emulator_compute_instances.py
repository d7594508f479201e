"""Standalone Compute Engine VMs in the emulator (flex-start VMs without a MIG), through the
unmodified ``compute_v1.InstancesClient`` on a private in-process emulator with a ``FakeClock``."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

P = "vm-test"
ZONE = "us-central1-a"
H100 = "us-central1/NVIDIA_H100_80GB"
HOUR = 3600


class Clients:
    def __init__(self, url: str) -> None:
        opts: dict[str, Any] = {
            "client_options": ClientOptions(api_endpoint=url),
            "credentials": AnonymousCredentials(),
        }
        self.instances = compute_v1.InstancesClient(**opts)
        self.zone_ops = compute_v1.ZoneOperationsClient(**opts)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    return dws_emulator_server_factory({H100: 16}, clock=clock)


@pytest.fixture
def gce(emulator: Any) -> Clients:
    return Clients(emulator.server.rest_url)


def flex_vm(
    name: str,
    *,
    wait: int | None = HOUR,
    run: int | None = 6 * HOUR,
    action: str = "DELETE",
    machine: str = "a3-highgpu-8g",
    model: str = "FLEX_START",
    labels: dict[str, str] | None = None,
) -> compute_v1.Instance:
    scheduling = compute_v1.Scheduling(
        provisioning_model=model,
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
    )
    if run is not None:
        scheduling.max_run_duration = compute_v1.Duration(seconds=run)
        scheduling.instance_termination_action = action
    vm = compute_v1.Instance(
        name=name,
        machine_type=f"zones/{ZONE}/machineTypes/{machine}",
        scheduling=scheduling,
        labels=labels or {"dws_request": "r1"},
    )
    if wait is not None:
        vm.params = compute_v1.InstanceParams(request_valid_for_duration=compute_v1.Duration(seconds=wait))
    return vm


def insert(gce: Clients, vm: compute_v1.Instance, request_id: str = "") -> compute_v1.Operation:
    request = compute_v1.InsertInstanceRequest(project=P, zone=ZONE, instance_resource=vm)
    if request_id:
        request.request_id = request_id
    return gce.instances.insert_unary(request=request)


def get(gce: Clients, name: str) -> compute_v1.Instance:
    return gce.instances.get(project=P, zone=ZONE, instance=name)


def listed(gce: Clients, filter_: str = "") -> list[str]:
    request = compute_v1.ListInstancesRequest(project=P, zone=ZONE, filter=filter_)
    return [vm.name for vm in gce.instances.list(request=request)]


def record(emulator: Any, name: str) -> dict[str, Any]:
    return next(
        r for r in emulator.control.requests() if r["kind"] == "Instance" and r["display_name"] == name
    )


def test_a_flex_start_vm_waits_pending_then_runs_until_its_run_duration_deletes_it(
    gce, emulator, clock
) -> None:
    insert(gce, flex_vm("a", run=HOUR, labels={"dws_request": "r1", "team": "ml"}))
    insert(gce, flex_vm("b", run=HOUR))  # 16 H100 in all: both run at once
    insert(gce, flex_vm("c", wait=2 * HOUR, labels={"dws_request": "r2"}))  # waits for one of them
    clock.advance(0.1)
    a, c = get(gce, "a"), get(gce, "c")
    assert a.status == "RUNNING" and c.status == "PENDING"
    assert a.guest_accelerators[0].accelerator_count == 8
    assert a.guest_accelerators[0].accelerator_type.endswith("acceleratorTypes/nvidia-h100-80gb")
    assert a.network_interfaces[0].network_i_p.startswith("10.128.")
    assert a.scheduling.termination_time  # start + maxRunDuration
    assert listed(gce, 'labels.dws_request = "r1"') == ["a", "b"]
    assert listed(gce, 'labels.dws_request = "r1" AND labels.team = "ml"') == ["a"]
    assert listed(gce, "status = PENDING") == ["c"]
    states = [h["state"] for h in record(emulator, "a")["history"]]
    assert states == ["PENDING", "PROVISIONING", "STAGING", "RUNNING"]

    clock.advance(HOUR)  # a and b are deleted at the end of their run; c gets their GPUs
    for name in ("a", "b"):
        with pytest.raises(exceptions.NotFound):
            get(gce, name)
    assert get(gce, "c").status == "RUNNING"
    assert record(emulator, "a")["why_deleted"] == "maxRunDuration ended"
    assert emulator.control.capacity()[H100]["in_use"] == 8


def test_a_vm_not_obtained_within_its_wait_is_deleted(gce, emulator, clock) -> None:
    insert(gce, flex_vm("a"))
    insert(gce, flex_vm("b"))
    insert(gce, flex_vm("late", wait=120))
    clock.advance(60)
    assert get(gce, "late").status == "PENDING"
    clock.advance(61)
    with pytest.raises(exceptions.NotFound):
        get(gce, "late")
    rec = record(emulator, "late")
    assert rec["state"] == "DELETED" and rec["why_deleted"] == "no capacity within requestValidForDuration"
    assert rec["start_time"] is None
    assert emulator.control.capacity()[H100]["queued"] == 0


def test_no_wait_means_now_or_an_error_and_no_vm(gce, clock) -> None:
    op = insert(gce, flex_vm("now", wait=0))
    assert not op.error.errors and get(gce, "now").status == "RUNNING"
    assert gce.zone_ops.get(project=P, zone=ZONE, operation=op.name).target_link.endswith("/instances/now")
    insert(gce, flex_vm("other", wait=None))  # no wait given: as 0
    refused = insert(gce, flex_vm("refused", wait=0))
    assert refused.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    with pytest.raises(exceptions.NotFound):
        get(gce, "refused")


def test_stop_at_the_end_of_the_run_gives_the_gpus_back_and_keeps_the_vm(gce, emulator, clock) -> None:
    insert(gce, flex_vm("stopping", run=600, action="STOP"))
    clock.advance(0.1)
    assert get(gce, "stopping").status == "RUNNING"  # started on this tick
    clock.advance(600)
    vm = get(gce, "stopping")
    assert vm.status == "TERMINATED" and vm.last_stop_timestamp
    assert emulator.control.capacity()[H100]["in_use"] == 0
    op = gce.instances.delete_unary(project=P, zone=ZONE, instance="stopping")
    assert op.operation_type == "delete"
    with pytest.raises(exceptions.NotFound):
        get(gce, "stopping")


def test_deleting_a_waiting_vm_takes_it_out_of_the_queue(gce, emulator, clock) -> None:
    insert(gce, flex_vm("a"))
    insert(gce, flex_vm("b"))
    insert(gce, flex_vm("waiting"))
    clock.advance(0.1)
    assert emulator.control.capacity()[H100]["queued"] == 1
    gce.instances.delete_unary(project=P, zone=ZONE, instance="waiting")
    assert emulator.control.capacity()[H100]["queued"] == 0
    assert record(emulator, "waiting")["why_deleted"] == "deleted"
    with pytest.raises(exceptions.NotFound):
        gce.instances.delete_unary(project=P, zone=ZONE, instance="waiting")


def test_a_request_id_replays_the_insert_and_a_second_name_is_a_conflict(gce, emulator) -> None:
    first = insert(gce, flex_vm("once"), request_id="3f9e6a48-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    again = insert(gce, flex_vm("once"), request_id="3f9e6a48-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    assert again.name == first.name
    assert [r["display_name"] for r in emulator.control.requests() if r["kind"] == "Instance"] == ["once"]
    with pytest.raises(exceptions.Conflict):
        insert(gce, flex_vm("once"))


@pytest.mark.parametrize(
    ("vm", "found"),
    [
        (flex_vm("short", wait=30), "requestValidForDuration"),
        (flex_vm("long", wait=3 * HOUR), "requestValidForDuration"),
        (flex_vm("norun", run=None), "maxRunDuration"),
        (flex_vm("tiny", run=60), "maxRunDuration"),
        (flex_vm("ondemand", model="STANDARD", wait=None), "only as flex-start VMs"),
    ],
)
def test_what_a_flex_start_vm_may_not_be(gce, vm: compute_v1.Instance, found: str) -> None:
    with pytest.raises(exceptions.BadRequest) as refused:
        insert(gce, vm)
    assert found in str(refused.value)


def test_the_termination_action_and_maintenance_policy_are_checked(gce) -> None:
    vm = flex_vm("noaction")
    vm.scheduling.instance_termination_action = "INSTANCE_TERMINATION_ACTION_UNSPECIFIED"
    with pytest.raises(exceptions.BadRequest, match="STOP or DELETE"):
        insert(gce, vm)
    vm = flex_vm("migrate")
    vm.scheduling.on_host_maintenance = "MIGRATE"
    with pytest.raises(exceptions.BadRequest, match="onHostMaintenance"):
        insert(gce, vm)


def test_a_vm_without_gpus_runs_at_once(gce, emulator) -> None:
    vm = compute_v1.Instance(name="plain", machine_type=f"zones/{ZONE}/machineTypes/n2-standard-4")
    insert(gce, vm)
    assert get(gce, "plain").status == "RUNNING"
    assert emulator.control.capacity()[H100]["in_use"] == 0
