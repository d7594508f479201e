"""The provider's facts against the emulator's, for every fact both hold.

Each side has its own table (``airflow_provider_dws.facts`` / ``catalog`` for the parse-time checks,
``dws_emulator.facts`` and its API modules for what the emulator refuses), each written from Google's
documents; neither imports the other. A wrong fact in one of them now fails here, naming the fact and
both values, instead of passing both the parse-time check and the emulator and failing only on Google
Cloud. A disagreement is settled against the documents (the source each side cites), never by making
one side read the other's table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from airflow_provider_dws import catalog, facts
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator, check_accelerator
from dws_emulator import facts as emulator_facts
from dws_emulator.compute import instances as compute_instances
from dws_emulator.compute import validation as compute_checks
from dws_emulator.core import errors as emulator_errors
from dws_emulator.kube import provisioning as kube_provisioning
from dws_emulator.kube import validation as kube_checks
from dws_emulator.tpu.validation import parse_accelerator_type
from dws_emulator.vertex import validation as vertex_checks


def disagreement(fact: str, provider: Any, emulator: Any) -> str:
    """The failure message: the fact, both values; for mappings only the keys that differ, for sets
    only what one has and the other has not."""
    if isinstance(provider, (set, frozenset)) and isinstance(emulator, (set, frozenset)):
        provider, emulator = sorted(provider - emulator), sorted(emulator - provider)
    elif isinstance(provider, dict) and isinstance(emulator, dict):
        keys = sorted(k for k in provider.keys() | emulator.keys() if provider.get(k) != emulator.get(k))
        provider = {k: provider.get(k, "<missing>") for k in keys}
        emulator = {k: emulator.get(k, "<missing>") for k in keys}
    return f"{fact}: the provider says {provider!r}, the emulator says {emulator!r}"


def agree(fact: str, provider: Any, emulator: Any) -> None:
    assert provider == emulator, disagreement(fact, provider, emulator)


# -- GPUs ----------------------------------------------------------------------------------------

#: Fact name -> (the provider's value, the emulator's), read when the test runs.
GPU_FACTS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "GPU machine type -> (Vertex AI GPU, count)": lambda: (
        dict(facts.GPU_MACHINE_ROWS),
        dict(emulator_facts.MACHINE_GPUS),
    ),
    "Compute Engine GPU name -> Vertex AI name": lambda: (
        dict(facts.COMPUTE_GPU_NAMES),
        dict(emulator_facts.VERTEX_NAME),
    ),
    "GPUs a FLEX_START Batch job (a flex-start VM) may have": lambda: (
        set(facts.BATCH_FLEX_START_GPUS),
        set(emulator_facts.FLEX_START_GPUS),
    ),
    "calendar-mode GPU machine types -> (Vertex AI GPU, GPUs per VM)": lambda: (
        {m: row for m, row in facts.GPU_MACHINE_ROWS.items() if facts.calendar_gpu_machine(m)},
        dict(emulator_facts.CALENDAR_MACHINES),
    ),
}


@pytest.mark.parametrize("fact", sorted(GPU_FACTS))
def test_gpu_facts_agree(fact: str) -> None:
    provider, emulator = GPU_FACTS[fact]()
    agree(fact, provider, emulator)


def test_attachable_gpus_are_gpus_the_emulator_knows_and_come_with_no_machine_series() -> None:
    """The provider's N1-attached GPUs: the emulator serves them (guestAccelerators, GKE node pools)
    and none of its accelerator-optimized series has them built in."""
    attachable = {gpu for gpus in facts.GPU_ATTACHED_ROWS.values() for gpu in gpus}
    unknown = attachable - set(emulator_facts.VERTEX_NAME)
    agree("attachable GPUs the emulator does not know", set(), unknown)
    built_in = attachable & {series.gpu for series in emulator_facts.GPU_SERIES}
    agree("attachable GPUs that come built into a machine series", set(), built_in)


def test_gke_node_gpu_limits_agree_with_the_emulator_s_machines() -> None:
    """GKE's per-node GPU limit (the provider's) is the most any machine of that GPU has (the emulator's)."""
    most: dict[str, int] = {}
    for series in emulator_facts.GPU_SERIES:
        for count in series.gpus.values():
            most[series.gpu] = max(most.get(series.gpu, 0), count)
    fixed = {gpu: n for gpu, n in facts.GKE_ACCELERATOR_MAX_GPUS.items() if gpu in most}
    agree("most GPUs of one machine type, per GPU", fixed, most)


# -- Cloud TPU -----------------------------------------------------------------------------------


def provider_accepts(accelerator_type: str) -> bool:
    op = CreateTPUQueuedResourceOperator(
        task_id="t", zone="us-west4-a", accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite"
    )
    try:
        check_accelerator(op, accelerator_type)
    except ValueError:
        return False
    return True


def emulator_shape(accelerator_type: str) -> tuple[int, int] | None:
    try:
        shape = parse_accelerator_type(accelerator_type)
    except ValueError:
        return None
    return shape.chips, shape.hosts


def test_tpu_families_agree() -> None:
    agree("TPU families", set(catalog.TPU_FAMILIES), set(emulator_facts.TPU_FAMILIES))


@pytest.mark.parametrize("family", sorted(catalog.TPU_FAMILIES))
def test_tpu_slices_agree(family: str) -> None:
    """Every suffix up to past the largest slice: offered by both or neither, with the same chips and
    TPU VMs (the operator's parse-time check, the catalog's shape, the emulator's)."""
    row = catalog.TPU_FAMILIES[family]
    provider: dict[int, tuple[int, int] | None] = {}
    emulator: dict[int, tuple[int, int] | None] = {}
    for size in range(max(row.max_size, *row.sizes) + 257):
        name = f"{family}-{size}"
        shape = catalog.tpu_shape(name) if provider_accepts(name) else None
        provider[size] = None if shape is None else (shape.chips, shape.hosts)
        emulator[size] = emulator_shape(name)
    agree(f"{family} slices: suffix -> (chips, TPU VMs)", provider, emulator)


def test_multislice_limit_agrees() -> None:
    agree("slices in one multislice request", facts.MAX_SLICES, emulator_facts.MAX_SLICES)


# -- names and locations ----------------------------------------------------------------------------

#: Real zones and regions (Compute Engine's regions and zones pages), and names that are neither.
ZONES = ["us-central1-a", "us-west4-b", "europe-west4-c", "northamerica-northeast1-a", "me-central2-b"]
REGIONS = ["us-central1", "us-east5", "asia-southeast1", "northamerica-northeast2", "africa-south1"]
NOT_LOCATIONS = [
    "us-central",
    "uscentral1",
    "US-central1",
    "us-central1-",
    "us-central1-ab",
    "central1-a",
    "",
]


def accepted(pattern: str | re.Pattern[str], names: Iterable[str]) -> set[str]:
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    return {name for name in names if compiled.fullmatch(name)}


@pytest.mark.parametrize(
    ("fact", "provider", "emulator"),
    [
        ("zone pattern", facts.ZONE_PATTERN, emulator_facts.ZONE_RE),
        ("region pattern", facts.REGION_PATTERN, emulator_facts.REGION_RE),
    ],
)
def test_location_patterns_agree(fact: str, provider: str, emulator: re.Pattern[str]) -> None:
    names = ZONES + REGIONS + NOT_LOCATIONS
    agree(f"{fact}: the names it accepts", accepted(provider, names), accepted(emulator, names))
    assert accepted(provider, names) in (set(ZONES), set(REGIONS)), disagreement(fact, provider, "")


LABEL_KEYS = ["dws_key", "a", "a" * 63, "a" * 64, "Dws", "1abc", "dws-dag", "dws.dag", ""]
LABEL_VALUES = ["", "x", "0-9_a", "v" * 63, "v" * 64, "UPPER", "a.b"]


def test_label_rules_agree() -> None:
    agree(
        "label keys accepted",
        accepted(facts.LABEL_KEY_PATTERN, LABEL_KEYS),
        accepted(emulator_errors._LABEL_KEY_RE, LABEL_KEYS),
    )
    agree(
        "label values accepted",
        accepted(facts.LABEL_VALUE_PATTERN, LABEL_VALUES),
        accepted(emulator_errors._LABEL_VALUE_RE, LABEL_VALUES),
    )
    agree("labels on one resource", facts.MAX_LABELS, emulator_errors.MAX_LABELS)


# -- limits ----------------------------------------------------------------------------------------

LIMITS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "Vertex AI default max wait (s)": lambda: (
        facts.DEFAULT_MAX_WAIT.total_seconds(),
        vertex_checks.DEFAULT_MAX_WAIT_SECONDS,
    ),
    "Flex Start longest run (s)": lambda: (
        facts.MAX_RUN_LIMIT.total_seconds(),
        vertex_checks.MAX_FLEX_TIMEOUT_SECONDS,
    ),
    "resize request run duration (s)": lambda: (
        (facts.COMPUTE_MIN_RUN.total_seconds(), facts.COMPUTE_MAX_RUN.total_seconds()),
        (compute_checks.MIN_RUN_SECONDS, compute_checks.MAX_RUN_SECONDS),
    ),
    "standalone flex-start VM wait, requestValidForDuration (s)": lambda: (
        (facts.COMPUTE_VM_MIN_WAIT.total_seconds(), facts.COMPUTE_VM_MAX_WAIT.total_seconds()),
        (compute_instances.MIN_WAIT_SECONDS, compute_instances.MAX_WAIT_SECONDS),
    ),
    "standalone flex-start VM termination actions": lambda: (
        set(facts.COMPUTE_TERMINATION_ACTIONS),
        set(compute_instances.TERMINATION_ACTIONS),
    ),
    "calendar block length (s)": lambda: (
        (facts.CALENDAR_MIN_BLOCK.total_seconds(), facts.CALENDAR_MAX_BLOCK.total_seconds()),
        (emulator_facts.CALENDAR_MIN_SECONDS, emulator_facts.CALENDAR_MAX_SECONDS),
    ),
    "calendar horizon, GPUs and TPUs (s)": lambda: (
        (facts.CALENDAR_GPU_HORIZON.total_seconds(), facts.CALENDAR_TPU_HORIZON.total_seconds()),
        (emulator_facts.CALENDAR_GPU_HORIZON_SECONDS, emulator_facts.CALENDAR_TPU_HORIZON_SECONDS),
    ),
    "calendar GPU VMs per request": lambda: (facts.CALENDAR_MAX_GPU_VMS, emulator_facts.CALENDAR_MAX_GPU_VMS),
    "calendar TPU chips per request": lambda: (facts.CALENDAR_TPU_CHIPS, emulator_facts.CALENDAR_TPU_CHIPS),
    "calendar v5e SERVING chips": lambda: (
        facts.CALENDAR_TPU_SERVING_CHIPS,
        emulator_facts.CALENDAR_TPU_SERVING_CHIPS,
    ),
    "calendar TPU workload types": lambda: (
        facts.CALENDAR_TPU_WORKLOADS,
        emulator_facts.CALENDAR_TPU_WORKLOADS,
    ),
    "calendar TPU vmFamily -> Cloud TPU family": lambda: (
        {row[0]: row[2] for row in facts.CALENDAR_TPU_ROWS.values()},
        dict(emulator_facts.CALENDAR_TPU_FAMILIES),
    ),
    "ProvisioningRequest pod sets, most": lambda: (
        facts.PROVISIONING_REQUEST_MAX_POD_SETS,
        kube_checks.MAX_POD_SETS,
    ),
    "ProvisioningRequest maxRunDurationSeconds, most": lambda: (
        facts.PROVISIONING_REQUEST_MAX_RUN.total_seconds(),
        kube_checks.MAX_RUN_SECONDS,
    ),
    "GKE queued provisioning class": lambda: (facts.GKE_QUEUED_PROVISIONING_CLASS, kube_checks.QUEUED_CLASS),
    "pod annotations that consume a ProvisioningRequest": lambda: (
        (facts.CONSUME_ANNOTATION, facts.CLASS_ANNOTATION),
        (kube_provisioning.CONSUME_ANNOTATION, kube_provisioning.CLASS_ANNOTATION),
    ),
    "the reservation affinity key": lambda: (facts.RESERVATION_AFFINITY_KEY, vertex_checks.RESERVATION_KEY),
}


@pytest.mark.parametrize("fact", sorted(LIMITS))
def test_limits_agree(fact: str) -> None:
    provider, emulator = LIMITS[fact]()
    agree(fact, provider, emulator)


def test_a_disagreement_names_the_fact_and_both_values() -> None:
    message = disagreement("calendar GPU VMs per request", {"a": 1, "b": 2}, {"a": 1, "b": 3})
    assert message == "calendar GPU VMs per request: the provider says {'b': 2}, the emulator says {'b': 3}"
    with pytest.raises(AssertionError, match="the provider says 80, the emulator says 81"):
        agree("calendar GPU VMs per request", 80, 81)
    only = disagreement("GPUs", {"nvidia-l4", "nvidia-gb200"}, {"nvidia-l4", "nvidia-b200"})
    assert only == "GPUs: the provider says ['nvidia-gb200'], the emulator says ['nvidia-b200']"
