"""The control service ``dws.emulator.v1.Control``: JSON in, JSON out, never faulted or counted.

Its methods are the core's (requests, capacity, faults, outages, counters) plus those each API
contributes (:meth:`~.api.Api.control_methods`, e.g. TPU ``Preempt``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from .capacity import PoolKey
from .errors import EmulatorError
from .faults import FaultInjector, FaultSpecError
from .stats import RequestStats
from .wire import guard, json_dumps, json_loads

if TYPE_CHECKING:
    from .state import CoreState

log = logging.getLogger("dws_emulator")

CONTROL_SERVICE = "dws.emulator.v1.Control"
MAX_OUTAGE_SECONDS = 3600.0


class ControlServicer:
    """``dws.emulator.v1.Control``: JSON in, JSON out (identity serializers on the wire).

    To add a core method, define ``def Name(self, body: dict) -> Any`` and list it in ``METHODS``;
    an API adds its own through :meth:`~.api.Api.control_methods`.
    """

    METHODS = (
        "ListRequests",
        "GetCapacity",
        "SetCapacity",
        "SetFaults",
        "GetFaults",
        "ClearFaults",
        "Outage",
        "GetStats",
        "ResetStats",
    )

    def __init__(
        self,
        state: CoreState,
        faults: FaultInjector | None = None,
        outage: Callable[[float], dict[str, Any]] | None = None,
        stats: RequestStats | None = None,
    ) -> None:
        self.state = state
        self.faults = faults if faults is not None else FaultInjector(state.rng)
        self._outage = outage
        self.stats = stats if stats is not None else RequestStats()

    def ListRequests(self, body: dict[str, Any]) -> Any:
        return {"requests": self.state.requests()}

    def GetCapacity(self, body: dict[str, Any]) -> Any:
        return {"pools": self.state.inventory()}

    def SetCapacity(self, body: dict[str, Any]) -> Any:
        pools = body.get("pools")
        if not isinstance(pools, dict):
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, 'expected {"pools": {"LOC/ACC": COUNT}}')
        parsed: dict[PoolKey | str, int] = {}
        for key, total in pools.items():
            try:
                pkey = PoolKey.parse(key)
            except ValueError as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            if not isinstance(total, int) or isinstance(total, bool) or total < 0:
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"pool {key}: count must be an integer >= 0"
                )
            parsed[pkey] = total
        return {"pools": self.state.set_capacity(parsed)}

    def SetFaults(self, body: dict[str, Any]) -> Any:
        """``{"faults": [SPEC or rule object, ...], "append": false, "seed": null}``."""
        rules = body.get("faults")
        seed = body.get("seed")
        if not isinstance(rules, list):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, 'expected {"faults": ["METHOD=EFFECT...", ...]}'
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"seed must be an integer, got {seed!r}")
        try:
            self.faults.set(rules, append=bool(body.get("append", False)), seed=seed)
        except FaultSpecError as exc:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        log.info("faults set: %s", ", ".join(r.spec for r in self.faults.rules) or "(none)")
        return self.faults.to_json()

    def GetFaults(self, body: dict[str, Any]) -> Any:
        return self.faults.to_json()

    def ClearFaults(self, body: dict[str, Any]) -> Any:
        self.faults.clear()
        log.info("faults cleared")
        return self.faults.to_json()

    def Outage(self, body: dict[str, Any]) -> Any:
        """``{"seconds": N}``: refuse connections for N seconds, starting right after this reply."""
        seconds = body.get("seconds")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 < seconds <= MAX_OUTAGE_SECONDS
        ):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'expected {{"seconds": N}} with 0 < N <= {MAX_OUTAGE_SECONDS:g}, got {seconds!r}',
            )
        if self._outage is None:
            raise EmulatorError(grpc.StatusCode.FAILED_PRECONDITION, "this server cannot simulate outages")
        return self._outage(float(seconds))

    def GetStats(self, body: dict[str, Any]) -> Any:
        """``{"calls": {METHOD: n}, "total", "since", "until"}``: calls received since the last reset."""
        return self.stats.snapshot()

    def ResetStats(self, body: dict[str, Any]) -> Any:
        """Zero the call counters; returns the counts as they were (read and reset at once)."""
        report = self.stats.reset()
        log.info("call counters reset after %d calls", report["total"])
        return report

    def _method(self, name: str, impl: Callable[[dict[str, Any]], Any]) -> grpc.RpcMethodHandler:
        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                body = json_loads(request)
            except ValueError as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"request is not JSON: {exc}") from None
            return json_dumps(impl(body))

        call.__name__ = name
        # No (de)serializers: bytes pass through untouched and are JSON-decoded in ``call``.
        return grpc.unary_unary_rpc_method_handler(guard(call))

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            CONTROL_SERVICE,
            {
                **{name: self._method(name, impl) for name, impl in self.state.control_methods().items()},
                **{name: self._method(name, getattr(self, name)) for name in self.METHODS},
            },
        )
