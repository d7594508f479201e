"""Compute Engine's calendar-mode advice (``advice/calendarMode``): the request that asks where and
when a block is free, the recommendations it answers read as offers, and the choice among them.
Pure (no call): :meth:`~airflow_provider_dws.backends.calendar.FutureReservationBackend.advise`
makes the call."""

from __future__ import annotations

from collections.abc import Container, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_dws.backends.calendar_block import rfc3339
from airflow_provider_dws.backends.compute_base import _when
from airflow_provider_dws.facts import CALENDAR_TPU_ROWS

if TYPE_CHECKING:
    from google.cloud.compute_v1 import CalendarModeAdviceRequest

    from airflow_provider_dws.catalog import CalendarShape

#: The key of the one spec in an advice request (the API allows one).
ADVICE_SPEC_KEY = "block"


class BlockOffer(NamedTuple):
    """One recommendation of the calendar-mode advice: a zone and a block in it."""

    zone: str
    start: datetime
    end: datetime
    recommendation_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly (XCom)."""
        return {
            "zone": self.zone,
            "start_time": self.start.isoformat(),
            "end_time": self.end.isoformat(),
            "recommendation_id": self.recommendation_id,
        }


def advice_request(
    shape: CalendarShape,
    zones: Sequence[str],
    earliest: datetime,
    latest: datetime,
    duration: timedelta,
    workload_type: str = "BATCH",
) -> CalendarModeAdviceRequest:
    """Ask where and when ``shape`` is free for ``duration``, starting between ``earliest`` and
    ``latest``, in ``zones`` only."""
    from google.cloud import compute_v1

    if shape.tpu_version is not None:
        target = compute_v1.FutureResourcesSpecTargetResources(
            aggregate_resources=compute_v1.FutureResourcesSpecAggregateResources(
                vm_family=CALENDAR_TPU_ROWS[shape.tpu_version][0],
                accelerator_count=shape.chip_count,
                workload_type=workload_type,
            )
        )
    else:
        target = compute_v1.FutureResourcesSpecTargetResources(
            specific_sku_resources=compute_v1.FutureResourcesSpecSpecificSKUResources(
                machine_type=shape.machine_type, instance_count=shape.vm_count
            )
        )
    length = f"{int(duration.total_seconds())}s"
    spec = compute_v1.FutureResourcesSpec(
        target_resources=target,
        deployment_type="DENSE",
        time_range_spec=compute_v1.FlexibleTimeRange(
            start_time_not_earlier_than=rfc3339(earliest),
            start_time_not_later_than=rfc3339(latest),
            min_duration=length,
            max_duration=length,
        ),
        location_policy=compute_v1.FutureResourcesSpecLocationPolicy(
            locations={
                f"zones/{zone}": compute_v1.FutureResourcesSpecLocationPolicyLocation(preference="ALLOW")
                for zone in zones
            }
        ),
    )
    return compute_v1.CalendarModeAdviceRequest(future_resources_specs={ADVICE_SPEC_KEY: spec})


def read_offers(response: Any, zones: Container[str]) -> tuple[list[BlockOffer], dict[str, str]]:
    """The offers of an advice response in ``zones`` (its order kept), and what it says of the zones it
    did not recommend (``zone -> "NO_CAPACITY: details"``; a zone it names RECOMMENDED is not one)."""
    offers: list[BlockOffer] = []
    others: dict[str, str] = {}
    for recommendation in response.recommendations:
        for item in recommendation.recommendations_per_spec.values():
            for location, other in item.other_locations.items():
                if other.status == "RECOMMENDED":
                    continue  # offered too (its own recommendation, if any, gives the block)
                zone = location.rsplit("/", 1)[-1]
                others[zone] = f"{other.status}: {other.details}" if other.details else str(other.status)
            zone = (item.location or "").rsplit("/", 1)[-1]
            start, end = _when(item.start_time), _when(item.end_time)
            if zone in zones and start is not None and end is not None:
                offers.append(BlockOffer(zone, start, end, item.recommendation_id or ""))
    return offers, {zone: why for zone, why in others.items() if not any(o.zone == zone for o in offers)}


def choose_offer(
    offers: Sequence[BlockOffer], order: str, zones: Sequence[str]
) -> tuple[BlockOffer, list[BlockOffer]]:
    """The offer to take and the others, best first.

    ``earliest``: the earliest start, a tie going to the zone listed first. ``zone_order``: the first
    listed zone that has an offer, its earliest start (the user's zones in order of preference, the
    cheapest or nearest first). Raises ``ValueError`` when there is none.
    """
    if not offers:
        raise ValueError("no offer to choose from")
    rank = {zone: index for index, zone in enumerate(zones)}

    def by_start(offer: BlockOffer) -> tuple[Any, ...]:
        return (offer.start, rank.get(offer.zone, len(rank)), offer.end)

    def by_zone(offer: BlockOffer) -> tuple[Any, ...]:
        return (rank.get(offer.zone, len(rank)), offer.start, offer.end)

    if order not in ("earliest", "zone_order"):
        raise ValueError(f"order must be 'earliest' or 'zone_order', got {order!r}")
    ordered = sorted(dict.fromkeys(offers), key=by_start if order == "earliest" else by_zone)
    return ordered[0], ordered[1:]
