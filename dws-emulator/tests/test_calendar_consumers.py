"""Workloads on a calendar-mode reservation, through the unmodified clients of each surface: a Vertex
AI custom job (``reservation_affinity``), a TPU queued resource (``reservation_name``), a Batch job
(RESERVATION_BOUND with ``reservation``) and a MIG's VMs (RESERVATION_BOUND template). Each waits
for the delivery, runs on the reservation's own capacity, and is ended as its API would when the
block ends (or when the reservation will never come)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import batch_v1, compute_v1
from google.cloud.aiplatform_v1 import JobServiceClient
from google.cloud.aiplatform_v1 import types as vertex
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
from google.cloud.batch_v1.services.batch_service.transports import BatchServiceGrpcTransport
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2 import types as tpu
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport
from test_calendar_routes import (
    DAY,
    H100_A,
    ZONE,
    Clients,
    P,
    fr_path,
    gpu_block,
    insert,
    record,
    res_path,
    start_emulator,
    status,
    tpu_block,
)

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

TPU_ZONE = "us-west4-a"
RES = res_path("res-1")
KEY = "compute.googleapis.com/reservation-name"
LONG = str(30 * DAY)  # a workload that would run past the block's end


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    # No Flex Start H100s at all: whatever runs, runs on the reservation.
    return start_emulator(dws_emulator_server_factory, clock, {"us-central1/NVIDIA_H100_80GB": 0})


@pytest.fixture
def gce(emulator: Any) -> Clients:
    return Clients(emulator.server.rest_url)


@pytest.fixture
def block(gce: Clients, clock: FakeClock) -> float:
    """A 3-day block of 2 x a3-highgpu-8g (16 H100s) in us-central1-a, starting in 60 s; its start."""
    start = clock() + 60
    insert(gce, gpu_block("block", start, days=3, count=2, reservation="res-1"))
    clock.advance(1)
    assert status(gce, "block") == "PROCURING"
    return start


def deliver(emulator: Any, clock: FakeClock, start: float) -> None:
    """Past the start and the 1 s of provisioning, and one tick: the block is delivered."""
    clock.advance(start + 1.5 - clock())
    emulator.server.state.tick()


def end(clock: FakeClock, start: float, days: float = 3) -> None:
    clock.advance(start + days * DAY + 1 - clock())


# -- Vertex AI -------------------------------------------------------------------------------------


def vertex_client(emulator: Any) -> JobServiceClient:
    return JobServiceClient(
        transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(emulator.address))
    )


def vertex_job(name: str, reservation: str = RES, machine: str = "a3-highgpu-8g", strategy: str = "") -> Any:
    spec = vertex.MachineSpec(
        machine_type=machine,
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        reservation_affinity=vertex.ReservationAffinity(
            reservation_affinity_type=vertex.ReservationAffinity.Type.SPECIFIC_RESERVATION,
            key=KEY,
            values=[reservation],
        ),
    )
    job = vertex.CustomJob(
        display_name=name,
        job_spec=vertex.CustomJobSpec(
            worker_pool_specs=[
                vertex.WorkerPoolSpec(
                    machine_spec=spec,
                    replica_count=1,
                    container_spec=vertex.ContainerSpec(
                        image_uri="busybox", env=[vertex.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value=LONG)]
                    ),
                )
            ]
        ),
    )
    if strategy:
        job.job_spec.scheduling = vertex.Scheduling(strategy=strategy)
    return job


def test_vertex_jobs_wait_for_the_delivery_run_on_it_and_fail_when_the_block_ends(
    gce, clock, emulator, block
) -> None:
    client = vertex_client(emulator)
    parent = f"projects/{P}/locations/us-central1"
    jobs = [client.create_custom_job(parent=parent, custom_job=vertex_job(f"train-{i}")) for i in range(3)]
    clock.advance(0.1)
    assert {client.get_custom_job(name=j.name).state for j in jobs} == {vertex.JobState.JOB_STATE_PENDING}
    deliver(emulator, clock, block)
    states = [client.get_custom_job(name=j.name).state for j in jobs]
    assert states == [vertex.JobState.JOB_STATE_RUNNING] * 2 + [vertex.JobState.JOB_STATE_PENDING]
    assert (
        gce.reservations.get(project=P, zone=ZONE, reservation="res-1").specific_reservation.in_use_count == 2
    )
    rec = record(emulator, "block")
    assert [c["kind"] for c in rec["consumers"]] == ["CustomJob"] * 3

    end(clock, block)
    ran, waited = client.get_custom_job(name=jobs[0].name), client.get_custom_job(name=jobs[2].name)
    assert ran.state == waited.state == vertex.JobState.JOB_STATE_FAILED
    assert ran.error.code == 14 and ran.start_time  # UNAVAILABLE: capacity revoked after it started
    assert waited.error.code == 8 and not waited.start_time  # RESOURCE_EXHAUSTED: never started
    assert f"The reservation {RES} ended at" in ran.error.message and "its block ended" in ran.error.message
    assert emulator.control.capacity()[f"{H100_A}@res-1"]["in_use"] == 0


def test_vertex_refuses_an_unknown_ended_or_mismatched_reservation(gce, clock, emulator, block) -> None:
    client = vertex_client(emulator)
    parent = f"projects/{P}/locations/us-central1"
    for job, words in (
        (vertex_job("x", reservation=res_path("nope")), "does not exist"),
        (vertex_job("x", reservation="res-1"), "full reservation name"),
        (vertex_job("x", machine="a3-megagpu-8g"), "holds a3-highgpu-8g machines"),
        (vertex_job("x", strategy="FLEX_START"), "cannot be combined with a specific reservation"),
    ):
        with pytest.raises(exceptions.InvalidArgument) as refused:
            client.create_custom_job(parent=parent, custom_job=job)
        assert words in refused.value.message
    with pytest.raises(exceptions.InvalidArgument):  # the reservation is in us-central1, not us-east4
        client.create_custom_job(parent=f"projects/{P}/locations/us-east4", custom_job=vertex_job("x"))
    deliver(emulator, clock, block)
    end(clock, block)
    with pytest.raises(exceptions.InvalidArgument) as ended:
        client.create_custom_job(parent=parent, custom_job=vertex_job("late"))
    assert "does not exist" in ended.value.message


# -- Cloud TPU -------------------------------------------------------------------------------------


def tpu_client(emulator: Any) -> TpuClient:
    return TpuClient(transport=TpuGrpcTransport(channel=grpc.insecure_channel(emulator.address)))


def queued_resource(node: str, accelerator: str = "v5litepod-8", reservation: str = "tpu-block-res") -> Any:
    return tpu.QueuedResource(
        tpu=tpu.QueuedResource.Tpu(
            node_spec=[
                tpu.QueuedResource.Tpu.NodeSpec(
                    parent=f"projects/{P}/locations/{TPU_ZONE}",
                    node_id=node,
                    node=tpu.Node(accelerator_type=accelerator, runtime_version="v2-alpha-tpuv5-lite"),
                )
            ]
        ),
        reservation_name=f"projects/{P}/locations/{TPU_ZONE}/reservations/{reservation}",
    )


def test_tpu_queued_resources_wait_go_active_and_are_suspended_when_the_block_ends(
    gce, clock, emulator
) -> None:
    start = clock() + 60
    insert(gce, tpu_block("tpu-block", start, chips=16, days=2), zone=TPU_ZONE)
    clock.advance(1)
    client = tpu_client(emulator)
    parent = f"projects/{P}/locations/{TPU_ZONE}"
    for i in range(3):  # 8 chips each: two fit in the block
        client.create_queued_resource(
            parent=parent, queued_resource_id=f"qr-{i}", queued_resource=queued_resource(f"n-{i}")
        )
    clock.advance(0.1)
    State = tpu.QueuedResourceState.State

    def state(i: int) -> Any:
        return client.get_queued_resource(name=f"{parent}/queuedResources/qr-{i}").state.state

    assert {state(i) for i in range(3)} == {State.WAITING_FOR_RESOURCES}
    deliver(emulator, clock, start)
    clock.advance(1)  # PROVISIONING lasts 0.5 s
    assert [state(i) for i in range(3)] == [State.ACTIVE, State.ACTIVE, State.WAITING_FOR_RESOURCES]
    res = gce.reservations.get(project=P, zone=TPU_ZONE, reservation="tpu-block-res")
    assert res.aggregate_reservation.in_use_resources[0].accelerator.accelerator_count == 16

    end(clock, start, days=2)
    # SUSPENDING, then SUSPENDED on the next tick: the emulator's own ticker may make that tick
    # before this read (a fresh-clone make test saw SUSPENDED here), so the history tells the order.
    assert state(0) in (State.SUSPENDING, State.SUSPENDED)
    clock.advance(0.1)
    assert state(0) == State.SUSPENDED
    [qr0] = [r for r in emulator.control.requests() if r["name"].endswith("/queuedResources/qr-0")]
    steps = [h["state"] for h in qr0["history"]]
    assert steps[steps.index("ACTIVE") :][:3] == ["ACTIVE", "SUSPENDING", "SUSPENDED"], steps
    node = client.get_node(name=f"{parent}/nodes/n-0")
    assert node.state == tpu.Node.State.PREEMPTED and "tpu-block-res ended at" in node.health_description
    waited = client.get_queued_resource(name=f"{parent}/queuedResources/qr-2").state
    assert waited.state == State.FAILED and "tpu-block-res ended at" in waited.failed_data.error.message
    with pytest.raises(exceptions.InvalidArgument) as ended:
        client.create_queued_resource(
            parent=parent, queued_resource_id="late", queued_resource=queued_resource("late")
        )
    assert "does not exist any more" in ended.value.message


def test_a_tpu_of_another_family_is_refused(gce, clock, emulator) -> None:
    insert(gce, tpu_block("tpu-block", clock() + 60), zone=TPU_ZONE)
    clock.advance(1)
    with pytest.raises(exceptions.InvalidArgument) as refused:
        tpu_client(emulator).create_queued_resource(
            parent=f"projects/{P}/locations/{TPU_ZONE}",
            queued_resource_id="qr",
            queued_resource=queued_resource("n", accelerator="v6e-8"),
        )
    assert "holds v5litepod capacity, not v6e" in refused.value.message


# -- Cloud Batch -----------------------------------------------------------------------------------


def batch_client(emulator: Any) -> batch_v1.BatchServiceClient:
    return batch_v1.BatchServiceClient(
        transport=BatchServiceGrpcTransport(channel=grpc.insecure_channel(emulator.address))
    )


def batch_job(reservation: str = "res-1", model: str = "RESERVATION_BOUND") -> batch_v1.Job:
    policy = batch_v1.AllocationPolicy.InstancePolicy(
        machine_type="a3-highgpu-8g", provisioning_model=model, reservation=reservation
    )
    return batch_v1.Job(
        task_groups=[
            batch_v1.TaskGroup(
                task_spec=batch_v1.TaskSpec(
                    runnables=[batch_v1.Runnable(container=batch_v1.Runnable.Container(image_uri="busybox"))],
                    environment=batch_v1.Environment(variables={"DWS_EMULATOR_RUN_SECONDS": LONG}),
                )
            )
        ],
        allocation_policy=batch_v1.AllocationPolicy(
            instances=[batch_v1.AllocationPolicy.InstancePolicyOrTemplate(policy=policy)]
        ),
    )


def test_batch_jobs_run_on_the_reservation_and_fail_when_it_ends(gce, clock, emulator, block) -> None:
    client = batch_client(emulator)
    parent = f"projects/{P}/locations/us-central1"
    jobs = [client.create_job(parent=parent, job_id=f"job-{i}", job=batch_job()) for i in range(3)]
    State = batch_v1.JobStatus.State
    clock.advance(0.1)
    assert {client.get_job(name=j.name).status.state for j in jobs} == {State.QUEUED}
    deliver(emulator, clock, block)
    clock.advance(1)  # SCHEDULED lasts 0.5 s
    assert [client.get_job(name=j.name).status.state for j in jobs] == [
        State.RUNNING,
        State.RUNNING,
        State.QUEUED,
    ]
    end(clock, block)
    ran = client.get_job(name=jobs[0].name).status
    assert ran.state == State.FAILED
    assert "from RUNNING to FAILED" in ran.status_events[-1].description
    assert f"The reservation {RES} ended at" in ran.status_events[-1].description
    waited = client.get_job(name=jobs[2].name).status
    assert waited.state == State.FAILED and "from QUEUED to FAILED" in waited.status_events[-1].description
    batch_records = [r for r in emulator.control.requests() if r["kind"] == "BatchJob"]
    assert {r["reservation"] for r in batch_records} == {RES} and {r["pool"] for r in batch_records} == {
        f"{H100_A}@res-1"
    }


def test_batch_refuses_an_unknown_reservation_or_a_spot_vm_on_one(emulator, block) -> None:
    client = batch_client(emulator)
    parent = f"projects/{P}/locations/us-central1"
    with pytest.raises(exceptions.InvalidArgument) as unknown:
        client.create_job(parent=parent, job_id="unknown", job=batch_job("other"))
    assert "policy.reservation" in unknown.value.message and "does not exist" in unknown.value.message
    with pytest.raises(exceptions.InvalidArgument) as spot:
        client.create_job(parent=parent, job_id="spot", job=batch_job(model="SPOT"))
    assert "SPOT VM cannot consume a specific reservation" in spot.value.message


# -- Compute Engine MIG ----------------------------------------------------------------------------


def reservation_bound_mig(gce_url: str, name: str = "mig", reservation: str = "res-1") -> Any:
    opts = {"client_options": ClientOptions(api_endpoint=gce_url), "credentials": AnonymousCredentials()}
    templates = compute_v1.InstanceTemplatesClient(**opts)
    migs = compute_v1.InstanceGroupManagersClient(**opts)
    template = compute_v1.InstanceTemplate(
        name=f"{name}-tpl",
        properties=compute_v1.InstanceProperties(
            machine_type="a3-highgpu-8g",
            scheduling=compute_v1.Scheduling(
                provisioning_model="RESERVATION_BOUND", on_host_maintenance="TERMINATE"
            ),
            reservation_affinity=compute_v1.ReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=KEY, values=[reservation]
            ),
        ),
    )
    templates.insert_unary(project=P, instance_template_resource=template)
    migs.insert_unary(
        project=P,
        zone=ZONE,
        instance_group_manager_resource=compute_v1.InstanceGroupManager(
            name=name,
            instance_template=f"global/instanceTemplates/{name}-tpl",
            base_instance_name=name,
            target_size=0,
        ),
    )
    return (
        migs,
        compute_v1.InstanceGroupManagerResizeRequestsClient(**opts),
        compute_v1.InstancesClient(**opts),
    )


def test_mig_vms_are_created_on_the_reservation_and_deleted_when_it_ends(gce, clock, emulator, block) -> None:
    migs, resize, instances = reservation_bound_mig(emulator.server.rest_url)
    resize.insert_unary(  # no requested_run_duration: the VMs live as long as the reservation
        project=P,
        zone=ZONE,
        instance_group_manager="mig",
        instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
            name="rr", resize_by=2
        ),
    )
    clock.advance(0.1)
    rr = resize.get(project=P, zone=ZONE, instance_group_manager="mig", resize_request="rr")
    assert rr.state == "ACCEPTED" and RES in rr.status.last_attempt.error.errors[0].message
    deliver(emulator, clock, block)
    rr = resize.get(project=P, zone=ZONE, instance_group_manager="mig", resize_request="rr")
    assert rr.state == "SUCCEEDED"
    vms = list(migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager="mig"))
    assert len(vms) == 2
    vm = instances.get(project=P, zone=ZONE, instance=vms[0].name)
    assert vm.scheduling.provisioning_model == "RESERVATION_BOUND"
    assert list(vm.reservation_affinity.values) == ["res-1"]
    assert (
        gce.reservations.get(project=P, zone=ZONE, reservation="res-1").specific_reservation.in_use_count == 2
    )
    clock.advance(DAY)  # nothing ends before the block does
    assert len(list(migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager="mig"))) == 2

    end(clock, block)
    assert list(migs.list_managed_instances(project=P, zone=ZONE, instance_group_manager="mig")) == []
    with pytest.raises(exceptions.NotFound):
        instances.get(project=P, zone=ZONE, instance=vms[0].name)
    rr = resize.get(project=P, zone=ZONE, instance_group_manager="mig", resize_request="rr")
    assert rr.state == "SUCCEEDED"
    assert "last_attempt" not in rr.status  # a final state has none (discovery: lastAttempt)
    rec = next(r for r in emulator.control.requests() if r["kind"] == "ResizeRequest")
    assert rec["strategy"] == "RESERVATION_BOUND" and rec["reservation"] == RES and rec["vms_deleted"]


def test_a_resize_request_on_an_unknown_reservation_fails(gce, clock, emulator, block) -> None:
    _, resize, _ = reservation_bound_mig(emulator.server.rest_url, reservation="other")
    resize.insert_unary(
        project=P,
        zone=ZONE,
        instance_group_manager="mig",
        instance_group_manager_resize_request_resource=compute_v1.InstanceGroupManagerResizeRequest(
            name="rr", resize_by=1, requested_run_duration=compute_v1.Duration(seconds=3600)
        ),
    )
    clock.advance(0.1)
    rr = resize.get(project=P, zone=ZONE, instance_group_manager="mig", resize_request="rr")
    assert rr.state == "FAILED" and rr.status.error.errors[0].code == "RESOURCE_NOT_FOUND"
    assert res_path("other") in rr.status.error.errors[0].message


# -- a reservation that never comes ----------------------------------------------------------------


def test_consumers_waiting_for_a_cancelled_request_fail(gce, clock, emulator) -> None:
    insert(gce, gpu_block("far", clock() + 40 * DAY, reservation="res-1"))
    clock.advance(1)
    assert status(gce, "far") == "APPROVED"
    client = vertex_client(emulator)
    job = client.create_custom_job(
        parent=f"projects/{P}/locations/us-central1", custom_job=vertex_job("early")
    )
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="far")
    failed = client.get_custom_job(name=job.name)
    assert failed.state == vertex.JobState.JOB_STATE_FAILED and not failed.start_time
    assert f"The reservation {RES} will not be delivered" in failed.error.message
    assert "CANCELLED" in failed.error.message
    assert record(emulator, "far")["consumers"] == [{"name": job.name, "kind": "CustomJob"}]
    assert fr_path("far") in failed.error.message
