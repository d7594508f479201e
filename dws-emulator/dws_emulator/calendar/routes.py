"""Calendar mode's REST routes (paths as the ``compute_v1`` REST transports send them): future
reservations, calendar-mode advice and reservations. Their operations are polled through the zone
operations routes :mod:`..compute` serves (one store, :mod:`..core.gce_operations`).

``state`` is the :class:`~.state.CalendarState` (typed ``Any``: the state imports this module).
"""

from __future__ import annotations

from typing import Any

from ..core.rest import RestCall, RestRoute

ROOT = "/compute/v1/projects/{project}"


def _rid(call: RestCall) -> str:
    return call.query.get("requestId", "")


def calendar_routes(state: Any) -> list[RestRoute]:
    """Every calendar-mode route."""
    frs = f"{ROOT}/zones/{{zone}}/futureReservations"
    fr = f"{frs}/{{future_reservation}}"
    reservations = f"{ROOT}/zones/{{zone}}/reservations"
    reservation = f"{reservations}/{{reservation}}"

    def p(call: RestCall, *names: str) -> list[str]:
        return [call.params[n] for n in ("project", *names)]

    return [
        RestRoute(
            "POST",
            frs,
            "compute.futureReservations.insert",
            lambda c: state.insert(*p(c, "zone"), c.body, _rid(c)),
        ),
        RestRoute(
            "GET", frs, "compute.futureReservations.list", lambda c: state.list(*p(c, "zone"), c.query)
        ),
        RestRoute(
            "GET",
            fr,
            "compute.futureReservations.get",
            lambda c: state.get(*p(c, "zone", "future_reservation")),
        ),
        RestRoute(
            "POST",
            f"{fr}/cancel",
            "compute.futureReservations.cancel",
            lambda c: state.cancel(*p(c, "zone", "future_reservation"), _rid(c)),
        ),
        RestRoute(
            "DELETE",
            fr,
            "compute.futureReservations.delete",
            lambda c: state.delete(*p(c, "zone", "future_reservation"), _rid(c)),
        ),
        RestRoute(
            "GET",
            f"{ROOT}/aggregated/futureReservations",
            "compute.futureReservations.aggregatedList",
            lambda c: state.aggregated_list(c.params["project"], c.query),
        ),
        RestRoute(
            "POST",
            f"{ROOT}/regions/{{region}}/advice/calendarMode",
            "compute.advice.calendarMode",
            lambda c: state.calendar_mode_advice(*p(c, "region"), c.body),
        ),
        RestRoute(
            "GET",
            reservations,
            "compute.reservations.list",
            lambda c: state.list_reservations(*p(c, "zone"), c.query),
        ),
        RestRoute(
            "GET",
            reservation,
            "compute.reservations.get",
            lambda c: state.get_reservation(*p(c, "zone", "reservation")),
        ),
        RestRoute(
            "DELETE",
            reservation,
            "compute.reservations.delete",
            lambda c: state.delete_reservation(*p(c, "zone", "reservation"), _rid(c)),
        ),
        RestRoute(
            "GET",
            f"{ROOT}/aggregated/reservations",
            "compute.reservations.aggregatedList",
            lambda c: state.aggregated_reservations(c.params["project"], c.query),
        ),
    ]
