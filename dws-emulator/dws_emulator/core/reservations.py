"""Reservations that workloads consume: the one registry the APIs share (Compute Engine calendar mode).

A **reservation** is capacity only its consumers may use: a pool of its own in the capacity model,
``ZONE/ACCELERATOR@NAME`` (``us-central1-a/NVIDIA_H100_80GB@block-1`` counted in GPUs,
``us-west4-a/v5litepod@tpu-block`` counted in chips; the spelling TPU reservation pools already
use), separate from the Flex Start pools. The API that books it (:mod:`..calendar`) declares it
here when its future reservation is approved (the pool exists with 0 units, so a consumer may
queue on it), sets the pool's size when it is delivered and ends it at the block's end.

A consumer (a Vertex AI job, a TPU queued resource, a Batch job, a MIG's resize request) names a
reservation in its API's spelling; :meth:`Reservations.resolve` reads them all. It queues on the
reservation's pool like any holder and tells the registry it consumes it
(:meth:`Reservations.consume`), so that :meth:`~.state.CoreState.end_reservation` can end it
through its API's ``reservation_ended`` hook when the reservation ends (the block is over, its
request was cancelled or declined, or the reservation was deleted).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from .capacity import PoolKey

#: The reservation affinity key that targets a reservation by name (Compute Engine, Vertex AI).
RESERVATION_KEY = "compute.googleapis.com/reservation-name"

_REF_RE = re.compile(
    r"(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
    r"(?:projects/(?P<project>[^/]+)/)?(?:(?:zones|locations)/(?P<zone>[^/]+)/)?"
    r"(?:reservations/)?(?P<name>[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"
)


@dataclass
class Reservation:
    """One reservation a future reservation creates (``ended`` once it is gone)."""

    path: str  # projects/P/zones/Z/reservations/NAME
    project: str
    zone: str
    name: str
    accelerator: str  # the pool's accelerator: a GPU's Vertex AI name, or a TPU family
    machine_type: str | None  # GPU reservations: the machine type every VM on it has
    gpus_per_vm: int  # GPU reservations: that machine's GPUs; 0 for TPUs (counted in chips)
    owner: str  # the future reservation's path
    delivered: bool = False
    ended: bool = False
    #: Why it ended (or will not be delivered), as the consumers' errors say it.
    ended_message: str = ""
    #: Holder id -> what it is ("CustomJob", "QueuedResource", ...), every consumer ever.
    consumers: dict[str, str] = field(default_factory=dict)

    @property
    def pool(self) -> PoolKey:
        return PoolKey(self.zone, f"{self.accelerator}@{self.name}")

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    @property
    def unit(self) -> str:
        return "GPUs" if self.machine_type else "chips"


def parse_reference(ref: str) -> tuple[str | None, str | None, str] | None:
    """``(project, zone, name)`` of a reservation reference (a full URL,
    ``projects/P/zones/Z/reservations/R``, the TPU spelling ``projects/P/locations/Z/reservations/R``,
    ``zones/Z/reservations/R`` or a bare name), None if it is none of these."""
    match = _REF_RE.fullmatch(ref.strip())
    if match is None:
        return None
    if "/" in ref and "reservations/" not in ref:
        return None
    return match["project"], match["zone"], match["name"]


class Reservations:
    """Every reservation ever declared, by path (the newest one with a path wins)."""

    def __init__(self) -> None:
        self._by_path: dict[str, Reservation] = {}

    def add(self, reservation: Reservation) -> None:
        self._by_path[reservation.path] = reservation

    def get(self, path: str) -> Reservation | None:
        return self._by_path.get(path)

    def all(self) -> list[Reservation]:
        return list(self._by_path.values())

    def resolve(
        self, ref: str, project: str, zones: Collection[str] | None = None, region: str | None = None
    ) -> Reservation | None:
        """The reservation ``ref`` names for a consumer of ``project`` that may run in ``zones`` (or
        any zone of ``region``), ended ones included; None when there is no such reservation.

        A bare name or ``zones/Z/...`` is read in the consumer's project; a bare name is looked
        for in the consumer's zones and must be unique there.
        """
        parsed = parse_reference(ref)
        if parsed is None:
            return None
        ref_project, ref_zone, name = parsed
        ref_project = ref_project or project

        def allowed(zone: str) -> bool:
            if zones is not None:
                return zone in zones
            return region is None or zone.rsplit("-", 1)[0] == region

        if ref_zone is not None:
            found = self._by_path.get(f"projects/{ref_project}/zones/{ref_zone}/reservations/{name}")
            return found if found is not None and allowed(found.zone) else None
        matches = [
            r
            for r in self._by_path.values()
            if r.project == ref_project and r.name == name and allowed(r.zone)
        ]
        live = [r for r in matches if not r.ended] or matches
        return live[0] if len(live) == 1 else None

    @staticmethod
    def consume(holder: str, reservation: Reservation, kind: str) -> None:
        """``holder`` (a capacity holder of ``kind``) consumes ``reservation``: it is ended with it."""
        reservation.consumers[holder] = kind
