"""gRPC servicer of ``google.cloud.batch.v1.BatchService``: jobs and the tasks of their group."""

from __future__ import annotations

from typing import Any

import grpc
from google.cloud.batch_v1.types import batch as gcb_batch

from ..core.wire import unary
from . import BATCH_SERVICE


class BatchServicer:
    """Decodes BatchService requests, calls :class:`~.state.BatchState`, encodes the replies."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def CreateJob(self, request, context):
        return self.state.create(request.parent, request.job_id, request.job, request.request_id)

    def GetJob(self, request, context):
        return self.state.get(request.name)

    def ListJobs(self, request, context):
        jobs, token = self.state.list_jobs(
            request.parent, request.filter, request.order_by, request.page_size, request.page_token
        )
        response = gcb_batch.ListJobsResponse.pb()(next_page_token=token)
        response.jobs.extend(jobs)
        return response

    def CancelJob(self, request, context):
        return self.state.cancel(request.name, request.request_id)

    def DeleteJob(self, request, context):
        return self.state.delete(request.name, request.request_id)

    def ListTasks(self, request, context):
        tasks, token = self.state.list_tasks(
            request.parent, request.filter, request.page_size, request.page_token
        )
        response = gcb_batch.ListTasksResponse.pb()(next_page_token=token)
        response.tasks.extend(tasks)
        return response

    def GetTask(self, request, context):
        return self.state.get_task(request.name)

    def handler(self) -> grpc.GenericRpcHandler:
        requests: dict[str, Any] = {
            "CreateJob": gcb_batch.CreateJobRequest,
            "GetJob": gcb_batch.GetJobRequest,
            "ListJobs": gcb_batch.ListJobsRequest,
            "CancelJob": gcb_batch.CancelJobRequest,
            "DeleteJob": gcb_batch.DeleteJobRequest,
            "ListTasks": gcb_batch.ListTasksRequest,
            "GetTask": gcb_batch.GetTaskRequest,
        }
        return grpc.method_handlers_generic_handler(
            BATCH_SERVICE, {name: unary(getattr(self, name), cls.pb()) for name, cls in requests.items()}
        )
