"""Extra links from a task to its request in the Google Cloud console, one class per DWS surface.

Every link's whole URL is stored in XCom by the task before it defers (:class:`StoredUrlLink`). This
module holds only what a DAG file's operators declare (each link's name and XCom key), as it loads
at every parse. Each URL is built by its surface's adapter (``runtime/<api>.py``), which runs only
when a task does; its push and the account of what a task's run pushed are in
:mod:`airflow_provider_dws.console`, loaded when a task runs or a link's URL is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey


class StoredUrlLink(BaseOperatorLink):
    """An extra link whose whole URL is pushed to XCom under :attr:`key` by the task
    (:func:`airflow_provider_dws.console.push_url`).

    Storing the URL (not its parts) before deferring makes the link work while the request still
    waits in the queue, and keeps ``get_link`` free of API calls.
    """

    key: ClassVar[str]

    @property
    def xcom_key(self) -> str:
        """The XCom key the URL is stored under."""
        return self.key

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the request exists."""
        from airflow_provider_dws.console import tracked_url

        # A process that ran the task instance knows what its try pushed: reading a link never
        # pushed would log an error in the task's log.
        url = tracked_url(ti_key, self.key)
        if url is not None:
            return url
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""


class VertexAIFlexStartJobLink(StoredUrlLink):
    """ "Vertex AI Flex Start Job": the job's page in the Google Cloud console (XCom key ``dws_vertex_job_link``)."""

    name = "Vertex AI Flex Start Job"
    key = "dws_vertex_job_link"


class TPUQueuedResourceLink(StoredUrlLink):
    """ "TPU Queued Resource": the console's Cloud TPU page for this request (XCom key ``dws_tpu_queued_resource_link``)."""

    name = "TPU Queued Resource"
    key = "dws_tpu_queued_resource_link"


class BatchFlexStartJobLink(StoredUrlLink):
    """ "Batch Flex Start Job": the job's page in the Google Cloud console (XCom key ``dws_batch_job_link``)."""

    name = "Batch Flex Start Job"
    key = "dws_batch_job_link"


class BatchJobLogsLink(StoredUrlLink):
    """ "Batch Job Logs": the job's task logs in Logs Explorer (XCom key ``dws_batch_logs_link``)."""

    name = "Batch Job Logs"
    key = "dws_batch_logs_link"


class ComputeFlexStartMIGLink(StoredUrlLink):
    """ "Flex-start MIG": the managed instance group's page in the console (XCom key ``dws_compute_mig_link``)."""

    name = "Flex-start MIG"
    key = "dws_compute_mig_link"


class ComputeFlexStartInstancesLink(StoredUrlLink):
    """ "Flex-start VMs": the first VM of a set of standalone flex-start VMs in the console (XCom key
    ``dws_compute_instances_link``)."""

    name = "Flex-start VMs"
    key = "dws_compute_instances_link"


class CalendarBlockLink(StoredUrlLink):
    """ "Calendar block": the future reservation's page in the console (XCom key ``dws_calendar_block_link``)."""

    name = "Calendar block"
    key = "dws_calendar_block_link"


class GKEProvisioningRequestLink(StoredUrlLink):
    """ "GKE Cluster": the console page of the request's cluster (XCom key ``dws_gke_cluster_link``)."""

    name = "GKE Cluster"
    key = "dws_gke_cluster_link"


class GKEQueuedJobLink(StoredUrlLink):
    """ "GKE Queued Job": the Kueue Job's page in the Google Cloud console (XCom key ``dws_gke_job_link``)."""

    name = "GKE Queued Job"
    key = "dws_gke_job_link"


class GKEFlexStartJobLink(StoredUrlLink):
    """ "GKE Flex-start Job": the Job's page in the Google Cloud console (XCom key
    ``dws_gke_flex_job_link``)."""

    name = "GKE Flex-start Job"
    key = "dws_gke_flex_job_link"


class VertexAIBatchPredictionLink(StoredUrlLink):
    """ "Vertex AI Batch Prediction": the job's page in the Google Cloud console (XCom key ``dws_vertex_batch_link``)."""

    name = "Vertex AI Batch Prediction"
    key = "dws_vertex_batch_link"


class VertexAIEndpointLink(StoredUrlLink):
    """ "Vertex AI Endpoint": the endpoint's page in the Google Cloud console (XCom key ``dws_vertex_endpoint_link``)."""

    name = "Vertex AI Endpoint"
    key = "dws_vertex_endpoint_link"
