"""Queued resources on calendar-mode reservations (:mod:`..core.reservations`).

A ``reservation_name`` (``projects/P/locations/ZONE/reservations/R``) of a reservation a future
reservation declared makes the request wait in that reservation's pool,
``ZONE/FAMILY@R`` (WAITING_FOR_RESOURCES until the block is delivered and has room). One that
ended, or holds another TPU family, is INVALID_ARGUMENT. A ``--capacity ZONE/FAMILY@R`` pool is a
reservation that no future reservation declared and that never ends: it keeps working as before.
"""

from __future__ import annotations

import grpc

from ..core.errors import EmulatorError
from ..core.reservations import Reservation, Reservations
from .validation import QueuedResourcePlan

_FIELD = "Invalid value for field 'queued_resource.reservation_name': "


def calendar_reservation(reservations: Reservations, plan: QueuedResourcePlan) -> Reservation | None:
    """The live calendar-mode reservation ``plan`` consumes; None when it names none (or a
    ``--capacity`` reservation pool); INVALID_ARGUMENT for an ended one or another family."""
    if plan.reservation is None:
        return None
    res = reservations.resolve(plan.reservation, plan.project, zones=[plan.zone])
    if res is None:
        return None
    if res.ended:
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{_FIELD}reservation {plan.reservation} does not exist any more ({res.ended_message})",
        )
    if res.accelerator != plan.shape.family:
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{_FIELD}reservation {plan.reservation} holds {res.machine_type or res.accelerator} capacity, "
            f"not {plan.shape.family}.",
        )
    return res
