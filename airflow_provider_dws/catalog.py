"""Lookups derived from :mod:`airflow_provider_dws.facts`: TPU slice shapes and chips, GPU machine
checks, calendar-mode shapes, GKE node checks, and the messages that explain a refusal (pure Python,
stdlib only).

No fact is written here: every value comes from a table of :mod:`~airflow_provider_dws.facts`,
which records what Google's documents say, so a wrong value is corrected there, once. The backends
(chip arithmetic, shapes) and the detailed parse-time checks (loaded only when a quick check
refuses) call these; ``catalog.machine_gpu_error`` is the one GPU attachment check every operator
that takes a machine type uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from airflow_provider_dws.facts import (
    BATCH_FLEX_START_GPUS,
    CALENDAR_GPU_SERIES,
    CALENDAR_H4D_MACHINES,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MAX_H4D_VMS,
    CALENDAR_TPU_CHIPS,
    CALENDAR_TPU_ROWS,
    CALENDAR_TPU_SERVING_CHIPS,
    CALENDAR_TPU_WORKLOADS,
    CHIPS_PER_HOST,
    COMPUTE_GPU_NAMES,
    FLEX_START_GPUS,
    GKE_ACCELERATOR_LABEL,
    GKE_ACCELERATOR_MAX_GPUS,
    GPU_ATTACHED_ROWS,
    GPU_FIXED_FAMILIES,
    GPU_MACHINE_ROWS,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    MAX_SLICES,
    NO_GPU_FAMILIES,
    QUEUED_RESOURCE_ID_PATTERN,
    REGION_PATTERN,
    TPU_FAMILY_ROWS,
    VERTEX_ACCELERATOR_TYPES,
    ZONE_PATTERN,
    machine_family,
    tpu_size_offered,
)
from airflow_provider_dws.patterns import LazyPattern

__all__ = [
    "BATCH_FLEX_START_GPUS",
    "CHIPS_PER_HOST",
    "FLEX_START_GPUS",
    "GPU_MACHINES",
    "MAX_SLICES",
    "QUEUED_RESOURCE_ID_PATTERN",
    "REGION_RE",
    "TPU_FAMILIES",
    "VERTEX_ACCELERATOR_TYPES",
    "ZONE_RE",
    "CalendarShape",
    "GpuMachine",
    "TpuFamily",
    "TpuShape",
    "batch_gpu_error",
    "batch_machine_gpus",
    "calendar_shape",
    "calendar_shape_error",
    "compute_gpu_name",
    "gpu_machine_error",
    "machine_gpu_error",
    "machines_for",
    "split_tpu_type",
    "tpu_chips",
    "tpu_shape",
    "tpu_type_examples",
]

# -- Cloud TPU ---------------------------------------------------------------------------------


class TpuFamily(NamedTuple):
    """One TPU generation as the accelerator type names it (``v5litepod`` in ``v5litepod-16``)."""

    name: str
    cores_per_chip: int  # 1: the suffix counts chips; 2: it counts TensorCores
    sizes: frozenset[int]  # the suffixes listed, below whole cubes
    cube_cores: int = 0  # above the listed sizes, any multiple of this (0: none) ...
    max_size: int = 0  # ... up to this suffix
    single_host_chips: int = 4  # the largest slice that is one TPU VM

    def accepts(self, size: int) -> bool:
        """True if ``<family>-<size>`` is a slice the API offers."""
        return tpu_size_offered(self.sizes, self.cube_cores, self.max_size, size)

    def describe_sizes(self) -> str:
        """The valid suffixes in words (for error messages)."""
        *head, last = (str(s) for s in sorted(self.sizes))
        unit = "chips" if self.cores_per_chip == 1 else "TensorCores"
        listed = f"{', '.join(head)} or {last} {unit}" if head else f"{last} {unit}"
        if self.cube_cores:
            return f"{listed}, or a multiple of {self.cube_cores} up to {self.max_size} (whole cubes)"
        return listed


TPU_FAMILIES: dict[str, TpuFamily] = {
    name: TpuFamily(name, cores, frozenset(sizes), cube, top, single)
    for name, (cores, sizes, cube, top, single) in TPU_FAMILY_ROWS.items()
}
TPU_TYPE_RE = LazyPattern(r"^(?P<family>[a-z0-9]+)-(?P<size>0|[1-9][0-9]*)$")


class TpuShape(NamedTuple):
    """One slice of ``accelerator_type``: its family, the suffix, chips and TPU VMs (hosts)."""

    accelerator_type: str
    family: str
    size: int
    chips: int
    hosts: int


def split_tpu_type(accelerator_type: object) -> tuple[TpuFamily, int] | None:
    """``"v5litepod-16"`` -> (the v5litepod family, 16); ``None`` unless family and syntax are known."""
    match = TPU_TYPE_RE.fullmatch(accelerator_type) if isinstance(accelerator_type, str) else None
    if match is None or match["family"] not in TPU_FAMILIES:
        return None
    return TPU_FAMILIES[match["family"]], int(match["size"])


def tpu_type_examples() -> str:
    """``v2-N, v3-N, ...``: the families, for messages."""
    return ", ".join(f"{name}-N" for name in TPU_FAMILIES)


def tpu_chips(accelerator_type: str) -> int:
    """Chips in one slice of ``accelerator_type`` (``v5litepod-16`` -> 16, ``v5p-8`` -> 4).

    Only the syntax is checked, so the shape of an existing resource is always described.
    """
    split = split_tpu_type(accelerator_type)
    if split is None:
        raise ValueError(f"not a Cloud TPU accelerator type: {accelerator_type!r}")
    family, size = split
    return max(1, size // family.cores_per_chip)


def tpu_shape(accelerator_type: str) -> TpuShape:
    """The shape of a slice the API offers, or ``ValueError`` saying what is wrong with it."""
    split = split_tpu_type(accelerator_type)
    if split is None:
        raise ValueError(
            f"{accelerator_type!r} is not a Cloud TPU accelerator type: expected one of "
            f"{tpu_type_examples()} (e.g. 'v5litepod-16')"
        )
    family, size = split
    if not family.accepts(size):
        raise ValueError(
            f"{accelerator_type!r} is not a {family.name} slice: the sizes are {family.describe_sizes()}"
        )
    chips = max(1, size // family.cores_per_chip)
    hosts = 1 if chips <= family.single_host_chips else chips // CHIPS_PER_HOST
    return TpuShape(accelerator_type, family.name, size, chips, hosts)


# -- GPUs (Vertex AI / Compute Engine) ---------------------------------------------------------


class GpuMachine(NamedTuple):
    """An accelerator-optimized machine type and the GPUs it always comes with."""

    machine_type: str
    accelerator_type: str
    accelerator_count: int

    @property
    def series(self) -> str:
        """``a3-highgpu`` for ``a3-highgpu-8g``."""
        return self.machine_type.rsplit("-", 1)[0]


GPU_MACHINES: dict[str, GpuMachine] = {
    machine: GpuMachine(machine, accelerator, count)
    for machine, (accelerator, count) in GPU_MACHINE_ROWS.items()
}
_SERIES = frozenset(m.series for m in GPU_MACHINES.values())


def gpu_machine_error(machine_type: str, accelerator_type: object, count: object) -> str | None:
    """Why ``count`` x ``accelerator_type`` (Vertex AI names) cannot run on ``machine_type`` (``None``:
    it can, or the tables cannot tell); see :func:`machine_gpu_error`."""
    return machine_gpu_error(machine_type, accelerator_type, count, vertex_names=True)


def machine_gpu_error(
    machine_type: str,
    gpu: object,
    count: object,
    *,
    vertex_names: bool = False,
    own_allowed: bool = False,
) -> str | None:
    """Why ``count`` x ``gpu`` cannot be on a VM of ``machine_type`` (``None``: it can, or the tables
    cannot tell): the one GPU attachment rule of every operator that takes a machine type.

    An accelerator-optimized machine type comes with a fixed GPU model and count
    (:data:`~airflow_provider_dws.facts.GPU_MACHINE_ROWS`), a family of
    :data:`~airflow_provider_dws.facts.GPU_ATTACHED_ROWS` takes the GPUs listed there attached, one of
    :data:`~airflow_provider_dws.facts.NO_GPU_FAMILIES` takes none. A machine type of an unknown family,
    or of an unknown series of a known one, is left to the API. ``gpu`` is a Compute Engine name, or a
    Vertex AI one with ``vertex_names``; ``None`` (and a ``None`` count) means none given: the machine's
    own GPUs where it has some (``own_allowed``: the operator then fills them in).
    """

    def name(compute: str) -> str:
        return COMPUTE_GPU_NAMES.get(compute, compute) if vertex_names else compute

    given = _COMPUTE_BY_VERTEX.get(gpu, gpu) if vertex_names and isinstance(gpu, str) else gpu
    family = machine_family(machine_type)
    machine = GPU_MACHINES.get(machine_type)
    if machine is not None:
        return _fixed_gpu_error(machine, given, count, name, own_allowed)
    if family in GPU_FIXED_FAMILIES:
        series = machine_type.rsplit("-", 1)[0]
        if series not in _SERIES:
            return None  # a series the table does not know yet
        known = sorted(m for m, spec in GPU_MACHINES.items() if spec.series == series)
        return f"machine_type {machine_type!r} is not a {series} machine type; use one of {known}"
    if given is None:
        return None
    if family in GPU_ATTACHED_ROWS:
        return _attached_gpu_error(machine_type, gpu, str(given), count, name)
    if family in NO_GPU_FAMILIES:
        return (
            f"machine_type {machine_type!r} takes no GPUs ({family} machines have none and none can be "
            f"attached), got {gpu!r}{_where_else(str(given), name)}"
        )
    return None  # a family the tables do not know: the API's to judge


def _attached_gpu_error(
    machine_type: str, gpu: object, given: str, count: object, name: Callable[[str], str]
) -> str | None:
    """A family that takes GPUs attached: one of its GPUs, in a count it comes in."""
    attachable = GPU_ATTACHED_ROWS[machine_family(machine_type)]
    counts = attachable.get(given)
    if counts is None:
        return (
            f"machine_type {machine_type!r} takes only {', '.join(name(g) for g in attachable)} "
            f"attached, got {gpu!r}{_where_else(given, name)}"
        )
    if count is not None and count not in counts:
        return (
            f"machine_type {machine_type!r} takes {', '.join(map(str, counts))} x {name(given)}, "
            f"got accelerator_count={count!r}"
        )
    return None


def _fixed_gpu_error(
    machine: GpuMachine, given: object, count: object, name: Callable[[str], str], own_allowed: bool
) -> str | None:
    """A machine with its own GPUs: none given (where allowed) or exactly those."""
    own, fixed = compute_gpu_name(machine.accelerator_type), machine.accelerator_count
    if own_allowed and given is None and count is None:
        return None
    if given == own and (count == fixed or (own_allowed and count is None)):
        return None
    leave_out = " (or leave both out)" if own_allowed else ""
    shown = fixed if own_allowed and count is None else count
    got = f"{shown!r} x {_spelt(given, name)!r}"
    return (
        f"machine_type {machine.machine_type!r} comes with exactly {fixed} x {name(own)}: set "
        f"accelerator_type={name(own)!r} and accelerator_count={fixed}{leave_out}, got {got}"
    )


def _spelt(given: object, name: Callable[[str], str]) -> object:
    """A GPU as the caller spells it (a name the tables do not know: as given)."""
    return name(given) if isinstance(given, str) and given in COMPUTE_GPU_NAMES else given


def _where_else(gpu: str, name: Callable[[str], str]) -> str:
    """Where ``gpu`` (a Compute name) can run instead, for messages (empty when the tables do not know)."""
    series = sorted({GPU_MACHINES[m].series for m in machines_for(COMPUTE_GPU_NAMES.get(gpu, ""))})
    if series:
        return f"; {name(gpu)} comes with the {', '.join(series)} machine types"
    families = sorted(family for family, gpus in GPU_ATTACHED_ROWS.items() if gpu in gpus)
    return f"; {name(gpu)} attaches to {', '.join(families)} machine types" if families else ""


def machines_for(accelerator_type: str) -> list[str]:
    """The machine types that come with ``accelerator_type`` (for messages)."""
    return sorted(m for m, spec in GPU_MACHINES.items() if spec.accelerator_type == accelerator_type)


# -- GPUs as Cloud Batch and Compute Engine name them ------------------------------------------

#: Vertex AI GPU name -> Compute Engine name (``NVIDIA_L4`` -> ``nvidia-l4``).
_COMPUTE_BY_VERTEX = {vertex: compute for compute, vertex in COMPUTE_GPU_NAMES.items()}


def compute_gpu_name(vertex_name: str) -> str:
    """The Compute Engine name of a GPU named the Vertex AI way (unknown: returned as is)."""
    return _COMPUTE_BY_VERTEX.get(vertex_name, vertex_name)


def batch_machine_gpus(machine_type: str) -> tuple[str, int] | None:
    """The GPUs (Compute name, count) a known GPU machine type always comes with, else ``None``."""
    machine = GPU_MACHINES.get(machine_type)
    return (
        None if machine is None else (compute_gpu_name(machine.accelerator_type), machine.accelerator_count)
    )


def batch_gpu_error(machine_type: str, accelerator_type: str | None, count: int | None) -> str | None:
    """Why ``count`` x ``accelerator_type`` (Compute names) cannot run on ``machine_type`` in a Flex
    Start Batch job or as flex-start VMs (``None``: it can; ``None`` type and count: the machine's own
    GPUs): a GPU Flex Start offers, on a VM that has GPUs (:func:`machine_gpu_error`)."""
    if accelerator_type is not None and accelerator_type not in BATCH_FLEX_START_GPUS:
        return (
            f"accelerator_type {accelerator_type!r} is not a GPU Flex Start offers to Cloud Batch; "
            f"use one of {sorted(BATCH_FLEX_START_GPUS)}"
        )
    error = machine_gpu_error(machine_type, accelerator_type, count, own_allowed=True)
    if error or accelerator_type is not None:
        return error
    own = batch_machine_gpus(machine_type)
    if own is not None:
        # A machine type that brings its GPUs (a4x-highgpu-4g's GB200s) must bring ones Flex Start offers.
        if own[0] not in BATCH_FLEX_START_GPUS:
            return (
                f"machine_type {machine_type!r} comes with {own[0]} GPUs, which Flex Start does not offer; "
                f"use a machine type whose GPUs are one of {sorted(BATCH_FLEX_START_GPUS)}"
            )
        return None
    if machine_family(machine_type) in NO_GPU_FAMILIES:
        return (
            f"machine_type {machine_type!r} has no GPUs of its own and takes none: Flex Start schedules "
            "GPU VMs, so use a GPU machine type such as 'g2-standard-8' or 'a3-highgpu-8g' (or an n1 "
            "machine type with accelerator_type='nvidia-tesla-t4')"
        )
    return (
        f"machine_type {machine_type!r} has no GPUs of its own: Flex Start schedules GPU VMs, so "
        f"set accelerator_type (one of {sorted(BATCH_FLEX_START_GPUS)}) or use a GPU machine "
        "type such as 'g2-standard-8' or 'a3-highgpu-8g'"
    )


# -- locations ---------------------------------------------------------------------------------

REGION_RE = LazyPattern(f"^{REGION_PATTERN}$")
ZONE_RE = LazyPattern(f"^{ZONE_PATTERN}$")


# -- calendar mode -----------------------------------------------------------------------------


class CalendarShape(NamedTuple):
    """What one calendar block reserves: VMs of a machine type, or TPU chips of a version.

    ``accelerator_type`` and ``accelerator_count`` are as the request records name them: the GPU's
    Compute Engine name and the GPUs over every VM (none for H4D), or the Cloud TPU accelerator
    type of the whole block (``v6e-32``) and its chips.
    """

    machine_type: str | None
    vm_count: int
    tpu_version: str | None
    chip_count: int
    accelerator_type: str | None
    accelerator_count: int

    def describe(self) -> str:
        """``8 x a3-highgpu-8g (64 x nvidia-h100-80gb)`` or ``32 TPU v6e chips``."""
        if self.tpu_version:
            return f"{self.chip_count} TPU {self.tpu_version} chip{'s' if self.chip_count != 1 else ''}"
        gpus = f" ({self.accelerator_count} x {self.accelerator_type})" if self.accelerator_type else ""
        return f"{self.vm_count} x {self.machine_type}{gpus}"


def calendar_shape_error(
    machine_type: object, vm_count: object, tpu_version: object, chip_count: object, workload_type: object
) -> str | None:
    """Why calendar mode cannot reserve this (``None``: it can): a GPU or H4D machine type and its VM
    count, or a TPU version and its chips (and, for TPUs, the workload type)."""
    if (machine_type is None) == (tpu_version is None):
        return "pass either machine_type and vm_count (GPU or H4D VMs) or tpu_version and chip_count (TPUs)"
    if machine_type is not None:
        if chip_count is not None:
            return "chip_count is for TPU blocks (with tpu_version); a VM block counts vm_count"
        gpu = (
            isinstance(machine_type, str)
            and machine_type in GPU_MACHINES
            and machine_type.rsplit("-", 1)[0] in CALENDAR_GPU_SERIES
        )
        if not gpu and machine_type not in CALENDAR_H4D_MACHINES:
            offered = sorted(m for m in GPU_MACHINES if m.rsplit("-", 1)[0] in CALENDAR_GPU_SERIES)
            return (
                f"machine_type {machine_type!r} is not offered in calendar mode, which reserves A3-or-newer "
                f"GPU machines ({', '.join(offered)}) and H4D ({', '.join(CALENDAR_H4D_MACHINES)})"
            )
        most = CALENDAR_MAX_GPU_VMS if gpu else CALENDAR_MAX_H4D_VMS
        if isinstance(vm_count, bool) or not isinstance(vm_count, int) or not 1 <= vm_count <= most:
            return f"vm_count must be an integer from 1 to {most} (VMs of {machine_type} per request), got {vm_count!r}"
        return None
    if vm_count is not None:
        return "vm_count is for VM blocks (with machine_type); a TPU block counts chip_count"
    if tpu_version not in CALENDAR_TPU_ROWS:
        return f"tpu_version must be one calendar mode offers, one of {sorted(CALENDAR_TPU_ROWS)}, got {tpu_version!r}"
    if workload_type not in CALENDAR_TPU_WORKLOADS:
        return f"workload_type must be one of {list(CALENDAR_TPU_WORKLOADS)}, got {workload_type!r}"
    chips = (
        CALENDAR_TPU_SERVING_CHIPS
        if (tpu_version, workload_type) == ("v5e", "SERVING")
        else CALENDAR_TPU_CHIPS
    )
    if chip_count not in chips or isinstance(chip_count, bool):
        return f"chip_count must be one of {list(chips)} for a TPU {tpu_version} {workload_type} block, got {chip_count!r}"
    return None


def calendar_shape(
    machine_type: str | None,
    vm_count: int | None,
    tpu_version: str | None = None,
    chip_count: int | None = None,
    workload_type: str = "BATCH",
) -> CalendarShape:
    """The block's shape, or ``ValueError`` with :func:`calendar_shape_error`'s message."""
    error = calendar_shape_error(machine_type, vm_count, tpu_version, chip_count, workload_type)
    if error:
        raise ValueError(error)
    if tpu_version is not None:
        assert chip_count is not None
        family, cores = CALENDAR_TPU_ROWS[tpu_version][2:]
        return CalendarShape(None, 0, tpu_version, chip_count, f"{family}-{chip_count * cores}", chip_count)
    assert machine_type is not None and vm_count is not None
    gpus = batch_machine_gpus(machine_type)
    if gpus is None:  # H4D: no accelerators
        return CalendarShape(machine_type, vm_count, None, 0, None, 0)
    return CalendarShape(machine_type, vm_count, None, 0, gpus[0], gpus[1] * vm_count)


# -- GPUs on GKE (queued provisioning) -----------------------------------------------------------


def gke_accelerators() -> list[str]:
    """The GKE accelerator label values this table knows (for messages)."""
    return sorted(GKE_ACCELERATOR_MAX_GPUS)


def gke_gpu_machines(accelerator: str) -> list[str]:
    """The accelerator-optimized machine types of a GKE accelerator (empty for N1-attached GPUs)."""
    return machines_for(COMPUTE_GPU_NAMES.get(accelerator, accelerator))


def gke_gpu_error(accelerator: str | None, gpus: int) -> str | None:
    """Why a pod asking for ``gpus`` x ``nvidia.com/gpu`` cannot run on a node of ``accelerator``
    (the ``cloud.google.com/gke-accelerator`` node selector; ``None``: none given), or ``None``.

    A pod runs on one node, so it can use at most that node's GPUs; the GKE node pool of a request
    is found by its accelerator, so a GPU request needs the selector and a selector needs GPUs.
    """
    if accelerator is None:
        if gpus > 0:
            return (
                f"the pod asks for {gpus} x {GPU_RESOURCE} but its nodeSelector has no "
                f"{GKE_ACCELERATOR_LABEL}: name the node pool's GPU, one of {gke_accelerators()}"
            )
        return None
    most = GKE_ACCELERATOR_MAX_GPUS.get(accelerator)
    if most is None:
        return (
            f"nodeSelector {GKE_ACCELERATOR_LABEL}={accelerator!r} is not a GKE GPU; use one of "
            f"{gke_accelerators()}"
        )
    if gpus <= 0:
        return (
            f"nodeSelector {GKE_ACCELERATOR_LABEL}={accelerator!r} asks for a GPU node, but no container "
            f"requests {GPU_RESOURCE}: set resources.limits[{GPU_RESOURCE!r}] (1 to {most})"
        )
    if gpus > most:
        machines = gke_gpu_machines(accelerator)
        largest = f" (its largest machine type, {machines[-1]})" if machines else ""
        return (
            f"the pod asks for {gpus} x {GPU_RESOURCE} but a node with {accelerator} has at most {most}"
            f"{largest}, and a pod runs on one node: ask for at most {most} per pod and more pods (count)"
        )
    return None


def gke_node_error(machine_type: str, accelerator: str | None, gpus: int) -> str | None:
    """Why a pod asking for ``gpus`` x ``nvidia.com/gpu`` on ``accelerator`` cannot run on a node of
    ``machine_type`` (its ``node.kubernetes.io/instance-type`` selector), or ``None``: the GPU
    attachment rule of :func:`machine_gpu_error`, and no more GPUs than the machine comes with."""
    own = batch_machine_gpus(machine_type)
    selected = f"nodeSelector {INSTANCE_TYPE_LABEL}={machine_type!r}"
    if own is None:
        error = machine_gpu_error(machine_type, accelerator, None)
        return f"{selected}: {error}" if error else None
    if accelerator is not None and accelerator != own[0]:
        return f"{selected} comes with {own[1]} x {own[0]}, not the {GKE_ACCELERATOR_LABEL} {accelerator!r}"
    if gpus > own[1]:
        return (
            f"the pod asks for {gpus} x {GPU_RESOURCE} but {selected} comes with {own[1]} x {own[0]}, "
            "and a pod runs on one node"
        )
    return None
