"""The queued resource a trigger makes from JSON (issue 36) is the message the worker built before.

``old_build`` is the worker-side builder as it was before the request became JSON (proto-plus
messages, the client imported); each case builds the same operator both ways and compares the
messages, presence of every field included.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.cloud.tpu_v2 import QueuedResource

from airflow_provider_dws.backends.tpu import queued_resource_from_spec
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.policies import Placement

IDENTITY = RequestIdentity("tpu_dag", "train", "manual__2026-03-01", try_number=2, attempt=3)


def old_build(
    op: Any,
    identity_labels: Mapping[str, str],
    parent: str,
    node_id: str,
    placement: Placement | None,
    max_wait: timedelta | None,
    now: datetime,
) -> QueuedResource:
    """The builder of the worker's path before issue 36 (``now``: its clock), kept as the reference."""
    from google.cloud.tpu_v2 import NetworkConfig, Node, SchedulingConfig, ServiceAccount
    from google.protobuf.timestamp_pb2 import Timestamp
    from google.type.interval_pb2 import Interval

    def stamp(moment: datetime) -> Timestamp:
        value = Timestamp()
        value.FromDatetime(moment)
        return value

    accelerator_type = (placement.accelerator_type if placement else None) or op.accelerator_type
    tier = placement.tier if placement and placement.tier else None
    spot = tier == "spot" if tier else op.spot
    guaranteed = tier == "guaranteed" if tier else op.guaranteed
    max_wait = max_wait or op.max_wait
    node = Node(
        accelerator_type=accelerator_type,
        runtime_version=op.runtime_version,
        labels={**(op.labels or {}), **identity_labels},
        network_config=NetworkConfig(
            network=op.network or "",
            subnetwork=op.subnetwork or "",
            enable_external_ips=op.enable_external_ips,
        ),
    )
    if op.service_account:
        node.service_account = ServiceAccount(email=op.service_account)
    if spot:
        node.scheduling_config = SchedulingConfig(spot=True)
    spec = QueuedResource.Tpu.NodeSpec(parent=parent, node=node)
    if op.node_count > 1:
        spec.multislice_params = QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=op.node_count, node_id_prefix=node_id
        )
    else:
        spec.node_id = node_id
    if op.valid_after:
        start = now + op.valid_after
        policy = QueuedResource.QueueingPolicy(
            valid_interval=Interval(start_time=stamp(start), end_time=stamp(start + max_wait))
        )
    else:
        policy = QueuedResource.QueueingPolicy(valid_until_duration=max_wait)
    qr = QueuedResource(tpu=QueuedResource.Tpu(node_spec=[spec]), queueing_policy=policy)
    if spot:
        qr.spot = QueuedResource.Spot()
    elif guaranteed:
        qr.guaranteed = QueuedResource.Guaranteed()
    home_zone = placement is None or placement.location == op.zone
    if op.reservation_name and not spot and home_zone:
        qr.reservation_name = op.reservation_name
    return qr


def make(**kwargs: Any) -> CreateTPUQueuedResourceOperator:
    args: dict[str, Any] = {
        "task_id": "train",
        "project_id": "my-project",
        "zone": "us-west4-a",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    args.update(kwargs)
    return CreateTPUQueuedResourceOperator(**args)


CASES: dict[str, tuple[dict[str, Any], Placement | None, timedelta | None]] = {
    "defaults": ({}, None, None),
    "spot, labels, network, account": (
        {
            "spot": True,
            "labels": {"team": "ml"},
            "network": "projects/my-project/global/networks/tpu",
            "subnetwork": "projects/my-project/regions/us-west4/subnetworks/tpu",
            "enable_external_ips": True,
            "service_account": "tpu@my-project.iam.gserviceaccount.com",
        },
        None,
        timedelta(minutes=30),
    ),
    "guaranteed with a reservation at home": (
        {"guaranteed": True, "reservation_name": "projects/my-project/locations/us-west4-a/reservations/r"},
        Placement("us-west4-a"),
        None,
    ),
    "a reservation is not asked for away from home": (
        {
            "reservation_name": "projects/my-project/locations/us-west4-a/reservations/r",
            "failover": ["us-east5-a"],
            "capacity_retry": 2,
        },
        Placement("us-east5-a", accelerator_type="v5p-8", tier="spot"),
        timedelta(hours=2),
    ),
    "multislice with a custom base id": (
        {"node_count": 4, "queued_resource_id": "my-slices", "max_wait": timedelta(hours=3)},
        None,
        None,
    ),
    "a delayed start": ({"valid_after": timedelta(hours=1)}, None, timedelta(minutes=45)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_request_spec_makes_the_message_the_worker_built(case: str) -> None:
    kwargs, placement, max_wait = CASES[case]
    op = make(**kwargs)
    adapter = op.adapter()
    before = datetime.now(timezone.utc)
    spec = adapter.request_spec(IDENTITY, placement, max_wait)
    zone = placement.location if placement else op.zone
    parent = f"projects/my-project/locations/{zone}"
    assert spec["queued_resource_id"] == adapter.id_for(IDENTITY)
    made = queued_resource_from_spec(spec["queued_resource"])
    if op.valid_after:
        # The start is the clock's at build time: take the built one, check it is that clock's.
        start = made.queueing_policy.valid_interval.start_time.ToDatetime(timezone.utc)
        assert before + op.valid_after <= start <= datetime.now(timezone.utc) + op.valid_after
        now = start - op.valid_after
    else:
        now = before
    expected = old_build(op, IDENTITY.labels(), parent, spec["queued_resource_id"], placement, max_wait, now)
    assert QueuedResource.pb(made) == QueuedResource.pb(expected)
    built = adapter.build(IDENTITY.labels(), parent, spec["queued_resource_id"], placement, max_wait)
    assert QueuedResource.pb(built).tpu == QueuedResource.pb(expected).tpu


def test_a_queued_resource_the_api_would_refuse_is_refused_with_its_field() -> None:
    with pytest.raises(ValueError, match="not a valid QueuedResource"):
        queued_resource_from_spec({"tpu": {"no_such_field": 1}})


def test_the_trigger_makes_it_unless_a_block_or_a_delayed_start_needs_the_worker() -> None:
    assert make().adapter().makes_in_trigger()
    assert not make(valid_after=timedelta(hours=1)).adapter().makes_in_trigger()
