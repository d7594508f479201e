"""The process bootstrap: one gRPC server for every hosted API, Operations and control, the REST
front for the APIs that speak JSON over HTTP (:mod:`.rest`), plus the ticker.

The REST front listens on the gRPC port + 1 of the same host (:attr:`ServerCore.rest_port`); with
``port=0`` a free adjacent pair is searched. Fault injection (:mod:`.faults`) wraps the emulated
services' handlers and REST routes, never the control service. Every call to an emulated service
is counted by method on arrival (:mod:`.stats`), faulted calls included. An outage
(:meth:`ServerCore.outage`) stops the gRPC server and the REST listener, so connections are
refused, and serves the same state on the same two ports afterwards.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from typing import Any, TypeVar

import grpc

from .clock import iso
from .control_service import MAX_OUTAGE_SECONDS, ControlServicer
from .faults import OPERATIONS_SERVICE, FaultInjector
from .operations import OperationsServicer
from .rest import RestFront, build_app
from .state import CoreState
from .stats import CountingHandler, RequestStats
from .wire import FaultInjectingHandler

log = logging.getLogger("dws_emulator")

TICK_SECONDS = 0.1
OUTAGE_GRACE_SECONDS = 0.2  # calls in flight when an outage starts (its own reply) may finish
HOLD_SECONDS = 2.0  # how long an outage tries to hold a port its stopped listener still closes
REBIND_SECONDS = 10.0  # how long a restart after an outage keeps trying to bind the port again
PAIR_ATTEMPTS = 50  # port=0: how many free gRPC ports to try before giving up on a free port + 1
# gRPC sets SO_REUSEPORT by default on Linux: a second emulator (another test worker's, restarting
# after an outage) could then bind a port this one holds, and the kernel would share the
# connections between the two. Off: a taken port fails to bind, loudly.
GRPC_OPTIONS = (("grpc.so_reuseport", 0),)

_S = TypeVar("_S", bound="ServerCore")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServerCore:
    """Runs an emulator in this process: ``ServerCore(capacity, seed).start()``.

    ``capacity`` maps ``"LOCATION/ACCELERATOR"`` (or :class:`PoolKey`) to a count; ``None`` uses
    :attr:`default_capacity`. ``port=0`` picks a free port; see :attr:`address`. ``faults`` are
    initial fault rules (spec strings or rule objects, see :mod:`.faults`); they draw from the
    state's generator, seeded with ``seed``. :attr:`faults` changes them later. :attr:`stats`
    counts the calls each emulated method received. ``clock`` (epoch seconds) is the model's time,
    injectable so tests can make hours pass at once; fault windows and outages keep real time.
    Every hosted API's services are served, plus Operations and the control service; the APIs'
    REST routes are served at :attr:`rest_address` (the gRPC port + 1).
    """

    #: The inventory used when ``capacity`` is None.
    default_capacity: Mapping[Any, int] = {}

    def new_state(self, capacity: Mapping[Any, int], seed: int, clock: Callable[[], float]) -> CoreState:
        """The state to serve; the bootstrap's subclass hosts its APIs on it."""
        return CoreState(capacity, seed=seed, clock=clock)

    def __init__(
        self,
        capacity: Mapping[Any, int] | None = None,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        max_workers: int = 16,
        faults: Iterable[Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not is_loopback(host):
            raise ValueError(f"dws-emulator binds to loopback only; refusing host {host!r}")
        self.host = host
        self.state = self.new_state(self.default_capacity if capacity is None else capacity, seed, clock)
        self.faults = FaultInjector(self.state.rng)
        if faults:
            self.faults.set(faults)
        # Lives on the server, not the gRPC server, so the counts survive an outage's restart.
        self.stats = RequestStats()
        self._requested_port = port
        self.port: int | None = None
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self.rest_port: int | None = None
        self._rest: RestFront | None = None
        self._executors: list[futures.ThreadPoolExecutor] = []
        self._lifecycle = threading.Lock()
        self._running = False
        self._outage_until: float | None = None  # monotonic end of the current outage
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` to dial (only valid after ``start``)."""
        if self.port is None:
            raise RuntimeError("server not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def in_outage(self) -> bool:
        """True from :meth:`outage` until the listener serves again (a call answered meanwhile
        reached the old listener before it closed)."""
        with self._lifecycle:
            return self._outage_until is not None

    @property
    def rest_address(self) -> str:
        """``host:port`` of the REST front: the gRPC port + 1 (only valid after ``start``)."""
        if self.rest_port is None:
            raise RuntimeError("server not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.rest_port}"

    @property
    def rest_url(self) -> str:
        """``http://host:port`` of the REST front (a REST client's ``api_endpoint``)."""
        return f"http://{self.rest_address}"

    def _serve_rest(self, port: int) -> int:
        """Serve every API's REST routes on ``port``; OSError if it cannot be bound."""
        assert self._rest is not None
        routes = [
            (api.rest_service, route) for api in self.state.apis.values() for route in api.rest_routes()
        ]
        return self._rest.serve(port, build_app(routes, self.faults, self.stats, self._rest.stopping))

    def _serve_pair(self, port: int) -> tuple[grpc.Server, int]:
        """gRPC on ``port`` and REST on ``port + 1``; ``port=0`` retries until a free pair is found."""
        attempts = PAIR_ATTEMPTS if port == 0 else 1
        for attempt in range(attempts):
            server, bound = self._serve_grpc(port)
            try:
                if bound + 1 > 65535:
                    raise OSError("no port above 65535")
                self.rest_port = self._serve_rest(bound + 1)
            except OSError:
                server.stop(None).wait()
                if attempt + 1 == attempts:
                    raise OSError(
                        f"could not bind the REST port {bound + 1} next to gRPC port {bound}"
                    ) from None
                continue
            return server, bound
        raise AssertionError("unreachable")

    def _serve_grpc(self, port: int) -> tuple[grpc.Server, int]:
        """A started gRPC server with every service, bound to ``port`` (0: any free port)."""
        executor = futures.ThreadPoolExecutor(max_workers=self._max_workers)
        server = grpc.server(executor, options=GRPC_OPTIONS)
        # Built from ``self.state`` at every (re)start: a test may swap the state before ``start``.
        emulated = [
            *(item for api in self.state.apis.values() for item in api.handlers()),
            (OPERATIONS_SERVICE, OperationsServicer(self.state).handler()),
        ]
        server.add_generic_rpc_handlers(
            (
                *(
                    CountingHandler(service, FaultInjectingHandler(handler, self.faults), self.stats)
                    for service, handler in emulated
                ),
                ControlServicer(self.state, self.faults, self.outage, self.stats).handler(),
            )
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # newer grpc raises instead of returning 0
            bound = 0
        if bound == 0:
            executor.shutdown(wait=False)
            raise OSError(f"could not bind {host}:{port}")
        server.start()
        self._executors.append(executor)
        return server, bound

    def start(self: _S) -> _S:
        with self._lifecycle:
            self._rest = RestFront(self.host)
            try:
                self._server, self.port = self._serve_pair(self._requested_port)
            except BaseException:
                self._rest.close()
                self._rest = None
                raise
            self._running = True
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick_loop, name="dws-emulator-ticker", daemon=True)
        self._ticker.start()
        return self

    def _tick_loop(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            try:
                self.state.tick()
            except Exception:  # keep ticking; a failed tick is logged and retried
                log.exception("tick failed")

    def outage(self, seconds: float) -> dict[str, Any]:
        """Refuse connections for ``seconds``, then serve the same state on the same port again.

        Returns at once; the listener closes right after (calls in flight get a short grace to
        finish). The control service is unreachable during the outage too. A second outage
        while one is running extends it.
        """
        if not 0 < seconds <= MAX_OUTAGE_SECONDS:
            raise ValueError(f"outage seconds must be in (0, {MAX_OUTAGE_SECONDS:g}], got {seconds!r}")
        with self._lifecycle:
            if not self._running:
                raise RuntimeError("server not started")
            until = time.monotonic() + seconds
            already = self._outage_until is not None
            self._outage_until = max(until, self._outage_until or until)
            if not already:
                threading.Thread(target=self._run_outage, name="dws-emulator-outage", daemon=True).start()
        self.faults.record_outage(seconds)
        log.info(
            "outage: refusing connections on ports %s and %s for %gs", self.port, self.rest_port, seconds
        )
        return {"seconds": seconds, "until": iso(time.time() + seconds), "address": self.address}

    def _run_outage(self) -> None:
        with self._lifecycle:
            server, self._server = self._server, None
            rest = self._rest
        if server is not None:
            server.stop(OUTAGE_GRACE_SECONDS).wait()
        if rest is not None:
            rest.halt()
        held = self._hold_ports()
        try:
            self._sit_out_outage()
        finally:
            for sock in held:
                sock.close()
        self._rebind_after_outage()

    def _hold_ports(self) -> list[socket.socket]:
        """Bind, without listening, the two ports the outage closed: connections are refused, as
        in an outage, and no other server (another test's emulator asking for any free port) can
        take them before the restart."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        held = []
        for port in (self.port, self.rest_port):
            deadline = time.monotonic() + HOLD_SECONDS
            while True:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.host.strip("[]"), port or 0))
                except OSError:
                    sock.close()
                    if time.monotonic() < deadline:  # the stopped listener may still be closing
                        time.sleep(0.02)
                        continue
                    log.warning("outage: port %s could not be held; another server may take it", port)
                    break
                held.append(sock)
                break
        return held

    def _sit_out_outage(self) -> None:
        while True:
            with self._lifecycle:
                assert self._outage_until is not None
                remaining = self._outage_until - time.monotonic()
                if remaining <= 0 or not self._running:
                    break
            self._stop.wait(remaining)

    def _rebind_after_outage(self) -> None:
        deadline = time.monotonic() + REBIND_SECONDS
        while True:
            with self._lifecycle:
                if not self._running:
                    self._outage_until = None
                    return
                try:
                    assert self.port is not None and self.rest_port is not None
                    if self._server is None:
                        self._server, _ = self._serve_grpc(self.port)
                    self._serve_rest(self.rest_port)
                except OSError:
                    if time.monotonic() > deadline:
                        log.exception("outage over but port %s could not be bound again", self.port)
                        self._outage_until = None
                        return
                else:
                    self._outage_until = None
                    log.info("outage over: listening on %s again", self.address)
                    return
            time.sleep(0.05)

    def stop(self, grace: float | None = 1.0) -> None:
        with self._lifecycle:
            self._running = False
            server, self._server = self._server, None
            rest, self._rest = self._rest, None
        self._stop.set()
        if server is not None:
            server.stop(grace).wait()
        if rest is not None:
            rest.close()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None
        for executor in self._executors:
            executor.shutdown(wait=False)
        self._executors.clear()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
