"""The accelerator catalog: the operators' checks, the TPU backend's arithmetic and the documented
shapes (D8). The emulator's own table is compared with this one in ``test_facts_crosscheck.py``."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.aiplatform_v1 import AcceleratorType

from airflow_provider_dws import catalog
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.policies import Placement

# From the public Cloud TPU pages (tpu/docs/v2, v3, v4, v5e, v5p, v6e): listed slices, and
# slices the API does not offer (v5e and v6e have no 2-chip shape; v2 and v3 no 16-core slice).
DOCUMENTED_VALID = [
    "v2-8", "v2-32", "v2-128", "v2-256", "v2-512",
    "v3-8", "v3-32", "v3-2048",
    "v4-8", "v4-16", "v4-32", "v4-64", "v4-128", "v4-384", "v4-4096",
    "v5p-8", "v5p-16", "v5p-128", "v5p-256", "v5p-12288",
    "v5litepod-1", "v5litepod-4", "v5litepod-8", "v5litepod-16", "v5litepod-256",
    "v6e-1", "v6e-4", "v6e-8", "v6e-64", "v6e-256",
]  # fmt: skip
DOCUMENTED_INVALID = [
    "v2-16", "v2-64", "v3-16", "v3-4096", "v4-4", "v4-96", "v5p-4", "v5p-12416",
    "v5litepod-2", "v5litepod-12", "v5litepod-512", "v6e-2", "v6e-0", "v5litepod-016",
]  # fmt: skip


def tpu_op(**kwargs: Any) -> CreateTPUQueuedResourceOperator:
    args: dict[str, Any] = {
        "task_id": "t",
        "zone": "us-west4-a",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    args.update(kwargs)
    return CreateTPUQueuedResourceOperator(**args)


@pytest.mark.parametrize("accelerator_type", DOCUMENTED_VALID)
def test_documented_slices_are_accepted(accelerator_type: str) -> None:
    assert catalog.tpu_shape(accelerator_type).accelerator_type == accelerator_type
    assert tpu_op(accelerator_type=accelerator_type).accelerator_type == accelerator_type


@pytest.mark.parametrize("accelerator_type", DOCUMENTED_INVALID)
def test_slices_the_api_refuses_are_refused_at_parse_time(accelerator_type: str) -> None:
    with pytest.raises(ValueError, match="is not a"):
        catalog.tpu_shape(accelerator_type)
    with pytest.raises(ValueError, match=f"accelerator_type '{accelerator_type}'|must be one of"):
        tpu_op(accelerator_type=accelerator_type)


@pytest.mark.parametrize(
    "accelerator_type", ["v5litepod-16", "v5p-8", "v4-32", "v2-512", "v6e-256", "v5p-12288"]
)
def test_a_shape_s_chips_are_the_syntax_only_count(accelerator_type: str) -> None:
    """``tpu_chips`` (syntax only, for existing resources) counts what ``tpu_shape`` (offered slices) does."""
    assert catalog.tpu_shape(accelerator_type).chips == catalog.tpu_chips(accelerator_type)


@pytest.mark.parametrize(
    ("accelerator_type", "chips", "hosts"),
    [("v5litepod-16", 16, 4), ("v5litepod-8", 8, 1), ("v5p-8", 4, 1), ("v5p-16", 8, 2), ("v6e-256", 256, 64)],
)
def test_documented_chips_and_vms(accelerator_type: str, chips: int, hosts: int) -> None:
    shape = catalog.tpu_shape(accelerator_type)
    assert (shape.chips, shape.hosts) == (chips, hosts)


def test_vertex_accelerator_names_are_the_clients_enum() -> None:
    assert {k: int(v) for k, v in AcceleratorType.__members__.items()} == catalog.VERTEX_ACCELERATOR_TYPES
    assert set(catalog.VERTEX_ACCELERATOR_TYPES) >= catalog.FLEX_START_GPUS
    assert {m.accelerator_type for m in catalog.GPU_MACHINES.values()} <= catalog.FLEX_START_GPUS


# -- GPU machine types -------------------------------------------------------------------------

IMAGE = {"image_uri": "us-docker.pkg.dev/p/r/train:1"}


def vertex_op(machine_spec: dict[str, Any], **kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    pool = {"machine_spec": machine_spec, "replica_count": 1, "container_spec": IMAGE}
    return CreateVertexAIFlexStartJobOperator(
        task_id="t", region="us-central1", worker_pool_specs=[pool], **kwargs
    )


@pytest.mark.parametrize(
    ("machine", "accelerator", "count"),
    [
        ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
        ("a3-highgpu-1g", "NVIDIA_H100_80GB", 1),
        ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
        ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
        ("a4-highgpu-8g", "NVIDIA_B200", 8),
        ("a2-highgpu-4g", "NVIDIA_TESLA_A100", 4),
        ("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16),
        ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8),
        ("g2-standard-24", "NVIDIA_L4", 2),
        ("g2-standard-96", "NVIDIA_L4", 8),
    ],
)
def test_machines_with_their_own_gpus_are_accepted(machine: str, accelerator: str, count: int) -> None:
    spec = {"machine_type": machine, "accelerator_type": accelerator, "accelerator_count": count}
    assert vertex_op(spec).worker_pool_specs[0]["machine_spec"] == spec


@pytest.mark.parametrize(
    ("machine", "accelerator", "count"),
    [
        ("a3-highgpu-8g", "NVIDIA_H100_80GB", 4),
        ("a3-highgpu-8g", "NVIDIA_TESLA_A100", 8),
        ("a3-megagpu-8g", "NVIDIA_H100_80GB", 8),
        ("g2-standard-24", "NVIDIA_L4", 1),
    ],
)
def test_machine_accelerator_mismatch_is_refused_naming_the_right_values(
    machine: str, accelerator: str, count: int
) -> None:
    right = catalog.GPU_MACHINES[machine]
    spec = {"machine_type": machine, "accelerator_type": accelerator, "accelerator_count": count}
    with pytest.raises(
        ValueError,
        match=(
            rf"machine_type '{machine}' comes with exactly {right.accelerator_count} x "
            rf"{right.accelerator_type}: set accelerator_type='{right.accelerator_type}' and "
            rf"accelerator_count={right.accelerator_count}"
        ),
    ):
        vertex_op(spec)


def test_a_misspelt_machine_of_a_known_series_is_refused() -> None:
    spec = {"machine_type": "a3-highgpu-3g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 3}
    with pytest.raises(ValueError, match=r"'a3-highgpu-3g' is not a a3-highgpu machine type; use one of"):
        vertex_op(spec)


def test_a_failover_machine_brings_its_own_gpu_count() -> None:
    home = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
    other = Placement("us-east4", machine_type="a2-ultragpu-4g", accelerator_type="NVIDIA_A100_80GB")
    op = vertex_op(home, capacity_retry=1, failover=[other])
    job = op.adapter().build(RequestIdentity("d", "t", "r"), other)
    spec = job.job_spec.worker_pool_specs[0].machine_spec
    assert (spec.machine_type, spec.accelerator_count) == ("a2-ultragpu-4g", 4)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (
            Placement("us-east4", machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_A100_80GB"),
            "machine_type 'a3-highgpu-8g' comes with exactly 8 x NVIDIA_H100_80GB",
        ),
        (
            Placement("us-east4", accelerator_type="NVIDIA_A100_80GB"),
            "an accelerator_type needs its machine_type too",
        ),
    ],
)
def test_failover_machine_mismatch_is_refused(placement: Placement, message: str) -> None:
    home = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
    with pytest.raises(ValueError, match=message):
        vertex_op(home, capacity_retry=1, failover=[placement])


def test_worker_pool_fields_are_the_clients() -> None:
    from google.cloud.aiplatform_v1 import WorkerPoolSpec

    from airflow_provider_dws.operators.vertex_ai import WORKER_POOL_FIELDS

    assert set(WorkerPoolSpec.meta.fields) == WORKER_POOL_FIELDS
