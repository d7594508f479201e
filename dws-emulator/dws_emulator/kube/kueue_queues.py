"""Kueue's queues in the emulator: the seeded objects, ResourceFlavors, whether a ClusterQueue is
active, and each queue's Workload counts (the pieces :mod:`.kueue` builds on).

The seeded objects are those of GKE's queued-provisioning guide, stored at ``v1beta2``:
ResourceFlavor ``dws-flavor`` (the queued node pools' label and toleration, which Kueue merges into
the pod template when it admits), ClusterQueue ``dws-cluster-queue`` (that flavor, quota far above
any pool, admission check ``dws-prov`` in its ``admissionChecksStrategy``), AdmissionCheck
``dws-prov`` (controller ``kueue.x-k8s.io/provisioning-request``, parameters
ProvisioningRequestConfig ``dws-config``), the config (class ``queued-provisioning.gke.io``,
managed resource ``nvidia.com/gpu``, retry 3 / 60 s / 1800 s) and LocalQueue ``dws-queue`` in
``default``, each with the status Kueue's controllers write (then the pending, reserving and
admitted counts, kept by :class:`QueueCounts`).

A ClusterQueue is active as Kueue's cache decides (``pkg/cache/scheduler/clusterqueue.go``,
``inactiveReason``): not stopped (``stopPolicy`` None), every flavor it names exists, every
admission check it names exists and is active. Otherwise its ``Active`` condition is False with
the first reason (``Stopped``, ``FlavorNotFound``, ``AdmissionCheckNotFound``,
``AdmissionCheckInactive``) and ``Can't admit new workloads: <every reason>.``; its Workloads get
no quota until it is active again (:meth:`.kueue.Kueue`).
"""

from __future__ import annotations

from typing import Any

from .kueue_objects import (
    ADMISSION_CHECKS,
    BACKOFF_BASE_SECONDS,
    BACKOFF_LIMIT_COUNT,
    BACKOFF_MAX_SECONDS,
    CHECK,
    CLUSTER_QUEUE,
    CLUSTER_QUEUES,
    CONFIG,
    CONFIGS,
    CONTROLLER_NAME,
    FLAVOR,
    LOCAL_QUEUE,
    LOCAL_QUEUE_NAMESPACE,
    LOCAL_QUEUES,
    MANAGED_RESOURCE,
    PROVISIONING_CLASS,
    RESOURCE_FLAVORS,
    admission_checks_of,
    find_condition,
    flavor_names,
    is_true,
    set_condition,
)
from .store import Kind, KubeStore, timestamp

#: What the seeded flavor puts on the pods it admits: the queued node pools' label and taint.
FLAVOR_NODE_LABELS = {"cloud.google.com/gke-queued": "true"}
FLAVOR_TOLERATIONS = [
    {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
]
#: A ClusterQueue that holds its Workloads (``spec.stopPolicy``).
STOPPED = ("Hold", "HoldAndDrain")
READY_MESSAGE = "Can admit new workloads"


# -- flavors -------------------------------------------------------------------------------------


def flavor_terms(store: KubeStore, name: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The node labels and tolerations ResourceFlavor ``name`` puts on the pods it admits."""
    flavor = store.find(RESOURCE_FLAVORS, "", name) or {}
    spec = flavor.get("spec") or {}
    return dict(spec.get("nodeLabels") or {}), [dict(t) for t in spec.get("tolerations") or []]


def assigned_flavor(wl: dict[str, Any]) -> str:
    """The flavor the Workload's first pod set was admitted on (``""`` before quota)."""
    for assignment in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for flavor in (assignment.get("flavors") or {}).values():
            return str(flavor)
    return ""


# -- whether a ClusterQueue is active --------------------------------------------------------------


def inactive_reason(store: KubeStore, cluster_queue: dict[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` of a ClusterQueue that cannot admit, as Kueue words them; None if it can."""
    reasons: list[tuple[str, str]] = []
    if (cluster_queue.get("spec") or {}).get("stopPolicy") in STOPPED:
        reasons.append(("Stopped", "is stopped"))
    missing = [f for f in flavor_names(cluster_queue) if store.find(RESOURCE_FLAVORS, "", f) is None]
    if missing:
        reasons.append(("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}"))
    checks = {name: store.find(ADMISSION_CHECKS, "", name) for name in admission_checks_of(cluster_queue)}
    absent = [name for name, check in checks.items() if check is None]
    if absent:
        reasons.append(
            ("AdmissionCheckNotFound", f"references missing AdmissionCheck(s): {','.join(absent)}")
        )
    inactive = [name for name, check in checks.items() if check is not None and not is_true(check, "Active")]
    if inactive:
        reasons.append(
            ("AdmissionCheckInactive", f"references inactive AdmissionCheck(s): {','.join(inactive)}")
        )
    if not reasons:
        return None
    return reasons[0][0], f"Can't admit new workloads: {', '.join(m for _, m in reasons)}."


def check_problem(store: KubeStore, check: dict[str, Any]) -> str | None:
    """Why a provisioning AdmissionCheck is not active (its parameters do not name an existing
    ProvisioningRequestConfig), in Kueue's words; None when it is."""
    ref = (check.get("spec") or {}).get("parameters")
    if not ref:
        return "missing parameters reference"
    bad = "bad parameters reference"
    if not ref.get("name"):
        return f"empty name: {bad}"
    if ref.get("apiGroup") != CONFIGS.group:
        return f'wrong group "{ref.get("apiGroup", "")}", expecting "{CONFIGS.group}": {bad}'
    if ref.get("kind") != CONFIGS.kind:
        return f'wrong kind "{ref.get("kind", "")}", expecting "{CONFIGS.kind}": {bad}'
    if store.find(CONFIGS, "", ref["name"]) is None:
        return f'{CONFIGS.key} "{ref["name"]}" not found'
    return None


def update_check_active(store: KubeStore, check: dict[str, Any], now: float) -> None:
    """Kueue's provisioning AdmissionCheck controller: the check's ``Active`` condition (True, or
    False with reason ``BadParametersRef``), written when its status changes."""
    if (check.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
        return
    problem = check_problem(store, check)
    value, reason, message = (
        ("True", "Active", "The admission check is active")
        if problem is None
        else ("False", "BadParametersRef", problem)
    )
    # As Kueue's reconciler, written only when the status changes.
    if (find_condition(check, "Active") or {}).get("status") != value:
        _write_active(store, ADMISSION_CHECKS, check, (value, reason, message), now)


def is_active(cluster_queue: dict[str, Any] | None) -> bool:
    """The ClusterQueue's ``Active`` condition is True (as the controller last wrote it)."""
    return is_true(cluster_queue, "Active")


def update_active(store: KubeStore, cluster_queue: dict[str, Any], now: float) -> bool:
    """Write the ClusterQueue's ``Active`` condition if it changed; True if it became active."""
    why = inactive_reason(store, cluster_queue)
    value, reason, message = ("True", "Ready", READY_MESSAGE) if why is None else ("False", *why)
    cond = find_condition(cluster_queue, "Active") or {}
    if (cond.get("status"), cond.get("reason"), cond.get("message")) == (value, reason, message):
        return False
    _write_active(store, CLUSTER_QUEUES, cluster_queue, (value, reason, message), now)
    return value == "True"


def _write_active(
    store: KubeStore, kind: Kind, obj: dict[str, Any], active: tuple[str, str, str], now: float
) -> None:
    """Set a cluster-scoped object's ``Active`` condition to (status, reason, message)."""
    generation = obj["metadata"].get("generation", 1)

    def write(stored: dict[str, Any]) -> None:
        set_condition(stored.setdefault("status", {}), "Active", *active, now, generation)

    store.update(kind, "", obj["metadata"]["name"], write, status=True)


# -- seeded objects ------------------------------------------------------------------------------


def _active(now: float, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": "Active",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(now),
        "observedGeneration": 1,
    }


def _seed_one(
    store: KubeStore, kind: Kind, namespace: str, obj: dict[str, Any], status: dict[str, Any]
) -> None:
    name = obj["metadata"]["name"]
    if store.find(kind, namespace, name) is not None:
        return
    store.create(kind, namespace, obj)
    if kind.status_subresource:
        store.update(kind, namespace, name, lambda o: o.__setitem__("status", status), status=True)


def seed(store: KubeStore) -> None:
    """Create the flavor, ClusterQueue, AdmissionCheck, config and LocalQueue of GKE's guide (each
    kept if present), flavor and check first so the ClusterQueue is active from the start."""
    now = store.clock()
    covered = ["cpu", "memory", MANAGED_RESOURCE, "ephemeral-storage"]
    _seed_one(
        store,
        RESOURCE_FLAVORS,
        "",
        {
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": dict(FLAVOR_NODE_LABELS), "tolerations": list(FLAVOR_TOLERATIONS)},
        },
        {},
    )
    _seed_one(
        store,
        CONFIGS,
        "",
        {
            "metadata": {"name": CONFIG},
            "spec": {
                "provisioningClassName": PROVISIONING_CLASS,
                "managedResources": [MANAGED_RESOURCE],
                "retryStrategy": {
                    "backoffLimitCount": BACKOFF_LIMIT_COUNT,
                    "backoffBaseSeconds": BACKOFF_BASE_SECONDS,
                    "backoffMaxSeconds": BACKOFF_MAX_SECONDS,
                },
            },
        },
        {},
    )
    _seed_one(
        store,
        ADMISSION_CHECKS,
        "",
        {
            "metadata": {"name": CHECK},
            "spec": {
                "controllerName": CONTROLLER_NAME,
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": CONFIG,
                },
            },
        },
        {"conditions": [_active(now, "Active", "The admission check is active")]},
    )
    _seed_one(
        store,
        CLUSTER_QUEUES,
        "",
        {
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "stopPolicy": "None",
                "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
                "preemption": {
                    "borrowWithinCohort": {"policy": "Never"},
                    "reclaimWithinCohort": "Never",
                    "withinClusterQueue": "Never",
                },
                "resourceGroups": [
                    {
                        "coveredResources": covered,
                        "flavors": [
                            {
                                "name": FLAVOR,
                                "resources": [{"name": r, "nominalQuota": "1000000000"} for r in covered],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
            },
        },
        {
            "conditions": [_active(now, "Ready", READY_MESSAGE)],
            "pendingWorkloads": 0,
            "reservingWorkloads": 0,
            "admittedWorkloads": 0,
            "flavorsReservation": [],
            "flavorsUsage": [],
        },
    )
    _seed_one(
        store,
        LOCAL_QUEUES,
        LOCAL_QUEUE_NAMESPACE,
        {"metadata": {"name": LOCAL_QUEUE}, "spec": {"clusterQueue": CLUSTER_QUEUE, "stopPolicy": "None"}},
        {
            "conditions": [_active(now, "Ready", "Can submit new workloads to localQueue")],
            "pendingWorkloads": 0,
            "reservingWorkloads": 0,
            "admittedWorkloads": 0,
            "flavorsReservation": [],
            "flavorsUsage": [],
        },
    )


class QueueCounts:
    """``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads`` of each queue, kept as
    Workloads change (finished, deactivated and queue-less Workloads count nowhere, as in Kueue)."""

    def __init__(self, store: KubeStore) -> None:
        self.store = store
        self._of: dict[tuple[str, str], tuple[tuple[str, str], str, str]] = {}
        self._counts: dict[tuple[str, str], list[int]] = {}  # (namespace or "", queue) -> counts
        self.dirty: set[tuple[str, str]] = set()

    def seen(self, ns: str, wl: dict[str, Any], deleted: bool) -> None:
        """Count Workload ``wl`` (as an event carries it) in its queues, instead of where it was."""
        key = (ns, wl["metadata"]["name"])
        old = self._of.pop(key, None)
        if old is not None:
            self._add(old, -1)
        lq = self.store.find(LOCAL_QUEUES, ns, (wl.get("spec") or {}).get("queueName", ""))
        if deleted or lq is None or is_true(wl, "Finished") or wl["spec"].get("active") is False:
            return
        state = (
            "admitted"
            if is_true(wl, "Admitted")
            else "reserving"
            if is_true(wl, "QuotaReserved")
            else "pending"
        )
        new = ((ns, lq["metadata"]["name"]), lq["spec"].get("clusterQueue", ""), state)
        self._of[key] = new
        self._add(new, 1)

    def _add(self, entry: tuple[tuple[str, str], str, str], sign: int) -> None:
        lq, cq, state = entry
        for queue in (lq, ("", cq)):
            counts = self._counts.setdefault(queue, [0, 0, 0])
            counts[0] += sign * (state == "pending")
            counts[1] += sign * (state in ("reserving", "admitted"))
            counts[2] += sign * (state == "admitted")
            self.dirty.add(queue)

    def flush(self) -> None:
        """Write the changed counts into the queues' status."""
        dirty, self.dirty = self.dirty, set()
        for ns, name in sorted(dirty):
            kind = LOCAL_QUEUES if ns else CLUSTER_QUEUES
            obj = self.store.find(kind, ns, name)
            if obj is None:
                continue
            pending, reserving, admitted = self._counts.get((ns, name), [0, 0, 0])
            want = {
                "pendingWorkloads": pending,
                "reservingWorkloads": reserving,
                "admittedWorkloads": admitted,
            }
            if all((obj.get("status") or {}).get(k) == v for k, v in want.items()):
                continue

            def write(obj: dict[str, Any], want: dict[str, int] = want) -> None:
                obj["status"].update(want)

            self.store.update(kind, ns, name, write, status=True)
