"""The shared core state: lock, clock and tick, seeded ids, capacity model, long-running operations.

Each emulated API (:class:`~.api.Api`) keeps its own requests and is driven by :meth:`CoreState.tick`
through its hooks. Every public method takes the lock and first calls :meth:`CoreState.tick`, so
the model is current whatever the background ticker is doing. The state is transport agnostic:
the gRPC layer only decodes requests, calls in, and encodes replies.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc
from google.longrunning import operations_pb2

from .api import Api
from .capacity import CapacityModel
from .errors import EmulatorError
from .gce_operations import GceOperations
from .reservations import Reservations

log = logging.getLogger("dws_emulator")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class CoreState:
    """All emulator state behind one lock. ``clock`` returns epoch seconds (injectable for tests).

    ``apis`` are the :class:`~.api.Api` classes to host; each instance is reachable as
    ``state.apis[name]`` (and as an attribute of that name).
    """

    def __init__(
        self,
        capacity: Mapping[Any, int] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        apis: Iterable[type[Api]] = (),
    ) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.seed = seed
        # Fault injection draws from this (see .faults); ids use their own stream so faults never shift them.
        self.rng = random.Random(seed)
        self.id_rng = random.Random(f"dws-emulator-ids:{seed}")
        # Drawn first, so the ids APIs draw after it are those of earlier versions for a given seed.
        self._first_job_id = self.id_rng.randrange(10**18, 5 * 10**18)
        self._next_op_id = self.id_rng.randrange(10**18, 5 * 10**18)
        self.capacity = CapacityModel(capacity, clock=clock)
        self.operations: dict[str, operations_pb2.Operation] = {}
        # Compute Engine's Operation resources (the REST APIs' own kind of operation).
        self.gce_operations = GceOperations(self)
        self.reservations = Reservations()
        self.apis: dict[str, Api] = {}
        for api_class in apis:
            api = api_class(self)
            self.apis[api.name] = api

    def __getattr__(self, name: str) -> Any:
        # ``state.vertex``, ``state.tpu``, ``state.batch``: the hosted APIs by name.
        apis = self.__dict__.get("apis", {})
        if name in apis:
            return apis[name]
        raise AttributeError(name)

    def first_job_id(self) -> int:
        """The seeded first numeric id of server-named resources (Vertex CustomJobs)."""
        return self._first_job_id

    def new_operation_id(self) -> int:
        """The next long-running operation id (shared by every API's operations)."""
        op_id = self._next_op_id
        self._next_op_id += 1
        return op_id

    def services(self) -> dict[str, tuple[str, ...]]:
        """Every hosted API's services and methods (APIs sharing a service, ``compute.v1``, add up)."""
        merged: dict[str, tuple[str, ...]] = {}
        for api in self.apis.values():
            for svc, methods in api.services.items():
                merged[svc] = merged.get(svc, ()) + tuple(methods)
        return merged

    def _owner(self, holder: str) -> Api:
        api = self._owner_or_none(holder)
        if api is None:
            raise KeyError(f"no API owns capacity holder {holder}")
        return api

    def _owner_or_none(self, holder: str) -> Api | None:
        for api in self.apis.values():
            if api.owns(holder):
                return api
        return None

    def end_reservation(self, path: str, message: str, now: float) -> None:
        """Reservation ``path`` is gone: every consumer of it is ended by its API (``message`` says
        why), and its pool holds nothing any more. Ending an ended reservation does nothing."""
        reservation = self.reservations.get(path)
        if reservation is None or reservation.ended:
            return
        reservation.ended = True
        reservation.ended_message = message
        for holder in list(reservation.consumers):
            api = self._owner_or_none(holder)
            if api is not None:
                api.reservation_ended(holder, reservation, message, now)
        self.capacity.set_total(reservation.pool, 0)
        log.info("reservation %s ended: %s", path, message)

    # -- tick ------------------------------------------------------------------------------
    def tick(self) -> None:
        """Advance every API and the capacity model to ``clock()``; costs what is due, not what exists."""
        with self.lock:
            now = self.clock()
            apis = list(self.apis.values())
            for api in apis:
                api.before_advance(now)
            # Capacity is advanced after releases so a freed set is handed on in the same tick.
            result = self.capacity.advance()
            for holder in result.expired:
                self._owner(holder).expired(holder, now)
            for holder in result.started:
                self._owner(holder).started(holder, now)
            for api in apis:
                api.after_advance(now)
            self.gce_operations.after_advance(now)

    # -- Operations RPCs -------------------------------------------------------------------
    def get_operation(self, name: str) -> operations_pb2.Operation:
        with self.lock:
            self.tick()
            op = self.operations.get(name)
            if op is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            out = operations_pb2.Operation()
            out.CopyFrom(op)
            if not out.done:
                out.ClearField("result")
            return out

    def list_operations(self, name: str, page_size: int = 0, page_token: str = ""):
        with self.lock:
            self.tick()
            names = sorted(n for n in self.operations if n.startswith(name.rstrip("/") + "/"))
            start = 0
            if page_token:
                if not page_token.isdigit():
                    raise EmulatorError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}."
                    )
                start = int(page_token)
            size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
            chunk = names[start : start + size]
            next_token = str(start + size) if start + size < len(names) else ""
            return [self.get_operation(n) for n in chunk], next_token

    def delete_operation(self, name: str) -> None:
        with self.lock:
            if self.operations.pop(name, None) is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            for api in self.apis.values():
                api.forget_operation(name)

    def cancel_operation(self, name: str) -> None:
        """CancelOperation, best effort (AIP-151): the API whose operation ``name`` is may stop it
        (:meth:`~.api.Api.cancel_operation`); most finish on their own within a tick or two, and
        cancelling one of those, or one already done, changes nothing."""
        with self.lock:
            self.get_operation(name)  # ticks first; NOT_FOUND for an unknown operation
            now = self.clock()
            for api in self.apis.values():
                if api.cancel_operation(name, now):
                    break

    def operation_done(self, name: str) -> bool:
        return self.get_operation(name).done

    # -- control ---------------------------------------------------------------------------
    def requests(self) -> list[dict[str, Any]]:
        """Every request ever created (deleted ones included), oldest first, as plain dicts.

        The APIs' records (``kind`` tells them apart) are merged by create time.
        """
        with self.lock:
            self.tick()
            timed: list[tuple[float, dict[str, Any]]] = []
            for api in self.apis.values():
                timed.extend(api.requests())
            timed.sort(key=lambda item: item[0])  # stable: API order, then creation order
            return [record for _, record in timed]

    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        methods: dict[str, Callable[[dict[str, Any]], Any]] = {}
        for api in self.apis.values():
            methods.update(api.control_methods())
        return methods

    def inventory(self) -> dict[str, dict[str, int]]:
        with self.lock:
            self.tick()
            return self.capacity.inventory()

    def set_capacity(self, pools: Mapping[Any, int]) -> dict[str, dict[str, int]]:
        """Create or resize pools (others unchanged); queued requests may start right away."""
        with self.lock:
            for key, total in pools.items():
                self.capacity.set_total(key, total)
                log.info("capacity %s set to %d", key, total)
            self.tick()
            return self.capacity.inventory()
