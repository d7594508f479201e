"""The emulated cluster's node pools: queued and flex-start GPU pools, a TPU flex-start pool, a CPU pool.

A queued node pool (``--enable-queued-provisioning``) has no nodes until a ProvisioningRequest
gets its whole set; its GPUs come from the shared capacity model's regional pool of the same
accelerator (``us-central1/NVIDIA_H100_80GB``, the pool Vertex AI and Cloud Batch draw from), so
a GKE request waits behind (and blocks) the other APIs' queued requests for that GPU. Nodes are
names only (no Node objects are served). The ``default-pool`` runs pods that ask for no GPU.

A flex-start node pool (``--flex-start`` without queued provisioning, :mod:`.flexstart`) draws
on the same capacity pools one node at a time: a GPU pool on its region's pool of that GPU, a
single-host TPU pool (``tpu-v5-lite-podslice:2x4``) on its zone's pool of that TPU family, in chips.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..core.capacity import PoolKey
from ..facts import DAY_SECONDS, VERTEX_NAME

#: The one location every GKE project / location / cluster name maps to.
CLUSTER_LOCATION = "us-central1"
CLUSTER_NAME = "dws-cluster"

#: Node labels and the taint GKE puts on queued node pools' nodes.
QUEUED_LABEL = "cloud.google.com/gke-queued"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
QUEUED_TAINT = {"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}
GPU_RESOURCE = "nvidia.com/gpu"

#: Flex-start nodes' label (also the pods' node selector), and the TPU nodes' labels and resource.
FLEX_LABEL = "cloud.google.com/gke-flex-start"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"
#: GKE's single-host TPU slices: label value -> (the capacity model's family, machine type prefix).
TPU_SLICES: dict[str, tuple[str, str]] = {
    "tpu-v5-lite-podslice": ("v5litepod", "ct5lp-hightpu"),
    "tpu-v6e-slice": ("v6e", "ct6e-standard"),
}
#: Single-host topologies and their chips per node (``ct5lp-hightpu-8t`` is 2x4).
TPU_TOPOLOGIES: dict[str, int] = {"1x1": 1, "2x2": 4, "2x4": 8}
#: The zone of a TPU flex-start pool given without a location (TPU capacity pools are zonal).
TPU_ZONE = f"{CLUSTER_LOCATION}-a"
#: ``--max-run-duration``: at most 7 days, and 7 days when not given.
MAX_RUN_SECONDS = int(7 * DAY_SECONDS)

#: GPUs per node of each accelerator's default machine (the 8-GPU A3 / A2 Ultra, a G2 with 4 L4s).
MACHINES: dict[str, tuple[str, int]] = {
    "nvidia-h100-80gb": ("a3-highgpu-8g", 8),
    "nvidia-h100-mega-80gb": ("a3-megagpu-8g", 8),
    "nvidia-a100-80gb": ("a2-ultragpu-8g", 8),
    "nvidia-tesla-a100": ("a2-highgpu-8g", 8),
    "nvidia-l4": ("g2-standard-48", 4),
}


@dataclass(frozen=True)
class NodePool:
    """One node pool: ``accelerator`` is the GKE label value (``nvidia-h100-80gb``), None for CPUs."""

    name: str
    accelerator: str | None
    machine_type: str
    gpus_per_node: int = 0
    #: Where its GPUs come from: the cluster's location, or (a pool selected by name only) another.
    location: str = CLUSTER_LOCATION
    #: A flex-start pool (no queued provisioning): nodes one at a time, each for ``max_run_seconds``.
    flex_start: bool = False
    max_run_seconds: int | None = None
    #: A single-host TPU pool: its topology (``2x4``) and chips per node (``accelerator`` is then
    #: the ``cloud.google.com/gke-tpu-accelerator`` value).
    topology: str | None = None
    tpu_chips: int = 0

    @property
    def queued(self) -> bool:
        return self.accelerator is not None and not self.flex_start

    @property
    def tpu(self) -> bool:
        return self.topology is not None

    @property
    def per_node(self) -> int:
        """GPUs (TPU: chips) of one node."""
        return self.tpu_chips or self.gpus_per_node

    @property
    def resource(self) -> str:
        """The extended resource its pods ask for."""
        return TPU_RESOURCE if self.tpu else GPU_RESOURCE

    @property
    def located(self) -> bool:
        """Whether its capacity is elsewhere than the cluster's own (then pods select it by name only)."""
        return self.location != (TPU_ZONE if self.tpu else CLUSTER_LOCATION)

    @property
    def pool(self) -> PoolKey | None:
        """The capacity model's pool its GPUs (or TPU chips) come from."""
        if self.accelerator is None:
            return None
        if self.tpu:
            return PoolKey(self.location, TPU_SLICES[self.accelerator][0])
        return PoolKey(self.location, VERTEX_NAME[self.accelerator])

    def nodes_for(self, gpus: int) -> int:
        return max(1, math.ceil(gpus / self.gpus_per_node)) if self.gpus_per_node else 1

    def node_labels(self) -> dict[str, str]:
        labels = {NODEPOOL_LABEL: self.name}
        if self.tpu:
            assert self.accelerator is not None and self.topology is not None
            labels[TPU_ACCELERATOR_LABEL] = self.accelerator
            labels[TPU_TOPOLOGY_LABEL] = self.topology
        elif self.accelerator:
            labels[ACCELERATOR_LABEL] = self.accelerator
        if self.flex_start:
            labels[FLEX_LABEL] = "true"
        elif self.accelerator:
            labels[QUEUED_LABEL] = "true"
        return labels

    def taints(self) -> list[dict[str, str]]:
        """The taints GKE puts on the pool's nodes."""
        if self.queued:
            return [dict(QUEUED_TAINT)]
        if self.flex_start:  # GKE taints accelerator nodes and adds the toleration to pods itself
            return [{"key": self.resource, "value": "present", "effect": "NoSchedule"}]
        return []

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "accelerator": self.accelerator,
            "machine_type": self.machine_type,
            "gpus_per_node": self.gpus_per_node,
            "queued_provisioning": self.queued,
            "flex_start": self.flex_start,
            "pool": str(self.pool) if self.pool else None,
            "location": self.location,
            "node_labels": self.node_labels(),
            "taints": self.taints(),
        }
        if self.flex_start:
            out["max_run_seconds"] = self.max_run_seconds
        if self.tpu:
            out["tpu_topology"], out["tpu_chips_per_node"] = self.topology, self.tpu_chips
        return out


DEFAULT_POOL = NodePool("default-pool", None, "e2-standard-8")


def queued_pool(accelerator: str, name: str | None = None, location: str | None = None) -> NodePool:
    """The queued node pool of ``accelerator`` (a GKE label value); ValueError for an unknown GPU."""
    if accelerator not in VERTEX_NAME:
        raise ValueError(f"unknown accelerator {accelerator!r}; one of: {', '.join(sorted(VERTEX_NAME))}")
    machine, per_node = MACHINES.get(accelerator, (f"{accelerator}-8g", 8))
    return NodePool(
        name or f"dws-{accelerator}", accelerator, machine, per_node, location or CLUSTER_LOCATION
    )


def parse_node_pool(spec: str) -> NodePool:
    """``ACCELERATOR``, ``NAME=ACCELERATOR`` or ``NAME=ACCELERATOR@LOCATION`` (CLI and control API
    spelling). A pool with a location draws its GPUs from that location's capacity pool, and only
    pods that select it by name (``cloud.google.com/gke-nodepool``) get it: several such pools of
    one accelerator keep their capacity apart, as the fault matrix needs for its side-by-side rows."""
    name, sep, rest = spec.strip().partition("=")
    if not sep:
        name, rest = "", name
    accelerator, at, location = rest.partition("@")
    if at and not (name.strip() and location.strip()):
        raise ValueError(f"a node pool with a location needs a name: NAME=ACCELERATOR@LOCATION, got {spec!r}")
    return queued_pool(accelerator.strip(), name.strip() or None, location.strip() or None)


def flex_pool(
    accelerator: str, name: str | None = None, location: str | None = None, topology: str | None = None
) -> NodePool:
    """A flex-start node pool of a GPU (GKE label value) or, with ``topology``, a single-host TPU
    slice; ValueError for an unknown accelerator or topology."""
    name = name or f"dws-flex-{accelerator}"
    if accelerator in TPU_SLICES:
        if topology not in TPU_TOPOLOGIES:
            raise ValueError(
                f"a TPU flex-start node pool needs a single-host topology, {accelerator}:TOPOLOGY with one of "
                f"{', '.join(TPU_TOPOLOGIES)}; got {topology!r}"
            )
        chips = TPU_TOPOLOGIES[topology]
        machine = f"{TPU_SLICES[accelerator][1]}-{chips}t"
        where = location or TPU_ZONE
        return NodePool(name, accelerator, machine, 0, where, True, MAX_RUN_SECONDS, topology, chips)
    if accelerator not in VERTEX_NAME:
        known = sorted([*VERTEX_NAME, *TPU_SLICES])
        raise ValueError(f"unknown accelerator {accelerator!r}; one of: {', '.join(known)}")
    if topology:
        raise ValueError(f"a GPU node pool has no topology: {accelerator}:{topology}")
    machine, per_node = MACHINES.get(accelerator, (f"{accelerator}-8g", 8))
    return NodePool(name, accelerator, machine, per_node, location or CLUSTER_LOCATION, True, MAX_RUN_SECONDS)


def parse_flex_pool(spec: str) -> NodePool:
    """A flex-start pool from ``ACCELERATOR``, ``NAME=ACCELERATOR`` or ``NAME=ACCELERATOR@LOCATION``,
    a TPU's ACCELERATOR being ``tpu-v5-lite-podslice:2x4`` (a zone as its LOCATION); the spelling
    and rules of :func:`parse_node_pool`."""
    name, sep, rest = spec.strip().partition("=")
    if not sep:
        name, rest = "", name
    shape, at, location = rest.partition("@")
    if at and not (name.strip() and location.strip()):
        raise ValueError(f"a node pool with a location needs a name: NAME=ACCELERATOR@LOCATION, got {spec!r}")
    accelerator, _, topology = shape.partition(":")
    return flex_pool(
        accelerator.strip(), name.strip() or None, location.strip() or None, topology.strip() or None
    )


def default_queued_pools(accelerators: tuple[str, ...]) -> dict[str, NodePool]:
    pools = [queued_pool(acc) for acc in accelerators]
    return {pool.accelerator or "": pool for pool in pools}


class NodePools:
    """The cluster's queued and flex-start node pools, and node naming."""

    def __init__(self, pools: dict[str, NodePool], flex: list[NodePool] | None = None) -> None:
        #: The pool a pod gets by its accelerator alone (one per accelerator, in the cluster's location).
        self.by_accelerator = dict(pools)
        #: Pools with a location of their own, by name: a pod selects them by name only.
        self.located: dict[str, NodePool] = {}
        #: Flex-start pools a pod gets by its accelerator (and TPU topology) alone, and those with
        #: a location of their own, by name.
        self.flex: dict[tuple[str, str | None], NodePool] = {}
        self.flex_located: dict[str, NodePool] = {}
        self._node_seq = 0
        self.replace_flex(flex or [], True)

    def get(self, accelerator: str) -> NodePool | None:
        return self.by_accelerator.get(accelerator)

    def by_name(self, name: str) -> NodePool | None:
        if name == DEFAULT_POOL.name:
            return DEFAULT_POOL
        return self.located.get(name) or next(
            (p for p in self.by_accelerator.values() if p.name == name), None
        )

    def queued_names(self) -> list[str]:
        """Every queued node pool's name."""
        return sorted([p.name for p in self.by_accelerator.values()] + list(self.located))

    def replace(self, pools: list[NodePool], replace: bool) -> None:
        if replace:
            self.by_accelerator, self.located = {}, {}
        for pool in pools:
            assert pool.accelerator is not None
            if pool.location != CLUSTER_LOCATION:
                self.located[pool.name] = pool
            else:
                self.by_accelerator[pool.accelerator] = pool

    def flex_for(self, accelerator: str, topology: str | None) -> NodePool | None:
        """The flex-start pool of a GPU (``topology`` None) or of a TPU slice, in the cluster's location."""
        return self.flex.get((accelerator, topology))

    def flex_by_name(self, name: str) -> NodePool | None:
        """The flex-start node pool of that name (None: no such pool)."""
        return self.flex_located.get(name) or next((p for p in self.flex.values() if p.name == name), None)

    def flex_pools(self) -> list[NodePool]:
        """Every flex-start node pool, by name."""
        return sorted([*self.flex.values(), *self.flex_located.values()], key=lambda p: p.name)

    def replace_flex(self, pools: list[NodePool], replace: bool) -> None:
        """Add (or with ``replace``, set) flex-start pools; one of a shape in the cluster's location
        replaces the one it had."""
        if replace:
            self.flex, self.flex_located = {}, {}
        for pool in pools:
            assert pool.flex_start and pool.accelerator is not None
            if pool.located:
                self.flex_located[pool.name] = pool
            else:
                self.flex[(pool.accelerator, pool.topology)] = pool

    def set_flex_max_run(self, seconds: int) -> None:
        """Every flex-start pool's ``--max-run-duration`` (nodes that are up keep theirs)."""
        self.replace_flex([dataclasses.replace(p, max_run_seconds=seconds) for p in self.flex_pools()], True)

    def new_nodes(self, pool: NodePool, count: int) -> list[str]:
        """Fresh node names, as GKE spells them: ``gke-CLUSTER-POOL-<8 hex>-<4 chars>``."""
        names = []
        for _ in range(count):
            self._node_seq += 1
            names.append(
                f"gke-{CLUSTER_NAME}-{pool.name}-{self._node_seq:08x}-{self._node_seq * 7919 % 10000:04d}"
            )
        return names

    def to_json(self) -> list[dict[str, Any]]:
        """The default and queued pools (the flex-start ones: ``[p.to_json() for p in flex_pools()]``)."""
        return (
            [DEFAULT_POOL.to_json()]
            + [p.to_json() for _, p in sorted(self.by_accelerator.items())]
            + [p.to_json() for _, p in sorted(self.located.items())]
        )
