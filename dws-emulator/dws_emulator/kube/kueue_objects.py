"""Kueue's names, labels, conditions and quota, as Kueue writes them (the pieces :mod:`.kueue` builds on).

Names follow Kueue's job framework and provisioning admission check:

- Workload of a Job: ``job-<job name>-<first 5 hex of sha1("Job\\nbatch\\n<name>\\n<uid>")>``
  (the prefix cut so the whole fits 253 characters);
- ProvisioningRequest: ``<workload>-<check>-<attempt>``, attempt from 1;
- its PodTemplates: ``ppt-<request>-<podset>``;
- a name longer than 247 characters is cut and given a 5-hex sha1 tail.

The names and constants of the seeded queues are here too; the objects, their status and what
makes a queue active are in :mod:`.kueue_queues`. Objects are read and written as stored, at
``v1beta2`` (:mod:`.kueue_versions`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any

from .store import KINDS, KubeStore, timestamp

JOBS = KINDS["jobs.batch"]
PODS = KINDS["pods"]
PODTEMPLATES = KINDS["podtemplates"]
REQUESTS = KINDS["provisioningrequests.autoscaling.x-k8s.io"]
WORKLOADS = KINDS["workloads.kueue.x-k8s.io"]
LOCAL_QUEUES = KINDS["localqueues.kueue.x-k8s.io"]
CLUSTER_QUEUES = KINDS["clusterqueues.kueue.x-k8s.io"]
ADMISSION_CHECKS = KINDS["admissionchecks.kueue.x-k8s.io"]
CONFIGS = KINDS["provisioningrequestconfigs.kueue.x-k8s.io"]
RESOURCE_FLAVORS = KINDS["resourceflavors.kueue.x-k8s.io"]

#: The Job label naming its LocalQueue: what makes a Job Kueue's.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: On the Workload: the uid of the Job it stands for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: On ProvisioningRequests and PodTemplates Kueue creates.
MANAGED_LABEL = "kueue.x-k8s.io/managed"
#: Added to the Job's pod template when it starts: the pod set's name.
PODSET_LABEL = "kueue.x-k8s.io/podset"
#: Job (then Workload) annotations with this prefix become ProvisioningRequest parameters.
PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"
#: What a pod must carry to consume a Provisioned request (injected through podSetUpdates).
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
DEFAULT_PODSET = "main"

CLUSTER_QUEUE = "dws-cluster-queue"
LOCAL_QUEUE = "dws-queue"
LOCAL_QUEUE_NAMESPACE = "default"
CHECK = "dws-prov"
CONFIG = "dws-config"
FLAVOR = "dws-flavor"
PROVISIONING_CLASS = "queued-provisioning.gke.io"
MANAGED_RESOURCE = "nvidia.com/gpu"
#: A Workload's QuotaReserved reasons while its queue cannot take it (Kueue's workload controller:
#: a queue that does not exist, an inactive one).
MISCONFIGURED = "Misconfigured"
SUSPENDED = "Suspended"
BLOCKED_REASONS = (MISCONFIGURED, SUSPENDED)
#: Kueue's defaults for a config without a retryStrategy, and the seeded config's values.
BACKOFF_LIMIT_COUNT = 3
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 1800
#: The labels Kubernetes' Job controller puts on a template that Kueue leaves out of the pod set.
JOB_MANAGED_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
#: Every label the Job controller manages (restored as they are when Kueue stops a Job).
JOB_CONTROLLER_LABELS = (*JOB_MANAGED_LABELS, "batch.kubernetes.io/job-name")

_MAX_NAME = 253
_HASH = 5
_MAX_PREFIX = _MAX_NAME - 1 - _HASH  # Kueue's objNameMaxPrefixLength (252 - 5)


def workload_name(job_name: str, job_uid: str) -> str:
    """The Workload Kueue creates for Job ``job_name`` with ``job_uid``."""
    digest = hashlib.sha1(f"Job\nbatch\n{job_name}\n{job_uid}".encode()).hexdigest()
    return f"{f'job-{job_name}'[:_MAX_PREFIX]}-{digest[:_HASH]}"


def _limit(name: str) -> str:
    # Kueue keeps request and template names under the object-name limit the same way.
    if len(name) <= _MAX_NAME - 1 - _HASH:
        return name
    return f"{name[: _MAX_NAME - 1 - _HASH]}-{hashlib.sha1(name.encode()).hexdigest()[:_HASH]}"


def request_name(workload: str, check: str, attempt: int) -> str:
    """``<workload>-<check>-<attempt>``: the ProvisioningRequest of one attempt (from 1)."""
    return _limit(f"{workload}-{check}-{attempt}")


def pod_template_name(request: str, podset: str) -> str:
    """``ppt-<request>-<podset>``: the PodTemplate a request's pod set refers to."""
    return _limit(f"ppt-{request}-{podset}")


def attempt_of(request: str, workload: str, check: str) -> int | None:
    """The attempt a request's name carries, or None if it is not ``<workload>-<check>-<n>``."""
    match = re.fullmatch(re.escape(_limit(f"{workload}-{check}-")) + r"([0-9]+)", request)
    return int(match.group(1)) if match else None


def backoff_seconds(retry: int, base: int, cap: int) -> int:
    """Wait before retry number ``retry`` (from 1): ``base * 2**(retry - 1)``, at most ``cap``."""
    return int(min(base * 2 ** max(retry - 1, 0), cap))


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller owner reference to ``obj``, as controller-runtime writes one."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: dict[str, Any] | None, owner_uid: str) -> bool:
    """``obj`` exists and has an owner reference to ``owner_uid``."""
    if obj is None:
        return False
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid for ref in refs)


def controller_of(obj: dict[str, Any], kind: str) -> str | None:
    """The name of ``obj``'s owner of ``kind`` (``Job``, ``Workload``), or None."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind:
            return str(ref.get("name"))
    return None


def find_condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of ``type_`` in ``obj["status"]["conditions"]``, or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    cond = find_condition(obj, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    status: dict[str, Any], type_: str, value: str, reason: str, message: str, now: float, generation: int
) -> None:
    """Set a condition as apimachinery's SetStatusCondition does (the time moves only with the status)."""
    conds = status.setdefault("conditions", [])
    for cond in conds:
        if cond["type"] == type_:
            if cond["status"] != value:
                cond["lastTransitionTime"] = timestamp(now)
            cond.update(status=value, reason=reason, message=message, observedGeneration=generation)
            return
    conds.append(
        {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": timestamp(now),
            "observedGeneration": generation,
        }
    )


def remove_condition(status: dict[str, Any], type_: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != type_]


def retry_strategy(config: dict[str, Any]) -> tuple[int, int, int]:
    """``(backoffLimitCount, backoffBaseSeconds, backoffMaxSeconds)`` of a config, Kueue's defaults filled."""
    strategy = (config.get("spec") or {}).get("retryStrategy") or {}
    return (
        int(strategy.get("backoffLimitCount", BACKOFF_LIMIT_COUNT)),
        int(strategy.get("backoffBaseSeconds", BACKOFF_BASE_SECONDS)),
        int(strategy.get("backoffMaxSeconds", BACKOFF_MAX_SECONDS)),
    )


def pod_resources(template: dict[str, Any]) -> set[str]:
    """Every resource a pod template's containers request or limit."""
    spec = template.get("spec") or {}
    names: set[str] = set()
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        names.update((resources.get("requests") or {}).keys())
        names.update((resources.get("limits") or {}).keys())
    return names


def limits_as_requests(template: dict[str, Any]) -> dict[str, Any]:
    """A copy where a container's missing requests are its limits (what Kueue puts in a PodTemplate)."""
    template = copy.deepcopy(template)
    spec = template.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
    return template


# -- Workload status ---------------------------------------------------------------------------------------


def parse_time(text: str) -> float:
    """Epoch seconds of an RFC 3339 time as the store writes them."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def true_in(status: dict[str, Any], type_: str) -> bool:
    """A condition of ``type_`` is True in ``status``."""
    return is_true({"status": status}, type_)


def set_check_state(check: dict[str, Any], state: str, message: str, now: float) -> None:
    """An admission check state (its time moves only when the state does)."""
    if check["state"] != state:
        check["state"] = state
        check["lastTransitionTime"] = timestamp(now)
    check["message"] = message


def checks_message(checks: list[dict[str, Any]], state: str) -> str:
    """``AdmissionCheck in Retry state: "dws-prov" (message)``, as Kueue words it."""
    parts = [
        f"{json.dumps(c['name'])} ({c['message']})" if c.get("message") else json.dumps(c["name"])
        for c in sorted(checks, key=lambda c: c["name"])
    ]
    noun = "AdmissionCheck" if len(checks) == 1 else "AdmissionChecks"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def evict(status: dict[str, Any], reason: str, message: str, now: float, gen: int) -> None:
    """Evicted, checks back to Pending (a Retry counts), quota and admission released, not requeued yet."""
    set_condition(status, "Evicted", "True", reason, message, now, gen)
    checks = []
    for check in status.get("admissionChecks") or []:
        if check["state"] == "Pending":
            checks.append(check)
            continue
        reset = {
            "name": check["name"],
            "state": "Pending",
            "lastTransitionTime": timestamp(now),
            "message": f"Reset to Pending after eviction. Previously: {check['state']}",
        }
        if check.get("requeueAfterSeconds") is not None:
            reset["requeueAfterSeconds"] = check["requeueAfterSeconds"]
        retries = int(check.get("retryCount") or 0)
        reset["retryCount"] = retries + 1 if check["state"] == "Retry" else retries
        checks.append(reset)
    if "admissionChecks" in status:
        status["admissionChecks"] = checks
    status.pop("admission", None)
    set_condition(status, "QuotaReserved", "False", "Pending", message, now, gen)
    if true_in(status, "Admitted") or find_condition({"status": status}, "Admitted") is not None:
        set_condition(
            status,
            "Admitted",
            "False",
            "NoReservationUnsatisfiedChecks",
            "The workload has no reservation and not all checks ready",
            now,
            gen,
        )
    set_condition(status, "Requeued", "False", reason, message, now, gen)


def summary_state(wl: dict[str, Any]) -> str:
    """One word for a Workload's state (the summary's)."""
    if is_true(wl, "Finished"):
        return "finished"
    if wl["spec"].get("active") is False:
        return "deactivated"
    if is_true(wl, "Admitted"):
        return "admitted"
    if is_true(wl, "Evicted"):
        return "evicted"
    if is_true(wl, "QuotaReserved"):
        return "quota-reserved"
    cond = find_condition(wl, "QuotaReserved")
    return "inadmissible" if cond and cond.get("reason") in BLOCKED_REASONS else "pending"


def flavor_names(cluster_queue: dict[str, Any]) -> list[str]:
    """Every flavor a (stored) ClusterQueue's resource groups name, in order."""
    names: list[str] = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if flavor.get("name") and flavor["name"] not in names:
                names.append(str(flavor["name"]))
    return names


def admission_checks_of(cluster_queue: dict[str, Any], flavor: str | None = None) -> list[str]:
    """The admission checks a (stored, ``v1beta2``) ClusterQueue names in its
    ``admissionChecksStrategy``: all of them, or those that apply to ``flavor`` (a rule without
    ``onFlavors`` applies to every flavor)."""
    strategy = (cluster_queue.get("spec") or {}).get("admissionChecksStrategy") or {}
    return [
        str(rule.get("name", ""))
        for rule in strategy.get("admissionChecks") or []
        if flavor is None or not rule.get("onFlavors") or flavor in rule["onFlavors"]
    ]


def reserve(wl: dict[str, Any], status: dict[str, Any], cq: dict[str, Any], now: float) -> None:
    """The scheduler: quota in the ClusterQueue (never short here), the checks it names Pending."""
    gen, cq_name = wl["metadata"]["generation"], cq["metadata"]["name"]
    flavors = flavor_names(cq)
    flavor = flavors[0] if flavors else ""
    status["admission"] = {
        "clusterQueue": cq_name,
        "podSetAssignments": [
            {
                "name": ps["name"],
                "flavors": {r: flavor for r in sorted(pod_resources(ps["template"]))} if flavor else {},
                "count": ps["count"],
            }
            for ps in wl["spec"]["podSets"]
        ],
    }
    set_condition(
        status,
        "QuotaReserved",
        "True",
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {cq_name}",
        now,
        gen,
    )
    evicted = find_condition({"status": status}, "Evicted")
    if evicted and evicted["status"] == "True":
        set_condition(
            status, "Evicted", "False", "QuotaReserved", f"Previously: {evicted['message']}", now, gen
        )
    names = admission_checks_of(cq, flavor)
    kept = {c["name"]: c for c in status.get("admissionChecks") or []}
    status["admissionChecks"] = [
        kept.get(n) or {"name": n, "state": "Pending", "lastTransitionTime": timestamp(now), "message": ""}
        for n in names
    ]


def summary_message(wl: dict[str, Any]) -> str:
    """The message that explains a Workload's state best (eviction, then quota, then a check)."""
    for type_, value in (("Finished", "True"), ("Evicted", "True"), ("QuotaReserved", "False")):
        cond = find_condition(wl, type_)
        if cond is not None and cond.get("status") == value:
            return str(cond.get("message") or "")
    checks = (wl.get("status") or {}).get("admissionChecks") or []
    return "; ".join(c["message"] for c in checks if c.get("message"))


def workload_summary(store: KubeStore, wl: dict[str, Any]) -> dict[str, Any]:
    """One Workload in a line of the summary: its Job, queue, state, checks, attempts, live requests, and why."""
    meta, status = wl["metadata"], wl.get("status") or {}
    checks = status.get("admissionChecks") or []
    attempts = {c["name"]: int(c.get("retryCount") or 0) + 1 for c in checks}
    return {
        "namespace": meta["namespace"],
        "name": meta["name"],
        "job": controller_of(wl, "Job"),
        "queue": wl["spec"].get("queueName", ""),
        "state": summary_state(wl),
        "checks": {c["name"]: c["state"] for c in checks},
        "attempts": attempts,
        "message": summary_message(wl),
        "requests": [
            name
            for check, attempt in attempts.items()
            if store.find(REQUESTS, meta["namespace"], name := request_name(meta["name"], check, attempt))
            is not None
        ],
    }
