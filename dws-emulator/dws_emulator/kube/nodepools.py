"""The emulated cluster's node pools: one queued GPU pool per accelerator, plus a CPU pool.

A queued node pool (``--enable-queued-provisioning``) has no nodes until a ProvisioningRequest
gets its whole set; its GPUs come from the shared capacity model's regional pool of the same
accelerator (``us-central1/NVIDIA_H100_80GB``, the pool Vertex AI and Cloud Batch draw from), so
a GKE request waits behind (and blocks) the other APIs' queued requests for that GPU. Nodes are
names only (no Node objects are served). The ``default-pool`` runs pods that ask for no GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.capacity import PoolKey
from ..facts import VERTEX_NAME

#: The one location every GKE project / location / cluster name maps to.
CLUSTER_LOCATION = "us-central1"
CLUSTER_NAME = "dws-cluster"

#: Node labels and the taint GKE puts on queued node pools' nodes.
QUEUED_LABEL = "cloud.google.com/gke-queued"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
QUEUED_TAINT = {"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}
GPU_RESOURCE = "nvidia.com/gpu"

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

    @property
    def queued(self) -> bool:
        return self.accelerator is not None

    @property
    def pool(self) -> PoolKey | None:
        """The capacity model's pool its GPUs come from."""
        if self.accelerator is None:
            return None
        return PoolKey(self.location, VERTEX_NAME[self.accelerator])

    def nodes_for(self, gpus: int) -> int:
        return max(1, math.ceil(gpus / self.gpus_per_node)) if self.gpus_per_node else 1

    def node_labels(self) -> dict[str, str]:
        labels = {NODEPOOL_LABEL: self.name}
        if self.accelerator:
            labels[ACCELERATOR_LABEL] = self.accelerator
            labels[QUEUED_LABEL] = "true"
        return labels

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "accelerator": self.accelerator,
            "machine_type": self.machine_type,
            "gpus_per_node": self.gpus_per_node,
            "queued_provisioning": self.queued,
            "pool": str(self.pool) if self.pool else None,
            "location": self.location,
            "node_labels": self.node_labels(),
            "taints": [dict(QUEUED_TAINT)] if self.queued else [],
        }


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


def default_queued_pools(accelerators: tuple[str, ...]) -> dict[str, NodePool]:
    pools = [queued_pool(acc) for acc in accelerators]
    return {pool.accelerator or "": pool for pool in pools}


class NodePools:
    """The cluster's queued node pools by accelerator, and node naming."""

    def __init__(self, pools: dict[str, NodePool]) -> None:
        #: The pool a pod gets by its accelerator alone (one per accelerator, in the cluster's location).
        self.by_accelerator = dict(pools)
        #: Pools with a location of their own, by name: a pod selects them by name only.
        self.located: dict[str, NodePool] = {}
        self._node_seq = 0

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
        return (
            [DEFAULT_POOL.to_json()]
            + [p.to_json() for _, p in sorted(self.by_accelerator.items())]
            + [p.to_json() for _, p in sorted(self.located.items())]
        )
