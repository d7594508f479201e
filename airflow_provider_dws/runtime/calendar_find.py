"""The Find task when it runs: ask each region's calendar-mode advice for a block, choose one as the
operator's ``order`` says, and say what each zone answered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.calendar import FutureReservationBackend, describe_length
from airflow_provider_dws.backends.calendar_advice import advice_request, choose_offer, read_offers
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError, CapacityNotObtainedError
from airflow_provider_dws.operators.calendar_checks import search_range
from airflow_provider_dws.runtime.calendar import shape_fields, shape_of
from airflow_provider_dws.runtime.loop import resolve_project

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.operators.calendar import FindCalendarBlockOperator

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    return zone.rsplit("-", 1)[0]


def find_block(op: FindCalendarBlockOperator, context: Context) -> dict[str, Any]:
    """Ask each region's calendar-mode advice, choose a block as ``op.order`` says, log the choice and
    the alternatives and return them; no block anywhere is capacity not obtained, with each zone's answer."""
    shape = shape_of(op)
    zones = [str(z) for z in op.zones]
    earliest, latest = search_range(op)
    project = resolve_project(op)
    backend = FutureReservationBackend(project, zones[0], op.gcp_conn_id, op.impersonation_chain)
    regions: dict[str, list[str]] = {}
    for zone in zones:
        regions.setdefault(region_of(zone), []).append(zone)
    offers: list[Any] = []
    unavailable: dict[str, str] = {}
    refused: list[str] = []
    for region, in_region in regions.items():
        request = advice_request(shape, in_region, earliest, latest, op.duration, op.workload_type)
        try:
            response = backend.advise(region, request)
        except _REFUSED as err:
            # One region's refusal (a zone it does not serve, no permission there) is that region's
            # answer: the others may still have a block.
            refused.append(f"{region}: {err.message}")
            unavailable.update({zone: f"the advice was refused: {err.message}" for zone in in_region})
            continue
        found, why = read_offers(response, in_region)
        offers += found
        unavailable.update(why)
    if len(refused) == len(regions):
        raise BadRequestError(f"Compute Engine refused the calendar-mode advice ({'; '.join(refused)})")
    span = f"{shape.describe()} for {describe_length(op.duration)}, starting between {earliest:%Y-%m-%d %H:%M} and {latest:%Y-%m-%d %H:%M} UTC"
    if not offers:
        answers = "; ".join(f"{zone}: {unavailable.get(zone, 'no recommendation')}" for zone in zones)
        raise CapacityNotObtainedError(f"no calendar block of {span} in {', '.join(zones)} ({answers})")
    chosen, others = choose_offer(offers, op.order, zones)
    op.log.info("Calendar-mode advice for %s:", span)
    op.log.info(
        "Chosen (%s): %s from %s to %s",
        "earliest start" if op.order == "earliest" else "first zone in order",
        chosen.zone,
        chosen.start.isoformat(),
        (chosen.start + op.duration).isoformat(),
    )
    for offer in others:
        op.log.info(
            "Alternative: %s from %s to %s", offer.zone, offer.start.isoformat(), offer.end.isoformat()
        )
    for zone, answer in unavailable.items():
        op.log.info("Not offered in %s: %s", zone, answer)
    return {
        "zone": chosen.zone,
        "region": region_of(chosen.zone),
        "start_time": chosen.start.isoformat(),
        "end_time": (chosen.start + op.duration).isoformat(),
        "duration_seconds": int(op.duration.total_seconds()),
        "recommendation_id": chosen.recommendation_id,
        "order": op.order,
        **shape_fields(shape, op.workload_type),
        "alternatives": [offer.to_dict() for offer in others],
        "unavailable": unavailable,
    }
