"""How an API package plugs into the shared core: the :class:`Api` base class.

The core (capacity, clock and tick, operations, faults, counters, control, server) imports no API
package. An API subclasses :class:`Api` and the bootstrap (:mod:`dws_emulator.apis`)
hands its class to :class:`~.state.CoreState`. What an API contributes:

* ``services``: its gRPC service names and methods (fault rules and call counters use them);
* tick hooks: ``before_advance`` (its own due transitions, before the capacity model starts queue
  heads), ``started`` / ``expired`` for capacity holders it ``owns``, ``after_advance``;
* ``handlers``: its gRPC generic handlers, one per service;
* ``rest_service`` and ``rest_routes``: its REST routes (:class:`~.rest.RestRoute`) on the REST
  front, for an API whose clients speak JSON over HTTP (Compute Engine);
* ``requests`` (the control API's inventory of requests) and ``control_methods`` (extra control
  calls, e.g. TPU ``Preempt``);
* ``forget_operation``: a long-running operation of its own was deleted by a client;
* ``cancel_operation``: a client asked to cancel a long-running operation (AIP-151: best effort);
  an API whose operation can still be stopped does so and says it handled it;
* ``reservation_ended``: a reservation one of its holders consumes is gone
  (:mod:`.reservations`): end that holder as the API would.

Every hook runs under the core's lock.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import grpc
from google.longrunning import operations_pb2

from .capacity import CapacityModel
from .gce_operations import GceOperations
from .reservations import Reservation, Reservations
from .rest import RestRoute


class Core(Protocol):
    """What an API may use of the core (:class:`~.state.CoreState` provides it)."""

    lock: threading.RLock
    clock: Callable[[], float]
    capacity: CapacityModel
    operations: dict[str, operations_pb2.Operation]
    gce_operations: GceOperations
    reservations: Reservations
    id_rng: random.Random

    def tick(self) -> None: ...

    def end_reservation(self, path: str, message: str, now: float) -> None: ...

    def new_operation_id(self) -> int: ...

    def first_job_id(self) -> int: ...


class Api:
    """One emulated API on the shared core; override what applies (defaults do nothing)."""

    #: Short name, also the attribute of the core state it is reachable by (``state.batch``).
    name = ""
    #: Full service name -> emulated method names (REST methods under :attr:`rest_service` too).
    services: Mapping[str, tuple[str, ...]] = {}
    #: The service name the REST routes' methods are registered and counted under.
    rest_service = ""

    def __init__(self, core: Core) -> None:
        self.core = core

    def owns(self, holder: str) -> bool:
        """True if ``holder`` (a capacity holder id) is one of this API's requests."""
        return False

    def before_advance(self, now: float) -> None:
        """Transitions due at ``now`` that precede the capacity model's ``advance``."""

    def started(self, holder: str, now: float) -> None:
        """The capacity model gave ``holder`` its whole set."""

    def expired(self, holder: str, now: float) -> None:
        """``holder``'s max wait passed while it was queued (it left the queue)."""

    def after_advance(self, now: float) -> None:
        """Transitions that follow ``advance`` in the same tick (starts that need no queue, operations)."""

    def handlers(self) -> list[tuple[str, grpc.GenericRpcHandler]]:
        """``(service name, generic handler)`` for each gRPC service of this API."""
        return []

    def rest_routes(self) -> list[RestRoute]:
        """This API's routes on the REST front (each named by a method of :attr:`rest_service`)."""
        return []

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        """Every request ever created, as ``(create time, control-API record)``."""
        return []

    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """Extra control methods (JSON body in, JSON-able reply out), by method name."""
        return {}

    def forget_operation(self, name: str) -> None:
        """A client deleted operation ``name``; drop any pending completion of it."""

    def cancel_operation(self, name: str, now: float) -> bool:
        """A client asked to cancel operation ``name``: stop it if it is this API's and can still be
        stopped (ending it with code CANCELLED). True if it is this API's, stopped or not."""
        return False

    def reservation_ended(self, holder: str, reservation: Reservation, message: str, now: float) -> None:
        """``reservation``, which ``holder`` consumes (or waits for), is gone: end ``holder``."""
