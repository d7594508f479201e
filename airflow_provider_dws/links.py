"""Extra links from a task to its request in the Google Cloud console, one class per DWS surface.

Every link's whole URL is stored in XCom by the task before it defers (:class:`StoredUrlLink`).

When a task ends, Airflow asks each of its extra links for its URL (``get_link``) and stores it again
for the UI. Asking the API server for an XCom that does not exist makes the task SDK's supervisor log
an error ("XCom not found") in the task's log, though a link not made yet (a task that failed before
its request existed, a release task) is no error. So this process keeps account of the links of the
task instance it runs (:func:`track`): a fresh try starts with its XComs deleted by Airflow, and the
links a try pushed before it deferred are kept in its task state store (:data:`LINKS_KEY`) for the
run that resumes it. ``get_link`` answers from that account, and asks for the XCom only where it has
none (a caller outside the task's run).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

log = logging.getLogger(__name__)

CONSOLE = "https://console.cloud.google.com"

#: Task state store key: ``{"try": N, "urls": {xcom key: url}}``, the links try N pushed so far.
LINKS_KEY = "dws_links"

#: The links of each task instance this process runs, keyed by (dag, task, run, map index): the
#: URLs pushed in its current try, with the store that keeps them for a resumed run.
_TRACKED: dict[tuple[str, str, str, int], _Tracked] = {}


class _Tracked:
    """One task instance's links in its current try."""

    def __init__(self, store: Any, try_number: int, urls: dict[str, str]) -> None:
        self.store = store
        self.try_number = try_number
        self.urls = urls


def _ti_key(ti: Any) -> tuple[str, str, str, int] | None:
    """A task instance's (dag, task, run, map index); ``None`` for what does not name one."""
    dag_id, task_id, run_id = (getattr(ti, attr, None) for attr in ("dag_id", "task_id", "run_id"))
    if not (isinstance(dag_id, str) and isinstance(task_id, str) and isinstance(run_id, str)):
        return None
    map_index = getattr(ti, "map_index", -1)
    return (dag_id, task_id, run_id, map_index if isinstance(map_index, int) and map_index >= 0 else -1)


def _try_number(ti: Any) -> int | None:
    number = getattr(ti, "try_number", None)
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def track(context: Any) -> None:
    """Account for the link XComs of the task instance about to run (called before ``execute`` and
    before a resume): none on a fresh try (Airflow deleted its XComs when it began), or those the
    try pushed before it deferred, as its task state store keeps them. Without a readable store the
    task instance is not tracked, and ``get_link`` reads the XCom as before."""
    ti, store = context.get("ti"), context.get("task_state_store")
    key, try_number = _ti_key(ti), _try_number(ti)
    if key is None:
        return
    _TRACKED.pop(key, None)
    if store is None or try_number is None:
        return
    try:
        kept = store.get(LINKS_KEY)
    except Exception:
        log.warning("Could not read the console links kept for this try", exc_info=True)
        return
    urls = kept.get("urls") if isinstance(kept, dict) and kept.get("try") == try_number else None
    # A try's first run: nothing pushed yet. A resumed run: what the try pushed before deferring.
    _TRACKED[key] = _Tracked(store, try_number, dict(urls) if isinstance(urls, dict) else {})


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
        """Store ``url`` for this task instance (and, for a run that resumes this try, in its task
        state store: :func:`track`); returns it."""
        ti = context["ti"]
        ti.xcom_push(key=cls.key, value=url)
        key = _ti_key(ti)
        tracked = _TRACKED.get(key) if key is not None else None
        if tracked is not None:
            tracked.urls[cls.key] = url
            try:
                tracked.store.set(LINKS_KEY, {"try": tracked.try_number, "urls": tracked.urls})
            except Exception:
                log.warning("Could not keep the console link for a resumed run", exc_info=True)
        return url

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the request exists."""
        key = _ti_key(ti_key)
        tracked = _TRACKED.get(key) if key is not None else None
        if tracked is not None:
            # This process ran the task instance: it knows what its try pushed, and reading a link
            # never pushed would log an error in the task's log.
            return tracked.urls.get(self.key, "")
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
