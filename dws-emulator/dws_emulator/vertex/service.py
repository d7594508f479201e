"""gRPC servicer of ``google.cloud.aiplatform.v1.JobService`` (CustomJob methods only).

Any other JobService method answers UNIMPLEMENTED (gRPC's default for an unknown method).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import job_service
from google.protobuf import empty_pb2

from ..core.wire import unary
from . import JOB_SERVICE


class JobServiceServicer:
    """``google.cloud.aiplatform.v1.JobService`` (CustomJob methods only)."""

    def __init__(self, state: Any) -> None:
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
                "CreateCustomJob": unary(self.CreateCustomJob, req(job_service.CreateCustomJobRequest)),
                "GetCustomJob": unary(self.GetCustomJob, req(job_service.GetCustomJobRequest)),
                "ListCustomJobs": unary(self.ListCustomJobs, req(job_service.ListCustomJobsRequest)),
                "CancelCustomJob": unary(self.CancelCustomJob, req(job_service.CancelCustomJobRequest)),
                "DeleteCustomJob": unary(self.DeleteCustomJob, req(job_service.DeleteCustomJobRequest)),
            },
        )
