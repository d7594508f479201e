"""Compute Engine ``Operation`` resources and ``requestId`` replay, one store for every API served as
``compute.v1`` (Compute Engine's MIGs and calendar mode's future reservations share the zone,
region and global operations routes the :mod:`..compute` package serves).

An operation is RUNNING when returned and DONE at the end of the next tick (the change it describes
is applied at once by the API that made it). A mutating call with a ``requestId`` that was seen in
the same project within :data:`REQUEST_ID_WINDOW_SECONDS` of the emulator's clock gets the first
call's operation back and changes nothing (the API guarantees at least 60 minutes); after that the
id is forgotten and the call is a new one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .clock import iso
from .gce import MAX_WAIT_SECONDS, check_request_id, link, strip_link, to_json
from .rest import not_found

#: How long a ``requestId`` is remembered (emulator clock seconds).
REQUEST_ID_WINDOW_SECONDS = 3600.0

_OPERATION_PB: Any = None


def _operation_pb() -> Any:
    # Imported on first use: the core state is built before (and without) any Compute type.
    global _OPERATION_PB
    if _OPERATION_PB is None:
        from google.cloud.compute_v1.types import compute as gce

        _OPERATION_PB = gce.Operation.pb()
    return _OPERATION_PB


class GceOperations:
    """The operations of ``compute.v1``, by path (``projects/P/zones/Z/operations/NAME``); every method
    runs under the core's lock."""

    def __init__(self, core: Any) -> None:
        # ``core`` is the :class:`~.api.Core` (not imported: the api module imports this one).
        self.core = core
        self.operations: dict[str, Any] = {}  # path -> Operation pb
        self._due: list[str] = []
        self._replies: dict[tuple[str, str], tuple[str, float]] = {}  # (project, requestId) -> (path, time)

    def new_id(self) -> int:
        """A server id (63 random bits from the core's seeded id stream)."""
        return self.core.id_rng.getrandbits(63)

    def start(self, scope_path: str, op_type: str, target: str, target_id: int, now: float) -> Any:
        """A RUNNING operation of ``op_type`` on ``target`` in ``scope_path`` (``projects/P/zones/Z``,
        ``.../regions/R`` or ``.../global``), DONE at the end of the next tick."""
        rng = self.core.id_rng
        name = (
            f"operation-{int(now * 1000)}-{rng.getrandbits(52):013x}-{rng.getrandbits(32):08x}-"
            f"{rng.getrandbits(32):08x}"
        )
        path = f"{scope_path}/operations/{name}"
        status = _operation_pb().Status
        op = _operation_pb()(
            kind="compute#operation",
            id=self.new_id(),
            name=name,
            operation_type=op_type,
            target_link=link(target),
            target_id=target_id,
            status=status.Value("RUNNING"),
            progress=0,
            insert_time=iso(now),
            start_time=iso(now),
            user="dws-emulator",
            self_link=link(path),
        )
        kind = scope_path.split("/")[2]
        if kind == "zones":
            op.zone = link(scope_path)
        elif kind == "regions":
            op.region = link(scope_path)
        self.operations[path] = op
        self._due.append(path)
        return op

    def reply(self, project: str, request_id: str, op: Any) -> dict[str, Any]:
        """The JSON of ``op``, remembered under ``requestId`` for a replay."""
        if request_id:
            self._replies[(project, request_id)] = (strip_link(op.self_link), self.core.clock())
        return to_json(op)

    def replayed(self, project: str, request_id: str) -> dict[str, Any] | None:
        """The operation a recent call with this ``requestId`` returned, or None (a new call)."""
        seen = self._replies.get((project, check_request_id(request_id)))
        if seen is None:
            return None
        path, when = seen
        if self.core.clock() - when >= REQUEST_ID_WINDOW_SECONDS:
            del self._replies[(project, request_id)]
            return None
        return None if path not in self.operations else to_json(self.operations[path])

    def get(self, scope_path: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            path = f"{scope_path}/operations/{name}"
            op = self.operations.get(path)
            if op is None:
                raise not_found(path)
            return to_json(op)

    def wait(self, scope_path: str, name: str, stopping: threading.Event) -> dict[str, Any]:
        """The operation once DONE, or as it is after :data:`MAX_WAIT_SECONDS` (real time)."""
        deadline = time.monotonic() + MAX_WAIT_SECONDS
        while True:
            op = self.get(scope_path, name)
            if op.get("status") == "DONE" or time.monotonic() >= deadline or stopping.is_set():
                return op
            time.sleep(0.02)

    def after_advance(self, now: float) -> None:
        """The operations started before this tick are DONE."""
        due, self._due = self._due, []
        done = _operation_pb().Status.Value("DONE") if due else 0
        for path in due:
            op = self.operations.get(path)
            if op is not None:
                op.status = done
                op.progress = 100
                op.end_time = iso(now)
