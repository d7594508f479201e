"""gRPC servicer of ``google.longrunning.Operations`` for every API's long-running operations."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import grpc
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .clock import timestamp
from .faults import OPERATIONS_SERVICE
from .wire import unary

if TYPE_CHECKING:
    from .api import Core
    from .state import CoreState

MAX_WAIT_OPERATION_SECONDS = 60.0


class OperationsServicer:
    """``google.longrunning.Operations`` for the operations the emulator creates."""

    def __init__(self, state: CoreState) -> None:
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
                "GetOperation": unary(self.GetOperation, operations_pb2.GetOperationRequest),
                "ListOperations": unary(self.ListOperations, operations_pb2.ListOperationsRequest),
                "DeleteOperation": unary(self.DeleteOperation, operations_pb2.DeleteOperationRequest),
                "CancelOperation": unary(self.CancelOperation, operations_pb2.CancelOperationRequest),
                "WaitOperation": unary(self.WaitOperation, operations_pb2.WaitOperationRequest),
            },
        )


def start_operation(
    state: Core, parent: str, metadata: Any, target: str, verb: str, api_version: str, now: float
) -> operations_pb2.Operation:
    """A new, not yet done, long-running operation on ``target`` under ``parent``
    (``projects/P/locations/L``), stored in the core; returns a copy for the reply.

    ``metadata`` is the API's ``OperationMetadata`` protobuf class (Cloud TPU's and Cloud Batch's
    share these fields: target, verb, api_version, create_time, end_time).
    """
    name = f"{parent}/operations/operation-{state.new_operation_id()}"
    meta = metadata(target=target, verb=verb, api_version=api_version)
    meta.create_time.CopyFrom(timestamp(now))
    op = operations_pb2.Operation(name=name, done=False)
    op.metadata.Pack(meta)
    state.operations[name] = op
    returned = operations_pb2.Operation()
    returned.CopyFrom(op)
    return returned


def finish_operation(state: Core, name: str, metadata: Any, response: Any, now: float) -> None:
    """Mark a stored operation done with ``response`` (a message) and its end time; an operation
    the client deleted meanwhile is left alone."""
    op = state.operations.get(name)
    if op is None:
        return
    meta = metadata()
    op.metadata.Unpack(meta)
    meta.end_time.CopyFrom(timestamp(now))
    op.metadata.Pack(meta)
    op.response.Pack(response)
    op.done = True
