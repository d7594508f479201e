"""MIG VMs on calendar-mode reservations (:mod:`..core.reservations`).

A template with ``scheduling.provisioningModel`` RESERVATION_BOUND and ``reservationAffinity``
{SPECIFIC_RESERVATION, ``compute.googleapis.com/reservation-name``, [the reservation]} makes a
resize request take its GPUs from that reservation's own pool (waiting ACCEPTED until the block is
delivered and has room) and create its VMs in the reservation's zone; it needs no
``requestedRunDuration`` (its VMs live until the reservation ends, when they are deleted).
The reservation is named as Compute Engine allows: a name, ``zones/Z/reservations/R``,
``projects/P/zones/Z/reservations/R`` or a full URL; it must be in one of the MIG's zones.
"""

from __future__ import annotations

from ..core.reservations import Reservation, Reservations
from .records import Mig
from .validation import VmPlan

#: The error code of a resize request still waiting when its reservation ends. Google documents
#: none for this (compute v1 and beta, revision 20261106, list no such code, and the error codes
#: are free strings): the emulator answers as for a reservation that is gone, with a message that
#: names its end. Its own choice, so that a client keyed on an invented code would be caught.
RESERVATION_ENDED = "RESOURCE_NOT_FOUND"


def bound_reservation(reservations: Reservations, mig: Mig, plan: VmPlan) -> Reservation | tuple[str, str]:
    """The live reservation ``plan`` consumes, or the ``(code, message)`` the request FAILS with."""
    assert plan.reservation is not None
    res = reservations.resolve(plan.reservation, mig.project, zones=mig.zones)
    if res is None or res.ended:
        name = plan.reservation.rsplit("/", 1)[-1]
        where = (
            res.path
            if res is not None
            else f"projects/{mig.project}/zones/{mig.zones[0]}/reservations/{name}"
        )
        return "RESOURCE_NOT_FOUND", f"The resource '{where}' was not found"
    if res.accelerator != plan.accelerator or (res.machine_type and res.machine_type != plan.machine_type):
        return (
            "INVALID_RESOURCE_USAGE",
            f"The reservation '{res.path}' holds {res.machine_type or res.accelerator} machines; the instance "
            f"template asks for {plan.machine_type}.",
        )
    return res
