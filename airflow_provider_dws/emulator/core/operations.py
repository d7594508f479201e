"""gRPC servicer of ``google.longrunning.Operations`` for every API's long-running operations."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import grpc
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .faults import OPERATIONS_SERVICE
from .wire import unary

if TYPE_CHECKING:
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
