"""The records calendar mode keeps: future reservations and the settings of their procurement."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..core.reservations import Reservation
from .validation import BlockPlan

#: Environment variables of :class:`CalendarSettings` (``serve`` options override them).
APPROVAL_ENV = "DWS_EMULATOR_CALENDAR_APPROVAL_SECONDS"
MIN_LEAD_ENV = "DWS_EMULATOR_CALENDAR_MIN_LEAD_SECONDS"
PROVISION_ENV = "DWS_EMULATOR_CALENDAR_PROVISION_SECONDS"
MANUAL = "manual"


def parse_seconds(text: Any, what: str, manual_ok: bool = False) -> float | None:
    """A number of seconds >= 0 (from JSON or the environment); ``"manual"`` is None where allowed."""
    if manual_ok and (text is None or text == MANUAL):
        return None
    if isinstance(text, bool):
        raise ValueError(f"{what}: expected a number of seconds, got {text!r}")
    try:
        value = float(text)
    except (TypeError, ValueError):
        hint = f' or "{MANUAL}"' if manual_ok else ""
        raise ValueError(f"{what}: expected a number of seconds{hint}, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"{what}: must be >= 0, got {text!r}")
    return value


@dataclass
class CalendarSettings:
    """How procurement runs on the emulator's clock.

    ``approval_seconds``: from submission to the automatic decision (APPROVED if the calendar has
    room, else DECLINED); None: only the control API's Approve / Decline decide. ``min_lead_seconds``:
    how far in the future a block must start. ``provision_seconds``: how long PROVISIONING lasts
    after the start time before the reservation is delivered.
    """

    approval_seconds: float | None = 1.0
    min_lead_seconds: float = 0.0
    provision_seconds: float = 1.0

    @classmethod
    def from_env(cls) -> CalendarSettings:
        settings = cls()
        if os.environ.get(APPROVAL_ENV, "").strip():
            settings.approval_seconds = parse_seconds(os.environ[APPROVAL_ENV].strip(), APPROVAL_ENV, True)
        if os.environ.get(MIN_LEAD_ENV, "").strip():
            settings.min_lead_seconds = parse_seconds(os.environ[MIN_LEAD_ENV], MIN_LEAD_ENV) or 0.0
        if os.environ.get(PROVISION_ENV, "").strip():
            settings.provision_seconds = parse_seconds(os.environ[PROVISION_ENV], PROVISION_ENV) or 0.0
        return settings

    def to_json(self) -> dict[str, Any]:
        return {
            "approval_seconds": MANUAL if self.approval_seconds is None else self.approval_seconds,
            "min_lead_seconds": self.min_lead_seconds,
            "provision_seconds": self.provision_seconds,
        }


@dataclass
class FutureRecord:
    """One future reservation ever created (``pb``: the stored FutureReservation message)."""

    path: str
    project: str
    zone: str
    pb: Any
    plan: BlockPlan
    created_at: float
    history: list[tuple[str, float]] = field(default_factory=list)
    booking: int | None = None
    approved_at: float | None = None
    lock_at: float | None = None
    deliver_at: float | None = None
    delivered_at: float | None = None
    ended_at: float | None = None  # the block ended (its reservation and consumers with it)
    #: Units (VMs or chips) a partial delivery gives (control ``PartlyFulfil``), None: all.
    partial: int | None = None
    reservation: Reservation | None = None
    reservation_pb: Any = None  # its Reservation message while served (INACTIVE from approval, READY)
    reason: str = ""  # why it was declined, failed or ended
    deleted: bool = False

    @property
    def status(self) -> str:
        return str(self.pb.status.procurement_status)

    @property
    def name(self) -> str:
        return str(self.pb.name)
