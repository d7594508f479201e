"""Kueue Jobs in the attempt loop: build the suspended Job, find it, classify its end."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.kube_jobs import job_result
from airflow_provider_dws.backends.kueue import (
    ACCELERATOR_SELECTOR,
    GPU_RESOURCE,
    MAX_RUN_ANNOTATION,
    QUEUE_NAME_LABEL,
    KueueJobBackend,
    job_gpus,
)
from airflow_provider_dws.facts import GPU_TOLERATION, QUEUED_TOLERATION
from airflow_provider_dws.links import GKEQueuedJobLink
from airflow_provider_dws.runtime.kube_job import (
    JobAdapter,
    add_tolerations,
    gke_job_console_url,
    named_job,
    pod_spec_of,
)

if TYPE_CHECKING:
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["KueueJobAdapter", "gke_job_console_url", "job_result"]

#: What GKE's GPU nodes are tainted with, and what a queued-provisioning node pool adds.
_TOLERATIONS = (GPU_TOLERATION, QUEUED_TOLERATION)


class KueueJobAdapter(JobAdapter[KueueJobBackend]):
    """A suspended Job in a Kueue LocalQueue per attempt; the wait ends when the Job ends.

    Kueue has no max wait: the trigger deletes a Job still waiting at its max wait, with no grace.
    """

    backend_class = KueueJobBackend
    link = GKEQueuedJobLink
    kind_name = "GKE Kueue Job"
    op: CreateGKEQueuedJobOperator

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

    def shape(self, manifest: Mapping[str, Any]) -> tuple[int, int, str]:
        """(pods at once, GPUs per pod, accelerator) of the Job."""
        return job_gpus(dict(manifest))

    def waits_in(self) -> str:
        """The Job's namespace and LocalQueue."""
        return f"namespace {self.op.namespace}, LocalQueue {self.op.queue_name}"

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """A Job Kueue gave up (rejected, capacity revoked) stays suspended for ever: delete it. A
        failed Job is kept (its pods' logs); it holds no capacity."""
        if status.state in ("Rejected", "CapacityRevoked"):
            self.log.info("Deleting %s (%s): it would stay suspended for nothing", status.name, status.state)
            self.backend().release(status.name)
