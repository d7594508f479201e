"""Request counters: how many RPCs each emulated method received since the last reset.

Every call to an emulated service (each API's and Operations) is counted on arrival, by its full
method name (``google.cloud.aiplatform.v1.JobService/GetCustomJob``), before fault injection and
before the request is even decoded, so faulted, refused and UNIMPLEMENTED calls count too. The
control service is never counted: reading the counters must not change them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from .clock import iso


class RequestStats:
    """Thread-safe per-method call counters with a reset time.

    ``count`` is on the server's hot path: one lock and one dict update per call.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self._since = clock()

    def count(self, method: str) -> None:
        """Record one call of ``method`` (a full ``SERVICE/Method`` name)."""
        with self._lock:
            self._calls[method] = self._calls.get(method, 0) + 1

    def _report(self, calls: dict[str, int], since: float, until: float) -> dict[str, Any]:
        return {
            "calls": dict(sorted(calls.items())),
            "total": sum(calls.values()),
            "since": iso(since),
            "until": iso(until),
        }

    def snapshot(self) -> dict[str, Any]:
        """``{"calls": {METHOD: n}, "total", "since": last reset, "until": now}`` (times RFC 3339)."""
        with self._lock:
            calls, since = dict(self._calls), self._since
            now = self._clock()
        return self._report(calls, since, now)

    def reset(self) -> dict[str, Any]:
        """Zero the counters; returns the counts up to the reset (its ``until`` is the new ``since``).

        Read and reset happen under one lock, so no call is lost or counted twice between two
        consecutive resets.
        """
        with self._lock:
            calls, since = self._calls, self._since
            now = self._clock()
            self._calls, self._since = {}, now
        return self._report(calls, since, now)


class CountingHandler(grpc.GenericRpcHandler):
    """Counts every call addressed to ``service`` (known method or not), then defers to ``inner``."""

    def __init__(self, service: str, inner: grpc.GenericRpcHandler, stats: RequestStats) -> None:
        self._prefix = f"/{service}/"
        self._inner = inner
        self._stats = stats

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = str(handler_call_details.method)  # type: ignore[attr-defined]
        if method.startswith(self._prefix):
            self._stats.count(method[1:])
        return self._inner.service(handler_call_details)
