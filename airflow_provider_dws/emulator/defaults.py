"""The emulator's default inventory and the registry of its APIs' services (names only, no types).

Kept light: the CLI parses fault rules with it before any API's protobuf types are loaded.
"""

from __future__ import annotations

from .batch import BATCH_SERVICE
from .batch import METHODS as BATCH_METHODS
from .compute import COMPUTE_SERVICE
from .compute import METHODS as COMPUTE_METHODS
from .core.faults import register_methods
from .tpu import METHODS as TPU_METHODS
from .tpu import TPU_SERVICE
from .vertex import JOB_SERVICE
from .vertex import METHODS as VERTEX_METHODS

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
}

#: Every API's services (gRPC, and Compute Engine's REST service) and their emulated methods.
SERVICES: dict[str, tuple[str, ...]] = {
    JOB_SERVICE: VERTEX_METHODS,
    TPU_SERVICE: TPU_METHODS,
    BATCH_SERVICE: BATCH_METHODS,
    COMPUTE_SERVICE: COMPUTE_METHODS,
}

for _service, _methods in SERVICES.items():
    register_methods(_service, _methods)
