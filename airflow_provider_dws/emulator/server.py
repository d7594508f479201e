"""gRPC server: the real JobService, Cloud TPU and Operations protocols plus the control service.

There are no generated server stubs in the installed packages, so the services are assembled
with ``grpc.method_handlers_generic_handler`` from the raw protobuf classes behind the proto-plus
types. Any JobService method not listed here answers UNIMPLEMENTED (gRPC's default for an
unknown method); so does every Tpu method other than the queued-resource and node reads below.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import job_service
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .capacity import PoolKey
from .state import EmulatorState
from .tpu import both_tiers_on_wire
from .tpu_state import TpuState
from .validation import EmulatorError

log = logging.getLogger("dws_emulator")

JOB_SERVICE = "google.cloud.aiplatform.v1.JobService"
TPU_SERVICE = "google.cloud.tpu.v2.Tpu"
OPERATIONS_SERVICE = "google.longrunning.Operations"
CONTROL_SERVICE = "dws.emulator.v1.Control"
TICK_SECONDS = 0.1
MAX_WAIT_OPERATION_SECONDS = 60.0


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

    METHODS = ("ListRequests", "GetCapacity", "SetCapacity", "Preempt")

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

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
    """

    def __init__(
        self,
        capacity: Mapping[Any, int] | None = None,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        max_workers: int = 16,
    ) -> None:
        from . import DEFAULT_CAPACITY

        if not is_loopback(host):
            raise ValueError(f"dws-emulator binds to loopback only; refusing host {host!r}")
        self.host = host
        self.state = EmulatorState(DEFAULT_CAPACITY if capacity is None else capacity, seed=seed)
        self._requested_port = port
        self.port: int | None = None
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` to dial (only valid after ``start``)."""
        if self.port is None:
            raise RuntimeError("server not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> EmulatorServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers))
        server.add_generic_rpc_handlers(
            (
                JobServiceServicer(self.state).handler(),
                TpuServicer(self.state.tpu).handler(),
                OperationsServicer(self.state).handler(),
                ControlServicer(self.state).handler(),
            )
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = server.add_insecure_port(f"{host}:{self._requested_port}")
        if port == 0:
            raise OSError(f"could not bind {host}:{self._requested_port}")
        server.start()
        self._server, self.port = server, port
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

    def stop(self, grace: float | None = 1.0) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
