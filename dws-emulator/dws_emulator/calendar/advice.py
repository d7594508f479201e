"""Calendar-mode advice: where and when a block fits, read from the calendar of free capacity.

For each zone the request allows (the region's zones with an inventory of the accelerator, and the
zones its location policy ALLOWs, minus the DENYed ones) the earliest start that fits: candidate
starts are the earliest possible one (``startTimeNotEarlierThan``, but no sooner than the minimum
lead time plus :data:`ADVICE_SLACK_SECONDS` from now, in whole seconds) and then every UTC
midnight up to ``startTimeNotLaterThan`` (at most as far ahead as a block may start: 60 days for
GPUs, 120 for TPUs); at a start the
block runs as long as it fits, at most ``maxDuration``, and is a fit when that is at least
``minDuration``. Each zone with a fit gives one recommendation, earliest first (then by zone), whose
``otherLocations`` tell how every other allowed zone fared (RECOMMENDED, NO_CAPACITY,
NOT_SUPPORTED, CONDITIONS_NOT_MET). With no fit, one recommendation without a location says why
in ``otherLocations``. Deterministic: ids come from the emulator's seeded id stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..core.clock import iso
from .inventory import DAY, CapacityCalendar
from .validation import GPU_HORIZON_SECONDS, TPU_HORIZON_SECONDS, AdviceSpec

#: Seconds between the advice and the earliest start it recommends, beyond the minimum lead time,
#: so that a future reservation made from it right away still starts late enough.
ADVICE_SLACK_SECONDS = 5.0


def _candidates(low: float, high: float) -> list[float]:
    starts = [low]
    midnight = (math.floor(low / DAY) + 1) * DAY
    while midnight <= high:
        starts.append(float(midnight))
        midnight += DAY
    return starts


def _fit(
    calendar: CapacityCalendar, spec: AdviceSpec, zone: str, starts: list[float]
) -> tuple[float, float] | None:
    key = spec.ask.key(zone)
    for start in starts:
        room = calendar.room_until(key, start, spec.ask.units, start + spec.max_seconds)
        if room - start >= spec.min_seconds:
            return start, room
    return None


def advise(
    calendar: CapacityCalendar,
    spec: AdviceSpec,
    region: str,
    now: float,
    min_lead: float,
    new_id: Callable[[], str],
) -> dict[str, Any]:
    """The CalendarModeAdviceResponse JSON for ``spec`` in ``region``."""
    ask = spec.ask
    low = float(math.ceil(max(spec.earliest or 0.0, now + min_lead + ADVICE_SLACK_SECONDS)))
    horizon = now + (GPU_HORIZON_SECONDS if ask.machine_type else TPU_HORIZON_SECONDS)
    high = horizon if spec.latest is None else min(spec.latest, horizon)
    zones = sorted(
        ({z for z in calendar.zones(ask.accelerator) if z.rsplit("-", 1)[0] == region} | set(spec.allowed))
        - {z for z, allow in spec.allowed.items() if not allow}
    )
    starts = _candidates(low, high) if high >= low else []
    fits: dict[str, tuple[float, float]] = {}
    others: dict[str, dict[str, str]] = {}
    window = f"starting between {iso(low)} and {iso(high)}"
    for zone in zones:
        if not calendar.offers(ask.key(zone)):
            others[zone] = {
                "status": "NOT_SUPPORTED",
                "details": f"Calendar mode offers no {ask.accelerator} in {zone}.",
            }
        elif not starts:
            others[zone] = {
                "status": "CONDITIONS_NOT_MET",
                "details": f"The start time range ends ({iso(high)}) before the earliest possible start "
                f"({iso(low)}).",
            }
        else:
            found = _fit(calendar, spec, zone, starts)
            if found is None:
                others[zone] = {
                    "status": "NO_CAPACITY",
                    "details": f"No block of {ask.describe()} for {spec.min_seconds / DAY:g} to "
                    f"{spec.max_seconds / DAY:g} days {window} is free in {zone}.",
                }
            else:
                fits[zone] = found
    recommendations = []
    for zone, (start, end) in sorted(fits.items(), key=lambda item: (item[1][0], item[0])):
        other = {
            f"zones/{z}": (
                {"status": "RECOMMENDED", "details": f"A block starting {iso(fits[z][0])} fits there too."}
                if z in fits
                else others[z]
            )
            for z in zones
            if z != zone
        }
        rec: dict[str, Any] = {
            "location": f"zones/{zone}",
            "startTime": iso(start),
            "endTime": iso(end),
            "recommendationId": new_id(),
            "recommendationType": "FUTURE_RESERVATION",
        }
        if other:
            rec["otherLocations"] = other
        recommendations.append({"recommendationsPerSpec": {spec.key: rec}})
    if not recommendations:
        none: dict[str, Any] = {"recommendationId": new_id(), "recommendationType": "FUTURE_RESERVATION"}
        if others:
            none["otherLocations"] = {f"zones/{z}": v for z, v in others.items()}
        recommendations.append({"recommendationsPerSpec": {spec.key: none}})
    return {"recommendations": recommendations}
