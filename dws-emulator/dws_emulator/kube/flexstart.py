"""Flex-start node pools without queued provisioning: the cluster autoscaler and kubelet's side.

What GKE documents for a Standard-cluster node pool created with ``--flex-start`` and
``--max-run-duration`` (autoscaling from 0, location policy ANY, no reservation) and *without*
``--enable-queued-provisioning``, as modelled here:

* A pod opts in with the node selector ``cloud.google.com/gke-flex-start: "true"`` and
  ``cloud.google.com/gke-accelerator: <gpu>`` (resource ``nvidia.com/gpu``), or
  ``cloud.google.com/gke-tpu-accelerator`` and ``cloud.google.com/gke-tpu-topology`` for a
  single-host TPU slice (``google.com/tpu``), or selects a flex-start pool by
  ``cloud.google.com/gke-nodepool`` (a pool with a location of its own only so); no toleration
  is needed (GKE adds it). A pod that names a ProvisioningRequest to consume is not one of these.
* It runs on a flex-start node of its pool with room for its GPUs or chips (best fit: the fullest
  node that fits; a pod that asks for none takes a whole node). Else it stays Pending,
  ``PodScheduled`` False, ``Unschedulable``, with the scheduler's count of nodes and
  ``pod triggered scale-up: POOL N->M (waiting for flex-start capacity)``; a pod no node can
  ever fit (no such pool, more than a node has, a capacity pool smaller than a node) with
  ``pod didn't trigger scale-up: <why>``, retried on every tick (GKE never fails it).
* Scale-up: such a pod gets one node request, a capacity holder of one node's GPUs or chips in
  the pool's capacity pool, in its strict FIFO with every other API's requests; later pods of
  the same namespace and labels (one workload's) share a waiting request while it has room.
  Nodes come one at a time: some pods of a Job may run while others wait. A request whose pods
  all went (deleted, or placed on another node) before its node came up is withdrawn, leaving
  nothing queued.
* A node lives until ``max_run_seconds`` of its pool (7 days by default; control
  ``SetKubeFlexStart``), then is removed: its running pods fail at once as kubelet's graceful
  node shutdown fails them (``Failed``, reason ``Terminated``, a ``DisruptionTarget`` condition,
  reason ``TerminationByKubelet``), and its capacity is released. A node with no pod for
  ``scale_down_seconds`` (600, cluster-autoscaler's ``scale-down-unneeded-time``) is removed.
* Every node request is a ``FlexStartNode`` record in the control API's ``requests``: WAITING,
  RUNNING, then WITHDRAWN, SCALED_DOWN or EXPIRED.

Left out: Node objects (nodes are names), Events (``TriggeredScaleUp``, ``NotTriggerScaleUp``),
taints and tolerations, node affinity beyond the node selector, CPU and memory requests, the
scheduler's preemption, multi-host TPU slices, ``--max-nodes`` and total-node limits, zones of a
pool's ANY location policy (the capacity pool stands for them), Autopilot's compute classes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from google.rpc import code_pb2

from ..core.clock import iso
from ..defaults import DEFAULT_KUBE_FLEX_SCALE_DOWN_SECONDS
from .nodepools import (
    ACCELERATOR_LABEL,
    FLEX_LABEL,
    MAX_RUN_SECONDS,
    NODEPOOL_LABEL,
    TPU_ACCELERATOR_LABEL,
    TPU_TOPOLOGY_LABEL,
    NodePool,
)
from .pods import ENDED_PHASES, POD, pod_condition
from .provisioning import CONSUME_ANNOTATION, PROVISIONED, resource_limit

if TYPE_CHECKING:
    from ..core.api import Core
    from ..core.clock import Schedule
    from .nodepools import NodePools
    from .pods import PodController
    from .provisioning import ProvisioningController
    from .store import KubeStore

log = logging.getLogger("dws_emulator")

#: Record states (the control API's ``state``).
WAITING, RUNNING = "WAITING", "RUNNING"
WITHDRAWN, SCALED_DOWN, EXPIRED = "WITHDRAWN", "SCALED_DOWN", "EXPIRED"
#: What kubelet's graceful node shutdown writes on the pods it terminates.
SHUTDOWN_REASON = "Terminated"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
DISRUPTION_REASON = "TerminationByKubelet"
EXPIRED_REASON = "MaxRunDurationReached"
#: The exit code of a container stopped by SIGTERM.
SIGTERM_EXIT = 143
#: The node selector keys that must match a flex-start pool's node labels.
_MATCHED = (NODEPOOL_LABEL, ACCELERATOR_LABEL, TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL, FLEX_LABEL)


class Host(Protocol):
    """The part of :class:`~.cluster.Cluster` the flex-start model uses (no import cycle)."""

    core: Core
    store: KubeStore
    node_pools: NodePools
    schedule: Schedule
    provisioning: ProvisioningController
    pods: PodController


@dataclass
class NodeRequest:
    """One scale-up of a flex-start pool: a waiting capacity holder, then the node it became."""

    holder: str
    name: str  # ``<pool>/request-<n>``, stable before the node exists
    pool: NodePool
    namespace: str
    labels: dict[str, str]
    display_name: str  # the pod it was made for
    created_at: float
    max_run: int
    state: str = WAITING
    history: list[tuple[str, float]] = field(default_factory=list)
    node: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    expire_at: float | None = None
    idle_since: float | None = None
    #: Pending pods (uid -> GPUs or chips) it was made for, while it waits.
    waiting_for: dict[str, int] = field(default_factory=dict)
    #: Pods running on the node: uid -> (namespace, name, GPUs or chips).
    active: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    deleted: bool = False

    @property
    def free(self) -> int:
        """GPUs (or TPU chips) of the node no active pod uses."""
        return self.pool.per_node - sum(n for _, _, n in self.active.values())


@dataclass
class PendingPod:
    """A flex-start pod not on a node yet; ``pool`` None while no node can ever fit it."""

    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    pool: NodePool | None = None
    demand: int = 0
    request: str | None = None  # the holder of the node request made for it


class FlexStartController:
    """Pods on flex-start node pools, their node requests and nodes; runs under the core's lock."""

    def __init__(self, cluster: Host) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.scale_down_seconds = DEFAULT_KUBE_FLEX_SCALE_DOWN_SECONDS
        self.requests: dict[str, NodeRequest] = {}  # by holder, oldest first
        self.waiting: dict[str, NodeRequest] = {}  # the WAITING ones, by holder
        self.nodes: dict[str, NodeRequest] = {}  # the RUNNING ones, by node name
        self.pending: dict[str, PendingPod] = {}  # by pod uid, oldest first
        self.placed: dict[str, str] = {}  # pod uid -> holder of the node it runs on
        self._seq = 0

    # -- pods ----------------------------------------------------------------------------------
    def claims(self, pod: dict[str, Any]) -> bool:
        """Whether a new pod is a flex-start pod (not bound yet, consuming no ProvisioningRequest)."""
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        if spec.get("nodeName") or CONSUME_ANNOTATION in (meta.get("annotations") or {}):
            return False
        selector = spec.get("nodeSelector") or {}
        if selector.get(FLEX_LABEL) == "true":
            return True
        return self.cluster.node_pools.flex_by_name(str(selector.get(NODEPOOL_LABEL, ""))) is not None

    def added(self, obj: dict[str, Any], now: float) -> None:
        """A new pod: a flex-start one is placed on a node with room, or waits for one."""
        meta = obj["metadata"]
        pod = self.store.find(POD, meta["namespace"], meta["name"])
        if pod is None or pod["metadata"]["uid"] != meta["uid"] or meta["uid"] in self.pending:
            return
        if pod["spec"].get("nodeName") or (pod.get("status") or {}).get("phase") in ENDED_PHASES:
            return
        entry = PendingPod(meta["uid"], meta["namespace"], meta["name"], dict(meta.get("labels") or {}))
        self.pending[entry.uid] = entry
        self._admit(entry, pod, now)

    def modified(self, obj: dict[str, Any], now: float) -> None:
        """A pod changed: one that ended frees its room on its node; a pending one that a client
        bound or ended no longer waits."""
        uid, ended = obj["metadata"]["uid"], (obj.get("status") or {}).get("phase") in ENDED_PHASES
        if uid in self.placed and ended:
            self._vacate(uid, now)
        elif uid in self.pending and (ended or obj["spec"].get("nodeName")):
            self._unassign(self.pending.pop(uid), now)

    def deleted(self, obj: dict[str, Any], now: float) -> None:
        """A pod went: it no longer waits (its node request is withdrawn if no other pod waits for
        it) or no longer uses its node."""
        uid = obj["metadata"]["uid"]
        entry = self.pending.pop(uid, None)
        if entry is not None:
            self._unassign(entry, now)
        elif uid in self.placed:
            self._vacate(uid, now)

    def retry_stuck(self, now: float) -> None:
        """Pods no node could fit are looked at again each tick: pools and capacity may have changed."""
        for entry in [e for e in self.pending.values() if e.pool is None]:
            pod = self._pod(entry)
            if pod is None:
                self.pending.pop(entry.uid, None)
                continue
            self._admit(entry, pod, now)

    def _pod(self, entry: PendingPod) -> dict[str, Any] | None:
        """The stored pod of a pending entry while it is still unbound and not ended."""
        pod = self.store.find(POD, entry.namespace, entry.name)
        if pod is None or pod["metadata"]["uid"] != entry.uid or pod["spec"].get("nodeName"):
            return None
        return None if (pod.get("status") or {}).get("phase") in ENDED_PHASES else pod

    def _admit(self, entry: PendingPod, pod: dict[str, Any], now: float) -> None:
        shape = self._shape(pod)
        if isinstance(shape, str):
            self.cluster.pods.unschedulable(
                pod, f"{self._scheduler_text(None)}; pod didn't trigger scale-up: {shape}", now
            )
            return
        entry.pool, entry.demand = shape
        self._place(entry, now)

    def _shape(self, pod: dict[str, Any]) -> tuple[NodePool, int] | str:
        """The flex-start pool a pod goes to and its GPUs or chips, or why no node ever fits it."""
        pools = self.cluster.node_pools
        selector = pod["spec"].get("nodeSelector") or {}
        names = ", ".join(p.name for p in pools.flex_pools()) or "none"
        by_name, tpu = selector.get(NODEPOOL_LABEL), selector.get(TPU_ACCELERATOR_LABEL)
        gpu, topology = selector.get(ACCELERATOR_LABEL), selector.get(TPU_TOPOLOGY_LABEL)
        if by_name:
            pool = pools.flex_by_name(by_name)
            if pool is None:
                return f"node pool {by_name} is not a flex-start node pool (those are: {names})"
        elif tpu:
            if not topology:
                return (
                    f"a TPU pod needs the node selector {TPU_TOPOLOGY_LABEL} beside {TPU_ACCELERATOR_LABEL}"
                )
            pool = pools.flex_for(tpu, topology)
            if pool is None:
                return f"no flex-start node pool has TPU {tpu} in topology {topology} (those are: {names})"
        elif gpu:
            pool = pools.flex_for(gpu, None)
            if pool is None:
                return f"no flex-start node pool has accelerator {gpu} (those are: {names})"
        else:
            return (
                f"the pod selects no accelerator ({ACCELERATOR_LABEL}, or {TPU_ACCELERATOR_LABEL} and "
                f"{TPU_TOPOLOGY_LABEL}) and no flex-start node pool ({NODEPOOL_LABEL})"
            )
        labels = pool.node_labels()
        wrong = [f"{k}={selector[k]}" for k in _MATCHED if k in selector and labels.get(k) != selector[k]]
        if wrong:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
            return f"the nodes of node pool {pool.name} have labels {shown}, not {', '.join(wrong)}"
        asked = resource_limit(pod["spec"], pool.resource)
        if asked > pool.per_node:
            return (
                f"the pod asks for {asked} {pool.resource} and a node of node pool {pool.name} "
                f"({pool.machine_type}) has {pool.per_node}"
            )
        key = pool.pool
        assert key is not None
        total, _ = self.cluster.core.capacity.pool_usage(key)
        if not self.cluster.core.capacity.has_pool(key) or total < pool.per_node:
            # Queued, it would block its capacity pool's FIFO for good: GKE's scale-up gives up instead.
            return f"a node of node pool {pool.name} needs {pool.per_node} {key.accelerator} at once and {key} has {total}"
        # A pod that asks for no accelerator still needs a node of its own: it takes the whole node.
        return pool, asked or pool.per_node

    def _place(self, entry: PendingPod, now: float) -> None:
        """Bind the pod to the fullest node of its pool it fits, else make sure a node is requested."""
        pool, pod = entry.pool, self._pod(entry)
        assert pool is not None
        if pod is None:
            return  # bound by a client or gone: its MODIFIED or DELETED event follows
        fits = [r for r in self.nodes.values() if r.pool.name == pool.name and r.free >= entry.demand]
        if fits:
            self._bind(entry, min(fits, key=lambda r: r.free), now)
            return
        if entry.request not in self.waiting:  # none yet, or its node came up without it
            entry.request = self._request_for(entry, now)
        up = sum(1 for r in self.nodes.values() if r.pool.name == pool.name)
        waiting = sum(1 for r in self.waiting.values() if r.pool.name == pool.name)
        message = (
            f"{self._scheduler_text(pool)}; pod triggered scale-up: {pool.name} {up}->{up + waiting} "
            "(waiting for flex-start capacity)"
        )
        self.cluster.pods.unschedulable(pod, message, now)

    def _scheduler_text(self, pool: NodePool | None) -> str:
        provisioned = sum(
            len(r.nodes) for r in self.cluster.provisioning.live.values() if r.state == PROVISIONED
        )
        total = 1 + provisioned + len(self.nodes)
        full = sum(1 for r in self.nodes.values() if pool is not None and r.pool.name == pool.name)
        parts = [f"{full} Insufficient {pool.resource}"] if pool is not None and full else []
        if total - full:
            parts.append(f"{total - full} node(s) didn't match Pod's node affinity/selector")
        return f"0/{total} nodes are available: {', '.join(parts)}"

    def _request_for(self, entry: PendingPod, now: float) -> str:
        """A waiting request of the same workload with room, or a new one (one node's worth, queued)."""
        pool = entry.pool
        assert pool is not None and pool.pool is not None
        for rec in self.waiting.values():
            if (
                rec.pool.name == pool.name
                and (rec.namespace, rec.labels) == (entry.namespace, entry.labels)
                and pool.per_node - sum(rec.waiting_for.values()) >= entry.demand
            ):
                rec.waiting_for[entry.uid] = entry.demand
                return rec.holder
        self._seq += 1
        name = f"{pool.name}/request-{self._seq}"
        rec = NodeRequest(
            f"kube-flex:{name}",
            name,
            pool,
            entry.namespace,
            dict(entry.labels),
            entry.name,
            now,
            pool.max_run_seconds or MAX_RUN_SECONDS,
        )
        rec.waiting_for[entry.uid] = entry.demand
        self.requests[rec.holder] = rec
        self._state(rec, WAITING, now)
        self.cluster.core.capacity.enqueue(rec.holder, pool.pool, pool.per_node)
        log.info(
            "flex-start scale-up %s for pod %s/%s: %d x %s on %s",
            name,
            entry.namespace,
            entry.name,
            pool.per_node,
            pool.accelerator,
            pool.pool,
        )
        return rec.holder

    def _bind(self, entry: PendingPod, rec: NodeRequest, now: float) -> None:
        # Book the room before the pod's writes: their events come back here at once.
        self.pending.pop(entry.uid, None)
        if entry.request == rec.holder:
            rec.waiting_for.pop(entry.uid, None)
            entry.request = None
        self._unassign(entry, now)
        pod = self._pod(entry)
        if pod is None or rec.node is None:
            return
        rec.active[entry.uid] = (entry.namespace, entry.name, entry.demand)
        rec.pods.append(entry.name)
        rec.idle_since = None
        self.placed[entry.uid] = rec.holder
        self.cluster.pods.start(pod, rec.node, None, now)

    def _unassign(self, entry: PendingPod, now: float) -> None:
        """The pod no longer waits for its request: withdrawn if no other pod does."""
        rec = self.requests.get(entry.request or "")
        entry.request = None
        if rec is None:
            return
        rec.waiting_for.pop(entry.uid, None)
        if rec.state == WAITING and not rec.waiting_for:
            self.cluster.core.capacity.release(rec.holder)
            self._end(rec, WITHDRAWN, now)
            log.info("flex-start scale-up %s withdrawn: no pod waits for it", rec.name)

    def _vacate(self, uid: str, now: float) -> None:
        rec = self.requests[self.placed.pop(uid)]
        rec.active.pop(uid, None)
        if rec.state != RUNNING:
            return
        self._retry_pool(rec.pool.name, now)
        if not rec.active:
            self._idle(rec, now)

    def _retry_pool(self, pool: str, now: float) -> None:
        """Pending pods of the pool that a node's room now fits are bound, and one whose request
        went (its node came up without it) gets a new one. The others wait on as they are: their
        messages are not rewritten (at a thousand pending pods that was a million writes)."""
        for uid in list(self.pending):
            entry = self.pending.get(uid)  # an earlier pod's writes may have changed the index
            if entry is None or entry.pool is None or entry.pool.name != pool:
                continue
            room = any(r.pool.name == pool and r.free >= entry.demand for r in self.nodes.values())
            if room or entry.request not in self.waiting:
                self._place(entry, now)

    def _idle(self, rec: NodeRequest, now: float) -> None:
        rec.idle_since = now
        self.cluster.schedule.at(f"flex:{rec.holder}", now + self.scale_down_seconds)

    # -- nodes ---------------------------------------------------------------------------------
    def started(self, holder: str, now: float) -> None:
        """The capacity model gave a node request its node's GPUs or chips: the node is up."""
        rec = self.requests[holder]
        if rec.state != WAITING:
            self.cluster.core.capacity.release(holder)
            return
        current = self.cluster.node_pools.flex_by_name(rec.pool.name)
        rec.max_run = (current or rec.pool).max_run_seconds or MAX_RUN_SECONDS
        rec.node = self.cluster.node_pools.new_nodes(rec.pool, 1)[0]
        rec.started_at, rec.expire_at = now, now + rec.max_run
        self.nodes[rec.node] = rec
        self._state(rec, RUNNING, now)
        self.cluster.schedule.at(f"flex:{holder}", rec.expire_at)
        log.info("flex-start node %s up (%s), for %ds", rec.node, rec.name, rec.max_run)
        # The pods it was made for first, then any pending pod of the pool that fits.
        left = False
        for uid in list(rec.waiting_for):
            entry = self.pending.get(uid)
            if entry is not None and rec.state == RUNNING and rec.free >= entry.demand:
                self._bind(entry, rec, now)
            else:
                left = left or entry is not None
        rec.waiting_for.clear()
        if left or (rec.state == RUNNING and rec.free > 0):  # room for others, or pods to ask again for
            self._retry_pool(rec.pool.name, now)
        if rec.state == RUNNING and not rec.active:
            self._idle(rec, now)

    def due(self, holder: str, now: float) -> None:
        """The node's max run may have passed, or its idle time."""
        rec = self.requests.get(holder)
        if rec is None or rec.state != RUNNING:
            return
        if rec.expire_at is not None and now >= rec.expire_at:
            self.expire(rec, now, f"it reached the max run duration of its node pool ({rec.max_run}s)")
        elif (
            not rec.active and rec.idle_since is not None and now >= rec.idle_since + self.scale_down_seconds
        ):
            self._remove(rec, SCALED_DOWN, now)
            log.info("flex-start node %s scaled down: no pod for %gs", rec.node, self.scale_down_seconds)

    def expire(self, rec: NodeRequest, now: float, why: str) -> None:
        """Remove a node at its max run: kubelet's graceful shutdown fails its running pods."""
        message = f"Flex-start node {rec.node} of node pool {rec.pool.name} was removed: {why}"
        rec.error = {"code": code_pb2.UNAVAILABLE, "reason": EXPIRED_REASON, "message": message}
        victims = list(rec.active.items())
        for uid, _ in victims:
            self.placed.pop(uid, None)
        rec.active.clear()
        # Gone before the pods fail, so their Job's replacements never land on it.
        self._remove(rec, EXPIRED, now)
        log.info("%s", message)
        disruption = pod_condition("DisruptionTarget", "True", now, DISRUPTION_REASON, SHUTDOWN_MESSAGE)
        for _, (namespace, name, _) in victims:
            self.cluster.pods.finish(
                namespace, name, SIGTERM_EXIT, now, SHUTDOWN_REASON, SHUTDOWN_MESSAGE, [disruption]
            )

    def _remove(self, rec: NodeRequest, state: str, now: float) -> None:
        if rec.node is not None:
            self.nodes.pop(rec.node, None)
        self.cluster.core.capacity.release(rec.holder)
        self._end(rec, state, now)

    def _end(self, rec: NodeRequest, state: str, now: float) -> None:
        rec.deleted, rec.ended_at = True, now
        self._state(rec, state, now)

    def _state(self, rec: NodeRequest, state: str, now: float) -> None:
        rec.state = state
        rec.history.append((state, now))
        if state == WAITING:
            self.waiting[rec.holder] = rec
        else:
            self.waiting.pop(rec.holder, None)

    # -- records and control -------------------------------------------------------------------
    def record(self, rec: NodeRequest) -> dict[str, Any]:
        """The control API's record, in the shape of the other requests' records."""
        pool = rec.pool
        assert pool.pool is not None
        return {
            "kind": "FlexStartNode",
            "name": rec.node or rec.name,
            "request": rec.name,
            "display_name": rec.display_name,
            "namespace": rec.namespace,
            "project": "",
            "location": pool.location,
            "labels": dict(rec.labels),
            "strategy": "FLEX_START",
            "node_pool": pool.name,
            "accelerator_type": pool.pool.accelerator,
            "accelerator_count": pool.per_node,
            "tpu_topology": pool.topology,
            "pool": str(pool.pool),
            "node": rec.node,
            "nodes": [rec.node] if rec.node else [],
            "pods": list(rec.pods),
            "active_pods": [name for _, name, _ in rec.active.values()],
            "max_run_duration_seconds": rec.max_run,
            "state": rec.state,
            "holding": self.cluster.core.capacity.is_holding(rec.holder),
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "start_time": iso(rec.started_at),
            "end_time": iso(rec.ended_at),
            "expire_time": iso(rec.expire_at) if rec.state == RUNNING else None,
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": rec.error,
        }

    def records(self) -> list[tuple[float, dict[str, Any]]]:
        """Every node request's record with its creation time (the control API's ``requests``)."""
        return [(rec.created_at, self.record(rec)) for rec in self.requests.values()]

    def report(self) -> dict[str, Any]:
        """``GetKubeFlexStartNodes``: the settings, the pools, the nodes up and the requests waiting."""
        return {
            "scale_down_seconds": self.scale_down_seconds,
            "node_pools": [p.to_json() for p in self.cluster.node_pools.flex_pools()],
            "nodes": [self.record(rec) for rec in self.nodes.values()],
            "waiting": [self.record(rec) for rec in self.waiting.values()],
        }

    def configure(self, scale_down_seconds: float | None, max_run_seconds: int | None) -> None:
        """``SetKubeFlexStart``: the scale-down time (idle nodes go by the new one) and every pool's
        max run (waiting requests' too; nodes already up keep theirs)."""
        if scale_down_seconds is not None:
            self.scale_down_seconds = float(scale_down_seconds)
            for rec in self.nodes.values():
                if rec.idle_since is not None:
                    self.cluster.schedule.at(f"flex:{rec.holder}", rec.idle_since + self.scale_down_seconds)
        if max_run_seconds is not None:
            self.cluster.node_pools.set_flex_max_run(max_run_seconds)
            for rec in self.waiting.values():
                rec.max_run = max_run_seconds
        log.info("GKE flex-start: scale down after %gs, max run %s", self.scale_down_seconds, max_run_seconds)
