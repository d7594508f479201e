"""Jobs on GKE flex-start node pools in the attempt loop: build the Job, find it, classify its end."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.gke_flex import FlexStartJobBackend, flex_job_result, job_shape
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.facts import (
    GKE_ACCELERATOR_LABEL,
    GKE_FLEX_START_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    GPU_RESOURCE,
    GPU_TOLERATION,
    TPU_RESOURCE,
    TPU_TOLERATION,
)
from airflow_provider_dws.links import GKEFlexStartJobLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.gke import cluster_backend
from airflow_provider_dws.runtime.gke_kueue import gke_job_console_url
from airflow_provider_dws.runtime.kube_job import add_tolerations, named_job, pod_spec_of
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["FlexStartJobAdapter"]

#: Who a Job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")


def flex_start_pod(pod: dict[str, Any], op: Any) -> None:
    """Make a Job's pod spec ask for flex-start nodes: the ``gke-flex-start`` node selector, the
    accelerator's (GPU, or TPU and topology) with its resource limit when the operator names it,
    and the toleration of the GPU or TPU taint, each added once."""
    selector = {**(pod.get("nodeSelector") or {}), GKE_FLEX_START_LABEL: "true"}
    if op.accelerator:
        selector[GKE_ACCELERATOR_LABEL] = op.accelerator
        pod["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: str(op.gpus)}}
    if op.tpu:
        selector[GKE_TPU_ACCELERATOR_LABEL] = op.tpu
        selector[GKE_TPU_TOPOLOGY_LABEL] = op.tpu_topology
        pod["containers"][0]["resources"] = {"limits": {TPU_RESOURCE: str(op.tpu_chips())}}
    pod["nodeSelector"] = selector
    tpu = GKE_TPU_ACCELERATOR_LABEL in selector
    add_tolerations(pod, (TPU_TOLERATION,) if tpu else (GPU_TOLERATION,))


class FlexStartJobAdapter(RequestAdapter["CreateGKEFlexStartJobOperator", FlexStartJobBackend]):
    """A Job on flex-start nodes per attempt; the wait ends when the Job ends. Every pod it runs at
    once must get a node within the max wait, or the trigger deletes the Job (no grace: GKE's
    autoscaler has no max wait of its own), pods and all."""

    name_key = "job_name"

    target = "end"
    wait_grace = timedelta(0)
    submits_in_trigger = True
    op: CreateGKEFlexStartJobOperator

    def backend(self, location: str | None = None) -> FlexStartJobBackend:
        """The backend of the operator's cluster and namespace (one location: the cluster's)."""
        return cluster_backend(self, FlexStartJobBackend, location)

    def location_of(self, name: str) -> str:
        """Every Job of the task is in the cluster's location."""
        return self.op.location

    def build(self, identity: RequestIdentity, max_wait: timedelta | None = None) -> dict[str, Any]:
        """The Job manifest to create: the user's (or the one the parameters describe), named from the
        identity, with the identity labels on the Job and its pods (the poller lists both by them),
        its pods asking for flex-start nodes, and ``max_run`` as ``activeDeadlineSeconds``."""
        op = self.op
        manifest = named_job(op, identity, max_wait or op.max_wait)
        template = manifest["spec"]["template"] = dict(manifest["spec"].get("template") or {})
        template_meta = dict(template.get("metadata") or {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **manifest["metadata"]["labels"]}
        template["metadata"] = template_meta
        flex_start_pod(pod_spec_of(manifest), op)
        if op.max_run is not None:
            manifest["spec"]["activeDeadlineSeconds"] = round(op.max_run.total_seconds())
        return manifest

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The Job manifest of :meth:`build`, for the trigger to create (one cluster, so
        ``placement`` changes nothing)."""
        return self.build(identity, max_wait)

    def announce(self) -> dict[str, Any]:
        """The Job's name under ``job_name``, its console page (when the cluster is named) under
        the link's key."""
        link = self._console_url("{id}")
        return {
            "name_key": self.name_key,
            **({"link_key": GKEFlexStartJobLink.key, "link": link} if link else {}),
        }

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
        from airflow_provider_dws.console import push_url

        url = self._console_url(status.name)
        if url:
            push_url(context, GKEFlexStartJobLink.key, url)
        return url

    def _console_url(self, name: str) -> str | None:
        op = self.op
        if not op.project_id or not op.cluster_name or is_pending(name):
            return None
        return gke_job_console_url(str(op.project_id), op.location, op.cluster_name, op.namespace, name)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's Job (or adopt the one of that name)."""
        try:
            job, created = self.backend().submit(self.build(identity, max_wait), identity)
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the Job: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"the Kubernetes API refused the Job: {err.message}") from None
        self.log.info(
            "%s Job %s (attempt %d, %s); every pod must get a flex-start node within %s",
            "Submitted" if created else "Adopted",
            job.name,
            identity.attempt,
            job.description,
            max_wait,
        )
        self.remember(context, job)
        return job

    def result(self, context: Context, status: RequestStatus) -> dict[str, Any]:
        """What the Job did: its name, namespace, status, pod counts, nodes, wait and run seconds."""
        if RESULT in status.details:  # read by the trigger with the Job's final status
            return dict(status.details[RESULT])
        fresh = self.backend().get_status(status.name)
        details = fresh.details if fresh is not None else status.details
        return flex_job_result(status, self.op.namespace, details)

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """A Job whose node went away would make a new pod wait for a node: delete it. A failed
        Job is kept (its pods' logs); its nodes scale down once its pods ended."""
        if status.state == "CapacityRevoked":
            self.log.info(
                "Deleting %s (%s): nothing of it should wait for a node again", status.name, status.state
            )
            self.backend().release(status.name)

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The Job's accelerators over every pod, the accelerator, its console page."""
        pods, per_pod, accelerator = job_shape(self.build(_SHAPE_ONLY))
        return {
            "api": FlexStartJobBackend.kind,
            "kind": "GKE flex-start Job",
            # The record's project when neither the operator nor its Google connection names one.
            "project": "",
            "accelerator_type": accelerator or None,
            "accelerator_count": pods * per_pod,
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
                f"not every pod got a flex-start node within max wait {max_wait}: "
                f"{status.description or 'the Job'} ({where}{': ' + message if message else ''}); the Job was "
                "deleted with its pods, so no node stays up or comes up for it"
            )
        if failure is FailureKind.WORKLOAD_FAILED:
            return WorkloadFailedError(f"workload failed: {message or status.state} ({where})")
        if failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the Job lost its capacity: {message} ({where})")
        if failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"the Job was refused: {message} ({where})")
        return RequestCancelledError(
            f"{where} was deleted before it finished{': ' + message if message else ''}"
        )
