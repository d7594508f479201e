"""Kueue's two served API versions: ``v1beta2``, the one stored, and ``v1beta1``, deprecated.

Kueue's main branch serves every kind of ``kueue.x-k8s.io`` at both and stores ``v1beta2``; its
conversion webhook turns one into the other. The emulator stores ``v1beta2`` too and converts here,
at the routes: a body sent at ``v1beta1`` is converted before it is stored (or patched: the patch
applies to the ``v1beta1`` view), and an object read, listed or watched at ``v1beta1`` is converted
on its way out. Source: kubernetes-sigs/kueue, ``apis/kueue/v1beta1/*_conversion.go`` and the CRDs
in ``config/components/crd/bases`` (main, 2026-12). What changed, by kind:

- Workload: ``spec.priorityClassSource`` and ``spec.priorityClassName`` became
  ``spec.priorityClassRef`` (``group``, ``kind``, ``name``); the misspelt
  ``status.accumulatedPastExexcutionTimeSeconds`` became ``accumulatedPastExecutionTimeSeconds``;
  ``spec.preemptionGates`` and ``status.preemptionGates`` are new (dropped at ``v1beta1``).
- ClusterQueue: ``spec.cohort`` became ``spec.cohortName``; ``spec.admissionChecks`` (a list of
  names) is gone, the names move to ``spec.admissionChecksStrategy.admissionChecks``; the
  flavor-fungibility values ``Borrow`` and ``Preempt`` became ``MayStopSearch``;
  ``status.pendingWorkloadsStatus`` is gone; ``spec.concurrentAdmissionPolicy`` is new.
- LocalQueue: ``status.flavorUsage`` became ``status.flavorsUsage``; ``status.flavors`` is gone.
- AdmissionCheck: ``spec.retryDelayMinutes`` is gone.
- ResourceFlavor, ProvisioningRequestConfig: the same at both.

Not converted: a Workload's ``topologyAssignment`` (``domains`` at ``v1beta1``, ``slices`` at
``v1beta2``): the emulator models no topology-aware scheduling.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol


class Kind(Protocol):
    """What the conversion reads of a :class:`~.store.Kind` (the store imports this module)."""

    @property
    def group(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def api_version(self, version: str | None = None) -> str: ...


GROUP = "kueue.x-k8s.io"
#: Served, newest first; the first is the stored one.
VERSIONS = ("v1beta2", "v1beta1")
STORED = VERSIONS[0]
DEPRECATED = "v1beta1"

#: ``spec.priorityClassSource`` at v1beta1 -> (group, kind) of ``spec.priorityClassRef`` at v1beta2.
PRIORITY_SOURCES = {
    "kueue.x-k8s.io/workloadpriorityclass": ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    "scheduling.k8s.io/priorityclass": ("scheduling.k8s.io", "PriorityClass"),
}
#: v1beta1 flavor-fungibility values v1beta2 no longer has, and what they became.
FUNGIBILITY = {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}

Obj = dict[str, Any]


def _parts(obj: Obj) -> tuple[Obj, Obj]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else None
    status = obj.get("status") if isinstance(obj.get("status"), dict) else None
    return (spec if spec is not None else {}), (status if status is not None else {})


def _rename(part: Obj, old: str, new: str) -> None:
    if old in part:
        part[new] = part.pop(old)


# -- Workload ----------------------------------------------------------------------------------


def _workload_up(obj: Obj) -> None:
    spec, status = _parts(obj)
    source = spec.pop("priorityClassSource", None)
    name = spec.pop("priorityClassName", None)
    if source in PRIORITY_SOURCES and name:
        group, kind = PRIORITY_SOURCES[source]
        spec["priorityClassRef"] = {"group": group, "kind": kind, "name": name}
    _rename(status, "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")


def _workload_down(obj: Obj) -> None:
    spec, status = _parts(obj)
    ref = spec.pop("priorityClassRef", None) or {}
    for source, (group, kind) in PRIORITY_SOURCES.items():
        if ref.get("group") == group and ref.get("kind") == kind:
            spec["priorityClassSource"] = source
            spec["priorityClassName"] = ref.get("name", "")
    spec.pop("preemptionGates", None)
    status.pop("preemptionGates", None)
    _rename(status, "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")


# -- ClusterQueue --------------------------------------------------------------------------------


def _cluster_queue_up(obj: Obj) -> None:
    spec, status = _parts(obj)
    _rename(spec, "cohort", "cohortName")
    checks = spec.pop("admissionChecks", None)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        for field in ("whenCanBorrow", "whenCanPreempt"):
            if fungibility.get(field) in FUNGIBILITY:
                fungibility[field] = FUNGIBILITY[fungibility[field]]
    status.pop("pendingWorkloadsStatus", None)


def _cluster_queue_down(obj: Obj) -> None:
    spec, _ = _parts(obj)
    _rename(spec, "cohortName", "cohort")
    spec.pop("concurrentAdmissionPolicy", None)


# -- LocalQueue and AdmissionCheck ---------------------------------------------------------------


def _local_queue_up(obj: Obj) -> None:
    _, status = _parts(obj)
    _rename(status, "flavorUsage", "flavorsUsage")
    status.pop("flavors", None)


def _local_queue_down(obj: Obj) -> None:
    _, status = _parts(obj)
    _rename(status, "flavorsUsage", "flavorUsage")


def _admission_check_up(obj: Obj) -> None:
    spec, _ = _parts(obj)
    spec.pop("retryDelayMinutes", None)


#: Kind -> (v1beta1 -> v1beta2, v1beta2 -> v1beta1), each changing the object in place.
CONVERSIONS: dict[str, tuple[Callable[[Obj], None], Callable[[Obj], None]]] = {
    "Workload": (_workload_up, _workload_down),
    "ClusterQueue": (_cluster_queue_up, _cluster_queue_down),
    "LocalQueue": (_local_queue_up, _local_queue_down),
    "AdmissionCheck": (_admission_check_up, lambda obj: None),
}


def to_stored(kind: str, obj: Obj, version: str) -> Obj:
    """``obj`` of ``kind`` sent at ``version``, as the stored version holds it (a copy)."""
    obj = copy.deepcopy(obj)
    if version == DEPRECATED and kind in CONVERSIONS:
        CONVERSIONS[kind][0](obj)
    if "apiVersion" in obj:
        obj["apiVersion"] = f"{GROUP}/{STORED}"
    return obj


def to_served(kind: str, obj: Obj, version: str) -> Obj:
    """Stored ``obj`` of ``kind`` as ``version`` shows it (the same dict when nothing changes)."""
    if version == DEPRECATED and kind in CONVERSIONS:
        obj = copy.deepcopy(obj)
        CONVERSIONS[kind][1](obj)
    return obj


def shown(kind: Kind, obj: Obj, version: str) -> Obj:
    """A stored object of ``kind`` as a client asking at ``version`` sees it, ``apiVersion``
    included (any kind; converted for Kueue's)."""
    obj = to_served(kind.kind, obj, version) if kind.group == GROUP else obj
    obj["apiVersion"] = kind.api_version(version)
    return obj


def stored(kind: Kind, obj: Obj, version: str) -> Obj:
    """An object of ``kind`` a client sent at ``version``, as it is stored (any kind)."""
    return to_stored(kind.kind, obj, version) if kind.group == GROUP else obj
