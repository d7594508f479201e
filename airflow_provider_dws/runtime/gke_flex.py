"""Jobs on GKE flex-start node pools in the attempt loop: build the Job, find it, classify its end."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.gke_flex import FlexStartJobBackend, job_shape
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
from airflow_provider_dws.runtime.gke import release_backend
from airflow_provider_dws.runtime.kube_job import JobAdapter, add_tolerations, named_job, pod_spec_of

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
    from airflow_provider_dws.operators.gke_flex_release import DeleteGKEFlexStartJobOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["FlexStartJobAdapter", "FlexStartJobHandOverAdapter", "release_flex_jobs"]


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


class FlexStartJobAdapter(JobAdapter[FlexStartJobBackend]):
    """A Job on flex-start nodes per attempt; the wait ends when the Job ends. Every pod it runs at
    once must get a node within the max wait, or the trigger deletes the Job (no grace: GKE's
    autoscaler has no max wait of its own), pods and all."""

    backend_class = FlexStartJobBackend
    link = GKEFlexStartJobLink
    kind_name = "GKE flex-start Job"
    op: CreateGKEFlexStartJobOperator

    def build(self, identity: RequestIdentity, max_wait: timedelta | None = None) -> dict[str, Any]:
        """The Job manifest to create: the user's (or the one the parameters describe), named from the
        identity, with the identity labels on the Job and its pods (the poller lists both by them),
        its pods asking for flex-start nodes, and ``max_run`` after the max wait as
        ``activeDeadlineSeconds`` (Kubernetes counts it from the Job's start, its creation: the
        wait for nodes is in it)."""
        op = self.op
        wait = max_wait or op.max_wait
        manifest = named_job(op, identity, wait)
        template = manifest["spec"]["template"] = dict(manifest["spec"].get("template") or {})
        template_meta = dict(template.get("metadata") or {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **manifest["metadata"]["labels"]}
        template["metadata"] = template_meta
        flex_start_pod(pod_spec_of(manifest), op)
        if op.max_run is not None:
            manifest["spec"]["activeDeadlineSeconds"] = round((wait + op.max_run).total_seconds())
        return manifest

    def shape(self, manifest: Mapping[str, Any]) -> tuple[int, int, str]:
        """(pods at once, GPUs or TPU chips per pod, accelerator) of the Job."""
        return job_shape(manifest)

    def waits_in(self) -> str:
        """The Job's namespace, on flex-start nodes."""
        return f"namespace {self.op.namespace}, on flex-start nodes (every pod must have one within the max wait)"

    def not_obtained_words(self, status: RequestStatus, max_wait: timedelta, where: str) -> str:
        """Not every pod had a node by the max wait: the Job was deleted, pods and all."""
        message = status.outcome.message
        return (
            f"not every pod got a flex-start node within max wait {max_wait}: "
            f"{status.description or 'the Job'} ({where}{': ' + message if message else ''}); the Job was "
            "deleted with its pods, so no node stays up or comes up for it"
        )

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """A Job whose node went away would make a new pod wait for a node: delete it. A failed
        Job is kept (its pods' logs); its nodes scale down once its pods ended."""
        if status.state == "CapacityRevoked":
            self.log.info(
                "Deleting %s (%s): nothing of it should wait for a node again", status.name, status.state
            )
            self.backend().release(status.name)


class FlexStartJobHandOverAdapter(FlexStartJobAdapter):
    """The same Job, handed over once every pod it runs at once has had a node
    (``wait_until_finished=False``): the task returns the running Job's name, namespace and nodes,
    and the Job runs on until its end or its release
    (:class:`~airflow_provider_dws.operators.gke_flex_release.DeleteGKEFlexStartJobOperator`)."""

    target = "running"


# -- the release (DeleteGKEFlexStartJobOperator) -------------------------------------------------------


def release_flex_jobs(op: DeleteGKEFlexStartJobOperator, context: Context) -> dict[str, Any]:
    """Delete every Job of the setup task instance that is still waiting or running, any try and
    attempt (one list by its ``dws_key``), logging the nodes each ran on; record the release."""
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release
    from airflow_provider_dws.runtime.task import task_identity

    backend = release_backend(op, FlexStartJobBackend)
    released: list[tuple[str, str]] = []
    for status in backend.find(task_identity(context, task_id=op.setup_task_id)):
        if not status.phase.live:
            op.log.info(
                "Job %s ended (%s): nothing to give back; it is kept for its logs", status.name, status.state
            )
            continue
        nodes = status.details.get("nodes") or []
        op.log.info(
            "Deleting Job %s (%s: %s), its pods on %s",
            status.name,
            status.state,
            status.description,
            ", ".join(nodes) if nodes else "no node yet",
        )
        backend.release(status.name)
        released.append((status.name, status.state))
    requests = ReleasedApi(backend.kind, "GKE flex-start Job", lambda _name: str(op.location), ("Running",))
    record_release(op, context, requests, Released(released))
    if not released:
        op.log.info("No live Job of task %r in %s: nothing to do", op.setup_task_id, backend.where())
    return {
        "released": [name for name, _ in released],
        "deleted": bool(released),
        "state_before": released[0][1] if released else None,
    }
