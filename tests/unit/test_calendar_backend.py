"""Calendar mode without a server: names, the request body, the status of a block, the advice request
and the choice among its recommendations, and the shapes calendar mode offers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.cloud import compute_v1
from google.protobuf import json_format

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.base import RequestBackend
from airflow_provider_dws.backends.calendar import (
    UNDELIVERED,
    FutureReservationBackend,
    future_reservation_status,
)
from airflow_provider_dws.backends.calendar_advice import (
    BlockOffer,
    advice_request,
    choose_offer,
    read_offers,
)
from airflow_provider_dws.backends.calendar_block import (
    BlockAsk,
    block_shape,
    build_future_reservation,
    parse_future_reservation_name,
    parse_reservation_name,
)
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.scheduling.identity import RequestIdentity, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

START = datetime(2026, 12, 21, 8, 0, tzinfo=timezone.utc)
NAME = "projects/my-project/zones/us-central1-a/futureReservations/dws-reserve-0123456789abcdef-t1-a1"
H100 = catalog.calendar_shape("a3-highgpu-8g", 8)
V6E = catalog.calendar_shape(None, None, "v6e", 32)


def wire(message: Any) -> dict[str, Any]:
    """The JSON the REST transport sends (camelCase, enums as strings)."""
    return json_format.MessageToDict(type(message).pb(message))


# -- names -----------------------------------------------------------------------------------------


def test_names_parse_back() -> None:
    where = parse_future_reservation_name(NAME)
    assert (where.project, where.zone) == ("my-project", "us-central1-a")
    assert where.path == NAME
    self_link = "https://compute.googleapis.com/compute/v1/" + NAME
    assert parse_future_reservation_name(self_link) == where
    assert parse_reservation_name(
        "https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-a/reservations/r-1"
    ) == ("p", "us-east5-a", "r-1")
    with pytest.raises(ValueError, match="not a Compute Engine future reservation"):
        parse_future_reservation_name("projects/p/zones/z/reservations/r")


def test_the_name_is_the_identity() -> None:
    who = RequestIdentity("train_dag", "reserve_block", "manual__2026-12-01", try_number=2, attempt=1)
    name = who.queued_resource_id()
    assert len(name) <= 63 and parse_attempt_name(name)[1:] == (2, 1)  # type: ignore[index]
    assert (
        who.request_uuid()
        == RequestIdentity("train_dag", "reserve_block", "manual__2026-12-01", try_number=2).request_uuid()
    )


def test_backend_contract_and_spec() -> None:
    backend = FutureReservationBackend("my-project", "us-central1-a")
    assert isinstance(backend, RequestBackend)
    again = backend_from_spec(backend.kind, backend.spec())
    assert isinstance(again, FutureReservationBackend) and again.zone == "us-central1-a"
    assert backend.name_of("x") == "projects/my-project/zones/us-central1-a/futureReservations/x"


# -- the request body ------------------------------------------------------------------------------


def test_a_gpu_block_is_a_calendar_future_reservation() -> None:
    ask = BlockAsk(H100, "us-central1-a", START, timedelta(days=7))
    body = wire(build_future_reservation("my-project", "dws-x-t1-a1", ask, "airflow-provider-dws d.t"))
    assert body == {
        "name": "dws-x-t1-a1",
        "description": "airflow-provider-dws d.t",
        "reservationMode": "CALENDAR",
        "planningStatus": "SUBMITTED",
        "deploymentType": "DENSE",
        "specificReservationRequired": True,
        "autoDeleteAutoCreatedReservations": True,
        "reservationName": "dws-x-t1-a1",
        "timeWindow": {"startTime": "2026-12-21T08:00:00Z", "endTime": "2026-12-28T08:00:00Z"},
        "specificSkuProperties": {"instanceProperties": {"machineType": "a3-highgpu-8g"}, "totalCount": "8"},
    }


def test_a_tpu_block_is_an_aggregate_reservation() -> None:
    ask = BlockAsk(V6E, "us-east5-a", START, timedelta(days=2))
    body = wire(build_future_reservation("my-project", "dws-x-t1-a1", ask, "d"))
    assert "specificSkuProperties" not in body
    assert body["aggregateReservation"] == {
        "vmFamily": "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E",
        "workloadType": "BATCH",
        "reservedResources": [
            {
                "accelerator": {
                    "acceleratorCount": 32,
                    "acceleratorType": "projects/my-project/zones/us-east5-a/acceleratorTypes/ct6e",
                }
            }
        ],
    }


# -- the status of a block -------------------------------------------------------------------------


def fr(state: str, **status: Any) -> compute_v1.FutureReservation:
    ask = BlockAsk(H100, "us-central1-a", START, timedelta(days=7))
    message = build_future_reservation("my-project", NAME.rsplit("/", 1)[-1], ask, "d")
    message.creation_timestamp = "2026-12-01T10:00:00.000-08:00"
    message.status = compute_v1.FutureReservationStatus(procurement_status=state, **status)
    return message


def test_a_pending_block_waits() -> None:
    status = future_reservation_status(fr("PENDING_APPROVAL"), NAME, now=START - timedelta(days=10))
    assert status.phase is Phase.WAITING and status.state == "PENDING_APPROVAL"
    assert status.timings.submitted == datetime(2026, 12, 1, 18, tzinfo=timezone.utc)
    assert status.timings.started is None and status.details["attempt"] == 1
    assert status.description == "8 x a3-highgpu-8g from 2026-12-21 08:00 UTC for 7 days"
    assert status.details["end_time"] == "2026-12-28T08:00:00+00:00"


def test_a_delivered_block_runs_from_its_start_and_succeeds_after_its_end() -> None:
    delivered = fr(
        "FULFILLED",
        auto_created_reservations=[
            "https://x/compute/v1/projects/my-project/zones/us-central1-a/reservations/r"
        ],
    )
    during = future_reservation_status(delivered, NAME, now=START + timedelta(days=1))
    assert (
        during.phase is Phase.RUNNING and during.timings.started == START and during.timings.finished is None
    )
    assert during.outcome.message == "delivered as r"
    after = future_reservation_status(delivered, NAME, now=START + timedelta(days=8))
    assert after.phase is Phase.SUCCEEDED and after.timings.finished == START + timedelta(days=7)


def test_a_partial_delivery_says_how_much() -> None:
    status = future_reservation_status(fr("FAILED_PARTIALLY_FULFILLED", fulfilled_count=3), NAME)
    assert status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert "3 of 8 reserved slots were delivered" in status.outcome.message
    assert status.timings.started == START  # what was delivered is billed from the start


def test_the_shape_of_a_block_reads_back() -> None:
    assert block_shape(fr("APPROVED")) == H100
    ask = BlockAsk(V6E, "us-east5-a", START, timedelta(days=2))
    assert block_shape(build_future_reservation("p", "n", ask, "d")) == V6E
    assert "APPROVED" in UNDELIVERED and "FULFILLED" not in UNDELIVERED and "CANCELLED" not in UNDELIVERED


# -- the advice ------------------------------------------------------------------------------------


def test_the_advice_request_asks_for_one_spec_in_the_allowed_zones() -> None:
    request = advice_request(
        H100, ["us-central1-a", "us-central1-b"], START, START + timedelta(weeks=4), timedelta(days=7)
    )
    body = wire(request)
    spec = body["futureResourcesSpecs"]["block"]
    assert spec["targetResources"] == {
        "specificSkuResources": {"machineType": "a3-highgpu-8g", "instanceCount": "8"}
    }
    assert spec["timeRangeSpec"] == {
        "startTimeNotEarlierThan": "2026-12-21T08:00:00Z",
        "startTimeNotLaterThan": "2027-01-18T08:00:00Z",
        "minDuration": "604800s",
        "maxDuration": "604800s",
    }
    assert spec["locationPolicy"] == {
        "locations": {
            "zones/us-central1-a": {"preference": "ALLOW"},
            "zones/us-central1-b": {"preference": "ALLOW"},
        }
    }
    tpu = wire(advice_request(V6E, ["us-east5-a"], START, START, timedelta(days=1)))["futureResourcesSpecs"][
        "block"
    ]
    assert tpu["targetResources"] == {
        "aggregateResources": {
            "vmFamily": "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E",
            "acceleratorCount": "32",
            "workloadType": "BATCH",
        }
    }


def response(
    *offers: tuple[str, int], others: dict[str, tuple[str, str]] | None = None
) -> compute_v1.CalendarModeAdviceResponse:
    recommendations = []
    for index, (zone, days) in enumerate(offers):
        start = START + timedelta(days=days)
        item = compute_v1.FutureResourcesRecommendation(
            location=f"zones/{zone}",
            start_time=start.isoformat().replace("+00:00", "Z"),
            end_time=(start + timedelta(days=7)).isoformat().replace("+00:00", "Z"),
            recommendation_id=f"rec-{index}",
            recommendation_type="FUTURE_RESERVATION",
            other_locations={
                f"zones/{z}": compute_v1.FutureResourcesRecommendationOtherLocation(status=s, details=d)
                for z, (s, d) in (others or {}).items()
            },
        )
        recommendations.append(
            compute_v1.CalendarModeRecommendation(recommendations_per_spec={"block": item})
        )
    return compute_v1.CalendarModeAdviceResponse(recommendations=recommendations)


def test_offers_are_read_in_the_allowed_zones_with_what_the_others_answered() -> None:
    answer = response(
        ("us-central1-b", 3),
        ("us-central1-a", 5),
        ("europe-west4-a", 0),
        others={"us-central1-c": ("NO_CAPACITY", "no H100 then")},
    )
    offers, others = read_offers(answer, ["us-central1-a", "us-central1-b", "us-central1-c"])
    assert [(o.zone, o.start) for o in offers] == [
        ("us-central1-b", START + timedelta(days=3)),
        ("us-central1-a", START + timedelta(days=5)),
    ]
    assert others == {"us-central1-c": "NO_CAPACITY: no H100 then"}


def offer(zone: str, days: int) -> BlockOffer:
    start = START + timedelta(days=days)
    return BlockOffer(zone, start, start + timedelta(days=7))


def test_earliest_takes_the_earliest_start_a_tie_to_the_first_zone() -> None:
    zones = ["us-central1-a", "us-east4-b"]
    chosen, others = choose_offer(
        [offer("us-east4-b", 2), offer("us-central1-a", 5), offer("us-east4-b", 9)], "earliest", zones
    )
    assert chosen == offer("us-east4-b", 2) and others == [offer("us-central1-a", 5), offer("us-east4-b", 9)]
    tie, _ = choose_offer([offer("us-east4-b", 2), offer("us-central1-a", 2)], "earliest", zones)
    assert tie.zone == "us-central1-a"


def test_zone_order_takes_the_first_listed_zone_with_a_block() -> None:
    zones = ["us-east4-b", "us-central1-a"]
    chosen, others = choose_offer(
        [offer("us-central1-a", 1), offer("us-east4-b", 20), offer("us-east4-b", 10)], "zone_order", zones
    )
    assert chosen == offer("us-east4-b", 10)
    assert others == [offer("us-east4-b", 20), offer("us-central1-a", 1)]
    with pytest.raises(ValueError):
        choose_offer([], "earliest", zones)


# -- the shapes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("a3-highgpu-8g", 8, None, None, "BATCH"), None),
        (("a4x-highgpu-4g", 80, None, None, "BATCH"), None),
        (("h4d-standard-192", 256, None, None, "BATCH"), None),
        (("a3-highgpu-8g", 81, None, None, "BATCH"), "from 1 to 80"),
        (("a2-highgpu-8g", 1, None, None, "BATCH"), "not offered in calendar mode"),
        (("g2-standard-8", 1, None, None, "BATCH"), "not offered in calendar mode"),
        ((None, None, "v5p", 1024, "BATCH"), None),
        ((None, None, "v5e", 8, "SERVING"), None),
        ((None, None, "v5e", 16, "SERVING"), "one of [1, 4, 8]"),
        ((None, None, "v4", 8, "BATCH"), "tpu_version must be one"),
        ((None, None, "v6e", 3, "BATCH"), "chip_count must be one of"),
        (("a3-highgpu-8g", 8, "v6e", 8, "BATCH"), "pass either"),
        (("a3-highgpu-8g", 8, None, 8, "BATCH"), "chip_count is for TPU blocks"),
    ],
)
def test_calendar_shapes(args: tuple[Any, ...], error: str | None) -> None:
    got = catalog.calendar_shape_error(*args)
    assert (got is None) if error is None else (got is not None and error in got), got


def test_shape_accelerators_are_named_as_the_records_name_them() -> None:
    assert (H100.accelerator_type, H100.accelerator_count) == ("nvidia-h100-80gb", 64)
    assert (V6E.accelerator_type, V6E.accelerator_count) == ("v6e-32", 32)
    v5p = catalog.calendar_shape(None, None, "v5p", 32)
    assert v5p.accelerator_type == "v5p-64"  # v5p's suffix counts TensorCores, two per chip
    h4d = catalog.calendar_shape("h4d-standard-192", 4)
    assert (h4d.accelerator_type, h4d.accelerator_count, h4d.describe()) == (None, 0, "4 x h4d-standard-192")
