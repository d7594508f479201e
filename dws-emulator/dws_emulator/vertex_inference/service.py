"""gRPC servicers of ``google.cloud.aiplatform.v1beta1.JobService`` (BatchPredictionJob methods)
and ``google.cloud.aiplatform.v1beta1.EndpointService`` (endpoints, DeployModel, UndeployModel).

Any other method of either service answers UNIMPLEMENTED (gRPC's default for an unknown method).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.cloud.aiplatform_v1beta1.types import endpoint_service, job_service
from google.protobuf import empty_pb2

from ..core.wire import unary
from . import ENDPOINT_SERVICE, JOB_SERVICE


def _request(cls: Any) -> Any:
    return cls.pb()


class BatchPredictionServicer:
    """``google.cloud.aiplatform.v1beta1.JobService``: the BatchPredictionJob methods."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def CreateBatchPredictionJob(self, request, context):
        return self.state.create_batch_prediction_job(request.parent, request.batch_prediction_job)

    def GetBatchPredictionJob(self, request, context):
        return self.state.get_batch_prediction_job(request.name)

    def ListBatchPredictionJobs(self, request, context):
        jobs, token = self.state.list_batch_prediction_jobs(
            request.parent, request.filter, request.page_size, request.page_token
        )
        response = job_service.ListBatchPredictionJobsResponse.pb()(next_page_token=token)
        response.batch_prediction_jobs.extend(jobs)
        return response

    def CancelBatchPredictionJob(self, request, context):
        self.state.cancel_batch_prediction_job(request.name)
        return empty_pb2.Empty()

    def DeleteBatchPredictionJob(self, request, context):
        return self.state.delete_batch_prediction_job(request.name)

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {
            "CreateBatchPredictionJob": job_service.CreateBatchPredictionJobRequest,
            "GetBatchPredictionJob": job_service.GetBatchPredictionJobRequest,
            "ListBatchPredictionJobs": job_service.ListBatchPredictionJobsRequest,
            "CancelBatchPredictionJob": job_service.CancelBatchPredictionJobRequest,
            "DeleteBatchPredictionJob": job_service.DeleteBatchPredictionJobRequest,
        }
        return grpc.method_handlers_generic_handler(
            JOB_SERVICE, {name: unary(getattr(self, name), _request(cls)) for name, cls in methods.items()}
        )


class EndpointServicer:
    """``google.cloud.aiplatform.v1beta1.EndpointService``: endpoints and model deployments."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def CreateEndpoint(self, request, context):
        return self.state.create_endpoint(request.parent, request.endpoint, request.endpoint_id)

    def GetEndpoint(self, request, context):
        return self.state.get_endpoint(request.name)

    def ListEndpoints(self, request, context):
        endpoints, token = self.state.list_endpoints(
            request.parent, request.filter, request.page_size, request.page_token
        )
        response = endpoint_service.ListEndpointsResponse.pb()(next_page_token=token)
        response.endpoints.extend(endpoints)
        return response

    def DeleteEndpoint(self, request, context):
        return self.state.delete_endpoint(request.name)

    def DeployModel(self, request, context):
        return self.state.deploy_model(request)

    def UndeployModel(self, request, context):
        return self.state.undeploy_model(request.endpoint, request.deployed_model_id, request.traffic_split)

    def handler(self) -> grpc.GenericRpcHandler:
        methods = {
            "CreateEndpoint": endpoint_service.CreateEndpointRequest,
            "GetEndpoint": endpoint_service.GetEndpointRequest,
            "ListEndpoints": endpoint_service.ListEndpointsRequest,
            "DeleteEndpoint": endpoint_service.DeleteEndpointRequest,
            "DeployModel": endpoint_service.DeployModelRequest,
            "UndeployModel": endpoint_service.UndeployModelRequest,
        }
        return grpc.method_handlers_generic_handler(
            ENDPOINT_SERVICE,
            {name: unary(getattr(self, name), _request(cls)) for name, cls in methods.items()},
        )
