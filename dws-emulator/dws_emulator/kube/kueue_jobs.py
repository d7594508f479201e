"""Kueue's ``batch/v1`` Job integration: the Workload a Job stands for, starting and stopping the Job.

As Kueue's job framework does it: the pod set is the Job's template without the Job controller's
own labels (``batch.kubernetes.io/job-name`` kept) and ``min(parallelism, completions)`` pods;
starting merges the flavor's node labels and tolerations, every admission check's podSetUpdates
and the ``kueue.x-k8s.io/podset`` label into the template and unsuspends; stopping suspends and
puts the template's labels, annotations, node selector and tolerations back to the pod set's,
clears ``status.startTime``, and names the Job's pods that have not ended, for the controller to
delete (as the Job controller does on suspend). Conflicting node selectors are overwritten, not refused as Kueue would.
"""

from __future__ import annotations

import copy
from typing import Any

from .kueue_objects import (
    DEFAULT_PODSET,
    FINALIZER,
    JOB_CONTROLLER_LABELS,
    JOB_MANAGED_LABELS,
    JOB_UID_LABEL,
    JOBS,
    PODS,
    PODSET_LABEL,
    PROVREQ_PREFIX,
    owned_by,
    owner_reference,
)
from .kueue_queues import assigned_flavor, flavor_terms
from .store import KubeStore


def job_end(job: dict[str, Any]) -> tuple[bool, str] | None:
    """``(succeeded, message)`` once the Job has a Complete or Failed condition True, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"] == "Complete", str(cond.get("message") or "")
    return None


def new_workload(job: dict[str, Any], name: str, queue: str) -> dict[str, Any]:
    """The Workload Kueue creates for ``job`` (to store as ``name`` in the Job's namespace)."""
    spec, meta = job["spec"], job["metadata"]
    template = copy.deepcopy(spec.get("template") or {})
    labels = template.setdefault("metadata", {}).get("labels") or {}
    for label in JOB_MANAGED_LABELS:
        labels.pop(label, None)
    count = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "finalizers": [FINALIZER],
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "podSets": [{"name": DEFAULT_PODSET, "template": template, "count": count}],
            "queueName": queue,
            "active": True,
        },
    }
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(PROVREQ_PREFIX)}
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def merged(
    template: dict[str, Any], selector: dict[str, str], tolerations: list[dict[str, Any]]
) -> dict[str, Any]:
    """A copy of pod ``template`` with the node selector and tolerations added (no duplicate tolerations)."""
    template = copy.deepcopy(template)
    spec = template.setdefault("spec", {})
    if selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
    if tolerations:
        have = spec.get("tolerations") or []
        spec["tolerations"] = have + [t for t in tolerations if t not in have]
    return template


def start_job(store: KubeStore, ns: str, job: dict[str, Any], wl: dict[str, Any]) -> None:
    """Unsuspend with the flavor and every check's podSetUpdates merged into the pod template."""
    selector, tolerations = flavor_terms(store, assigned_flavor(wl))
    labels: dict[str, str] = {PODSET_LABEL: DEFAULT_PODSET}
    annotations: dict[str, str] = {}
    for check in wl["status"].get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            if update.get("name") == DEFAULT_PODSET:
                labels.update(update.get("labels") or {})
                annotations.update(update.get("annotations") or {})
                selector.update(update.get("nodeSelector") or {})
                tolerations += [t for t in update.get("tolerations") or [] if t not in tolerations]

    def start(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = False
        template = obj["spec"].setdefault("template", {})
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        template["spec"] = merged(template, selector, tolerations)["spec"]

    store.update(JOBS, ns, job["metadata"]["name"], start)


def stop_job(store: KubeStore, ns: str, job: dict[str, Any], wl: dict[str, Any] | None) -> list[str]:
    """Suspend as Kueue does (template back to the pod set's, startTime cleared); the live pods to delete."""
    name = job["metadata"]["name"]
    podset = wl["spec"]["podSets"][0] if wl and wl["spec"].get("podSets") else None

    def stop(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = True
        if podset is None:
            return
        template = obj["spec"].setdefault("template", {})
        meta, spec = template.setdefault("metadata", {}), template.setdefault("spec", {})
        original = podset.get("template") or {}
        kept = {k: v for k, v in (meta.get("labels") or {}).items() if k in JOB_CONTROLLER_LABELS}
        meta["labels"] = {**((original.get("metadata") or {}).get("labels") or {}), **kept}
        meta["annotations"] = dict((original.get("metadata") or {}).get("annotations") or {})
        for field in ("nodeSelector", "tolerations"):
            value = (original.get("spec") or {}).get(field)
            if value is None:
                spec.pop(field, None)
            else:
                spec[field] = copy.deepcopy(value)
        for field in ("labels", "annotations"):
            if not meta[field]:
                meta.pop(field)

    if not job["spec"].get("suspend"):
        job = store.update(JOBS, ns, name, stop)
    if (job.get("status") or {}).get("startTime"):
        store.update(JOBS, ns, name, lambda o: o["status"].pop("startTime", None), status=True)
    uid = job["metadata"]["uid"]
    return [
        pod["metadata"]["name"]
        for pod in store.iter(PODS, ns)
        if owned_by(pod, uid) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
