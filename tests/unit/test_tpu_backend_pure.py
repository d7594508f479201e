"""The pure helpers of the Cloud TPU backend: names, chips, descriptions, status and nodes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.tpu_v2 import (
    AccessConfig,
    NetworkEndpoint,
    Node,
    QueuedResource,
    QueuedResourceState,
)
from google.rpc import status_pb2

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.tpu import (
    TpuQueuedResourceBackend,
    describe_queued_resource,
    node_names,
    node_summary,
    parse_queued_resource_name,
    queued_resource_status,
    tpu_chips,
)
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

PROJECT = "my-project"
ZONE = "us-west4-a"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
NAME = f"{PARENT}/queuedResources/dws-fit-0123456789abcdef"
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)

State = QueuedResourceState.State


def make_qr(
    state: State = State.WAITING_FOR_RESOURCES,
    *,
    accel: str = "v5litepod-16",
    node_count: int = 0,
    node_id: str = "dws-fit-0123456789abcdef",
    valid_until: timedelta | None = timedelta(hours=6),
    name: str = NAME,
) -> QueuedResource:
    spec = QueuedResource.Tpu.NodeSpec(
        parent=PARENT,
        node=Node(accelerator_type=accel, runtime_version="v2-alpha-tpuv5-lite"),
    )
    if node_count:
        spec.multislice_params = QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=node_count, node_id_prefix=node_id
        )
    else:
        spec.node_id = node_id
    qr = QueuedResource(
        name=name,
        create_time=CREATED,
        tpu=QueuedResource.Tpu(node_spec=[spec]),
        state=QueuedResourceState(state=state),
    )
    if valid_until is not None:
        qr.queueing_policy = QueuedResource.QueueingPolicy(valid_until_duration=valid_until)
    return qr


# -- tpu_chips -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accel", "chips"),
    [
        ("v5litepod-16", 16),
        ("v5litepod-1", 1),
        ("v6e-8", 8),
        ("v6e-256", 256),
        ("v5p-8", 4),
        ("v5p-12288", 6144),
        ("v4-32", 16),
        ("v4-8", 4),
        ("v3-8", 4),
        ("v2-8", 4),
        ("v2-512", 256),
    ],
)
def test_tpu_chips(accel: str, chips: int) -> None:
    assert tpu_chips(accel) == chips


@pytest.mark.parametrize(
    "accel",
    [
        "",
        "v9-8",
        "tpu-8",
        "v5litepod",
        "v5litepod-",
        "-16",
        "v5litepod-x",
        "v5litepod--16",
        "V5P-8",
        "v5p-8.0",
    ],
)
def test_tpu_chips_refuses_what_is_not_an_accelerator_type(accel: str) -> None:
    with pytest.raises(ValueError, match="not a Cloud TPU accelerator type"):
        tpu_chips(accel)


# -- parse_queued_resource_name --------------------------------------------------------------


def test_parse_queued_resource_name() -> None:
    assert parse_queued_resource_name(NAME) == (PROJECT, ZONE, "dws-fit-0123456789abcdef")
    assert parse_queued_resource_name("projects/p/locations/z/queuedResources/q") == ("p", "z", "q")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "dws-fit",
        f"{PARENT}/queuedResources/",
        f"{PARENT}/queuedResources/a/b",
        f"{PARENT}/nodes/n1",
        f"projects/{PROJECT}/regions/us-west4/queuedResources/q",
        f"/{PARENT}/queuedResources/q",
        f"{PARENT}/queuedResources/q/",
        "projects//locations/z/queuedResources/q",
    ],
)
def test_parse_queued_resource_name_refuses_other_names(name: str) -> None:
    with pytest.raises(ValueError, match="not a Cloud TPU queued resource name"):
        parse_queued_resource_name(name)


# -- describe_queued_resource ----------------------------------------------------------------


def test_describe_single_slice() -> None:
    assert describe_queued_resource(make_qr(), ZONE) == "v5litepod-16 (16 chips) in us-west4-a"
    assert describe_queued_resource(make_qr(accel="v5p-8"), ZONE) == "v5p-8 (4 chips) in us-west4-a"


def test_describe_multislice() -> None:
    qr = make_qr(accel="v5p-8", node_count=2)
    assert describe_queued_resource(qr, ZONE) == "2 x v5p-8 (8 chips) in us-west4-a"
    qr = make_qr(accel="v6e-256", node_count=4)
    assert describe_queued_resource(qr, "europe-west4-a") == "4 x v6e-256 (1024 chips) in europe-west4-a"


def test_describe_without_node_spec_or_unknown_type() -> None:
    assert describe_queued_resource(QueuedResource(), ZONE) == "TPU in us-west4-a"
    assert describe_queued_resource(make_qr(accel="v99-7"), ZONE) == "v99-7 in us-west4-a"


# -- queued_resource_status ------------------------------------------------------------------


def test_status_waiting_for_resources() -> None:
    status = queued_resource_status(make_qr(State.WAITING_FOR_RESOURCES, valid_until=timedelta(hours=6)))
    assert isinstance(status, RequestStatus)
    assert status.name == NAME
    assert status.state == "WAITING_FOR_RESOURCES"
    assert status.phase is Phase.WAITING
    assert status.outcome.failure is None
    assert status.details == {"zone": ZONE, "max_wait_seconds": 6 * 3600, "attempt": 1, "try": None}
    assert status.description == "v5litepod-16 (16 chips) in us-west4-a"
    assert status.timings.submitted == CREATED
    assert status.timings.started is None
    assert status.timings.finished is None


def test_status_without_a_queueing_policy_has_no_max_wait() -> None:
    status = queued_resource_status(make_qr(State.ACCEPTED, valid_until=None))
    assert status.phase is Phase.WAITING
    assert status.details["max_wait_seconds"] is None


def test_status_active_is_running_with_a_start_time() -> None:
    before = datetime.now(timezone.utc)
    status = queued_resource_status(make_qr(State.ACTIVE))
    after = datetime.now(timezone.utc)
    assert status.state == "ACTIVE"
    assert status.phase is Phase.RUNNING
    assert status.outcome.failure is None
    started = status.timings.started
    assert started is not None
    assert before <= started <= after
    assert status.timings.finished is None
    assert status.timings.wait_seconds == pytest.approx((started - CREATED).total_seconds())


def test_status_failed_with_resource_exhausted_is_not_obtained() -> None:
    qr = make_qr(State.FAILED)
    qr.state.failed_data = QueuedResourceState.FailedData(
        error=status_pb2.Status(code=8, message="no v5litepod-16 capacity in us-west4-a")
    )
    status = queued_resource_status(qr)
    assert status.state == "FAILED"
    assert status.phase is Phase.NOT_OBTAINED
    assert status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert status.outcome.message == "no v5litepod-16 capacity in us-west4-a"
    assert status.timings.started is None
    assert status.timings.finished is not None
    assert status.timings.run_seconds == 0.0


def test_status_failed_with_invalid_argument_is_a_bad_request() -> None:
    qr = make_qr(State.FAILED)
    qr.state.failed_data = QueuedResourceState.FailedData(
        error=status_pb2.Status(code=3, message="unknown runtime version")
    )
    status = queued_resource_status(qr)
    assert status.phase is Phase.FAILED
    assert status.outcome.failure is FailureKind.BAD_REQUEST
    assert status.outcome.message == "unknown runtime version"


@pytest.mark.parametrize(
    ("state", "phase", "failure"),
    [
        (State.SUSPENDED, Phase.FAILED, FailureKind.PREEMPTED),
        (State.SUSPENDING, Phase.FAILED, FailureKind.PREEMPTED),
        (State.DELETING, Phase.CANCELLED, FailureKind.CANCELLED),
        (State.PROVISIONING, Phase.PROVISIONING, None),
        (State.CREATING, Phase.WAITING, None),
    ],
)
def test_status_of_other_states(state: State, phase: Phase, failure: FailureKind | None) -> None:
    status = queued_resource_status(make_qr(state))
    assert status.state == state.name
    assert status.phase is phase
    assert status.outcome.failure is failure
    assert (status.timings.finished is not None) == phase.terminal


def test_status_survives_the_event_round_trip() -> None:
    status = queued_resource_status(make_qr(State.ACTIVE, node_count=2, accel="v5p-8"))
    event = json.loads(json.dumps(status.to_event()))
    again = RequestStatus.from_event(event)
    assert again.outcome == status.outcome
    assert again.details == {}  # the zone and max wait: the task has them itself
    assert again.description == "2 x v5p-8 (8 chips) in us-west4-a"
    assert again.timings == status.timings


def test_status_of_a_nameless_resource() -> None:
    status = queued_resource_status(make_qr(State.ACCEPTED, name=""))
    assert status.details["zone"] == ""
    assert status.description.endswith(" in ")


# -- node_names / node_summary ---------------------------------------------------------------


def test_node_names_single_slice() -> None:
    assert node_names(make_qr(State.ACTIVE, node_id="n1")) == [f"{PARENT}/nodes/n1"]


def test_node_names_multislice() -> None:
    assert node_names(make_qr(State.ACTIVE, node_count=3, node_id="pre")) == [
        f"{PARENT}/nodes/pre-0",
        f"{PARENT}/nodes/pre-1",
        f"{PARENT}/nodes/pre-2",
    ]


def test_node_names_of_an_empty_resource() -> None:
    assert node_names(QueuedResource()) == []


def test_node_summary() -> None:
    node = Node(
        name=f"{PARENT}/nodes/n1",
        state=Node.State.READY,
        accelerator_type="v5litepod-16",
        runtime_version="v2-alpha-tpuv5-lite",
        network_endpoints=[
            NetworkEndpoint(
                ip_address="10.0.0.2", port=8470, access_config=AccessConfig(external_ip="34.1.2.3")
            ),
            NetworkEndpoint(ip_address="10.0.0.3", port=8470),
        ],
    )
    summary = node_summary(node)
    assert summary == {
        "name": f"{PARENT}/nodes/n1",
        "node_id": "n1",
        "state": "READY",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
        "ip_addresses": ["10.0.0.2", "10.0.0.3"],
        "external_ip_addresses": ["34.1.2.3"],
    }
    assert json.loads(json.dumps(summary)) == summary


def test_node_summary_without_endpoints() -> None:
    summary = node_summary(Node(name=f"{PARENT}/nodes/n2", state=Node.State.CREATING))
    assert summary["node_id"] == "n2"
    assert summary["state"] == "CREATING"
    assert summary["ip_addresses"] == []
    assert summary["external_ip_addresses"] == []


# -- the backend object (no API calls) -------------------------------------------------------


def test_backend_names() -> None:
    backend = TpuQueuedResourceBackend(PROJECT, ZONE)
    assert backend.kind == "tpu_queued_resource"
    assert backend.parent == PARENT
    assert backend.name_of("dws-fit-0123456789abcdef") == NAME
    assert parse_queued_resource_name(backend.name_of("q1")) == (PROJECT, ZONE, "q1")


@pytest.mark.parametrize(
    ("chain", "in_spec"),
    [
        (None, None),
        ("sa@p.iam.gserviceaccount.com", "sa@p.iam.gserviceaccount.com"),
        (
            ("a@p.iam.gserviceaccount.com", "b@p.iam.gserviceaccount.com"),
            ["a@p.iam.gserviceaccount.com", "b@p.iam.gserviceaccount.com"],
        ),
    ],
)
def test_backend_spec_round_trip(chain: object, in_spec: object) -> None:
    backend = TpuQueuedResourceBackend(PROJECT, ZONE, "my_gcp", chain)  # type: ignore[arg-type]
    spec = backend.spec()
    assert spec == {
        "project_id": PROJECT,
        "zone": ZONE,
        "gcp_conn_id": "my_gcp",
        "impersonation_chain": in_spec,
    }
    spec = json.loads(json.dumps(spec))
    rebuilt = backend_from_spec("tpu_queued_resource", spec)
    assert isinstance(rebuilt, TpuQueuedResourceBackend)
    assert rebuilt.spec() == backend.spec()
    assert rebuilt.parent == backend.parent
    assert rebuilt.kind == "tpu_queued_resource"


def test_unknown_backend_kind() -> None:
    with pytest.raises(ValueError, match="unknown DWS backend kind 'tpu'"):
        backend_from_spec("tpu", {})
