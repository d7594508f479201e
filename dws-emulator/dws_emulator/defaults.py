"""The emulator's default inventory and the registry of its APIs' services (names only, no types).

Kept light: the CLI parses fault rules with it before any API's protobuf types are loaded.
"""

from __future__ import annotations

from .batch import BATCH_SERVICE
from .batch import METHODS as BATCH_METHODS
from .calendar import CALENDAR_METHODS
from .compute import COMPUTE_SERVICE
from .compute import METHODS as COMPUTE_METHODS
from .core.faults import register_methods
from .kube import KUBE_METHODS, KUBE_SERVICE
from .tpu import METHODS as TPU_METHODS
from .tpu import TPU_SERVICE
from .vertex import JOB_SERVICE
from .vertex import METHODS as VERTEX_METHODS
from .vertex_inference import ENDPOINT_METHODS, ENDPOINT_SERVICE, JOB_METHODS
from .vertex_inference import JOB_SERVICE as V1BETA1_JOB_SERVICE

#: Pools when ``serve`` gets no ``--capacity``: GPU pools (Vertex AI, Cloud Batch and Compute Engine share them)
#: by region and Vertex accelerator name, TPU pools by zone and family in chips.
DEFAULT_CAPACITY: dict[str, int] = {
    # 32: the Compute example's 4 x a3-highgpu-8g fit at once (the Vertex example takes 8).
    "us-central1/NVIDIA_H100_80GB": 32,
    "us-central1/NVIDIA_A100_80GB": 16,
    "us-central1/NVIDIA_TESLA_A100": 16,
    "us-central1/NVIDIA_L4": 16,
    "us-east4/NVIDIA_H100_80GB": 8,
    "us-west4-a/v5litepod": 64,
    "us-central1-a/v5litepod": 32,
    "us-east5-a/v5p": 64,
    "us-east1-d/v6e": 64,
    # Where Cloud TPU offers v6e flex-start (its docs: us-east5-a, asia-northeast1-b).
    "us-east5-a/v6e": 32,
}

#: The calendar of free capacity for calendar mode (future reservations) when ``serve`` gets no
#: ``--calendar-capacity``: units free on every day, by zone and accelerator (GPUs by their Vertex
#: AI name, TPU families in chips). Separate from the pools above: a delivered block is a pool of its own.
DEFAULT_CALENDAR_CAPACITY: dict[str, int] = {
    "us-central1-a/NVIDIA_H100_80GB": 64,
    "us-central1-b/NVIDIA_H100_80GB": 64,
    "us-east4-b/NVIDIA_H100_80GB": 64,
    "us-central1-b/NVIDIA_B200": 32,
    "us-west4-a/v5litepod": 256,
    "us-central1-a/v5litepod": 128,
    "us-east5-a/v5p": 128,
    "us-east1-d/v6e": 256,
}

#: Every API's services (gRPC, and Compute Engine's REST service) and their emulated methods.
SERVICES: dict[str, tuple[str, ...]] = {
    JOB_SERVICE: VERTEX_METHODS,
    # Vertex AI inference: v1beta1 BatchPredictionJobs and Endpoints (other service names than v1's).
    V1BETA1_JOB_SERVICE: JOB_METHODS,
    ENDPOINT_SERVICE: ENDPOINT_METHODS,
    TPU_SERVICE: TPU_METHODS,
    BATCH_SERVICE: BATCH_METHODS,
    # Compute Engine and calendar mode are one REST service (``compute.v1``).
    COMPUTE_SERVICE: COMPUTE_METHODS + CALENDAR_METHODS,
    # The Kubernetes API of the emulated GKE cluster (REST, ``pods.list``).
    KUBE_SERVICE: KUBE_METHODS,
}

for _service, _methods in SERVICES.items():
    register_methods(_service, _methods)

#: The GKE cluster's queued node pools (``--enable-queued-provisioning``) when ``serve`` gets no
#: ``--kube-node-pools``: one per accelerator (GKE label values), drawing on the GPU pools above.
DEFAULT_KUBE_NODE_POOLS: tuple[str, ...] = ("nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4")
#: How long a Provisioned ProvisioningRequest keeps its nodes for pods that have not come yet.
DEFAULT_BOOKING_SECONDS = 600.0
#: The GKE cluster's flex-start node pools (``--flex-start``, no queued provisioning) when ``serve``
#: gets no ``--kube-flex-start-pools``: ``dws-flex-<accelerator>`` for each queued pool's GPU (the
#: same capacity pool), and a TPU v5e single-host pool (2x4, 8 chips a node) on ``us-central1-a/v5litepod``.
DEFAULT_KUBE_FLEX_START_POOLS: tuple[str, ...] = (*DEFAULT_KUBE_NODE_POOLS, "tpu-v5-lite-podslice:2x4")
#: How long a flex-start node stays with no pod before it is removed (cluster-autoscaler's
#: ``--scale-down-unneeded-time``, 10 minutes by default).
DEFAULT_KUBE_FLEX_SCALE_DOWN_SECONDS = 600.0
