"""gRPC server: the real JobService, Cloud TPU and Operations protocols plus the control service.

There are no generated server stubs in the installed packages, so the services are assembled
with ``grpc.method_handlers_generic_handler`` from the raw protobuf classes behind the proto-plus
types. Any JobService method not listed here answers UNIMPLEMENTED (gRPC's default for an
unknown method); so does every Tpu method other than the queued-resource and node reads below.

Fault injection (:mod:`.faults`) wraps the JobService, Tpu and Operations handlers, never the
control service; a server without fault rules serves the plain handlers. Outside that, every call
to those three services is counted by method on arrival (:mod:`.stats`), faulted calls included. An outage
(:meth:`EmulatorServer.outage`) stops the gRPC server, so connections are refused, and starts a
new one on the same port with the same state afterwards.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import job_service
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .capacity import PoolKey
from .faults import (
    CODES,
    JOB_SERVICE,
    MESSAGES,
    OPERATIONS_SERVICE,
    TPU_SERVICE,
    FaultInjector,
    FaultSpecError,
)
from .state import EmulatorState, iso
from .stats import CountingHandler, RequestStats
from .tpu import both_tiers_on_wire
from .tpu_state import TpuState
from .validation import EmulatorError

log = logging.getLogger("dws_emulator")

__all__ = ["CONTROL_SERVICE", "JOB_SERVICE", "OPERATIONS_SERVICE", "TPU_SERVICE", "EmulatorServer"]

CONTROL_SERVICE = "dws.emulator.v1.Control"
TICK_SECONDS = 0.1
MAX_WAIT_OPERATION_SECONDS = 60.0
MAX_OUTAGE_SECONDS = 3600.0
OUTAGE_GRACE_SECONDS = 0.2  # calls in flight when an outage starts (its own reply) may finish
REBIND_SECONDS = 10.0  # how long a restart after an outage keeps trying to bind the port again


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def _json_loads(data: bytes) -> Any:
    return json.loads(data.decode() or "{}") if data else {}


def _guard(fn: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
    """Translate ``EmulatorError`` into a gRPC status; log unexpected failures as INTERNAL."""

    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(request, context)
        except EmulatorError as exc:
            context.abort(exc.code, exc.message)
        except Exception as exc:  # a bug in the emulator must not look like a hang to the client
            log.exception("internal error in %s", getattr(fn, "__name__", fn))
            context.abort(grpc.StatusCode.INTERNAL, f"dws-emulator internal error: {exc}")

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def _unary(fn: Callable[..., Any], request_class: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        _guard(fn), request_deserializer=request_class.FromString, response_serializer=_serialize
    )


def _with_faults(handler: grpc.RpcMethodHandler, method: str, faults: FaultInjector) -> grpc.RpcMethodHandler:
    """``handler`` with the fault rules applied to every call of ``method`` (``SERVICE/Method``)."""
    inner = handler.unary_unary

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        decision = faults.decide(method)
        if decision.latency:
            time.sleep(decision.latency)
        if decision.code is None:
            return inner(request, context)
        if decision.code == "DEADLINE_EXCEEDED":
            # Apply the request, then lose the answer: the client cannot tell whether it happened.
            # The request's own error (an abort) is lost with the answer, as on a real timeout.
            with contextlib.suppress(Exception):
                inner(request, context)
        log.info("fault injected: %s %s", method, decision.code)
        context.abort(CODES[decision.code], MESSAGES[decision.code])

    return grpc.unary_unary_rpc_method_handler(
        call,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class FaultInjectingHandler(grpc.GenericRpcHandler):
    """Wraps a service's generic handler; while no rule is set it returns the plain handlers."""

    def __init__(self, inner: grpc.GenericRpcHandler, faults: FaultInjector) -> None:
        self._inner = inner
        self._faults = faults
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None or not self._faults.enabled or handler.unary_unary is None:
            return handler
        method = str(handler_call_details.method).lstrip("/")  # type: ignore[attr-defined]
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = _with_faults(handler, method, self._faults)
        return wrapped


class JobServiceServicer:
    """``google.cloud.aiplatform.v1.JobService`` (CustomJob methods only)."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def CreateCustomJob(self, request, context):
        return self.state.create_custom_job(request.parent, request.custom_job)

    def GetCustomJob(self, request, context):
        return self.state.get_custom_job(request.name)

    def ListCustomJobs(self, request, context):
        jobs, token = self.state.list_custom_jobs(
            request.parent, request.filter, request.page_size, request.page_token
        )
        response = job_service.ListCustomJobsResponse.pb()(next_page_token=token)
        response.custom_jobs.extend(jobs)
        return response

    def CancelCustomJob(self, request, context):
        self.state.cancel_custom_job(request.name)
        return empty_pb2.Empty()

    def DeleteCustomJob(self, request, context):
        return self.state.delete_custom_job(request.name)

    def handler(self) -> grpc.GenericRpcHandler:
        def req(cls: Any) -> Any:
            return cls.pb()

        return grpc.method_handlers_generic_handler(
            JOB_SERVICE,
            {
                "CreateCustomJob": _unary(self.CreateCustomJob, req(job_service.CreateCustomJobRequest)),
                "GetCustomJob": _unary(self.GetCustomJob, req(job_service.GetCustomJobRequest)),
                "ListCustomJobs": _unary(self.ListCustomJobs, req(job_service.ListCustomJobsRequest)),
                "CancelCustomJob": _unary(self.CancelCustomJob, req(job_service.CancelCustomJobRequest)),
                "DeleteCustomJob": _unary(self.DeleteCustomJob, req(job_service.DeleteCustomJobRequest)),
            },
        )


class _CreateQueuedResource:
    """A decoded CreateQueuedResourceRequest plus what only the wire bytes can tell."""

    def __init__(self, data: bytes) -> None:
        self.request = cloud_tpu.CreateQueuedResourceRequest.pb().FromString(data)
        self.both_tiers = both_tiers_on_wire(data)


class TpuServicer:
    """``google.cloud.tpu.v2.Tpu``: queued resources (create/get/list/delete) and node reads."""

    def __init__(self, tpu: TpuState) -> None:
        self.tpu = tpu

    def CreateQueuedResource(self, raw: _CreateQueuedResource, context):
        request = raw.request
        return self.tpu.create(
            request.parent, request.queued_resource_id, request.queued_resource, raw.both_tiers
        )

    def GetQueuedResource(self, request, context):
        return self.tpu.get(request.name)

    def ListQueuedResources(self, request, context):
        resources, token = self.tpu.list_resources(request.parent, request.page_size, request.page_token)
        response = cloud_tpu.ListQueuedResourcesResponse.pb()(next_page_token=token)
        response.queued_resources.extend(resources)
        return response

    def DeleteQueuedResource(self, request, context):
        return self.tpu.delete(request.name, request.force)

    def GetNode(self, request, context):
        return self.tpu.get_node(request.name)

    def ListNodes(self, request, context):
        nodes, token = self.tpu.list_nodes(request.parent, request.page_size, request.page_token)
        response = cloud_tpu.ListNodesResponse.pb()(next_page_token=token)
        response.nodes.extend(nodes)
        return response

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            TPU_SERVICE,
            {
                "CreateQueuedResource": grpc.unary_unary_rpc_method_handler(
                    _guard(self.CreateQueuedResource),
                    request_deserializer=_CreateQueuedResource,
                    response_serializer=_serialize,
                ),
                "GetQueuedResource": _unary(self.GetQueuedResource, cloud_tpu.GetQueuedResourceRequest.pb()),
                "ListQueuedResources": _unary(
                    self.ListQueuedResources, cloud_tpu.ListQueuedResourcesRequest.pb()
                ),
                "DeleteQueuedResource": _unary(
                    self.DeleteQueuedResource, cloud_tpu.DeleteQueuedResourceRequest.pb()
                ),
                "GetNode": _unary(self.GetNode, cloud_tpu.GetNodeRequest.pb()),
                "ListNodes": _unary(self.ListNodes, cloud_tpu.ListNodesRequest.pb()),
            },
        )


class OperationsServicer:
    """``google.longrunning.Operations`` for the operations the emulator creates."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def GetOperation(self, request, context):
        return self.state.get_operation(request.name)

    def ListOperations(self, request, context):
        ops, token = self.state.list_operations(request.name, request.page_size, request.page_token)
        return operations_pb2.ListOperationsResponse(operations=ops, next_page_token=token)

    def DeleteOperation(self, request, context):
        self.state.delete_operation(request.name)
        return empty_pb2.Empty()

    def CancelOperation(self, request, context):
        self.state.cancel_operation(request.name)
        return empty_pb2.Empty()

    def WaitOperation(self, request, context):
        limit = MAX_WAIT_OPERATION_SECONDS
        if request.HasField("timeout"):
            limit = min(limit, request.timeout.seconds + request.timeout.nanos / 1e9)
        deadline = time.monotonic() + limit
        op = self.state.get_operation(request.name)
        while not op.done and time.monotonic() < deadline and context.is_active():
            time.sleep(0.02)
            op = self.state.get_operation(request.name)
        return op

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            OPERATIONS_SERVICE,
            {
                "GetOperation": _unary(self.GetOperation, operations_pb2.GetOperationRequest),
                "ListOperations": _unary(self.ListOperations, operations_pb2.ListOperationsRequest),
                "DeleteOperation": _unary(self.DeleteOperation, operations_pb2.DeleteOperationRequest),
                "CancelOperation": _unary(self.CancelOperation, operations_pb2.CancelOperationRequest),
                "WaitOperation": _unary(self.WaitOperation, operations_pb2.WaitOperationRequest),
            },
        )


class ControlServicer:
    """``dws.emulator.v1.Control``: JSON in, JSON out (identity serializers on the wire).

    To add a method, define ``def Name(self, body: dict) -> Any`` and list it in ``METHODS``.
    """

    METHODS = (
        "ListRequests",
        "GetCapacity",
        "SetCapacity",
        "Preempt",
        "SetFaults",
        "GetFaults",
        "ClearFaults",
        "Outage",
        "GetStats",
        "ResetStats",
    )

    def __init__(
        self,
        state: EmulatorState,
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

    def Preempt(self, body: dict[str, Any]) -> Any:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, 'expected {"name": "projects/.../queuedResources/ID"}'
            )
        return {"queued_resource": self.state.tpu.preempt(name)}

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

    def _method(self, name: str) -> grpc.RpcMethodHandler:
        impl = getattr(self, name)

        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                body = _json_loads(request)
            except ValueError as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"request is not JSON: {exc}") from None
            return _json_dumps(impl(body))

        call.__name__ = name
        # No (de)serializers: bytes pass through untouched and are JSON-decoded in ``call``.
        return grpc.unary_unary_rpc_method_handler(_guard(call))

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            CONTROL_SERVICE, {name: self._method(name) for name in self.METHODS}
        )


class EmulatorServer:
    """Runs the emulator in this process: ``EmulatorServer(capacity, seed).start()``.

    ``capacity`` maps ``"LOCATION/ACCELERATOR"`` (or :class:`PoolKey`) to a count; ``None``
    uses :data:`DEFAULT_CAPACITY`. ``port=0`` picks a free port; see :attr:`address`.
    ``faults`` are initial fault rules (spec strings or rule objects, see :mod:`.faults`); they
    draw from the state's generator, seeded with ``seed``. :attr:`faults` changes them later.
    :attr:`stats` counts the calls each emulated method received. ``clock`` (epoch seconds) is
    the model's time, injectable so tests can make hours pass at once; fault windows and outages
    keep real time.
    """

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
        from . import DEFAULT_CAPACITY

        if not is_loopback(host):
            raise ValueError(f"dws-emulator binds to loopback only; refusing host {host!r}")
        self.host = host
        self.state = EmulatorState(DEFAULT_CAPACITY if capacity is None else capacity, seed=seed, clock=clock)
        self.faults = FaultInjector(self.state.rng)
        if faults:
            self.faults.set(faults)
        # Lives on the server, not the gRPC server, so the counts survive an outage's restart.
        self.stats = RequestStats()
        self._requested_port = port
        self.port: int | None = None
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
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

    def _serve_grpc(self, port: int) -> tuple[grpc.Server, int]:
        """A started gRPC server with every service, bound to ``port`` (0: any free port)."""
        executor = futures.ThreadPoolExecutor(max_workers=self._max_workers)
        server = grpc.server(executor)
        emulated = (
            (JOB_SERVICE, JobServiceServicer(self.state).handler()),
            (TPU_SERVICE, TpuServicer(self.state.tpu).handler()),
            (OPERATIONS_SERVICE, OperationsServicer(self.state).handler()),
        )
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

    def start(self) -> EmulatorServer:
        with self._lifecycle:
            self._server, self.port = self._serve_grpc(self._requested_port)
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
        log.info("outage: refusing connections on port %s for %gs", self.port, seconds)
        return {"seconds": seconds, "until": iso(time.time() + seconds), "address": self.address}

    def _run_outage(self) -> None:
        with self._lifecycle:
            server, self._server = self._server, None
        if server is not None:
            server.stop(OUTAGE_GRACE_SECONDS).wait()
        while True:
            with self._lifecycle:
                assert self._outage_until is not None
                remaining = self._outage_until - time.monotonic()
                if remaining <= 0 or not self._running:
                    break
            self._stop.wait(remaining)
        deadline = time.monotonic() + REBIND_SECONDS
        while True:
            with self._lifecycle:
                if not self._running:
                    self._outage_until = None
                    return
                try:
                    assert self.port is not None
                    self._server, _ = self._serve_grpc(self.port)
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
        self._stop.set()
        if server is not None:
            server.stop(grace).wait()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None
        for executor in self._executors:
            executor.shutdown(wait=False)
        self._executors.clear()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
