"""The queued-provisioning controller: ProvisioningRequests on the shared capacity model.

A new request gets ``Accepted``; its demand (every pod set's count x its PodTemplate's
``nvidia.com/gpu`` limit, on the queued node pool its ``cloud.google.com/gke-accelerator`` node
selector names) is one capacity holder: the whole set or nothing, strict FIFO with every other
API's queued requests for that GPU. Then, with the reasons cluster-autoscaler writes:

* ``Provisioned`` (``CapacityIsProvisioned``) when the set is free: its nodes exist, the GPUs are
  booked. Pods that consume it run on those nodes (:mod:`.pods`).
* ``BookingExpired`` (``CapacityReservationTimeExpired``) when no consuming pod has started
  within the booking window (:attr:`~.cluster.Cluster.booking_seconds`): capacity released.
* ``CapacityRevoked`` (``MaxRunDurationReached``) ``maxRunDurationSeconds`` after Provisioned:
  consuming pods fail, capacity released.
* ``Failed``: ``FailedToCreatePods`` (a PodTemplate missing, no GPU asked, no queued node pool
  for the accelerator) or ``FailedToBookCapacity`` (more GPUs than the pool can ever hold).

Consumed capacity is released once every consuming pod has ended; deleting the request releases
what it holds. Only True conditions are written (a waiting request has ``Accepted`` alone).

Limits: every pod set must ask for the same accelerator; a client's own writes to the status are
stored but not read back (the controller keeps its own view); no partial or zonal placement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from google.rpc import code_pb2

from ..core.clock import iso
from .nodepools import ACCELERATOR_LABEL, GPU_RESOURCE, NODEPOOL_LABEL, NodePool
from .store import KINDS, timestamp
from .validation import max_run_seconds

if TYPE_CHECKING:
    from ..core.api import Core
    from ..core.clock import Schedule
    from .nodepools import NodePools
    from .store import KubeStore

log = logging.getLogger("dws_emulator")

PR = KINDS["provisioningrequests.autoscaling.x-k8s.io"]
POD_TEMPLATE = KINDS["podtemplates"]
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

#: Record states (the control API's ``state``), from the conditions the controller wrote.
WAITING, PROVISIONED, CONSUMED = "ACCEPTED", "PROVISIONED", "CONSUMED"
FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED = "FAILED", "BOOKING_EXPIRED", "CAPACITY_REVOKED"
ENDED = frozenset({CONSUMED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED})


@dataclass
class RequestRecord:
    """What the controller knows of one ProvisioningRequest (one per uid, kept after delete)."""

    holder: str
    namespace: str
    name: str
    uid: str
    cls: str
    labels: dict[str, str]
    created_at: float
    pods: int = 0
    gpus: int = 0
    node_pool: NodePool | None = None
    max_run: int | None = None
    state: str = "PENDING"
    history: list[tuple[str, float]] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    nodes: list[str] = field(default_factory=list)
    booking_until: float | None = None
    revoke_at: float | None = None
    consumed: bool = False
    deleted: bool = False
    error: dict[str, Any] | None = None


def gpu_limit(spec: dict[str, Any]) -> int:
    """The ``nvidia.com/gpu`` a pod spec asks for (limits, else requests, summed over containers)."""
    return resource_limit(spec, GPU_RESOURCE)


def resource_limit(spec: dict[str, Any], resource: str) -> int:
    """The extended ``resource`` a pod spec asks for (limits, else requests, summed over containers)."""
    total = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource, (resources.get("requests") or {}).get(resource))
        if value is not None and str(value).isdigit():
            total += int(str(value))
    return total


class Consumers(Protocol):
    """What the provisioning controller asks of the pod controller (the pods of a request)."""

    def consumers(self, namespace: str, request: str, active_only: bool = False) -> list[dict[str, Any]]: ...

    def retry_pending(self, namespace: str, request: str, now: float) -> None: ...

    def fail_consumers(self, rec: RequestRecord, message: str, now: float) -> None: ...


class Host(Protocol):
    """The part of :class:`~.cluster.Cluster` the controller uses (a protocol: no import cycle)."""

    core: Core
    store: KubeStore
    node_pools: NodePools
    schedule: Schedule
    booking_seconds: float

    @property
    def pods(self) -> Consumers: ...


class ProvisioningController:
    """Every ProvisioningRequest's life on the capacity model; runs under the core's lock."""

    def __init__(self, cluster: Host) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.records: dict[str, RequestRecord] = {}  # by holder, oldest first
        self.live: dict[tuple[str, str], RequestRecord] = {}  # (namespace, name) -> record
        #: Manual mode (tests of other controllers): new requests are recorded but left alone, so
        #: whoever writes their conditions decides; pods still need a request this controller provisioned.
        self.manual = False

    # -- lookups -----------------------------------------------------------------------------
    @staticmethod
    def holder_of(namespace: str, name: str, uid: str) -> str:
        return f"kube:{namespace}/{name}:{uid}"

    def get(self, namespace: str, name: str) -> RequestRecord | None:
        return self.live.get((namespace, name))

    def holding(self, rec: RequestRecord) -> bool:
        return self.cluster.core.capacity.is_holding(rec.holder)

    # -- events ------------------------------------------------------------------------------
    def added(self, obj: dict[str, Any], now: float) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        rec = RequestRecord(
            self.holder_of(ns, name, meta["uid"]),
            ns,
            name,
            meta["uid"],
            str(spec.get("provisioningClassName", "")),
            dict(meta.get("labels") or {}),
            now,
            max_run=max_run_seconds(spec),
        )
        self.records[rec.holder] = rec
        self.live[(ns, name)] = rec
        if self.manual:
            return
        problem = self._plan(rec, spec)
        if problem is not None:
            self._fail(rec, problem[0], problem[1], now)
            return
        assert rec.node_pool is not None and rec.node_pool.pool is not None
        self._condition(
            rec, "Accepted", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler", now
        )
        self._state(rec, WAITING, now)
        self.cluster.core.capacity.enqueue(rec.holder, rec.node_pool.pool, rec.gpus)
        log.info(
            "ProvisioningRequest %s/%s accepted: %d pods, %d x %s on %s",
            ns,
            name,
            rec.pods,
            rec.gpus,
            rec.node_pool.accelerator,
            rec.node_pool.pool,
        )

    def _plan(self, rec: RequestRecord, spec: dict[str, Any]) -> tuple[str, str] | None:
        """Fill the record's demand; ``(reason, message)`` if the request can never be provisioned."""
        accelerator: str | None = None
        for i, pod_set in enumerate(spec.get("podSets") or []):
            ref = (pod_set.get("podTemplateRef") or {}).get("name", "")
            template = self.store.find(POD_TEMPLATE, rec.namespace, ref)
            if template is None:
                return "FailedToCreatePods", (
                    f"Provisioning Request's pods cannot be created: podSets[{i}]: PodTemplate "
                    f"{rec.namespace}/{ref} not found (create it before the request)"
                )
            pod_spec = (template.get("template") or {}).get("spec") or {}
            gpus = gpu_limit(pod_spec)
            if gpus <= 0:
                return "FailedToCreatePods", (
                    f"Provisioning Request's pods cannot be created: podSets[{i}]: PodTemplate "
                    f"{rec.namespace}/{ref} asks for no {GPU_RESOURCE}; a queued node pool provisions GPU nodes only"
                )
            where = f"Provisioning Request's pods cannot be created: podSets[{i}]: PodTemplate {rec.namespace}/{ref}"
            selector = pod_spec.get("nodeSelector") or {}
            wanted, pool_name = selector.get(ACCELERATOR_LABEL), selector.get(NODEPOOL_LABEL)
            pool: NodePool | None
            if pool_name:
                pool = self.cluster.node_pools.by_name(pool_name)
                if pool is None or not pool.queued:
                    queued = ", ".join(self.cluster.node_pools.queued_names())
                    return "FailedToCreatePods", (
                        f"{where} selects node pool {pool_name}, which is not a node pool with queued "
                        f"provisioning (those are: {queued or 'none'})"
                    )
                if wanted and wanted != pool.accelerator:
                    return "FailedToCreatePods", (
                        f"{where} selects node pool {pool_name}, whose accelerator is {pool.accelerator}, "
                        f"and accelerator {wanted}"
                    )
                wanted = pool.accelerator
            elif not wanted:
                return "FailedToCreatePods", (
                    f"{where} has no nodeSelector {ACCELERATOR_LABEL} or {NODEPOOL_LABEL}: no queued node pool matches"
                )
            else:
                pool = self.cluster.node_pools.get(wanted)
                if pool is None:
                    known = ", ".join(sorted(self.cluster.node_pools.by_accelerator)) or "none"
                    return "FailedToCreatePods", (
                        f"{where}: no node pool with queued provisioning has accelerator {wanted} "
                        f"(queued node pools' accelerators: {known})"
                    )
            if gpus > pool.gpus_per_node:
                return "FailedToCreatePods", (
                    f"{where}: a pod asks for {gpus} {GPU_RESOURCE}, but a node of node pool {pool.name} "
                    f"({pool.machine_type}) has {pool.gpus_per_node}: no node can ever fit it"
                )
            if accelerator is not None and wanted != accelerator:
                return "FailedToCreatePods", (
                    f"Provisioning Request's pods cannot be created: podSets[{i}] asks for {wanted}, "
                    f"podSets[0] for {accelerator}; one request provisions one node pool"
                )
            accelerator = wanted
            rec.node_pool = pool
            rec.pods += int(pod_set.get("count") or 0)
            rec.gpus += int(pod_set.get("count") or 0) * gpus
        pool = rec.node_pool
        if pool is None or pool.pool is None:
            return "FailedToCreatePods", "Provisioning Request's pods cannot be created: no pod sets"
        total, _ = self.cluster.core.capacity.pool_usage(pool.pool)
        if not self.cluster.core.capacity.has_pool(pool.pool) or rec.gpus > total:
            return "FailedToBookCapacity", (
                f"The request needs {rec.gpus} {pool.accelerator} GPUs at once ({rec.pods} pods); node pool "
                f"{pool.name} can never provide more than {total} in {pool.pool.location}"
            )
        return None

    def started(self, holder: str, now: float) -> None:
        rec = self.records[holder]
        if rec.deleted or self.store.find(PR, rec.namespace, rec.name) is None:
            self.cluster.core.capacity.release(holder)
            return
        pool = rec.node_pool
        assert pool is not None
        rec.started_at = now
        rec.nodes = self.cluster.node_pools.new_nodes(pool, pool.nodes_for(rec.gpus))
        rec.booking_until = now + self.cluster.booking_seconds
        self.cluster.schedule.at(f"pr:{holder}", rec.booking_until)
        if rec.max_run is not None:
            rec.revoke_at = now + rec.max_run
            self.cluster.schedule.at(f"pr:{holder}", rec.revoke_at)
        self._condition(rec, "Provisioned", "CapacityIsProvisioned", "Capacity is found in the cluster", now)
        self._state(rec, PROVISIONED, now)
        log.info(
            "ProvisioningRequest %s/%s provisioned: nodes %s", rec.namespace, rec.name, ", ".join(rec.nodes)
        )
        self.cluster.pods.retry_pending(rec.namespace, rec.name, now)

    def deleted(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        rec = self.records.get(self.holder_of(meta["namespace"], meta["name"], meta["uid"]))
        if rec is None:
            return
        self.cluster.core.capacity.release(rec.holder)
        if (
            rec.state == PROVISIONED
            and rec.consumed
            and not self.cluster.pods.consumers(rec.namespace, rec.name, True)
        ):
            self._state(rec, CONSUMED, now)  # its pods all ended before it was deleted (Kueue's cleanup)
        rec.deleted = True
        if rec.ended_at is None:
            rec.ended_at = now
        rec.history.append(("DELETED", now))
        if self.live.get((rec.namespace, rec.name)) is rec:
            del self.live[(rec.namespace, rec.name)]
        self.cluster.pods.retry_pending(rec.namespace, rec.name, now)  # their message changes

    def consumed(self, rec: RequestRecord) -> None:
        """A consuming pod started on the request's nodes: the booking is used."""
        rec.consumed = True

    def due(self, holder: str, now: float) -> None:
        """The booking window or the run duration may have passed; or a consuming pod ended."""
        rec = self.records.get(holder)
        if rec is None or rec.deleted or rec.state != PROVISIONED:
            return
        if rec.revoke_at is not None and now >= rec.revoke_at:
            why = f"maxRunDurationSeconds ({rec.max_run}) passed since the capacity was provisioned"
            self.revoke(rec, now, why, "MaxRunDurationReached")
        elif not rec.consumed and rec.booking_until is not None and now >= rec.booking_until:
            self._condition(
                rec,
                "BookingExpired",
                "CapacityReservationTimeExpired",
                "Capacity reservation time is expired",
                now,
            )
            self._end(rec, BOOKING_EXPIRED, now)
        elif rec.consumed and not self.cluster.pods.consumers(rec.namespace, rec.name, active_only=True):
            self._end(rec, CONSUMED, now)  # every consuming pod ended: the nodes go away

    # -- actions (also the control API's) ----------------------------------------------------
    def fail(self, rec: RequestRecord, reason: str, message: str, now: float) -> None:
        if rec.state in ENDED:
            return
        self._fail(rec, reason, message, now)
        self.cluster.pods.fail_consumers(rec, message, now)

    def revoke(self, rec: RequestRecord, now: float, why: str, reason: str = "CapacityRevoked") -> None:
        if rec.state != PROVISIONED:
            return
        message = f"The capacity of ProvisioningRequest {rec.namespace}/{rec.name} was revoked: {why}"
        self._condition(rec, "CapacityRevoked", reason, message, now)
        rec.error = {"code": code_pb2.UNAVAILABLE, "reason": reason, "message": message}
        self._end(rec, CAPACITY_REVOKED, now)
        self.cluster.pods.fail_consumers(rec, message, now)

    def _fail(self, rec: RequestRecord, reason: str, message: str, now: float) -> None:
        self._condition(rec, "Failed", reason, message, now)
        code = (
            code_pb2.RESOURCE_EXHAUSTED if reason == "FailedToBookCapacity" else code_pb2.FAILED_PRECONDITION
        )
        rec.error = {"code": code, "reason": reason, "message": message}
        self._end(rec, FAILED, now)
        log.info("ProvisioningRequest %s/%s failed: %s: %s", rec.namespace, rec.name, reason, message)

    def _end(self, rec: RequestRecord, state: str, now: float) -> None:
        self.cluster.core.capacity.release(rec.holder)
        rec.ended_at = now
        self._state(rec, state, now)

    def _state(self, rec: RequestRecord, state: str, now: float) -> None:
        rec.state = state
        rec.history.append((state, now))

    def _condition(self, rec: RequestRecord, type_: str, reason: str, message: str, now: float) -> None:
        """Set condition ``type_`` True on the stored request (as cluster-autoscaler writes it)."""
        if self.store.find(PR, rec.namespace, rec.name) is None:
            return

        def change(obj: dict[str, Any]) -> None:
            if obj["metadata"]["uid"] != rec.uid:
                return
            status = obj.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
            conditions.append(
                {
                    "type": type_,
                    "status": "True",
                    "observedGeneration": obj["metadata"].get("generation", 1),
                    "lastTransitionTime": timestamp(now),
                    "reason": reason,
                    "message": message,
                }
            )
            status["conditions"] = conditions

        self.store.update(PR, rec.namespace, rec.name, change, status=True)

    # -- records -----------------------------------------------------------------------------
    def record(self, rec: RequestRecord) -> dict[str, Any]:
        """The control API's record, in the shape the other APIs' records have."""
        pool = rec.node_pool
        return {
            "kind": "ProvisioningRequest",
            "name": f"{rec.namespace}/{rec.name}",
            "display_name": rec.name,
            "namespace": rec.namespace,
            "uid": rec.uid,
            "project": "",
            "location": "us-central1",
            "labels": dict(rec.labels),
            "strategy": rec.cls,
            "accelerator_type": pool.pool.accelerator if pool and pool.pool else None,
            "accelerator_count": rec.gpus,
            "pods": rec.pods,
            "node_pool": pool.name if pool else None,
            "pool": str(pool.pool) if pool and pool.pool else None,
            "nodes": list(rec.nodes),
            "max_run_duration_seconds": rec.max_run,
            "state": rec.state,
            "holding": self.holding(rec),
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "start_time": iso(rec.started_at),
            "end_time": iso(rec.ended_at),
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": rec.error,
        }
