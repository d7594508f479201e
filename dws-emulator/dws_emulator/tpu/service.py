"""gRPC servicer of ``google.cloud.tpu.v2.Tpu``: queued resources and node reads.

Every other Tpu method answers UNIMPLEMENTED (gRPC's default for an unknown method).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu

from ..core.wire import guard, serialize, unary
from . import TPU_SERVICE
from .validation import both_tiers_on_wire


class _CreateQueuedResource:
    """A decoded CreateQueuedResourceRequest plus what only the wire bytes can tell."""

    def __init__(self, data: bytes) -> None:
        self.request = cloud_tpu.CreateQueuedResourceRequest.pb().FromString(data)
        self.both_tiers = both_tiers_on_wire(data)


class TpuServicer:
    """``google.cloud.tpu.v2.Tpu``: queued resources (create/get/list/delete) and node reads."""

    def __init__(self, tpu: Any) -> None:
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
                    guard(self.CreateQueuedResource),
                    request_deserializer=_CreateQueuedResource,
                    response_serializer=serialize,
                ),
                "GetQueuedResource": unary(self.GetQueuedResource, cloud_tpu.GetQueuedResourceRequest.pb()),
                "ListQueuedResources": unary(
                    self.ListQueuedResources, cloud_tpu.ListQueuedResourcesRequest.pb()
                ),
                "DeleteQueuedResource": unary(
                    self.DeleteQueuedResource, cloud_tpu.DeleteQueuedResourceRequest.pb()
                ),
                "GetNode": unary(self.GetNode, cloud_tpu.GetNodeRequest.pb()),
                "ListNodes": unary(self.ListNodes, cloud_tpu.ListNodesRequest.pb()),
            },
        )
