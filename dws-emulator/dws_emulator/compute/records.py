"""The Compute Engine records the state keeps: templates, MIGs, resize requests and VMs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.reservations import Reservation
from .validation import VmPlan


@dataclass
class Template:
    """An instance template (global or regional) as stored."""

    path: str
    pb: Any


@dataclass
class Mig:
    """A managed instance group; ``vms`` are its live VMs by name."""

    path: str
    project: str
    scope: str  # "zones" or "regions"
    location: str
    pb: Any
    template_path: str
    zones: list[str]
    vms: dict[str, Vm] = field(default_factory=dict)
    deleted: bool = False

    @property
    def scope_path(self) -> str:
        return f"projects/{self.project}/{self.scope}/{self.location}"


@dataclass
class ResizeRecord:
    """One resize request ever created (``holder``: its capacity holder id, unique even if renamed)."""

    path: str
    holder: str
    mig: Mig
    pb: Any
    created_at: float
    run_seconds: float
    history: list[tuple[str, float]] = field(default_factory=list)
    plan: VmPlan | None = None
    vms: list[Vm] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    run_until: float | None = None
    error: dict[str, str] | None = None
    deleted: bool = False
    reservation: Reservation | None = None  # a RESERVATION_BOUND template's calendar reservation

    @property
    def state(self) -> str:
        return str(self.pb.state)


@dataclass
class Vm:
    """One VM a resize request created; ``deleted_at`` is set when it is deleted."""

    name: str
    zone: str
    path: str
    pb: Any
    mig: Mig
    request: ResizeRecord | None
    gpus: int
    internal_ip: str
    created_at: float
    deleted_at: float | None = None
