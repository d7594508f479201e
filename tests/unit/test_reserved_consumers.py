"""Workloads on a calendar block's reservation: the request bodies of the four consumers (Vertex AI,
Cloud Batch, Compute Engine, Cloud TPU), the naming and placement checks, the block-end check at parse
and submit time, the record and the revoked error, and how each API's "reservation ended" is classified."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.batch import BATCH_JOB_STATES
from airflow_provider_dws.backends.compute import COMPUTE_RESIZE_REQUEST_STATES
from airflow_provider_dws.backends.tpu import TPU_QUEUED_RESOURCE_STATES
from airflow_provider_dws.backends.vertex_ai import VERTEX_JOB_STATES
from airflow_provider_dws.exceptions import BadRequestError, CapacityRevokedError
from airflow_provider_dws.operators.batch import CreateBatchReservedJobOperator
from airflow_provider_dws.operators.calendar import (
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.operators.compute import CreateComputeReservedVMsOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIReservedJobOperator
from airflow_provider_dws.runtime.reserved import Block, check_fits
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
)
from airflow_provider_dws.scheduling.policies import Placement

P = "my-project"
ZONE = "us-central1-a"
RES = f"projects/{P}/zones/{ZONE}/reservations/block-1"
FR = f"projects/{P}/zones/{ZONE}/futureReservations/block-1"
END = datetime(2026, 12, 8, 10, tzinfo=timezone.utc)
GPU_BLOCK = Block(
    reservation=RES,
    future_reservation=FR,
    start="2026-12-01T10:00:00+00:00",
    end=END.isoformat(),
    machine_type="a3-highgpu-8g",
)
TPU_BLOCK = Block(
    reservation="projects/my-project/zones/us-west4-a/reservations/tpu-block",
    future_reservation="projects/my-project/zones/us-west4-a/futureReservations/tpu-block",
    end=END.isoformat(),
    tpu_version="v5e",
)
IDENTITY = RequestIdentity("cal_dag", "train", "manual__1")
POOL = {
    "machine_spec": {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    },
    "replica_count": 2,
    "container_spec": {"image_uri": "img:1"},
}
KEY = "compute.googleapis.com/reservation-name"


def vertex(**kw: Any) -> CreateVertexAIReservedJobOperator:
    args: dict[str, Any] = {
        "task_id": "train",
        "project_id": P,
        "block_task_id": "wait",
        "worker_pool_specs": [POOL],
    }
    args.update(kw)
    return CreateVertexAIReservedJobOperator(**args)


def batch(**kw: Any) -> CreateBatchReservedJobOperator:
    args: dict[str, Any] = {
        "task_id": "shard",
        "project_id": P,
        "block_task_id": "wait",
        "image_uri": "img:1",
        "machine_type": "a3-highgpu-8g",
        "task_count": 2,
    }
    args.update(kw)
    return CreateBatchReservedJobOperator(**args)


def compute(**kw: Any) -> CreateComputeReservedVMsOperator:
    args: dict[str, Any] = {
        "task_id": "vms",
        "project_id": P,
        "block_task_id": "wait",
        "machine_type": "a3-highgpu-8g",
        "resize_by": 2,
    }
    args.update(kw)
    return CreateComputeReservedVMsOperator(**args)


def tpu(**kw: Any) -> CreateTPUQueuedResourceOperator:
    args: dict[str, Any] = {
        "task_id": "evaluate",
        "project_id": P,
        "block_task_id": "wait",
        "accelerator_type": "v5litepod-8",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    args.update(kw)
    return CreateTPUQueuedResourceOperator(**args)


# -- the request bodies ----------------------------------------------------------------------------


def test_vertex_job_names_the_reservation_in_every_accelerated_pool_and_has_no_flex_start() -> None:
    from google.cloud.aiplatform_v1 import ReservationAffinity, Scheduling

    op = vertex(worker_pool_specs=[POOL, {}, POOL], max_run=timedelta(hours=6))
    op.use_block(GPU_BLOCK)
    assert op.region == "us-central1"  # the reservation's
    job = op.adapter().build(IDENTITY, Placement(op.region))
    affinity = ReservationAffinity(
        reservation_affinity_type=ReservationAffinity.Type.SPECIFIC_RESERVATION, key=KEY, values=[RES]
    )
    pools = job.job_spec.worker_pool_specs
    assert [p.machine_spec.reservation_affinity for p in pools if p.machine_spec.accelerator_count] == [
        affinity
    ] * 2
    scheduling = job.job_spec.scheduling
    assert scheduling.strategy == Scheduling.Strategy.STRATEGY_UNSPECIFIED
    assert "max_wait_duration" not in scheduling and scheduling.timeout == timedelta(hours=6)
    assert job.labels["dws_task"] == "train"


def test_vertex_job_without_max_run_leaves_the_timeout_to_the_api() -> None:
    op = vertex()
    op.use_block(GPU_BLOCK)
    assert "timeout" not in op.adapter().build(IDENTITY).job_spec.scheduling


def test_batch_job_is_reservation_bound_in_the_reservation_zone() -> None:
    from google.cloud.batch_v1 import AllocationPolicy

    op = batch(max_run=timedelta(hours=2))
    op.use_block(GPU_BLOCK)
    job = op.adapter().build(IDENTITY)
    [instance] = job.allocation_policy.instances
    assert instance.policy.provisioning_model == AllocationPolicy.ProvisioningModel.RESERVATION_BOUND
    assert instance.policy.reservation == RES
    assert list(job.allocation_policy.location.allowed_locations) == [f"zones/{ZONE}"]
    assert job.task_groups[0].task_spec.max_run_duration == timedelta(hours=2)


def test_compute_template_is_reservation_bound_and_the_request_has_no_run_duration() -> None:
    op = compute()
    op.use_block(GPU_BLOCK)
    assert op.zone == ZONE
    adapter = op.adapter()
    template = adapter.template_for("dws-vms-x", Placement(ZONE))
    props = template.properties
    assert props.scheduling.provisioning_model == "RESERVATION_BOUND"
    assert props.scheduling.on_host_maintenance == "TERMINATE"
    assert "instance_termination_action" not in props.scheduling
    affinity = props.reservation_affinity
    assert (affinity.consume_reservation_type, affinity.key, list(affinity.values)) == (
        "SPECIFIC_RESERVATION",
        KEY,
        ["block-1"],
    )
    request = adapter.build(IDENTITY)
    assert "requested_run_duration" not in request and request.resize_by == 2


def test_compute_template_names_another_project_reservation_by_project() -> None:
    op = compute(project_id="other-project")
    op.use_block(GPU_BLOCK)
    values = op.adapter().template_for("t", Placement(ZONE)).properties.reservation_affinity.values
    assert list(values) == [f"projects/{P}/reservations/block-1"]


def test_tpu_queued_resource_takes_the_block_zone_and_reservation_name() -> None:
    op = tpu()
    assert op.zone is None
    op.use_block(TPU_BLOCK)
    assert op.zone == "us-west4-a"
    qr = op.adapter().build({}, f"projects/{P}/locations/us-west4-a", "node")
    assert qr.reservation_name == "projects/my-project/locations/us-west4-a/reservations/tpu-block"


def test_a_machine_type_that_is_not_the_block_is_refused_before_submitting() -> None:
    op = vertex(
        worker_pool_specs=[
            {
                **POOL,
                "machine_spec": {
                    **POOL["machine_spec"],
                    "machine_type": "a3-megagpu-8g",
                    "accelerator_type": "NVIDIA_H100_MEGA_80GB",
                },
            }
        ]
    )
    op.use_block(GPU_BLOCK)
    with pytest.raises(BadRequestError, match="holds a3-highgpu-8g VMs"):
        op.adapter().build(IDENTITY)


# -- naming and placement --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_task_id": None}, "pass exactly one of block_task_id"),
        ({"reservation": RES}, "pass exactly one of block_task_id"),
        ({"block_task_id": None, "reservation": "res-1"}, "reservation must be a reservation's"),
        ({"block_task_id": ""}, "block_task_id must be a task id"),
        (
            {"failover": ["us-east4"], "capacity_retry": 2},
            "cannot be combined with a calendar reservation",
        ),
        ({"allow_past_block_end": "yes"}, "allow_past_block_end must be True or False"),
    ],
)
def test_naming_checks_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vertex(**kwargs)


@pytest.mark.parametrize("name", [RES, FR, "projects/p1/locations/us-west4-a/reservations/r"])
def test_a_reservation_or_future_reservation_full_name_is_accepted(name: str) -> None:
    assert vertex(block_task_id=None, reservation=name).reservation == name


def test_a_templated_reservation_is_checked_after_rendering() -> None:
    op = vertex(block_task_id=None, reservation="{{ ti.xcom_pull('wait')['reservations'][0] }}")
    op.reservation = "not-a-name"  # what the template rendered to
    with pytest.raises(ValueError, match="reservation must be a reservation's"):
        op.check_parameters(rendered=True)


def test_a_location_other_than_the_reservation_is_refused() -> None:
    op = vertex(region="us-east4")
    with pytest.raises(BadRequestError, match="region 'us-east4' is not where its reservation"):
        op.use_block(GPU_BLOCK)
    vertex(region="us-central1").use_block(GPU_BLOCK)  # the same region is fine


def test_compute_consumer_refuses_a_region_and_a_run_duration() -> None:
    with pytest.raises(ValueError, match="a reservation is zonal"):
        compute(region="us-central1")
    with pytest.raises(TypeError, match="takes no max_run"):
        compute(max_run=3600)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spot": True}, "a calendar block is not spot capacity"),
        ({"reservation_name": "projects/p1/locations/us-west4-a/reservations/r"}, "not both"),
        ({"failover": ["us-east5-a"], "capacity_retry": 2}, "cannot be combined with a calendar reservation"),
        ({"block_task_id": None}, "zone must be a Cloud TPU zone"),
    ],
)
def test_tpu_block_checks(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tpu(**kwargs)


def test_the_tpu_operator_without_a_block_is_unchanged() -> None:
    op = tpu(block_task_id=None, zone="us-west4-a")
    assert not op.on_block and op.adapter().block is None


# -- the block's end -------------------------------------------------------------------------------


def test_a_workload_that_would_outlast_the_block_is_refused_with_the_end_time() -> None:
    op = vertex(max_run=timedelta(days=2))
    op.use_block(GPU_BLOCK)
    with pytest.raises(BadRequestError) as refused:
        check_fits(op, GPU_BLOCK, now=END - timedelta(days=1))
    assert END.isoformat() in str(refused.value) and "allow_past_block_end=True" in str(refused.value)
    check_fits(op, GPU_BLOCK, now=END - timedelta(days=3))  # fits
    allowed = vertex(max_run=timedelta(days=2), allow_past_block_end=True)
    check_fits(allowed, GPU_BLOCK, now=END - timedelta(days=1))
    check_fits(vertex(), GPU_BLOCK, now=END)  # no max_run: nothing to check


def test_the_block_end_is_checked_before_each_submit() -> None:
    op = batch(max_run=timedelta(days=7))
    op.use_block(Block(reservation=RES, end=(datetime.now(timezone.utc) + timedelta(days=1)).isoformat()))
    with pytest.raises(BadRequestError, match="past the end of its reservation"):
        op.adapter().submit({}, IDENTITY, Placement("us-central1"), timedelta(hours=1))  # type: ignore[arg-type]


def _dag_with(consumer: Any, duration: timedelta | None = timedelta(days=1)) -> None:
    with DAG("cal_dag", schedule=None):
        ReserveCalendarBlockOperator(
            task_id="reserve",
            zone=ZONE,
            start_time=(datetime.now(timezone.utc) + timedelta(days=10)).isoformat(),
            duration=duration,
            machine_type="a3-highgpu-8g",
            vm_count=2,
        )
        WaitForCalendarBlockOperator(task_id="wait", reserve_task_id="reserve")
        consumer()


def test_a_max_run_longer_than_the_whole_block_is_refused_at_parse_time() -> None:
    with pytest.raises(ValueError, match=r"longer than the whole calendar block of task 'wait' \(1 day"):
        _dag_with(lambda: vertex(max_run=timedelta(days=2)))
    with pytest.raises(ValueError, match="longer than the whole calendar block"):
        _dag_with(lambda: batch(block_task_id="reserve", max_run=timedelta(days=3)))
    _dag_with(lambda: vertex(max_run=timedelta(days=2), allow_past_block_end=True))
    _dag_with(lambda: vertex(max_run=timedelta(hours=20)))


# -- records and errors ----------------------------------------------------------------------------


def _status(outcome: Outcome) -> RequestStatus:
    return RequestStatus(
        name="projects/my-project/locations/us-central1/customJobs/1",
        state="JOB_STATE_FAILED",
        outcome=outcome,
        timings=RequestTimings(),
    )


def test_the_record_names_the_reservation_and_its_pricing() -> None:
    op = vertex()
    op.use_block(GPU_BLOCK)
    facts = op.adapter().record_facts(_status(Outcome(Phase.RUNNING)), Placement("us-central1"))
    assert (facts["reservation"], facts["pricing_model"], facts["accelerator_count"]) == (
        RES,
        "reservation",
        16,
    )


def test_a_revoked_reservation_is_capacity_revoked_not_a_workload_failure() -> None:
    op = vertex()
    op.use_block(GPU_BLOCK)
    status = _status(Outcome(Phase.FAILED, FailureKind.PREEMPTED, "The reservation X ended at T"))
    error = op.adapter().error(status, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(error, CapacityRevokedError)
    assert END.isoformat() in str(error) and "capacity revoked" in str(error)


def _adapter_on_block(ends_in: timedelta) -> Any:
    op = vertex(capacity_retry=3)
    op.use_block(Block(reservation=RES, end=(datetime.now(timezone.utc) + ends_in).isoformat()))
    return op.adapter()


def test_no_retry_once_the_block_has_ended_whatever_the_error_says() -> None:
    """Google documents no error code for a request whose reservation ended while it waited: a
    failure the words do not tell is still not retried, nor called a lack of capacity, once the
    block's end has passed."""
    unknown = _status(Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, "something else"))
    ended = _adapter_on_block(-timedelta(minutes=1))
    assert "has ended; a new request would wait on a reservation that is gone" in (
        ended.no_retry(unknown) or ""
    )
    assert isinstance(
        ended.error(unknown, Placement("us-central1"), timedelta(hours=1)), CapacityRevokedError
    )

    running = _adapter_on_block(timedelta(days=1))  # a block still running: the retry policy decides
    assert running.no_retry(unknown) is None
    assert not isinstance(
        running.error(unknown, Placement("us-central1"), timedelta(hours=1)), CapacityRevokedError
    )
    revoked = _status(Outcome(Phase.FAILED, FailureKind.PREEMPTED, ENDED))
    assert running.no_retry(revoked) is not None  # the words say it ended: never retried


def test_an_operator_without_a_block_leaves_retries_to_the_policy() -> None:
    adapter = tpu(block_task_id=None, zone="us-west4-a").adapter()
    status = _status(Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, "no capacity"))
    assert adapter.no_retry(status) is None


ENDED = (
    f"The reservation {RES} ended at 2026-12-08T10:00:00Z (its block ended at 2026-12-08T10:00:00Z); it "
    "was deleted, and every VM, job and TPU slice consuming it was stopped."
)
NEVER = f"The reservation {RES} will not be delivered: its future reservation {FR} is CANCELLED (x)."


def test_every_api_classifies_a_reservation_end_as_revoked() -> None:
    after_start = VERTEX_JOB_STATES.classify(
        "JOB_STATE_FAILED", started=True, error_code=14, error_message=ENDED
    )
    assert after_start.failure is FailureKind.PREEMPTED
    waiting = VERTEX_JOB_STATES.classify("JOB_STATE_FAILED", started=False, error_code=8, error_message=ENDED)
    assert waiting.failure is FailureKind.PREEMPTED
    assert TPU_QUEUED_RESOURCE_STATES.classify("FAILED", error_code=8, error_message=ENDED).failure is (
        FailureKind.PREEMPTED
    )
    events = [
        "Job state is set from QUEUED to SCHEDULED",
        f"Job state is set from RUNNING to FAILED. {ENDED}",
    ]
    assert BATCH_JOB_STATES.classify("FAILED", started=True, events=events).failure is FailureKind.PREEMPTED
    assert (
        COMPUTE_RESIZE_REQUEST_STATES.classify(
            "FAILED", reasons=["RESOURCE_NOT_FOUND"], message=ENDED
        ).failure
        is FailureKind.PREEMPTED
    )


def test_a_reservation_that_will_not_be_delivered_is_capacity_not_obtained() -> None:
    outcome = VERTEX_JOB_STATES.classify("JOB_STATE_FAILED", started=False, error_code=8, error_message=NEVER)
    assert (outcome.phase, outcome.failure) == (Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED)


def test_other_failures_are_classified_as_before() -> None:
    ran = VERTEX_JOB_STATES.classify(
        "JOB_STATE_FAILED",
        started=True,
        error_code=13,
        error_message="The replica exited with a non-zero status of 1",
    )
    assert ran.failure is FailureKind.WORKLOAD_FAILED
    assert BATCH_JOB_STATES.classify("FAILED", started=True, events=["Task failed"]).failure is (
        FailureKind.WORKLOAD_FAILED
    )


def test_a_block_round_trips_through_its_xcom_form() -> None:
    assert Block.from_dict(GPU_BLOCK.to_dict()) == GPU_BLOCK
    assert Block.from_dict(None) is None
    assert GPU_BLOCK.region == "us-central1" and GPU_BLOCK.name == "block-1"


def test_the_release_counts_a_request_recorded_by_its_setup_and_its_release_once() -> None:
    from dataclasses import replace

    from google.cloud import compute_v1

    from airflow_provider_dws.backends.calendar_block import BlockAsk, build_future_reservation
    from airflow_provider_dws.catalog import calendar_shape
    from airflow_provider_dws.records import RequestRecord
    from airflow_provider_dws.runtime.calendar_release import usage

    start = datetime(2026, 12, 1, tzinfo=timezone.utc)
    ask = BlockAsk(calendar_shape(None, None, "v5e", 8), "us-west4-a", start, timedelta(days=1))
    fr = build_future_reservation(P, "tpu-block", ask, "d")
    fr.status = compute_v1.FutureReservationStatus(procurement_status="FULFILLED")
    held = RequestRecord(
        api="tpu_queued_resource",
        kind="k",
        project=P,
        location="us-west4-a",
        request_name="qr",
        phase="running",
        accelerator_count=8,
        started=(start + timedelta(hours=1)).isoformat(),
        holds=True,
        reservation=TPU_BLOCK.tpu_reservation,
    )
    released = replace(held, phase="succeeded", holds=False, ended=(start + timedelta(hours=3)).isoformat())
    released = replace(released, released=released.ended)
    name = f"projects/{P}/zones/us-west4-a/futureReservations/tpu-block"
    cost = usage(fr, name, [held, released], start + timedelta(hours=12))
    assert (cost["workloads"], cost["used_hours"]) == (1, 16.0)  # 8 chips x 2 h, not twice
