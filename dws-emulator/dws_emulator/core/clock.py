"""Time for the emulator: RFC 3339 / protobuf conversions and :class:`Schedule`, the tick's agenda.

A tick must cost what changes, not what exists: each API keeps its requests' next due times in a
:class:`Schedule` (a heap of deadlines plus a set due on the very next tick) and visits only the
requests that come due, instead of walking every request it holds.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import datetime, timezone

from google.protobuf import timestamp_pb2


def iso(t: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC string (None stays None)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timestamp(t: float) -> timestamp_pb2.Timestamp:
    """Epoch seconds as a protobuf Timestamp."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


class Schedule:
    """When each named request next needs a look: at a time, or on the next tick.

    Entries are hints, not commitments: a request visited early (or for a deadline that no longer
    applies) re-checks its own state and does nothing, so superseded heap entries need no removal.
    ``due`` returns names in order of due time, then of scheduling, so a tick is deterministic.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._next: dict[str, None] = {}  # insertion-ordered set
        self._seq = itertools.count()

    def at(self, name: str, when: float) -> None:
        """Visit ``name`` on the first tick at or after ``when``."""
        heapq.heappush(self._heap, (when, next(self._seq), name))

    def next_tick(self, name: str) -> None:
        """Visit ``name`` on the next tick, whatever the time."""
        self._next[name] = None

    def due(self, now: float) -> list[str]:
        """Names due at ``now`` (each once), removed from the schedule."""
        names = dict(self._next)
        self._next.clear()
        heap = self._heap
        while heap and heap[0][0] <= now:
            names[heapq.heappop(heap)[2]] = None
        return list(names)

    def __len__(self) -> int:
        return len(self._heap) + len(self._next)
