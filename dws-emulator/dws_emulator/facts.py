"""What the emulator knows of Google's APIs: GPUs, machine types, TPU slices, zones and limits.

Written from Google's own documents, each fact with its source, and kept apart from any client of
the emulator: a test client that read its facts from the same table could never find that table
wrong (the provider's tests cross-check its facts against these, ``tests/unit/test_facts_crosscheck.py``).
Sources, as cited below:

* ``[aiplatform.v1]``, ``[compute.v1]``, ``[tpu.v2]``, ``[batch.v1]``: Google's discovery documents
  as google-api-python-client ships them (``googleapiclient/discovery_cache/documents/``;
  revisions 20261106, 20261106, 20261001, 20261103);
* ``[gpus]``: Compute Engine, "GPU machine types" and "Accelerator-optimized machine family"
  (cloud.google.com/compute/docs/gpus, /compute/docs/accelerator-optimized-machines);
* ``[flex-start VMs]``: Compute Engine, "About Flex-start VMs"
  (cloud.google.com/compute/docs/instances/about-flex-start-vms);
* ``[calendar]``: Compute Engine, "Create a future reservation request in calendar mode"
  (cloud.google.com/compute/docs/instances/create-future-reservations-calendar-mode), and Cloud
  TPU's "Request a future reservation in calendar mode" (cloud.google.com/tpu/docs/calendar-mode-reservation);
* ``[tpu vN]``: Cloud TPU's system architecture pages (cloud.google.com/tpu/docs/v2 ... /v6e);
* ``[aiplatform.v1beta1]``: as ``[aiplatform.v1]``, the v1beta1 document (revision 20261106);
* ``[gke tpus]``: GKE, "Plan TPUs in GKE" (cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus),
  whose TPU machine types Vertex AI's ``MachineSpec.machine_type`` takes for TPU serving;
* ``[flex-start inference]``: Vertex AI, "Use Flex-start VMs with inference" (Preview)
  (cloud.google.com/vertex-ai/docs/predictions/use-flex-start-vms).

Checked 2026-12. Where no stored page could be read, the fact says "not verified".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# -- GPUs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """One GPU model, spelled as Compute Engine (and Batch and GKE) and as Vertex AI name it."""

    compute: str  # [gpus]; [batch.v1] Accelerator.type, e.g. "nvidia-tesla-t4"
    vertex: str  # [aiplatform.v1] MachineSpec.acceleratorType enum
    #: Obtainable as a flex-start VM (and so by a Batch job with provisioningModel FLEX_START).
    flex_start: bool


GPUS: tuple[Gpu, ...] = (
    # [flex-start VMs]: "Flex-start VMs support all accelerator-optimized machine types (except A4X
    # and G4)": the GPUs of A2 (A100 40 and 80 GB), A3 (H100, H100 Mega, H200), A4 (B200), G2 (L4).
    Gpu("nvidia-l4", "NVIDIA_L4", True),
    Gpu("nvidia-tesla-a100", "NVIDIA_TESLA_A100", True),
    Gpu("nvidia-a100-80gb", "NVIDIA_A100_80GB", True),
    Gpu("nvidia-h100-80gb", "NVIDIA_H100_80GB", True),
    Gpu("nvidia-h100-mega-80gb", "NVIDIA_H100_MEGA_80GB", True),
    Gpu("nvidia-h200-141gb", "NVIDIA_H200_141GB", True),
    Gpu("nvidia-b200", "NVIDIA_B200", True),
    Gpu("nvidia-gb200", "NVIDIA_GB200", False),  # A4X: excepted by [flex-start VMs]
    # N1 machines with attached T4s are not on that page's list (it names accelerator-optimized
    # machines); Cloud Batch's own flex-start page could not be read: accepted, not verified.
    Gpu("nvidia-tesla-t4", "NVIDIA_TESLA_T4", True),
    # The other GPUs N1 machines take attached [gpus]: no flex-start.
    Gpu("nvidia-tesla-v100", "NVIDIA_TESLA_V100", False),
    Gpu("nvidia-tesla-p100", "NVIDIA_TESLA_P100", False),
    Gpu("nvidia-tesla-p4", "NVIDIA_TESLA_P4", False),
)

#: Compute Engine GPU name -> Vertex AI name (the capacity pools are named the Vertex AI way).
VERTEX_NAME: dict[str, str] = {gpu.compute: gpu.vertex for gpu in GPUS}
#: Vertex AI GPU name -> Compute Engine name.
COMPUTE_NAME: dict[str, str] = {gpu.vertex: gpu.compute for gpu in GPUS}
#: The GPUs a Batch job with provisioningModel FLEX_START may ask for (Compute names) [batch.v1]:
#: FLEX_START is "provisioned with DWS Flex Start", i.e. flex-start VMs.
FLEX_START_GPUS: frozenset[str] = frozenset(gpu.compute for gpu in GPUS if gpu.flex_start)


@dataclass(frozen=True)
class GpuSeries:
    """An accelerator-optimized machine series [gpus]: every machine type has a fixed GPU and count."""

    name: str  # "a3-highgpu": the machine types are NAME-SUFFIX
    gpu: str  # Compute Engine name
    gpus: Mapping[str, int]  # machine type suffix -> GPUs it comes with
    calendar: bool = False  # [calendar]: GPU VMs of the A3 series and newer

    def machine_types(self) -> dict[str, int]:
        """``{"a3-highgpu-8g": 8, ...}``."""
        return {f"{self.name}-{suffix}": count for suffix, count in self.gpus.items()}


_GPU_COUNTS = {"1g": 1, "2g": 2, "4g": 4, "8g": 8}
GPU_SERIES: tuple[GpuSeries, ...] = (
    GpuSeries("a2-highgpu", "nvidia-tesla-a100", _GPU_COUNTS),
    GpuSeries("a2-megagpu", "nvidia-tesla-a100", {"16g": 16}),
    GpuSeries("a2-ultragpu", "nvidia-a100-80gb", _GPU_COUNTS),
    GpuSeries("a3-highgpu", "nvidia-h100-80gb", _GPU_COUNTS, calendar=True),
    GpuSeries("a3-megagpu", "nvidia-h100-mega-80gb", {"8g": 8}, calendar=True),
    GpuSeries("a3-ultragpu", "nvidia-h200-141gb", {"8g": 8}, calendar=True),
    GpuSeries("a4-highgpu", "nvidia-b200", {"8g": 8}, calendar=True),
    GpuSeries("a4x-highgpu", "nvidia-gb200", {"4g": 4}, calendar=True),
    # G2: one L4 up to 16 vCPUs and on g2-standard-32, then 2, 4 and 8.
    GpuSeries(
        "g2-standard",
        "nvidia-l4",
        {"4": 1, "8": 1, "12": 1, "16": 1, "24": 2, "32": 1, "48": 4, "96": 8},
    ),
)

#: Machine type -> (its GPU's Vertex AI name, how many it comes with).
MACHINE_GPUS: dict[str, tuple[str, int]] = {
    machine: (VERTEX_NAME[series.gpu], count)
    for series in GPU_SERIES
    for machine, count in series.machine_types().items()
}
#: GPUs attached to N1 machine types rather than built into a series [gpus]: the GPUs of no
#: :data:`GPU_SERIES` (Vertex AI names).
N1_GPUS: frozenset[str] = frozenset(gpu.vertex for gpu in GPUS) - {
    VERTEX_NAME[series.gpu] for series in GPU_SERIES
}
#: The GPU machine types calendar mode reserves [calendar], as :data:`MACHINE_GPUS`.
CALENDAR_MACHINES: dict[str, tuple[str, int]] = {
    machine: (VERTEX_NAME[series.gpu], count)
    for series in GPU_SERIES
    if series.calendar
    for machine, count in series.machine_types().items()
}

# -- Cloud TPU -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TpuFamily:
    """A TPU version as its accelerator types name it (``v5litepod`` in ``v5litepod-16``).

    Slices are counted in chips, as the product pages' topology tables count them; the accelerator
    type's suffix is chips x ``cores_per_chip`` (v2 to v5p count TensorCores, two per chip).
    """

    name: str
    cores_per_chip: int
    chips: tuple[int, ...]  # the slice sizes the topology table lists
    cube_chips: int = 0  # above them, whole cubes of this many chips ... (0: none)
    max_chips: int = 0  # ... up to this slice
    vm_chips: int = 4  # the largest slice that is one TPU VM

    def slice_chips(self, suffix: int) -> int | None:
        """Chips of ``<name>-<suffix>``, or ``None`` if that slice is not offered."""
        chips, rest = divmod(suffix, self.cores_per_chip)
        if rest or chips <= 0:
            return None
        if chips in self.chips:
            return chips
        cubes = self.cube_chips and chips % self.cube_chips == 0 and chips <= self.max_chips
        return chips if cubes else None

    def describe(self) -> str:
        """The accelerator type suffixes offered, in words (for error messages)."""
        listed = ", ".join(str(c * self.cores_per_chip) for c in self.chips)
        if self.cube_chips:
            step, top = self.cube_chips * self.cores_per_chip, self.max_chips * self.cores_per_chip
            return f"{listed}, or a multiple of {step} up to {top} (whole cubes)"
        return listed


TPU_FAMILIES: dict[str, TpuFamily] = {
    family.name: family
    for family in (
        # [tpu v2]: 2x2 to 16x16 chips (v2-8 ... v2-512).
        TpuFamily("v2", 2, (4, 16, 64, 128, 256)),
        # [tpu v3]: 2x2 to 32x32 chips (v3-8 ... v3-2048).
        TpuFamily("v3", 2, (4, 16, 32, 64, 128, 256, 512, 1024)),
        # [tpu v4]: 2x2x1 to 2x4x4, then whole 4x4x4 cubes up to the 4,096-chip pod.
        TpuFamily("v4", 2, (4, 8, 16, 32), cube_chips=64, max_chips=4096),
        # [tpu v5p]: as v4, up to 16x16x24 (6,144 chips).
        TpuFamily("v5p", 2, (4, 8, 16, 32), cube_chips=64, max_chips=6144),
        # [tpu v5e], [tpu v6e]: 2D slices 1x1 to 16x16, one TensorCore per chip; a TPU VM has 1, 4
        # or 8 chips (so up to 8 chips is one VM).
        TpuFamily("v5litepod", 1, (1, 4, 8, 16, 32, 64, 128, 256), vm_chips=8),
        TpuFamily("v6e", 1, (1, 4, 8, 16, 32, 64, 128, 256), vm_chips=8),
    )
}
#: Chips of one TPU VM of a multi-host slice (GKE's multi-host TPU machine types, ``ct5lp-hightpu-4t``,
#: ``ct6e-standard-4t``, ``ct5p-hightpu-4t``, have 4).
MULTI_HOST_VM_CHIPS = 4
#: Slices in one multislice queued resource: not verified (the emulator takes up to 256).
MAX_SLICES = 256

# -- Vertex AI inference (v1beta1 BatchPredictionJob, DeployedModel) ------------------------------

#: Vertex AI's TPU serving machine types -> (the capacity pool's accelerator name, chips per
#: machine). The machine types are GKE's single-host TPU VMs [gke tpus]; which of them Vertex AI
#: serves on is not verified. Pools are named by ``AcceleratorType`` [aiplatform.v1beta1]
#: (``TPU_V5_LITEPOD``); v6e has no such value, so its pools are ``REGION/TPU_V6E``.
VERTEX_TPU_MACHINES: dict[str, tuple[str, int]] = {
    **{f"ct5lp-hightpu-{chips}t": ("TPU_V5_LITEPOD", chips) for chips in (1, 4, 8)},
    **{f"ct6e-standard-{chips}t": ("TPU_V6E", chips) for chips in (1, 4, 8)},
}
#: ``FlexStart.max_runtime_duration`` "can be set up to 7 days" [aiplatform.v1beta1]; a longer
#: deployment request is rejected [flex-start inference].
VERTEX_FLEX_MAX_RUNTIME_SECONDS = 7 * 24 * 3600.0
#: ``MachineSpec.machine_type`` of a DeployedModel defaults to ``n1-standard-2`` [aiplatform.v1beta1].
VERTEX_DEFAULT_DEPLOY_MACHINE = "n1-standard-2"
#: ``BatchDedicatedResources.max_replica_count`` defaults to 10 [aiplatform.v1beta1].
VERTEX_BATCH_DEFAULT_MAX_REPLICAS = 10

# -- locations -----------------------------------------------------------------------------------

#: A region is a continent or area, one or more words, and a number (``us-central1``,
#: ``northamerica-northeast1``); a zone is a region and one letter (``us-west4-a``)
#: [compute.v1: regions.list / zones.list names].
REGION_RE = re.compile(r"[a-z]+(?:-[a-z]+)+[0-9]+")
ZONE_RE = re.compile(rf"{REGION_RE.pattern}-[a-z]")

# -- calendar mode (future reservations, reservationMode CALENDAR) --------------------------------

DAY_SECONDS = 86400.0
#: A block lasts 1 to 90 days [calendar].
CALENDAR_MIN_SECONDS = 1 * DAY_SECONDS
CALENDAR_MAX_SECONDS = 90 * DAY_SECONDS
#: How far ahead a block may start: TPUs 120 days [calendar: "check TPU availability up to 120 days
#: in advance"]; GPU VMs 60 days (not verified).
CALENDAR_TPU_HORIZON_SECONDS = 120 * DAY_SECONDS
CALENDAR_GPU_HORIZON_SECONDS = 60 * DAY_SECONDS
#: GPU VMs one request reserves: 1 to 80 [calendar].
CALENDAR_MAX_GPU_VMS = 80
#: TPU chips one request reserves; a v5e block for SERVING only 1, 4 or 8 [calendar].
CALENDAR_TPU_CHIPS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CALENDAR_TPU_SERVING_CHIPS = (1, 4, 8)
#: ``AllocationAggregateReservation.workloadType`` [compute.v1]: BATCH, SERVING, UNSPECIFIED.
CALENDAR_TPU_WORKLOADS = ("BATCH", "SERVING")
#: The ``vmFamily`` of the TPU versions calendar mode reserves (v5e, v5p, v6e [calendar]; the enum
#: values [compute.v1]) -> the Cloud TPU family of their accelerator types.
CALENDAR_TPU_FAMILIES: dict[str, str] = {
    "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP": "v5litepod",
    "VM_FAMILY_CLOUD_TPU_POD_SLICE_CT5P": "v5p",
    "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E": "v6e",
}
#: A future reservation's ``namePrefix`` is at most 20 characters [compute.v1].
MAX_NAME_PREFIX = 20
