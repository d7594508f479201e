"""Compute Engine in the emulator (the REST front), through the unmodified ``compute_v1`` clients.

Each test runs a private in-process emulator with a ``FakeClock``: every call ticks the model, so
a transition that is due happens on the next call, and time passes only when the test says so.
The clients use the ``*_unary`` methods (the plain ones poll compute.googleapis.com) and the
operations clients on the same endpoint.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

P = "compute-test"
ZONE = "us-central1-a"
REGION = "us-central1"
H100 = "us-central1/NVIDIA_H100_80GB"
HOUR = 3600
DONE = compute_v1.Operation.Status.DONE


class Clients:
    """Every compute_v1 client the tests use, on the emulator's REST front."""

    def __init__(self, url: str) -> None:
        opts = {"client_options": ClientOptions(api_endpoint=url), "credentials": AnonymousCredentials()}
        self.templates = compute_v1.InstanceTemplatesClient(**opts)
        self.region_templates = compute_v1.RegionInstanceTemplatesClient(**opts)
        self.migs = compute_v1.InstanceGroupManagersClient(**opts)
        self.region_migs = compute_v1.RegionInstanceGroupManagersClient(**opts)
        self.resize = compute_v1.InstanceGroupManagerResizeRequestsClient(**opts)
        self.region_resize = compute_v1.RegionInstanceGroupManagerResizeRequestsClient(**opts)
        self.instances = compute_v1.InstancesClient(**opts)
        self.zone_ops = compute_v1.ZoneOperationsClient(**opts)
        self.region_ops = compute_v1.RegionOperationsClient(**opts)
        self.global_ops = compute_v1.GlobalOperationsClient(**opts)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator(dws_emulator_server_factory, clock):
    return dws_emulator_server_factory({H100: 16, "us-central1/NVIDIA_L4": 4}, clock=clock)


@pytest.fixture
def gce(emulator) -> Clients:
    return Clients(emulator.server.rest_url)


def flex_template(
    name: str = "tpl", machine: str = "a3-highgpu-8g", model: str = "FLEX_START", restart: bool = False
) -> compute_v1.InstanceTemplate:
    scheduling = compute_v1.Scheduling(
        provisioning_model=model,
        on_host_maintenance="TERMINATE",
        automatic_restart=restart,
        instance_termination_action="DELETE",
    )
    return compute_v1.InstanceTemplate(
        name=name,
        properties=compute_v1.InstanceProperties(machine_type=machine, scheduling=scheduling),
    )


def make_mig(
    gce: Clients,
    name: str = "mig",
    template: str = "tpl",
    machine: str = "a3-highgpu-8g",
    create: bool = True,
) -> None:
    if create:
        with contextlib.suppress(exceptions.Conflict):  # the MIGs of a test may share one template
            gce.templates.insert_unary(project=P, instance_template_resource=flex_template(template, machine))
    op = gce.migs.insert_unary(
        project=P,
        zone=ZONE,
        instance_group_manager_resource=compute_v1.InstanceGroupManager(
            name=name,
            instance_template=f"global/instanceTemplates/{template}",
            target_size=0,
            base_instance_name=name,
        ),
    )
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE


def resize(
    gce: Clients, name: str, count: int = 1, mig: str = "mig", run: int = HOUR, request_id: str = ""
) -> compute_v1.Operation:
    request = compute_v1.InsertInstanceGroupManagerResizeRequestRequest(
        project=P,
        zone=ZONE,
        instance_group_manager=mig,
        instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
            name=name, resize_by=count, requested_run_duration=compute_v1.Duration(seconds=run)
        ),
    )
    if request_id:
        request.request_id = request_id
    return gce.resize.insert_unary(request=request)


def get(gce: Clients, name: str, mig: str = "mig") -> compute_v1.InstanceGroupManagerResizeRequest:
    return gce.resize.get(project=P, zone=ZONE, instance_group_manager=mig, resize_request=name)


def vms(gce: Clients, mig: str = "mig") -> list[compute_v1.ManagedInstance]:
    return list(gce.migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager=mig))


def reason(exc: exceptions.GoogleAPICallError) -> str:
    return exc.errors[0]["reason"]


# -- templates, MIGs, operations ------------------------------------------------------------------


def test_template_insert_get_global_operation_and_errors(gce) -> None:
    op = gce.templates.insert_unary(project=P, instance_template_resource=flex_template())
    assert op.operation_type == "insert" and op.status == compute_v1.Operation.Status.RUNNING
    assert op.target_link.endswith(f"projects/{P}/global/instanceTemplates/tpl")
    done = gce.global_ops.wait(project=P, operation=op.name)
    assert done.status == DONE and done.progress == 100 and done.end_time
    assert gce.global_ops.get(project=P, operation=op.name).status == DONE
    tpl = gce.templates.get(project=P, instance_template="tpl")
    assert tpl.kind == "compute#instanceTemplate" and tpl.id > 0 and tpl.creation_timestamp
    assert tpl.self_link == f"https://www.googleapis.com/compute/v1/projects/{P}/global/instanceTemplates/tpl"
    assert tpl.properties.scheduling.provisioning_model == "FLEX_START"

    with pytest.raises(exceptions.Conflict) as conflict:
        gce.templates.insert_unary(project=P, instance_template_resource=flex_template())
    assert conflict.value.code == 409 and reason(conflict.value) == "alreadyExists"
    with pytest.raises(exceptions.NotFound) as missing:
        gce.templates.get(project=P, instance_template="nope")
    assert reason(missing.value) == "notFound"
    assert f"projects/{P}/global/instanceTemplates/nope" in missing.value.message
    with pytest.raises(exceptions.BadRequest) as bad:
        gce.templates.insert_unary(project=P, instance_template_resource=flex_template(name="Bad_Name"))
    assert reason(bad.value) == "invalid" and "resource.name" in bad.value.message
    with pytest.raises(exceptions.NotFound):
        gce.global_ops.get(project=P, operation="operation-0")

    op = gce.region_templates.insert_unary(
        project=P, region=REGION, instance_template_resource=flex_template("regional")
    )
    assert gce.region_ops.wait(project=P, region=REGION, operation=op.name).status == DONE
    assert gce.region_templates.get(project=P, region=REGION, instance_template="regional").region.endswith(
        f"regions/{REGION}"
    )


def test_mig_insert_get_list_pages_and_delete(gce, emulator) -> None:
    gce.templates.insert_unary(project=P, instance_template_resource=flex_template())
    for i in range(5):
        make_mig(gce, f"mig-{i}", template="tpl")
    mig = gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig-0")
    assert mig.kind == "compute#instanceGroupManager" and mig.target_size == 0 and mig.status.is_stable
    assert mig.instance_template.endswith(f"projects/{P}/global/instanceTemplates/tpl")
    assert mig.zone.endswith(f"zones/{ZONE}")
    emulator.server.stats.reset()
    pager = gce.migs.list(
        request=compute_v1.ListInstanceGroupManagersRequest(project=P, zone=ZONE, max_results=2)
    )
    assert [m.name for m in pager] == [f"mig-{i}" for i in range(5)]
    assert emulator.calls("compute.instanceGroupManagers.list") == 3  # pages of 2, 2 and 1
    listed = gce.migs.list(
        request=compute_v1.ListInstanceGroupManagersRequest(project=P, zone=ZONE, filter='name = "mig-3"')
    )
    assert [m.name for m in listed] == ["mig-3"]

    with pytest.raises(exceptions.Conflict):
        make_mig(gce, "mig-0", create=False)
    with pytest.raises(exceptions.NotFound):
        make_mig(gce, "orphan", template="missing", create=False)
    with pytest.raises(exceptions.BadRequest) as no_size:  # targetSize is required by insert
        gce.migs.insert_unary(
            project=P,
            zone=ZONE,
            instance_group_manager_resource=compute_v1.InstanceGroupManager(
                name="sizeless", instance_template="global/instanceTemplates/tpl", base_instance_name="s"
            ),
        )
    assert reason(no_size.value) == "required" and "resource.targetSize" in str(no_size.value)
    op = gce.migs.delete_unary(project=P, zone=ZONE, instance_group_manager="mig-4")
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE
    with pytest.raises(exceptions.NotFound):
        gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig-4")


# -- resize requests --------------------------------------------------------------------------------


def test_resize_request_waits_for_all_gpus_then_succeeds_with_running_vms(gce, emulator) -> None:
    make_mig(gce)
    op = resize(gce, "first", count=2)  # 16 H100: all the pool
    assert op.status == compute_v1.Operation.Status.RUNNING and op.operation_type == "insert"
    assert get(gce, "first").state == "SUCCEEDED"
    resize(gce, "second", count=1)
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE
    second = get(gce, "second")
    assert second.state == "ACCEPTED" and second.resize_by == 1
    assert second.kind == "compute#instanceGroupManagerResizeRequest" and second.zone.endswith(
        f"zones/{ZONE}"
    )
    assert second.requested_run_duration.seconds == HOUR
    assert second.status.last_attempt.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert not get(gce, "first").status.last_attempt.error.errors

    managed = vms(gce)
    assert len(managed) == 2 and {m.instance_status for m in managed} == {"RUNNING"}
    assert gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig").target_size == 2
    vm = gce.instances.get(project=P, zone=ZONE, instance=managed[0].name)
    assert vm.status == "RUNNING" and vm.machine_type.endswith("machineTypes/a3-highgpu-8g")
    assert vm.network_interfaces[0].network_i_p.startswith("10.128.")
    assert vm.guest_accelerators[0].accelerator_type.endswith("acceleratorTypes/nvidia-h100-80gb")
    assert vm.guest_accelerators[0].accelerator_count == 8
    assert vm.scheduling.provisioning_model == "FLEX_START" and vm.scheduling.automatic_restart is False
    assert emulator.control.capacity()[H100] == {"total": 16, "in_use": 16, "free": 0, "queued": 1}

    [record] = [r for r in emulator.control.requests() if r["display_name"] == "first"]
    assert record["kind"] == "ResizeRequest" and record["state"] == "SUCCEEDED"
    assert [h["state"] for h in record["history"]] == ["CREATING", "ACCEPTED", "SUCCEEDED"]
    assert record["instance_group_manager"] == f"projects/{P}/zones/{ZONE}/instanceGroupManagers/mig"
    assert record["accelerator_count"] == 16 and record["pool"] == H100
    assert {vm["name"] for vm in record["instances"]} == {m.name for m in managed}
    assert record["start_time"] and not record["vms_deleted"]


def test_request_id_replays_the_operation_and_a_duplicate_name_is_409(gce) -> None:
    make_mig(gce)
    request_id = str(uuid.uuid4())
    first = resize(gce, "rr", request_id=request_id)
    again = resize(gce, "rr", request_id=request_id)
    assert again.name == first.name and again.target_id == first.target_id
    listed = list(gce.resize.list(project=P, zone=ZONE, instance_group_manager="mig"))
    assert [r.name for r in listed] == ["rr"]
    assert len(vms(gce)) == 1  # no second request, no second VM
    with pytest.raises(exceptions.Conflict) as conflict:
        resize(gce, "rr")
    assert reason(conflict.value) == "alreadyExists"
    with pytest.raises(exceptions.BadRequest) as bad:
        resize(gce, "other", request_id="not-a-uuid")
    assert "requestId" in bad.value.message


def test_cancel_and_delete_follow_the_state_rules(gce, emulator) -> None:
    make_mig(gce)
    resize(gce, "running", count=2)
    resize(gce, "waiting", count=1)
    waiting = get(gce, "waiting")
    assert waiting.state == "ACCEPTED" and waiting.status.last_attempt.error.errors
    with pytest.raises(exceptions.PreconditionFailed) as cancel_succeeded:
        gce.resize.cancel_unary(project=P, zone=ZONE, instance_group_manager="mig", resize_request="running")
    assert cancel_succeeded.value.code == 412 and reason(cancel_succeeded.value) == "conditionNotMet"
    with pytest.raises(exceptions.PreconditionFailed) as delete_waiting:
        gce.resize.delete_unary(project=P, zone=ZONE, instance_group_manager="mig", resize_request="waiting")
    assert reason(delete_waiting.value) == "conditionNotMet"

    op = gce.resize.cancel_unary(project=P, zone=ZONE, instance_group_manager="mig", resize_request="waiting")
    assert op.operation_type == "cancel"
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE
    cancelled = get(gce, "waiting")
    # lastAttempt "is cleared when ResizeRequest transitions to the final state" (discovery).
    assert cancelled.state == "CANCELLED" and "last_attempt" not in cancelled.status
    assert emulator.control.capacity()[H100]["queued"] == 0
    gce.resize.delete_unary(project=P, zone=ZONE, instance_group_manager="mig", resize_request="waiting")
    with pytest.raises(exceptions.NotFound):
        get(gce, "waiting")

    # Deleting a SUCCEEDED request leaves its VMs running (and their GPUs held).
    gce.resize.delete_unary(project=P, zone=ZONE, instance_group_manager="mig", resize_request="running")
    with pytest.raises(exceptions.NotFound):
        get(gce, "running")
    assert len(vms(gce)) == 2 and emulator.control.capacity()[H100]["in_use"] == 16
    [record] = [r for r in emulator.control.requests() if r["display_name"] == "running"]
    assert record["deleted"] and not record["vms_deleted"]


def test_run_duration_end_deletes_the_vms_and_hands_the_gpus_on(gce, emulator, clock) -> None:
    make_mig(gce)
    resize(gce, "short", count=2, run=600)
    resize(gce, "next", count=1, run=HOUR)
    assert get(gce, "next").state == "ACCEPTED"
    names = [m.name for m in vms(gce)]
    clock.advance(599)
    assert len(vms(gce)) == 2
    clock.advance(1)
    assert get(gce, "short").state == "SUCCEEDED"  # stays SUCCEEDED after its VMs are gone
    for name in names:
        with pytest.raises(exceptions.NotFound):
            gce.instances.get(project=P, zone=ZONE, instance=name)
    assert get(gce, "next").state == "SUCCEEDED"  # its GPUs were free in the same tick
    assert len(vms(gce)) == 1
    assert gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig").target_size == 1
    [record] = [r for r in emulator.control.requests() if r["display_name"] == "short"]
    assert record["vms_deleted"] and all(vm["deleted"] for vm in record["instances"])
    assert [h["state"] for h in record["history"]][-1] == "VMS_DELETED"
    assert record["end_time"] == record["history"][-1]["time"]


@pytest.mark.parametrize("seconds", [599, 7 * 24 * HOUR + 1])
def test_a_run_duration_outside_ten_minutes_to_seven_days_is_refused(gce, seconds) -> None:
    make_mig(gce)
    with pytest.raises(exceptions.BadRequest) as bad:
        resize(gce, "rr", run=seconds)
    assert reason(bad.value) == "invalid" and "requestedRunDuration" in bad.value.message


def test_resize_by_zero_and_missing_mig_are_refused(gce) -> None:
    make_mig(gce)
    with pytest.raises(exceptions.BadRequest):
        resize(gce, "rr", count=0)
    with pytest.raises(exceptions.NotFound):
        resize(gce, "rr", mig="nope")


@pytest.mark.parametrize(("model", "restart"), [("STANDARD", False), ("FLEX_START", True)])
def test_a_template_not_ready_for_flex_start_fails_the_request(gce, model, restart) -> None:
    gce.templates.insert_unary(
        project=P, instance_template_resource=flex_template("plain", model=model, restart=restart)
    )
    make_mig(gce, template="plain")
    resize(gce, "rr")
    failed = get(gce, "rr")
    assert failed.state == "FAILED"
    assert failed.status.error.errors[0].code == "CONDITION_NOT_MET"
    assert "FLEX_START" in failed.status.error.errors[0].message
    assert "last_attempt" not in failed.status  # a FAILED request's error is in status.error only
    assert vms(gce) == []


def test_list_pages_and_filters_resize_requests(gce, emulator) -> None:
    make_mig(gce, machine="g2-standard-4")  # 1 L4 each, 4 in the pool
    for i in range(6):
        resize(gce, f"rr-{i}")
    emulator.server.stats.reset()
    pager = gce.resize.list(
        request=compute_v1.ListInstanceGroupManagerResizeRequestsRequest(
            project=P, zone=ZONE, instance_group_manager="mig", max_results=4
        )
    )
    assert [r.name for r in pager] == [f"rr-{i}" for i in range(6)]
    assert emulator.calls("compute.instanceGroupManagerResizeRequests.list") == 2
    waiting = gce.resize.list(
        request=compute_v1.ListInstanceGroupManagerResizeRequestsRequest(
            project=P, zone=ZONE, instance_group_manager="mig", filter='state = "ACCEPTED"'
        )
    )
    assert [r.name for r in waiting] == ["rr-4", "rr-5"]
    with pytest.raises(exceptions.BadRequest):
        list(
            gce.resize.list(
                request=compute_v1.ListInstanceGroupManagerResizeRequestsRequest(
                    project=P, zone=ZONE, instance_group_manager="mig", filter="labels.x = y"
                )
            )
        )


def test_delete_instances_frees_their_gpus_and_mig_delete_deletes_its_vms(gce, emulator) -> None:
    make_mig(gce)
    resize(gce, "held", count=2)
    resize(gce, "waiting", count=1)
    first, second = (m.instance for m in vms(gce))
    op = gce.migs.delete_instances_unary(
        project=P,
        zone=ZONE,
        instance_group_manager="mig",
        instance_group_managers_delete_instances_request_resource=compute_v1.InstanceGroupManagersDeleteInstancesRequest(
            instances=[first]
        ),
    )
    assert op.operation_type == "deleteInstances"
    assert get(gce, "waiting").state == "SUCCEEDED"  # one VM's 8 GPUs were enough
    assert gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig").target_size == 2
    with pytest.raises(exceptions.BadRequest):
        gce.migs.delete_instances_unary(
            project=P,
            zone=ZONE,
            instance_group_manager="mig",
            instance_group_managers_delete_instances_request_resource=compute_v1.InstanceGroupManagersDeleteInstancesRequest(
                instances=[first]
            ),
        )
    assert second in {m.instance for m in vms(gce)}
    gce.migs.delete_unary(project=P, zone=ZONE, instance_group_manager="mig")
    assert emulator.control.capacity()[H100]["in_use"] == 0
    records = {r["display_name"]: r for r in emulator.control.requests()}
    assert records["held"]["vms_deleted"] and records["waiting"]["vms_deleted"]
    assert [h["state"] for h in records["held"]["history"]][-2:] == ["VMS_DELETED", "DELETED"]
    assert records["held"]["end_time"] and records["held"]["deleted"]


# -- regional ---------------------------------------------------------------------------------------


def test_regional_mig_resize_request_spreads_vms_over_its_zones(gce, emulator, clock) -> None:
    gce.templates.insert_unary(project=P, instance_template_resource=flex_template("l4", "g2-standard-4"))
    zones = [f"{REGION}-a", f"{REGION}-b"]
    policy = compute_v1.DistributionPolicy(
        zones=[compute_v1.DistributionPolicyZoneConfiguration(zone=f"zones/{z}") for z in zones]
    )
    op = gce.region_migs.insert_unary(
        project=P,
        region=REGION,
        instance_group_manager_resource=compute_v1.InstanceGroupManager(
            name="rmig",
            instance_template="global/instanceTemplates/l4",
            target_size=0,
            distribution_policy=policy,
        ),
    )
    assert gce.region_ops.wait(project=P, region=REGION, operation=op.name).status == DONE
    request_id = str(uuid.uuid4())
    body = compute_v1.InstanceGroupManagerResizeRequest(
        name="rrr", resize_by=3, requested_run_duration=compute_v1.Duration(seconds=600)
    )
    insert = compute_v1.InsertRegionInstanceGroupManagerResizeRequestRequest(
        project=P,
        region=REGION,
        instance_group_manager="rmig",
        instance_group_manager_resize_request_resource=body,
        request_id=request_id,
    )
    op = gce.region_resize.insert_unary(request=insert)
    assert gce.region_resize.insert_unary(request=insert).name == op.name
    assert op.region.endswith(f"regions/{REGION}")
    assert gce.region_ops.wait(project=P, region=REGION, operation=op.name).status == DONE
    rr = gce.region_resize.get(project=P, region=REGION, instance_group_manager="rmig", resize_request="rrr")
    assert rr.state == "SUCCEEDED" and rr.region.endswith(f"regions/{REGION}")
    managed = list(
        gce.region_migs.list_managed_instances(project=P, region=REGION, instance_group_manager="rmig")
    )
    placed = sorted(m.instance.split("/zones/")[1].split("/")[0] for m in managed)
    assert placed == [zones[0], zones[0], zones[1]]
    [in_b] = [m for m in managed if f"/zones/{zones[1]}/" in m.instance]
    vm = gce.instances.get(project=P, zone=zones[1], instance=in_b.name)
    assert vm.zone.endswith(f"zones/{zones[1]}") and vm.guest_accelerators[0].accelerator_type.endswith(
        "nvidia-l4"
    )
    assert [
        r.name for r in gce.region_resize.list(project=P, region=REGION, instance_group_manager="rmig")
    ] == ["rrr"]
    pages = gce.region_resize.list(project=P, region=REGION, instance_group_manager="rmig").pages
    assert next(iter(pages)).kind == "compute#regionInstanceGroupManagerResizeRequestList"
    assert gce.region_migs.get(project=P, region=REGION, instance_group_manager="rmig").target_size == 3
    assert [m.name for m in gce.region_migs.list(project=P, region=REGION)] == ["rmig"]

    one = managed[0]
    gce.region_migs.delete_instances_unary(
        project=P,
        region=REGION,
        instance_group_manager="rmig",
        region_instance_group_managers_delete_instances_request_resource=compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
            instances=[one.instance]
        ),
    )
    assert emulator.control.capacity()["us-central1/NVIDIA_L4"]["in_use"] == 2
    with pytest.raises(exceptions.PreconditionFailed):
        gce.region_resize.cancel_unary(
            project=P, region=REGION, instance_group_manager="rmig", resize_request="rrr"
        )
    clock.advance(600)
    assert (
        list(gce.region_migs.list_managed_instances(project=P, region=REGION, instance_group_manager="rmig"))
        == []
    )
    assert emulator.control.capacity()["us-central1/NVIDIA_L4"]["in_use"] == 0
    gce.region_resize.delete_unary(
        project=P, region=REGION, instance_group_manager="rmig", resize_request="rrr"
    )
    with pytest.raises(exceptions.NotFound):
        gce.region_resize.get(project=P, region=REGION, instance_group_manager="rmig", resize_request="rrr")
    too_many = compute_v1.InstanceGroupManagerResizeRequest(
        name="wait", resize_by=5, requested_run_duration=compute_v1.Duration(seconds=HOUR)
    )  # 5 L4 of a pool of 4: it waits, and is cancelled
    gce.region_resize.insert_unary(
        project=P,
        region=REGION,
        instance_group_manager="rmig",
        instance_group_manager_resize_request_resource=too_many,
    )
    clock.advance(0.1)
    op = gce.region_resize.cancel_unary(
        project=P, region=REGION, instance_group_manager="rmig", resize_request="wait"
    )
    assert gce.region_ops.get(project=P, region=REGION, operation=op.name).operation_type == "cancel"
    waited = gce.region_resize.get(
        project=P, region=REGION, instance_group_manager="rmig", resize_request="wait"
    )
    assert waited.state == "CANCELLED" and "last_attempt" not in waited.status
    gce.region_migs.delete_unary(project=P, region=REGION, instance_group_manager="rmig")
    with pytest.raises(exceptions.NotFound):
        gce.region_migs.get(project=P, region=REGION, instance_group_manager="rmig")
