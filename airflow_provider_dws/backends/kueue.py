"""Kueue Jobs on GKE queued provisioning as DWS capacity requests.

The request is a ``batch/v1`` Job, created suspended with the ``kueue.x-k8s.io/queue-name`` label:
Kueue makes a Workload for it, reserves quota in the LocalQueue's ClusterQueue, asks for the
nodes through the ProvisioningRequest admission check and unsuspends the Job once they are there.
Its state is read from the Job and its Workload together (:func:`job_state`, into
:data:`.kueue_states.KUEUE_JOB_STATES`). One backend serves one namespace of one cluster, on the
Job calls of :class:`~.kube_jobs.JobBackend`: the shared poller lists its Jobs (by the provider's
label) and its Workloads once per interval. Releasing is deleting the Job with
``propagationPolicy=Background``: its pods, its Workload and the Workload's ProvisioningRequests
go with it.

Objects are handled as the API's JSON (camelCase dicts), whichever client read them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from airflow_provider_dws.backends.kueue_states import (
    FALLBACK_WORKLOAD_VERSION,
    KUEUE_CAPACITY_REVOKED,
    KUEUE_JOB_STATES,
    WORKLOAD_GROUP,
    newest_workload_version,
)
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError, RequestNotFoundError
from airflow_provider_dws.scheduling.phases import RequestTimings

log = logging.getLogger(__name__)

#: The label that hands a Job to Kueue (its LocalQueue in the Job's namespace).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: The label Kueue puts on a Job's Workload: the Job's uid.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: The per-Job ProvisioningRequest parameter Kueue passes on: the run limit GKE enforces.
MAX_RUN_ANNOTATION = "provreq.kueue.x-k8s.io/maxRunDurationSeconds"
WORKLOAD_PLURAL = "workloads"
GPU_RESOURCE = facts.GPU_RESOURCE
ACCELERATOR_SELECTOR = facts.GKE_ACCELERATOR_LABEL
#: Discovery errors after which the Workloads are read at the fallback version (a transient error
#: propagates, as it would from the list).
DISCOVERY_REFUSED = (PermissionDeniedApiError, RequestNotFoundError, InvalidRequestError)


# -- reading a Job and its Workload (pure) ----------------------------------------------------------


def workload_of(job: dict[str, Any], workloads: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The Workload Kueue made for ``job``: the one its uid labels or that it owns (newest first)."""
    uid = (job.get("metadata") or {}).get("uid")
    if not uid:
        return None
    mine = [
        wl
        for wl in workloads
        if ((wl.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == uid
        or any(ref.get("uid") == uid for ref in (wl.get("metadata") or {}).get("ownerReferences") or [])
    ]
    mine.sort(key=lambda wl: str((wl.get("metadata") or {}).get("creationTimestamp") or ""), reverse=True)
    return mine[0] if mine else None


def _revoked(workload: dict[str, Any] | None) -> str | None:
    """The message of a Workload whose capacity was revoked, if it says so."""
    if workload is None:
        return None
    status = workload.get("status") or {}
    for check in status.get("admissionChecks") or []:
        if KUEUE_CAPACITY_REVOKED.search(f"{check.get('state', '')} {check.get('message', '')}"):
            return str(check.get("message") or "the ProvisioningRequest's capacity was revoked")
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and KUEUE_CAPACITY_REVOKED.search(
            f"{cond.get('reason', '')} {cond.get('message', '')}"
        ):
            return str(cond.get("message") or cond.get("reason"))
    return None


def _rejected(workload: dict[str, Any] | None) -> str | None:
    """Why Kueue gave the Workload up: an admission check Rejected, or the Workload deactivated."""
    if workload is None:
        return None
    status = workload.get("status") or {}
    for check in status.get("admissionChecks") or []:
        if check.get("state") == "Rejected":
            return f"admission check {check.get('name', '?')} rejected the Workload: {check.get('message') or 'no reason given'}"
    if (workload.get("spec") or {}).get("active") is False:
        conditions = true_conditions(workload)
        why = conditions.get("Evicted") or conditions.get("DeactivationTarget") or {}
        return str(why.get("message") or "Kueue deactivated the Workload")
    return None


def _pending_checks(workload: dict[str, Any]) -> str:
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    waiting = [c for c in checks if c.get("state") != "Ready"]
    return "; ".join(
        f"{c.get('name', '?')} {c.get('state', 'Pending')}"
        + (f": {c['message']}" if c.get("message") else "")
        for c in waiting
    )


def job_state(job: dict[str, Any], workload: dict[str, Any] | None) -> tuple[str, str]:
    """The Job's state name in :data:`.kueue_states.KUEUE_JOB_STATES` and
    what it says, from the Job and its Workload (``None``: Kueue has made none yet).

    A rejection (an admission check Rejected, the Workload deactivated) after the Job had started is
    its capacity taken back (``CapacityRevoked``), as is one whose words say so; before a start it
    is capacity not obtained (``Rejected``).
    """
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Deleting", "the Job is being deleted"
    conditions = true_conditions(job)
    started = bool(status.get("startTime")) or "Admitted" in true_conditions(workload)
    if "Complete" in conditions:
        return "Complete", str(conditions["Complete"].get("message") or "")
    revoked = _revoked(workload)
    if "Failed" in conditions:
        if revoked is not None:
            return "CapacityRevoked", revoked
        failed = conditions["Failed"]
        reason = failed.get("reason") or "Failed"
        return "Failed", f"{reason}: {failed.get('message') or 'the Job failed'}"
    if revoked is not None:
        return "CapacityRevoked", revoked
    rejected = _rejected(workload)
    if rejected is not None:
        return ("CapacityRevoked" if started and status.get("startTime") else "Rejected"), rejected
    if not (job.get("spec") or {}).get("suspend"):
        return "Running", ""
    if workload is None:
        return "Suspended", "waiting for Kueue to queue the Job"
    wl_conditions = true_conditions(workload)
    if "Admitted" in wl_conditions:
        return "Admitted", "admitted by Kueue; the Job is being unsuspended"
    if "Evicted" in wl_conditions:
        evicted = wl_conditions["Evicted"]
        return (
            "Requeued",
            f"evicted ({evicted.get('reason', '')}: {evicted.get('message', '')}); queued again",
        )
    if "QuotaReserved" in wl_conditions:
        return "AwaitingCapacity", _pending_checks(
            workload
        ) or "quota reserved; waiting for the admission checks"
    queued: dict[str, Any] = next(
        (
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("type") == "QuotaReserved"
        ),
        {},
    )
    return "Queued", str(queued.get("message") or "queued in its LocalQueue")


def job_gpus(job: dict[str, Any]) -> tuple[int, int, str]:
    """(pods at once, GPUs per pod, accelerator) the Job asks for (0 GPUs, "" when none)."""
    spec = job.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    per_pod = 0
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        if amount is not None and str(amount).isdigit():
            per_pod += int(str(amount))
    accelerator = str((pod.get("nodeSelector") or {}).get(ACCELERATOR_SELECTOR) or "")
    pods = spec.get("parallelism")
    return (int(pods) if isinstance(pods, int) else 1), per_pod, accelerator


def describe_job(job: dict[str, Any]) -> str:
    """``4 pods x 8 nvidia-h100-80gb in namespace default, queue dws`` (what the Job asks for)."""
    pods, gpus, accelerator = job_gpus(job)
    meta = job.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE_NAME_LABEL, "?")
    what = f"{pods} pod{'s' if pods != 1 else ''}"
    if gpus:
        what += f" x {gpus} {accelerator or 'GPU'}"
    return f"{what} in namespace {meta.get('namespace', '?')}, queue {queue}"


def job_status(job: dict[str, Any], workload: dict[str, Any] | None) -> RequestStatus:
    """Classify a Job and its Workload into the shared vocabulary (pure: no API call)."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    state, message = job_state(job, workload)
    outcome = KUEUE_JOB_STATES.classify(state, message=message)
    admitted = true_conditions(workload).get("Admitted") or {}
    started = kube_time(status.get("startTime")) or kube_time(admitted.get("lastTransitionTime"))
    finished: datetime | None = None
    if outcome.phase.terminal:
        wl_status = (workload or {}).get("status") or {}
        checked = [*(wl_status.get("admissionChecks") or []), *(wl_status.get("conditions") or [])]
        finished = job_ended_at(job, started, (kube_time(c.get("lastTransitionTime")) for c in checked))
    if state in ("Rejected",):
        started = None  # never admitted: all of it was waiting
    labels = meta.get("labels") or {}
    wl_meta = (workload or {}).get("metadata") or {}
    requeued = (
        kube_time((true_conditions(workload).get("Evicted") or {}).get("lastTransitionTime"))
        if state == "Requeued"
        else None
    )
    classified = RequestStatus(
        name=str(meta.get("name", "")),
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=kube_time(meta.get("creationTimestamp")),
            started=started if started is not None and state not in ("Suspended", "Queued") else None,
            finished=finished,
        ),
        description=describe_job(job),
        details={
            **job_details(job),
            "workload": wl_meta.get("name"),
            "queue": labels.get(QUEUE_NAME_LABEL),
            # When Kueue evicted and requeued it: after a run, the trigger's max wait counts anew.
            **({"requeued_at": requeued.isoformat()} if requeued is not None else {}),
        },
    )
    if state != "Complete":
        return classified
    # What the task returns, read from the Job already in hand, so the resumed task makes no call.
    result = job_result(classified, str(meta.get("namespace") or ""), classified.details)
    return replace(classified, details={**classified.details, RESULT: result})


# -- the backend ------------------------------------------------------------------------------------


class KueueJobBackend(JobBackend):
    """Create, find, read and delete Kueue Jobs in one namespace of one GKE cluster: a
    :class:`~.kube_jobs.JobBackend` whose Jobs are read with their Workload (at the newest version
    the cluster's Kueue serves, asked of its API discovery once per backend)."""

    kind = "gke_kueue_job"
    owned_uid_label = JOB_UID_LABEL

    def __init__(self, *args: Any, workload_version: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The Workload version read: asked of the cluster's discovery on first use, then carried
        #: in :meth:`spec` so the triggerer's backend does not ask again.
        self.workload_version = workload_version

    def spec(self) -> dict[str, Any]:
        """Constructor keyword arguments, JSON-serializable, to rebuild this backend in the triggerer."""
        spec = super().spec()
        if self.workload_version:
            spec["workload_version"] = self.workload_version
        return spec

    def classify(self, job: dict[str, Any], owned: Sequence[dict[str, Any]]) -> RequestStatus:
        """The Job with its (newest) Workload, classified."""
        return job_status(job, workload_of(job, owned))

    def _chosen(self, groups: Mapping[str, Any] | None, why: str = "") -> str:
        if groups is None:
            log.warning(
                "Could not read the API groups of %s (%s): reading Kueue Workloads at %s",
                self.where(),
                why,
                FALLBACK_WORKLOAD_VERSION,
            )
            version = FALLBACK_WORKLOAD_VERSION
        else:
            version = newest_workload_version(groups)
        self.workload_version = version
        return version

    def workloads_version(self) -> str:
        """The Workload version this cluster's Kueue serves newest (discovery, once per backend)."""
        if self.workload_version:
            return self.workload_version
        try:
            groups = self._json(self._call("read the API groups", self._discovery().get_api_versions))
        except DISCOVERY_REFUSED as err:
            return self._chosen(None, str(err))
        return self._chosen(groups)

    async def aworkloads_version(self) -> str:
        """:meth:`workloads_version` from the event loop."""
        if self.workload_version:
            return self.workload_version
        try:
            groups = await self._aonce((await self._adiscovery()).get_api_versions)
        except DISCOVERY_REFUSED as err:
            return self._chosen(None, str(err))
        return self._chosen(groups)

    def _discovery(self) -> Any:
        from kubernetes.client import ApisApi

        return ApisApi(self.api_client())

    async def _adiscovery(self) -> Any:
        from kubernetes_asyncio.client import ApisApi

        return ApisApi(await self.async_api_client())

    def _custom(self) -> Any:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api_client())

    def list_workloads(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every Kueue Workload of the namespace (matching ``label_selector``), as JSON."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return self._list_all(
            f"list Workloads in {self.namespace}",
            self._custom().list_namespaced_custom_object,
            group=WORKLOAD_GROUP,
            version=self.workloads_version(),
            namespace=self.namespace,
            plural=WORKLOAD_PLURAL,
            **kwargs,
        )

    def _owned_list(self, label_selector: str | None) -> list[dict[str, Any]]:
        return self.list_workloads(label_selector)

    async def _acustom(self) -> Any:
        from kubernetes_asyncio.client import CustomObjectsApi

        return CustomObjectsApi(await self.async_api_client())

    async def _aowned_lister(self, label_selector: str | None) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The namespace's Workloads, at the version this cluster's Kueue serves newest."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return (await self._acustom()).list_namespaced_custom_object, {
            "group": WORKLOAD_GROUP,
            "version": await self.aworkloads_version(),
            "namespace": self.namespace,
            "plural": WORKLOAD_PLURAL,
            **kwargs,
        }
