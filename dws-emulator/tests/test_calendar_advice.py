"""Calendar-mode advice in the emulator through the unmodified ``AdviceClient``: the earliest block
that fits in each allowed zone, read from the calendar of free capacity, and the request checks."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from test_calendar_routes import (
    DAY,
    H100_A,
    H100_B,
    REGION,
    ZONE,
    ZONE_B,
    Clients,
    epoch,
    gpu_block,
    insert,
    rfc3339,
    start_emulator,
    status,
)

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator
P = "cal-test"


@pytest.fixture
def clock() -> FakeClock:
    # Midnight UTC plus one hour, so that "the next midnight" is a known time.
    return FakeClock(start=(int(FakeClock()() // DAY) + 1) * DAY + 3600)


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    return start_emulator(dws_emulator_server_factory, clock)


@pytest.fixture
def gce(emulator: Any) -> Clients:
    return Clients(emulator.server.rest_url)


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).date().isoformat()


def spec(
    clock: FakeClock,
    machine: str | None = "a3-highgpu-8g",
    count: int = 2,
    days: tuple[float, float] = (7, 7),
    within: float = 28,
    locations: dict[str, str] | None = None,
    chips: int = 0,
) -> compute_v1.FutureResourcesSpec:
    if machine is not None:
        target = compute_v1.FutureResourcesSpecTargetResources(
            specific_sku_resources=compute_v1.FutureResourcesSpecSpecificSKUResources(
                machine_type=machine, instance_count=count
            )
        )
    else:
        target = compute_v1.FutureResourcesSpecTargetResources(
            aggregate_resources=compute_v1.FutureResourcesSpecAggregateResources(
                vm_family="VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP",
                accelerator_count=chips,
                workload_type="BATCH",
            )
        )
    return compute_v1.FutureResourcesSpec(
        target_resources=target,
        time_range_spec=compute_v1.FlexibleTimeRange(
            min_duration=f"{int(days[0] * DAY)}s",
            max_duration=f"{int(days[1] * DAY)}s",
            start_time_not_earlier_than=rfc3339(clock()),
            start_time_not_later_than=rfc3339(clock() + within * DAY),
        ),
        location_policy=compute_v1.FutureResourcesSpecLocationPolicy(
            locations={
                zone: compute_v1.FutureResourcesSpecLocationPolicyLocation(preference=pref)
                for zone, pref in (locations or {}).items()
            }
        ),
        deployment_type="DENSE",
    )


def advise(
    gce: Clients, *specs: compute_v1.FutureResourcesSpec, region: str = REGION
) -> list[compute_v1.FutureResourcesRecommendation]:
    response = gce.advice.calendar_mode(
        project=P,
        region=region,
        calendar_mode_advice_request_resource=compute_v1.CalendarModeAdviceRequest(
            future_resources_specs={f"spec-{i}": s for i, s in enumerate(specs)}
        ),
    )
    return [rec.recommendations_per_spec["spec-0"] for rec in response.recommendations]


def test_each_allowed_zone_gets_its_earliest_block_earliest_first(gce, clock) -> None:
    recs = advise(gce, spec(clock, count=2))
    assert [r.location for r in recs] == [f"zones/{ZONE}", f"zones/{ZONE_B}"]
    first = recs[0]
    # No sooner than the minimum lead time (0) plus the advice's 5 s of slack, in whole seconds.
    assert epoch(first.start_time) == int(clock()) + 5
    assert epoch(first.end_time) - epoch(first.start_time) == 7 * DAY
    assert first.recommendation_type == "FUTURE_RESERVATION" and first.recommendation_id
    assert first.other_locations[f"zones/{ZONE_B}"].status == "RECOMMENDED"
    again = advise(gce, spec(clock, count=2))
    assert [(r.location, r.start_time, r.end_time) for r in again] == [
        (r.location, r.start_time, r.end_time) for r in recs
    ]


def test_booked_days_push_the_block_back_and_deny_removes_a_zone(gce, clock, emulator) -> None:
    insert(gce, gpu_block("busy", clock() + 60, days=3, count=7))  # 56 of 64 a day in zone a
    clock.advance(1)
    assert status(gce, "busy") == "PROCURING"
    recs = advise(gce, spec(clock, count=2))
    by_zone = {r.location: r for r in recs}
    # Zone b (16 a day) fits at once; zone a only from the first midnight after its booking.
    assert epoch(by_zone[f"zones/{ZONE_B}"].start_time) < epoch(by_zone[f"zones/{ZONE}"].start_time)
    assert recs[0].location == f"zones/{ZONE_B}"
    booking_end = clock() - 1 + 60 + 3 * DAY
    assert epoch(by_zone[f"zones/{ZONE}"].start_time) == (int(booking_end // DAY) + 1) * DAY

    denied = advise(gce, spec(clock, count=2, locations={f"zones/{ZONE_B}": "DENY"}))
    assert [r.location for r in denied] == [f"zones/{ZONE}"]
    assert f"zones/{ZONE_B}" not in denied[0].other_locations


def test_other_locations_say_why_a_zone_was_not_recommended(gce, clock, emulator) -> None:
    recs = advise(gce, spec(clock, count=3, locations={"zones/us-central1-f": "ALLOW"}))
    assert [r.location for r in recs] == [f"zones/{ZONE}"]  # 24 GPUs: zone b has 16 a day
    other = recs[0].other_locations
    assert other[f"zones/{ZONE_B}"].status == "NO_CAPACITY"
    assert "3 x a3-highgpu-8g" in other[f"zones/{ZONE_B}"].details
    assert other["zones/us-central1-f"].status == "NOT_SUPPORTED"

    emulator.control.set_calendar(pools={H100_A: 0, H100_B: 0})
    nothing = advise(gce, spec(clock, count=1))
    assert len(nothing) == 1 and not nothing[0].location
    assert {z: o.status for z, o in nothing[0].other_locations.items()} == {
        f"zones/{ZONE}": "NO_CAPACITY",
        f"zones/{ZONE_B}": "NO_CAPACITY",
    }


def test_a_shorter_block_within_min_and_max_duration_and_tpus(gce, clock, emulator) -> None:
    later = clock() + 10 * DAY
    emulator.control.set_calendar(days={_day(later + d * DAY): {H100_B: 0} for d in range(30)})
    recs = advise(gce, spec(clock, count=2, days=(3, 14), locations={f"zones/{ZONE}": "DENY"}))
    (rec,) = recs
    assert rec.location == f"zones/{ZONE_B}"
    length = epoch(rec.end_time) - epoch(rec.start_time)
    assert 3 * DAY <= length < 14 * DAY and epoch(rec.end_time) == (int(later // DAY)) * DAY

    tpus = advise(gce, spec(clock, machine=None, chips=32), region="us-west4")
    assert [r.location for r in tpus] == ["zones/us-west4-a"]
    too_many = advise(gce, spec(clock, machine=None, chips=128), region="us-west4")
    assert too_many[0].other_locations["zones/us-west4-a"].status == "NO_CAPACITY"


def test_a_start_range_that_ended_is_conditions_not_met(gce, clock) -> None:
    past = spec(clock)
    past.time_range_spec.start_time_not_later_than = rfc3339(clock() - DAY)
    past.time_range_spec.start_time_not_earlier_than = rfc3339(clock() - 2 * DAY)
    (rec,) = advise(gce, past)
    assert not rec.location and rec.other_locations[f"zones/{ZONE}"].status == "CONDITIONS_NOT_MET"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda s: setattr(s.target_resources.specific_sku_resources, "machine_type", "a2-highgpu-8g"),
            "machineType",
        ),
        (lambda s: setattr(s.time_range_spec, "min_duration", "3600s"), "minDuration"),
        (lambda s: setattr(s.time_range_spec, "max_duration", "8000000s"), "maxDuration"),
        (lambda s: setattr(s.time_range_spec, "min_duration", "a week"), "minDuration"),
        (lambda s: setattr(s.time_range_spec, "min_duration", "1209600s"), "contradictory"),
        (
            lambda s: s.location_policy.locations.update(
                {"zones/us-east4-b": compute_v1.FutureResourcesSpecLocationPolicyLocation(preference="ALLOW")}
            ),
            "Must be a zone of us-central1",
        ),
    ],
)
def test_invalid_advice_requests_are_400(gce, clock, change, field) -> None:
    bad = spec(clock)
    change(bad)
    with pytest.raises(exceptions.BadRequest) as error:
        advise(gce, bad)
    assert field in error.value.message


def test_exactly_one_spec_and_a_duration_are_required(gce, clock) -> None:
    with pytest.raises(exceptions.BadRequest) as two:
        advise(gce, spec(clock), spec(clock))
    assert "Exactly one spec" in two.value.message
    bare = spec(clock)
    bare.time_range_spec = compute_v1.FlexibleTimeRange(start_time_not_earlier_than=rfc3339(clock()))
    with pytest.raises(exceptions.BadRequest) as none:
        advise(gce, bare)
    assert "minDuration" in none.value.message
