"""Kueue Jobs in the attempt loop: build the suspended Job, find it, classify its end."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.kueue import (
    ACCELERATOR_SELECTOR,
    GPU_RESOURCE,
    MAX_RUN_ANNOTATION,
    QUEUE_NAME_LABEL,
    KueueJobBackend,
    job_gpus,
    job_result,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.facts import GPU_TOLERATION, QUEUED_TOLERATION
from airflow_provider_dws.links import GKEQueuedJobLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.gke import cluster_backend
from airflow_provider_dws.runtime.kube_job import add_tolerations, named_job, pod_spec_of
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["KueueJobAdapter", "job_result"]

#: Who a Job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")
#: What GKE's GPU nodes are tainted with, and what a queued-provisioning node pool adds.
_TOLERATIONS = (GPU_TOLERATION, QUEUED_TOLERATION)


def gke_job_console_url(project_id: str, location: str, cluster: str, namespace: str, name: str) -> str:
    """The console page of one Job of a GKE cluster."""
    return f"{CONSOLE}/kubernetes/job/{location}/{cluster}/{namespace}/{name}/details?project={project_id}"


class KueueJobAdapter(RequestAdapter["CreateGKEQueuedJobOperator", KueueJobBackend]):
    """A suspended Job in a Kueue LocalQueue per attempt; the wait ends when the Job ends.

    Kueue has no max wait: the trigger deletes a Job still waiting at its max wait, with no grace.
    """

    name_key = "job_name"

    target = "end"
    wait_grace = timedelta(0)
    submits_in_trigger = True
    op: CreateGKEQueuedJobOperator

    def backend(self, location: str | None = None) -> KueueJobBackend:
        """The backend of the operator's cluster and namespace (one location: the cluster's)."""
        return cluster_backend(self, KueueJobBackend, location)

    def location_of(self, name: str) -> str:
        """Every Job of the task is in the cluster's location."""
        return self.op.location

    # -- the Job ---------------------------------------------------------------------------------

    def build(self, identity: RequestIdentity, max_wait: timedelta | None = None) -> dict[str, Any]:
        """The Job manifest to create: the user's (or the one the parameters describe), named from the
        identity, suspended, in the LocalQueue, with the identity labels, the max wait label and the
        ``maxRunDurationSeconds`` annotation."""
        op = self.op
        manifest = named_job(op, identity, max_wait or op.max_wait, {QUEUE_NAME_LABEL: op.queue_name})
        meta = manifest["metadata"]
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            MAX_RUN_ANNOTATION: str(round(op.max_run.total_seconds())),
        }
        manifest["spec"]["suspend"] = True  # Kueue unsuspends it once admitted
        if op.job is None:
            # The queue's nodes are a queued node pool's, tainted gke-queued whatever they carry (a
            # toleration only allows): every pod tolerates it, a GPU pod the GPU taint too.
            pod = pod_spec_of(manifest)
            add_tolerations(pod, _TOLERATIONS if op.gpus else (QUEUED_TOLERATION,))
            if op.gpus:
                pod["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: str(op.gpus)}}
            if op.accelerator:
                pod["nodeSelector"] = {ACCELERATOR_SELECTOR: op.accelerator}
        return manifest

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The Job manifest of :meth:`build`, for the trigger to create (it is JSON already; one
        cluster, so ``placement`` changes nothing)."""
        return self.build(identity, max_wait)

    def announce(self) -> dict[str, Any]:
        """The Job's name under ``job_name``, its console page (when the cluster is named) under
        the link's key."""
        link = self._console_url("{id}")
        return {
            "name_key": self.name_key,
            **({"link_key": GKEQueuedJobLink.key, "link": link} if link else {}),
        }

    # -- the attempt loop's steps ----------------------------------------------------------------

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """This task instance's live Job (or a Job that already succeeded), to adopt."""
        jobs = {job.name: job for job in self.backend().find(identity)}
        decision = choose_existing([Candidate(n, j.phase, j.timings.submitted) for n, j in jobs.items()])
        self.log.info("%s", decision.describe(identity.describe()))
        if decision.name is None:
            return None
        job = jobs[decision.name]
        self.remember(context, job)
        return Found(job, self.op.home_placement(), int(job.details.get("attempt") or 1))

    def persist_link(self, context: Context, status: RequestStatus) -> str | None:
        """The Job's console page, when the cluster is named."""
        url = self._console_url(status.name)
        if url:
            push_url(context, GKEQueuedJobLink.key, url)
        return url

    def _console_url(self, name: str) -> str | None:
        op = self.op
        if not op.project_id or not op.cluster_name or is_pending(name):
            return None
        return gke_job_console_url(str(op.project_id), op.location, op.cluster_name, op.namespace, name)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's Job, suspended in the queue (or adopt the one of that name)."""
        try:
            job, created = self.backend().submit(self.build(identity, max_wait), identity)
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the Job: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"the Kubernetes API refused the Job: {err.message}") from None
        self.log.info(
            "%s Job %s in namespace %s, LocalQueue %s (attempt %d, %s); it may wait up to %s for "
            "admission and run up to %s",
            "Submitted" if created else "Adopted",
            job.name,
            self.op.namespace,
            self.op.queue_name,
            identity.attempt,
            job.description,
            max_wait,
            self.op.max_run,
        )
        self.remember(context, job)
        return job

    def result(self, context: Context, status: RequestStatus) -> dict[str, Any]:
        """What the Job did: its name, namespace, status, pod counts, wait and run seconds."""
        if RESULT in status.details:  # read by the trigger with the Job's final status
            return dict(status.details[RESULT])
        fresh = self.backend().get_status(status.name)
        details = fresh.details if fresh is not None else status.details
        return job_result(status, self.op.namespace, details)

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """A Job Kueue gave up (rejected, capacity revoked) stays suspended for ever: delete it. A
        failed Job is kept (its pods' logs); it holds no capacity."""
        if status.state in ("Rejected", "CapacityRevoked"):
            self.log.info("Deleting %s (%s): it would stay suspended for nothing", status.name, status.state)
            self.backend().release(status.name)

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The Job's GPUs over every pod, the accelerator, its console page."""
        pods, gpus, accelerator = job_gpus(self.build(_SHAPE_ONLY))
        return {
            "api": KueueJobBackend.kind,
            "kind": "GKE Kueue Job",
            # The record's project when neither the operator nor its Google connection names one (a
            # cluster reached through a Kubernetes connection).
            "project": "",
            "accelerator_type": accelerator or None,
            "accelerator_count": pods * gpus,
            "machine_type": None,
            "pricing_model": "flex_start",
            "console_url": self._console_url(status.name),
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a Job that ended without success."""
        message = status.outcome.message
        where = f"Job {status.name} in namespace {self.op.namespace}"
        failure = status.outcome.failure
        if failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in LocalQueue {self.op.queue_name} for "
                f"{status.description or 'the Job'} ({where}{': ' + message if message else ''})"
            )
        if failure is FailureKind.WORKLOAD_FAILED:
            return WorkloadFailedError(f"workload failed: {message or status.state} ({where})")
        if failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the Job's capacity was revoked: {message} ({where})")
        if failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"the Job was refused: {message} ({where})")
        return RequestCancelledError(
            f"{where} was deleted before it finished{': ' + message if message else ''}"
        )
