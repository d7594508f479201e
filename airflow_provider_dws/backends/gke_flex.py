"""Jobs on GKE flex-start node pools (without queued provisioning) as DWS capacity requests.

The request is a ``batch/v1`` Job whose pods select flex-start nodes
(``cloud.google.com/gke-flex-start: "true"`` and the accelerator's node labels). GKE's cluster
autoscaler adds a node for a pending pod when Dynamic Workload Scheduler finds the capacity, one
node at a time, so some pods of a Job may run while others still wait: the provider keeps the
promise the other surfaces keep, all or nothing. A Job is ``WaitingForNodes`` until every pod it
runs at once got a node, then ``Running``; at the max wait one still waiting is deleted with its
pods, so no node comes up (or stays up) for a workload that gave up. Its state is read from the
Job and its pods together (:func:`flex_job_state`, into :data:`FLEX_JOB_STATES`), on the Job
calls of :class:`~.kube_jobs.JobBackend`: the shared poller lists the provider's Jobs and their
pods (both by the ``dws_managed`` label, which the pods get from the Job's template) once per
interval.

A node lives at most the node pool's max run duration (7 days at most); then GKE removes it and
kubelet's graceful node shutdown fails its pods (``DisruptionTarget``, ``TerminationByKubelet``):
a Job failed that way lost its capacity (``CapacityRevoked``), not its workload.

Objects are handled as the API's JSON (camelCase dicts), whichever client read them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from airflow_provider_dws import facts
from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.kube_base import kube_time
from airflow_provider_dws.backends.kube_jobs import (
    JobBackend,
    job_details,
    job_ended_at,
    job_result,
    true_conditions,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings, StateTable

log = logging.getLogger(__name__)

#: The label Kubernetes (1.27 and later) puts on a Job's pods: the Job's uid.
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
#: Pod conditions and reasons of a pod its node's shutdown ended (kubelet's graceful shutdown, as at
#: a flex-start node's max run duration), and the pod ``status.reason`` it writes.
DISRUPTION_CONDITION = "DisruptionTarget"
NODE_GONE_REASONS = frozenset({"TerminationByKubelet", "DeletionByPodGC", "Terminated", "NodeShutdown"})
_ENDED = ("Succeeded", "Failed")

# The one table of a flex-start Job, read from the Job and its pods (``flex_job_state`` names it):
# * WaitingForNodes (fewer of its pods than it runs at once have had a node: the autoscaler is still
#   finding flex-start capacity; some may run already): WAITING, the phase the max wait deletes.
# * Running (every pod it runs at once has had a node): RUNNING. Complete: SUCCEEDED.
# * Failed (the Job failed, its pods' own doing): FAILED, the workload's.
# * CapacityRevoked (the Job failed after a pod's node went away: its max run duration passed, or
#   GKE reclaimed it): FAILED, preempted, never a workload failure.
# * Deleting (the Job has a deletion timestamp): CANCELLED.
FLEX_JOB_STATE_PHASES: dict[str, Phase] = {
    "WaitingForNodes": Phase.WAITING,
    "Running": Phase.RUNNING,
    "Complete": Phase.SUCCEEDED,
    "Failed": Phase.FAILED,
    "CapacityRevoked": Phase.FAILED,
    "Deleting": Phase.CANCELLED,
}


def classify_flex_job(state_name: str, *, message: str = "") -> Outcome:
    """Classify a flex-start Job's state (:data:`FLEX_JOB_STATE_PHASES`) into a phase and a reason."""
    if state_name == "Failed":
        return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, message or "the Job failed")
    if state_name == "CapacityRevoked":
        return Outcome(Phase.FAILED, FailureKind.PREEMPTED, message or "a flex-start node went away")
    phase = FLEX_JOB_STATE_PHASES.get(state_name, Phase.WAITING)
    if phase is Phase.CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, message or "the Job is being deleted")
    return Outcome(phase, None, message)


#: Jobs on flex-start node pools (a ``batch/v1`` Job and its pods); facts: ``message``.
FLEX_JOB_STATES = StateTable("gke_flex_start_job", FLEX_JOB_STATE_PHASES, classify_flex_job)


# -- reading a Job and its pods (pure) --------------------------------------------------------------


def pods_at_once(job: Mapping[str, Any]) -> int:
    """How many pods the Job runs at once: its parallelism, at most its completions."""
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    pods = parallelism if isinstance(parallelism, int) else 1
    completions = spec.get("completions")
    return max(1, min(pods, completions) if isinstance(completions, int) else pods)


def _scheduled_at(pod: Mapping[str, Any]) -> datetime | None:
    scheduled = true_conditions(pod).get("PodScheduled") or {}
    status = pod.get("status") or {}
    return kube_time(scheduled.get("lastTransitionTime")) or kube_time(status.get("startTime"))


def node_gone(pod: Mapping[str, Any]) -> str | None:
    """What a pod its node's shutdown or removal ended says (``None``: not ended that way)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    disruption = true_conditions(pod).get(DISRUPTION_CONDITION) or {}
    if disruption.get("reason") in NODE_GONE_REASONS or status.get("reason") in NODE_GONE_REASONS:
        node = (pod.get("spec") or {}).get("nodeName") or "its node"
        why = status.get("message") or disruption.get("message") or "the node was removed"
        return f"pod {(pod.get('metadata') or {}).get('name', '?')} on {node}: {why}"
    return None


def _failed_at(pod: Mapping[str, Any]) -> str:
    """When a failed pod ended, as its RFC 3339 text (sortable; "" when it does not say)."""
    status = pod.get("status") or {}
    ends = [
        str((cs.get("state") or {}).get("terminated", {}).get("finishedAt") or "")
        for cs in status.get("containerStatuses") or []
    ]
    ends += [str(c.get("lastTransitionTime") or "") for c in status.get("conditions") or []]
    return max(ends, default="")


def last_failure_node_gone(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """What the last pod to fail said, if its node's end failed it (``None`` otherwise): a Job
    that failed that way lost its capacity; one whose last failure was its own code did not, even
    if an earlier pod lost its node and was replaced."""
    failed = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Failed"]
    return node_gone(max(failed, key=_failed_at)) if failed else None


def had_nodes(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    """How many of the Job's pods have had a node: those not ended that have one, and every ended
    one (the Job's own counters, which outlive pods the garbage collector deleted), so a Job does
    not read as waiting again when a pod that ran is gone."""
    status = job.get("status") or {}
    running = sum(
        1
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") not in _ENDED
    )
    return running + int(status.get("succeeded") or 0) + int(status.get("failed") or 0)


def _waiting_message(pods: Sequence[Mapping[str, Any]]) -> str:
    """What the scheduler says of the first pod still without a node."""
    for pod in pods:
        status = pod.get("status") or {}
        if (pod.get("spec") or {}).get("nodeName") or status.get("phase") in _ENDED:
            continue
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") != "True" and cond.get("message"):
                return f"{(pod.get('metadata') or {}).get('name', '?')}: {cond['message']}"
    return ""


def flex_job_state(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The Job's state name in :data:`FLEX_JOB_STATES` and what it says, from the Job and its pods."""
    meta = job.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Deleting", "the Job is being deleted"
    conditions = true_conditions(job)
    if "Complete" in conditions:
        return "Complete", str(conditions["Complete"].get("message") or "")
    if "Failed" in conditions:
        gone = last_failure_node_gone(pods)
        if gone is not None:
            return "CapacityRevoked", f"a flex-start node went away ({gone})"
        failed = conditions["Failed"]
        return "Failed", f"{failed.get('reason') or 'Failed'}: {failed.get('message') or 'the Job failed'}"
    want = pods_at_once(job)
    placed = min(want, had_nodes(job, pods))
    if placed >= want:
        return "Running", f"all {want} pod{'s' if want != 1 else ''} got a flex-start node"
    if (job.get("spec") or {}).get("suspend"):
        return "WaitingForNodes", "the Job is suspended: it makes no pods"
    waiting = _waiting_message(pods)
    return "WaitingForNodes", f"{placed} of {want} pods have a node" + (f"; {waiting}" if waiting else "")


def job_shape(job: Mapping[str, Any]) -> tuple[int, int, str]:
    """(pods at once, accelerators per pod, accelerator) the Job asks for: GPUs with their GKE
    accelerator, or TPU chips with ``<tpu accelerator> <topology>`` (0 and "" when none)."""
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    per_pod = 0
    resource = facts.GPU_RESOURCE
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        for name in (facts.GPU_RESOURCE, facts.TPU_RESOURCE):
            amount = (resources.get("limits") or {}).get(name) or (resources.get("requests") or {}).get(name)
            if amount is not None and str(amount).isdigit():
                per_pod, resource = per_pod + int(str(amount)), name
    selector = pod.get("nodeSelector") or {}
    if resource == facts.TPU_RESOURCE:
        tpu = selector.get(facts.GKE_TPU_ACCELERATOR_LABEL, "TPU")
        accelerator = f"{tpu} {selector.get(facts.GKE_TPU_TOPOLOGY_LABEL, '')}".strip()
    else:
        accelerator = str(selector.get(facts.GKE_ACCELERATOR_LABEL) or "")
    return pods_at_once(job), per_pod, accelerator


def describe_job(job: Mapping[str, Any]) -> str:
    """``2 pods x 8 nvidia-h100-80gb on flex-start nodes in namespace default``."""
    pods, per_pod, accelerator = job_shape(job)
    what = f"{pods} pod{'s' if pods != 1 else ''}"
    if per_pod:
        what += f" x {per_pod} {accelerator or 'accelerators'}"
    return f"{what} on flex-start nodes in namespace {(job.get('metadata') or {}).get('namespace', '?')}"


def _timings(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], state: str) -> RequestTimings:
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    started: datetime | None = None
    if state != "WaitingForNodes":
        # When the last of the pods it runs at once got its node (all of them were needed); the
        # Job's start when those pods are gone.
        times = sorted(
            t for t in (_scheduled_at(p) for p in pods if (p.get("spec") or {}).get("nodeName")) if t
        )
        want = pods_at_once(job)
        started = times[want - 1] if len(times) >= want else kube_time(status.get("startTime"))
    finished = (
        job_ended_at(job, started) if FLEX_JOB_STATE_PHASES.get(state, Phase.WAITING).terminal else None
    )
    return RequestTimings(
        submitted=kube_time(meta.get("creationTimestamp")), started=started, finished=finished
    )


def flex_job_status(job: dict[str, Any], pods: Sequence[dict[str, Any]]) -> RequestStatus:
    """Classify a Job and its pods into the shared vocabulary (pure: no API call)."""
    meta = job.get("metadata") or {}
    state, message = flex_job_state(job, pods)
    classified = RequestStatus(
        name=str(meta.get("name", "")),
        state=state,
        outcome=FLEX_JOB_STATES.classify(state, message=message),
        timings=_timings(job, pods, state),
        description=describe_job(job),
        details={
            **job_details(job),
            "pods": pods_at_once(job),
            "scheduled": min(pods_at_once(job), had_nodes(job, pods)),
            "nodes": sorted(
                {str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")}
            ),
        },
    )
    if not classified.phase.terminal:
        return classified
    # What the task returns, read from the Job already in hand, so the resumed task makes no call.
    result = job_result(classified, str(meta.get("namespace") or ""), classified.details)
    return replace(classified, details={**classified.details, RESULT: result})


# -- the backend ------------------------------------------------------------------------------------


class FlexStartJobBackend(JobBackend):
    """Create, find, read and delete Jobs on flex-start node pools in one namespace of one GKE
    cluster: a :class:`~.kube_jobs.JobBackend` whose Jobs are read with their pods."""

    kind = "gke_flex_start_job"
    owned_uid_label = CONTROLLER_UID_LABEL
    owned_have_labels = True

    def classify(self, job: dict[str, Any], owned: Sequence[dict[str, Any]]) -> RequestStatus:
        """The Job with its pods, classified."""
        return flex_job_status(job, owned)

    def _core(self) -> Any:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api_client())

    async def _acore(self) -> Any:
        from kubernetes_asyncio.client import CoreV1Api

        return CoreV1Api(await self.async_api_client())

    def _owned_list(self, label_selector: str | None) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return self._list_all(
            f"list pods in {self.namespace}",
            self._core().list_namespaced_pod,
            namespace=self.namespace,
            **kwargs,
        )

    async def _aowned_lister(self, label_selector: str | None) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The namespace's pods (the provider's carry its labels, from the Job's template)."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return (await self._acore()).list_namespaced_pod, {"namespace": self.namespace, **kwargs}
