"""The API facts, as plain literals written from Google's documents: accelerators, names, limits.

This module is the record of what the documents say, and holds data only (beyond the few values
derived in place that the parse-time checks need, such as GKE's GPUs per node). The operators'
parse-time checks read these tables directly, so a DAG file's parse loads nothing but literals;
:mod:`airflow_provider_dws.catalog` derives the lookups (shapes, chips, hosts, messages) from them.
The sources (checked 2026-12):

* TPU (cloud.google.com/tpu/docs/v2 ... /v6e): ``v5litepod-N`` and ``v6e-N`` count chips (one
  TensorCore each) and come in the 2D shapes 1x1 to 16x16 (1, 4, 8, ... 256 chips: no 2-chip
  slice); ``v2``/``v3``/``v4``/``v5p`` count TensorCores, two per chip. v4 and v5p slices above
  one 4x4x4 cube (64 chips, 128 cores) come in whole cubes, up to the largest slice (v4: the pod,
  4,096 chips; v5p: 16x16x24, 6,144 chips).
* GPU (cloud.google.com/compute/docs/accelerator-optimized-machines): every accelerator-optimized
  machine type has a fixed GPU model and count; Vertex AI spells the model as its
  ``AcceleratorType`` enum name.
* The other tables name their source beside them.
"""

from collections.abc import Container
from datetime import timedelta

#: Vertex AI's own default for ``Scheduling.max_wait_duration``.
DEFAULT_MAX_WAIT = timedelta(hours=24)
#: Vertex AI's own default for ``Scheduling.timeout``.
DEFAULT_MAX_RUN = timedelta(days=7)
#: Flex Start workloads run at most 7 days (Dynamic Workload Scheduler requirement).
MAX_RUN_LIMIT = timedelta(days=7)
#: The provider refuses waits longer than 7 days: a request nobody is watching any more can
#: still grab capacity and bill for it. (The API itself accepts 0 = "wait forever"; we do not.)
MAX_WAIT_LIMIT = timedelta(days=7)

#: TPU family -> (cores per chip, the suffixes listed, whole-cube TensorCores above them (0: none),
#: the largest suffix, the largest single-host slice in chips).
TPU_FAMILY_ROWS = {
    "v2": (2, (8, 32, 128, 256, 512), 0, 0, 4),
    "v3": (2, (8, 32, 64, 128, 256, 512, 1024, 2048), 0, 0, 4),
    "v4": (2, (8, 16, 32, 64), 128, 8192, 4),
    "v5p": (2, (8, 16, 32, 64), 128, 12288, 4),
    "v5litepod": (1, (1, 4, 8, 16, 32, 64, 128, 256), 0, 0, 8),
    "v6e": (1, (1, 4, 8, 16, 32, 64, 128, 256), 0, 0, 8),
}

#: Chips of one TPU VM in a multi-host slice (one network endpoint each).
CHIPS_PER_HOST = 4

#: Vertex AI ``AcceleratorType`` names and numbers (google.cloud.aiplatform_v1; a test keeps
#: them equal to the installed client's enum).
VERTEX_ACCELERATOR_TYPES: dict[str, int] = {
    "ACCELERATOR_TYPE_UNSPECIFIED": 0,
    "NVIDIA_TESLA_K80": 1,
    "NVIDIA_TESLA_P100": 2,
    "NVIDIA_TESLA_V100": 3,
    "NVIDIA_TESLA_P4": 4,
    "NVIDIA_TESLA_T4": 5,
    "TPU_V2": 6,
    "TPU_V3": 7,
    "NVIDIA_TESLA_A100": 8,
    "NVIDIA_A100_80GB": 9,
    "TPU_V4_POD": 10,
    "NVIDIA_L4": 11,
    "TPU_V5_LITEPOD": 12,
    "NVIDIA_H100_80GB": 13,
    "NVIDIA_H100_MEGA_80GB": 14,
    "NVIDIA_H200_141GB": 15,
    "NVIDIA_B200": 16,
    "NVIDIA_GB200": 17,
    "NVIDIA_RTX_PRO_6000": 18,
}

#: Accelerator-optimized machine type -> (the Vertex AI name of its GPU, how many it always has).
GPU_MACHINE_ROWS = {
    "a4x-highgpu-4g": ("NVIDIA_GB200", 4),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-highgpu-1g": ("NVIDIA_H100_80GB", 1),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-4g": ("NVIDIA_H100_80GB", 4),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a2-ultragpu-1g": ("NVIDIA_A100_80GB", 1),
    "a2-ultragpu-2g": ("NVIDIA_A100_80GB", 2),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a2-ultragpu-8g": ("NVIDIA_A100_80GB", 8),
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-2g": ("NVIDIA_TESLA_A100", 2),
    "a2-highgpu-4g": ("NVIDIA_TESLA_A100", 4),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "g2-standard-4": ("NVIDIA_L4", 1),
    "g2-standard-8": ("NVIDIA_L4", 1),
    "g2-standard-12": ("NVIDIA_L4", 1),
    "g2-standard-16": ("NVIDIA_L4", 1),
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
}

#: GPU types Dynamic Workload Scheduler Flex Start accepts for Vertex AI training.
FLEX_START_GPUS = frozenset(
    {
        "NVIDIA_L4",
        "NVIDIA_TESLA_A100",
        "NVIDIA_A100_80GB",
        "NVIDIA_H100_80GB",
        "NVIDIA_H100_MEGA_80GB",
        "NVIDIA_H200_141GB",
        "NVIDIA_B200",
        "NVIDIA_GB200",
    }
)

#: Compute Engine accelerator names (Cloud Batch and Compute Engine spell GPUs so) -> the Vertex AI
#: name of the same GPU, the one :data:`GPU_MACHINE_ROWS` uses.
COMPUTE_GPU_NAMES = {
    "nvidia-l4": "NVIDIA_L4",
    "nvidia-tesla-t4": "NVIDIA_TESLA_T4",
    "nvidia-tesla-v100": "NVIDIA_TESLA_V100",
    "nvidia-tesla-p100": "NVIDIA_TESLA_P100",
    "nvidia-tesla-p4": "NVIDIA_TESLA_P4",
    "nvidia-tesla-a100": "NVIDIA_TESLA_A100",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB",
    "nvidia-h100-80gb": "NVIDIA_H100_80GB",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_80GB",
    "nvidia-h200-141gb": "NVIDIA_H200_141GB",
    "nvidia-b200": "NVIDIA_B200",
    "nvidia-gb200": "NVIDIA_GB200",
}
#: GPU types a Cloud Batch job with the FLEX_START provisioning model may ask for (Compute names):
#: the flex-start VM GPUs (G2, A2, A3 and A4 machines, and N1 machines with attached T4s). Not A4X's
#: GB200: "Flex-start VMs support all accelerator-optimized machine types (except A4X and G4)"
#: (Compute Engine, About Flex-start VMs, read 2026-12; the emulator's facts cross-check it).
BATCH_FLEX_START_GPUS = frozenset(
    {
        "nvidia-l4",
        "nvidia-tesla-t4",
        "nvidia-tesla-a100",
        "nvidia-a100-80gb",
        "nvidia-h100-80gb",
        "nvidia-h100-mega-80gb",
        "nvidia-h200-141gb",
        "nvidia-b200",
    }
)
#: The same GPUs by their Vertex AI names, as a GPU machine type's own (``GPU_MACHINE_ROWS``) are named.
BATCH_FLEX_START_MODELS = frozenset(COMPUTE_GPU_NAMES[gpu] for gpu in BATCH_FLEX_START_GPUS)
#: Machine families whose VMs take GPUs attached (Compute Engine's GPU pages: "For N1 general-purpose
#: machine types, except for the N1 shared-core (f1-micro and g1-small), you can attach a select set
#: of GPU models"; the accelerator-optimized families of :data:`GPU_MACHINE_ROWS` come with theirs):
#: family -> attachable GPU (Compute name) -> the GPU counts one VM may have. The models are verified
#: (2026-12); the counts are not (the page's N1 tables could not be read) and agree with GKE's
#: largest nodes. The vCPU and memory limits of each count are left to the API. K80s are gone (end
#: of support).
GPU_ATTACHED_ROWS = {
    "n1": {
        "nvidia-tesla-t4": (1, 2, 4),
        "nvidia-tesla-v100": (1, 2, 4, 8),
        "nvidia-tesla-p100": (1, 2, 4),
        "nvidia-tesla-p4": (1, 2, 4),
    },
}
#: Machine families that take no GPU: "GPUs are not compatible with other machine types" than the
#: accelerator-optimized ones and N1 (Compute Engine, About GPUs, verified 2026-12). The list of
#: family names is the machine family pages' as we knew them (not verified one by one); a family in
#: none of these tables (a new one, G4's RTX PRO 6000 machines) is left to the API.
NO_GPU_FAMILIES = frozenset(
    {
        *("c2", "c2d", "c3", "c3d", "c4", "c4a", "c4d", "e2", "f1", "g1", "h3", "h4d", "m1", "m2"),
        *("m3", "m4", "n2", "n2d", "n4", "n4a", "n4d", "t2a", "t2d", "x4", "z3"),
    }
)
#: Machine families whose machine types come with a fixed GPU (``a3`` of ``a3-highgpu-8g``).
GPU_FIXED_FAMILIES = frozenset(machine.split("-", 1)[0] for machine in GPU_MACHINE_ROWS)


def machine_family(machine_type: str) -> str:
    """``n1`` for ``n1-standard-8``, ``a4x`` for ``a4x-highgpu-4g``."""
    return machine_type.split("-", 1)[0]


#: Tasks in one Cloud Batch task group.
BATCH_MAX_TASKS = 10000
#: A Compute Engine machine type (``g2-standard-8``, ``a3-highgpu-8g``, ``n1-standard-4``).
MACHINE_TYPE_PATTERN = r"[a-z][a-z0-9]*-[a-z0-9-]*[a-z0-9]"

#: The fields of a Vertex AI ``WorkerPoolSpec`` (a test keeps them equal to the client's).
WORKER_POOL_FIELDS = frozenset(
    {
        "container_spec",
        "disk_spec",
        "lustre_mounts",
        "machine_spec",
        "nfs_mounts",
        "python_package_spec",
        "replica_count",
    }
)

#: A Google Cloud region (``us-central1``, ``europe-west4``, ``northamerica-northeast1``).
REGION_PATTERN = r"[a-z]+(?:-[a-z]+)+[0-9]+"
#: A Google Cloud zone: a region and a zone letter (``us-west4-a``).
ZONE_PATTERN = r"[a-z]+(?:-[a-z]+)+[0-9]+-[a-z]"
#: A Cloud TPU queued resource (and node) id: a lowercase letter, then up to 62 lowercase letters,
#: digits and '-', not ending with '-'.
QUEUED_RESOURCE_ID_PATTERN = r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?"
#: Slices in one multislice request.
MAX_SLICES = 256
#: A GCP label key and value (lowercase letters, digits, '_' and '-'; a key starts with a letter).
LABEL_KEY_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
LABEL_VALUE_PATTERN = r"[a-z0-9_-]{0,63}"
#: Labels one resource may have, and how many of them the provider's identity uses (``dws_*``).
MAX_LABELS = 64
IDENTITY_LABELS = 8


#: Cloud TPU flex-start (Preview, ``v2alpha1``): the families it is offered on (TPU v5e, v6e)
#: and the longest run (cloud.google.com/tpu/docs/request-using-flex-start, read 2026-12-07).
TPU_FLEX_START_FAMILIES = ("v5litepod", "v6e")
TPU_FLEX_START_MAX_RUN = timedelta(days=7)


def tpu_size_offered(sizes: Container[int], cube_cores: int, max_size: int, size: int) -> bool:
    """True if a family with these listed ``sizes`` and whole cubes offers a slice of ``size``."""
    return size in sizes or (cube_cores > 0 and size % cube_cores == 0 and 0 < size <= max_size)


def tpu_type_offered(accelerator_type: object) -> bool:
    """True if ``<family>-<size>`` names a slice Cloud TPU offers (``v5litepod-16``)."""
    family, _, size = accelerator_type.rpartition("-") if isinstance(accelerator_type, str) else ("", "", "")
    row = TPU_FAMILY_ROWS.get(family)
    if row is None or not size.isdigit() or size[0] == "0":
        return False
    return tpu_size_offered(row[1], row[2], row[3], int(size))


def gpu_machine_matches(machine_type: object, accelerator_type: object, count: object) -> bool:
    """True if ``machine_type`` is a known GPU machine that comes with ``count`` x ``accelerator_type``."""
    return GPU_MACHINE_ROWS.get(machine_type) == (accelerator_type, count)  # type: ignore[call-overload]


def batch_gpu_matches(machine_type: object, accelerator_type: object, count: object) -> bool:
    """True if ``count`` x ``accelerator_type`` (Compute names, ``None``: the machine's own GPUs) is
    what the known GPU machine ``machine_type`` comes with."""
    row = GPU_MACHINE_ROWS.get(machine_type)  # type: ignore[call-overload]
    if row is None:
        return False
    if accelerator_type is None:
        return count is None and row[0] in BATCH_FLEX_START_MODELS
    if accelerator_type not in BATCH_FLEX_START_GPUS:
        return False
    return (COMPUTE_GPU_NAMES.get(accelerator_type), row[1] if count is None else count) == row  # type: ignore[call-overload]


#: A Compute Engine resize request's ``requested_run_duration``: 10 minutes to 7 days (the API
#: refuses other values; the VMs are deleted when it ends).
COMPUTE_MIN_RUN = timedelta(minutes=10)
COMPUTE_MAX_RUN = timedelta(days=7)
#: VMs one resize request may add (a zonal MIG holds at most 1,000 VMs).
COMPUTE_MAX_RESIZE_BY = 1000
#: A standalone flex-start VM's wait (``params.requestValidForDuration``): 90 s to 2 hours (0, "only
#: if free now", is not a wait); its ``maxRunDuration`` is :data:`COMPUTE_MIN_RUN` to
#: :data:`COMPUTE_MAX_RUN`. Compute Engine documents (flex-start VMs, GA 2025-09-25).
COMPUTE_VM_MIN_WAIT = timedelta(seconds=90)
COMPUTE_VM_MAX_WAIT = timedelta(hours=2)
#: What a standalone VM does at the end of its run (``scheduling.instanceTerminationAction``).
COMPUTE_TERMINATION_ACTIONS = ("DELETE", "STOP")
#: Standalone VMs the operator makes as one set (its own bound: one insert each).
COMPUTE_MAX_SET_SIZE = 100
#: A Compute Engine resource name (instance template, MIG, resize request): RFC 1035, at most 63.
COMPUTE_NAME_PATTERN = QUEUED_RESOURCE_ID_PATTERN

# -- calendar mode (Compute Engine future reservations, reservation_mode=CALENDAR) -------------------
# From the Compute Engine documents on future reservation requests in calendar mode (checked 2026-12).

#: A block lasts 1 to 90 days.
CALENDAR_MIN_BLOCK = timedelta(days=1)
CALENDAR_MAX_BLOCK = timedelta(days=90)
#: How far ahead the calendar-mode advice sees (and a block may start): GPU and H4D VMs 60 days,
#: TPUs 120 days.
CALENDAR_GPU_HORIZON = timedelta(days=60)
CALENDAR_TPU_HORIZON = timedelta(days=120)
#: The GPU machine series calendar mode offers (A3 and newer); the machine types are those of
#: :data:`GPU_MACHINE_ROWS` in these series. VMs per request: 1 to 80.
CALENDAR_GPU_SERIES = ("a3-highgpu", "a3-megagpu", "a3-ultragpu", "a4-highgpu", "a4x-highgpu")
CALENDAR_MAX_GPU_VMS = 80
#: H4D (HPC, no GPUs) machine types calendar mode offers; VMs per request: 1 to 256.
CALENDAR_H4D_MACHINES = ("h4d-highmem-192", "h4d-highmem-192-lssd", "h4d-standard-192")
CALENDAR_MAX_H4D_VMS = 256
#: TPU version -> (its ``AllocationAggregateReservation.VmFamily``, its Compute Engine accelerator type
#: name, the Cloud TPU family of its accelerator types, TensorCores per chip in their suffix).
CALENDAR_TPU_ROWS = {
    "v5e": ("VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP", "ct5lp", "v5litepod", 1),
    "v5p": ("VM_FAMILY_CLOUD_TPU_POD_SLICE_CT5P", "ct5p", "v5p", 2),
    "v6e": ("VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E", "ct6e", "v6e", 1),
}
#: TPU chips one request may reserve; a v5e block for SERVING takes only 1, 4 or 8.
CALENDAR_TPU_CHIPS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CALENDAR_TPU_SERVING_CHIPS = (1, 4, 8)
CALENDAR_TPU_WORKLOADS = ("BATCH", "SERVING")
#: How the Find operator picks among the advice's recommendations.
CALENDAR_ORDERS = ("earliest", "zone_order")
#: How long a reserve waits for the request to be approved unless told (it is cancelled then).
CALENDAR_DEFAULT_APPROVAL_WAIT = timedelta(hours=1)
#: How long PROVISIONING may last past the block's start before the service fails the request.
CALENDAR_PROVISIONING_LIMIT = timedelta(hours=24)
#: The reservation affinity key that names a specific reservation (Compute Engine, Vertex AI).
RESERVATION_AFFINITY_KEY = "compute.googleapis.com/reservation-name"


def calendar_gpu_machine(machine_type: object) -> bool:
    """True for a GPU machine type of a series calendar mode offers (``a3-highgpu-8g``)."""
    return (
        isinstance(machine_type, str)
        and machine_type in GPU_MACHINE_ROWS
        and machine_type.rsplit("-", 1)[0] in CALENDAR_GPU_SERIES
    )


def calendar_machine_offered(machine_type: object) -> bool:
    """True for a machine type calendar mode offers: an A3-or-newer GPU machine, or H4D."""
    return calendar_gpu_machine(machine_type) or machine_type in CALENDAR_H4D_MACHINES


# -- GKE queued provisioning (ProvisioningRequest) -------------------------------------------------
# From the GKE documents on queued provisioning with ProvisioningRequests and the Kubernetes API
# conventions (checked 2026-12).

#: The ProvisioningRequest custom resource.
PROVISIONING_REQUEST_GROUP = "autoscaling.x-k8s.io"
PROVISIONING_REQUEST_VERSIONS = ("v1", "v1beta1")
PROVISIONING_REQUEST_PLURAL = "provisioningrequests"
#: The provisioning class of GKE queued provisioning (Dynamic Workload Scheduler).
GKE_QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
#: ``parameters.maxRunDurationSeconds``: at most 7 days.
PROVISIONING_REQUEST_MAX_RUN = timedelta(seconds=604800)
#: Pod sets of one request.
PROVISIONING_REQUEST_MAX_POD_SETS = 32
#: Pods that consume a request carry these two annotations (the older ``cluster-autoscaler.kubernetes.io/``
#: prefix is gone from current Kueue and GKE documents).
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
#: The node label of a GKE node's GPU, its value one of :data:`GKE_ACCELERATOR_MAX_GPUS`.
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
#: The label and taint of a node pool created with ``--enable-queued-provisioning``.
GKE_QUEUED_LABEL = "cloud.google.com/gke-queued"
#: The GPU resource a container asks for.
GPU_RESOURCE = "nvidia.com/gpu"
#: The toleration of the taint a queued-provisioning node pool carries (``gke-queued=true:NoSchedule``).
QUEUED_TOLERATION = {"key": GKE_QUEUED_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
#: The toleration of the taint GKE puts on GPU nodes.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def _most_gpus_per_vm() -> dict[str, int]:
    """Compute GPU name -> the most of it one VM has, from the two GPU tables (the fixed machines and
    the attachable GPUs), so GKE's limit is not a third copy of them."""
    compute_name = {vertex: compute for compute, vertex in COMPUTE_GPU_NAMES.items()}
    most: dict[str, int] = {}
    for vertex, count in GPU_MACHINE_ROWS.values():
        name = compute_name[vertex]
        most[name] = max(most.get(name, 0), count)
    for gpus in GPU_ATTACHED_ROWS.values():
        for name, counts in gpus.items():
            most[name] = max(most.get(name, 0), *counts)
    return most


#: GKE accelerator label value -> the most GPUs one node of it has (its largest machine type: a pod
#: cannot use GPUs of two nodes). The same GPUs as :data:`COMPUTE_GPU_NAMES`, spelled alike.
GKE_ACCELERATOR_MAX_GPUS = _most_gpus_per_vm()
#: The node label of a node's machine type (a pod's ``nodeSelector`` may name it).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: A Kubernetes object name (DNS-1123 subdomain), at most 253 characters.
KUBE_NAME_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
KUBE_NAME_MAX = 253
#: A namespace (DNS-1123 label), at most 63 characters.
KUBE_NAMESPACE_PATTERN = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
#: An environment variable name Kubernetes accepts.
KUBE_ENV_NAME_PATTERN = r"[-._a-zA-Z][-._a-zA-Z0-9]*"
#: A Kubernetes label value: at most 63 characters, alphanumeric at both ends.
KUBE_LABEL_VALUE_PATTERN = r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?"
#: A GKE cluster name: a lowercase letter first, lowercase letters, digits and '-', at most 40.
GKE_CLUSTER_NAME_PATTERN = r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?"

# -- GKE flex-start node pools (without queued provisioning) -----------------------------------------
# From GKE's "About flex-start provisioning mode" and "Run a small batch workload with flex-start"
# (checked 2026-12): pods opt in with a node selector; the autoscaler adds nodes one at a time.

#: The node label (and pod node selector) of a flex-start node pool's nodes: ``"true"``.
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
#: A flex-start node lives at most 7 days (the node pool's ``maxRunDuration``).
GKE_FLEX_START_MAX_RUN = timedelta(days=7)
#: The node labels of a TPU slice node pool's TPU and topology.
GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
#: The TPU resource a container asks for (chips), and the toleration of the taint on TPU nodes.
TPU_RESOURCE = "google.com/tpu"
TPU_TOLERATION = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
#: The TPU slices flex-start node pools offer on one node (single-host; GKE 1.33.0-gke.1712000 and
#: later; TPU v3 and v4 are not offered): GKE TPU accelerator -> topology -> chips on the node.
GKE_FLEX_START_TPU_TOPOLOGIES: dict[str, dict[str, int]] = {
    "tpu-v5-lite-podslice": {"1x1": 1, "2x2": 4, "2x4": 8},
    "tpu-v6e-slice": {"1x1": 1, "2x2": 4, "2x4": 8},
}
