"""Extra links from a task to its request in the Google Cloud console, one class per DWS surface.

Every link's whole URL is stored in XCom by the task before it defers (:class:`StoredUrlLink`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

CONSOLE = "https://console.cloud.google.com"


class StoredUrlLink(BaseOperatorLink):
    """An extra link whose whole URL is pushed to XCom under :attr:`key` by the task.

    Storing the URL (not its parts) before deferring makes the link work while the request still
    waits in the queue, and keeps ``get_link`` free of API calls.
    """

    key: ClassVar[str]

    @property
    def xcom_key(self) -> str:
        """The XCom key the URL is stored under."""
        return self.key

    @classmethod
    def push_url(cls, context: Any, url: str) -> str:
        """Store ``url`` for this task instance; returns it."""
        context["ti"].xcom_push(key=cls.key, value=url)
        return url

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the request exists."""
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""


# -- Vertex AI ------------------------------------------------------------------------------------


def custom_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one custom job."""
    return f"{CONSOLE}/vertex-ai/locations/{region}/training/{job_id}/cpu?project={project_id}"


class VertexAIFlexStartJobLink(StoredUrlLink):
    """ "Vertex AI Flex Start Job": the job's page in the Google Cloud console (XCom key ``dws_vertex_job_link``)."""

    name = "Vertex AI Flex Start Job"
    key = "dws_vertex_job_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, region: str, job_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, custom_job_console_url(project_id, region, job_id))


# -- Cloud TPU ------------------------------------------------------------------------------------


def queued_resource_console_url(project_id: str, zone: str, queued_resource_id: str) -> str:
    """The console's TPU page for the project, scoped to the queued resource's zone and id."""
    return f"{CONSOLE}/compute/tpus?project={project_id}&zone={zone}&queuedResource={queued_resource_id}"


class TPUQueuedResourceLink(StoredUrlLink):
    """ "TPU Queued Resource": the console's Cloud TPU page for this request (XCom key ``dws_tpu_queued_resource_link``)."""

    name = "TPU Queued Resource"
    key = "dws_tpu_queued_resource_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, zone: str, queued_resource_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, queued_resource_console_url(project_id, zone, queued_resource_id))


# -- Cloud Batch ----------------------------------------------------------------------------------


def batch_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one Cloud Batch job."""
    return f"{CONSOLE}/batch/jobsDetail/regions/{region}/jobs/{job_id}/details?project={project_id}"


def batch_job_logs_url(project_id: str, job_uid: str) -> str:
    """Logs Explorer on the job's task logs: ``logName="projects/P/logs/batch_task_logs" AND
    labels.job_uid="UID"``, the query Cloud Batch's documentation gives for a job's task logs (they
    are labelled with the job's server-made ``uid``, not its id). The logs exist only for a job
    whose ``logs_policy`` sends them to Cloud Logging, as the operator's jobs do by default."""
    from urllib.parse import quote

    query = f'logName="projects/{project_id}/logs/batch_task_logs" AND labels.job_uid="{job_uid}"'
    return f"{CONSOLE}/logs/query;query={quote(query, safe='')}?project={project_id}"


class BatchFlexStartJobLink(StoredUrlLink):
    """ "Batch Flex Start Job": the job's page in the Google Cloud console (XCom key ``dws_batch_job_link``)."""

    name = "Batch Flex Start Job"
    key = "dws_batch_job_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, region: str, job_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, batch_job_console_url(project_id, region, job_id))


class BatchJobLogsLink(StoredUrlLink):
    """ "Batch Job Logs": the job's task logs in Logs Explorer (XCom key ``dws_batch_logs_link``)."""

    name = "Batch Job Logs"
    key = "dws_batch_logs_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, job_uid: str) -> str:
        """Store the Logs Explorer URL for this task instance; returns it."""
        return cls.push_url(context, batch_job_logs_url(project_id, job_uid))


# -- Compute Engine -------------------------------------------------------------------------------


def mig_console_url(project_id: str, location: str, instance_group_manager: str) -> str:
    """The console page of a managed instance group (zonal or regional: the path is the same)."""
    return (
        f"{CONSOLE}/compute/instanceGroups/details/{location}/{instance_group_manager}?project={project_id}"
    )


class ComputeFlexStartMIGLink(StoredUrlLink):
    """ "Flex-start MIG": the managed instance group's page in the console (XCom key ``dws_compute_mig_link``)."""

    name = "Flex-start MIG"
    key = "dws_compute_mig_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, location: str, instance_group_manager: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, mig_console_url(project_id, location, instance_group_manager))


# -- Compute Engine calendar mode -----------------------------------------------------------------


def future_reservation_console_url(project_id: str, zone: str, name: str) -> str:
    """The console page of one future reservation (a calendar block)."""
    return f"{CONSOLE}/compute/futureReservations/details/zones/{zone}/{name}?project={project_id}"


class CalendarBlockLink(StoredUrlLink):
    """ "Calendar block": the future reservation's page in the console (XCom key ``dws_calendar_block_link``)."""

    name = "Calendar block"
    key = "dws_calendar_block_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, zone: str, name: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, future_reservation_console_url(project_id, zone, name))


# -- GKE queued provisioning ----------------------------------------------------------------------


def gke_cluster_console_url(project_id: str, location: str, cluster_name: str) -> str:
    """The console page of a GKE cluster (its node pools show the queued provisioning nodes)."""
    return f"{CONSOLE}/kubernetes/clusters/details/{location}/{cluster_name}/details?project={project_id}"


class GKEProvisioningRequestLink(StoredUrlLink):
    """ "GKE Cluster": the console page of the request's cluster (XCom key ``dws_gke_cluster_link``)."""

    name = "GKE Cluster"
    key = "dws_gke_cluster_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, location: str, cluster_name: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, gke_cluster_console_url(project_id, location, cluster_name))


# -- GKE: Kueue Jobs ------------------------------------------------------------------------------


def gke_job_console_url(project_id: str, location: str, cluster: str, namespace: str, name: str) -> str:
    """The console page of one Job of a GKE cluster."""
    return f"{CONSOLE}/kubernetes/job/{location}/{cluster}/{namespace}/{name}/details?project={project_id}"


class GKEQueuedJobLink(StoredUrlLink):
    """ "GKE Queued Job": the Kueue Job's page in the Google Cloud console (XCom key ``dws_gke_job_link``)."""

    name = "GKE Queued Job"
    key = "dws_gke_job_link"

    @classmethod
    def persist(
        cls, context: Any, project_id: str, location: str, cluster: str, namespace: str, name: str
    ) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, gke_job_console_url(project_id, location, cluster, namespace, name))
