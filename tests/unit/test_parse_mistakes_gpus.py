"""GPU attachment rules of every machine family, one table and one check for every operator that takes
a machine type (issue 27, section 3).

Accelerator-optimized machine types (a2, a3, a4, a4x, g2) come with a fixed GPU model and count, N1
takes T4, V100, P100 or P4 attached, and the other families (n2, c3, e2, ...) take none. Every operator
that names a machine type and a GPU refuses a pair no machine can be, when the DAG is parsed, with the
same words: Vertex AI worker pools, Cloud Batch (its parameters and a whole job), Compute Engine
flex-start VMs, the reserved consumers, failover placements, and a GKE pod template that selects a
machine type; Kueue's and GKE's per-node GPU limit is derived from the same table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws import catalog, facts
from airflow_provider_dws.operators.batch import (
    CreateBatchFlexStartJobOperator,
    CreateBatchReservedJobOperator,
)
from airflow_provider_dws.operators.compute import (
    CreateComputeFlexStartVMsOperator,
    CreateComputeReservedVMsOperator,
)
from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.policies import Placement

RESERVATION = "projects/p/zones/us-central1-a/reservations/block-1"
N2_WITH_L4 = (
    "machine_type 'n2-standard-8' takes no GPUs (n2 machines have none and none can be attached), got "
)


def in_dag(factory: Callable[..., Any], **kwargs: Any) -> Any:
    """The operator as a DAG file builds it."""
    with DAG("gpus", schedule=None, start_date=datetime(2026, 1, 1)):
        return factory(**kwargs)


def batch(**kw: Any) -> CreateBatchFlexStartJobOperator:
    return in_dag(
        CreateBatchFlexStartJobOperator, task_id="infer", region="us-central1", image_uri="i:1", **kw
    )


def compute(**kw: Any) -> CreateComputeFlexStartVMsOperator:
    args = {"task_id": "vms", "zone": "us-central1-a", "resize_by": 2, "max_run": timedelta(hours=1), **kw}
    return in_dag(CreateComputeFlexStartVMsOperator, **args)


def vertex(machine: str, accelerator: str, count: int, **kw: Any) -> CreateVertexAIFlexStartJobOperator:
    spec = {"machine_type": machine, "accelerator_type": accelerator, "accelerator_count": count}
    pool = {"machine_spec": spec, "replica_count": 1, "container_spec": {"image_uri": "i:1"}}
    args = {"task_id": "train", "region": "us-central1", "worker_pool_specs": [pool], **kw}
    return in_dag(CreateVertexAIFlexStartJobOperator, **args)


def gke(node_selector: dict[str, str], gpus: int = 1) -> CreateGKEProvisioningRequestOperator:
    container = {"name": "t", "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    template = {"containers": [container], "nodeSelector": node_selector}
    return in_dag(
        CreateGKEProvisioningRequestOperator,
        task_id="nodes",
        location="us-central1",
        cluster_name="train",
        pod_template=template,
    )


def refused(text: str) -> Any:
    """``pytest.raises`` for a parse-time error whose message starts with ``text``."""
    return pytest.raises(ValueError, match=f"^{re.escape(text)}")


# -- a GPU on a family that takes none, on every operator --------------------------------------------


def test_batch_refuses_a_gpu_on_a_family_that_takes_none() -> None:
    with refused(f"CreateBatchFlexStartJobOperator 'infer': {N2_WITH_L4}'nvidia-l4'; nvidia-l4 comes"):
        batch(machine_type="n2-standard-8", accelerator_type="nvidia-l4")


def test_batch_refuses_it_in_a_whole_job_too() -> None:
    policy = {"machine_type": "c3-standard-8", "accelerators": [{"type_": "nvidia-tesla-t4", "count": 1}]}
    job = {
        "task_groups": [{"task_spec": {"runnables": [{"script": {"text": "true"}}]}}],
        "allocation_policy": {"instances": [{"policy": policy}]},
    }
    with pytest.raises(ValueError) as err:
        in_dag(CreateBatchFlexStartJobOperator, task_id="infer", region="us-central1", job=job)
    assert str(err.value) == (
        "CreateBatchFlexStartJobOperator 'infer': job.allocation_policy.instances[0].policy: machine_type "
        "'c3-standard-8' takes no GPUs (c3 machines have none and none can be attached), got "
        "'nvidia-tesla-t4'; nvidia-tesla-t4 attaches to n1 machine types"
    )


def test_compute_refuses_it() -> None:
    with refused(f"CreateComputeFlexStartVMsOperator 'vms': {N2_WITH_L4}'nvidia-l4'"):
        compute(machine_type="n2-standard-8", accelerator_type="nvidia-l4")


def test_vertex_refuses_it() -> None:
    with refused(
        f"CreateVertexAIFlexStartJobOperator 'train': worker_pool_specs[0].machine_spec: {N2_WITH_L4}"
    ):
        vertex("n2-standard-8", "NVIDIA_L4", 1)


def test_the_reserved_consumers_refuse_it() -> None:
    with refused(f"CreateBatchReservedJobOperator 'infer': {N2_WITH_L4}'nvidia-l4'"):
        in_dag(
            CreateBatchReservedJobOperator,
            task_id="infer",
            reservation=RESERVATION,
            image_uri="i:1",
            machine_type="n2-standard-8",
            accelerator_type="nvidia-l4",
        )
    with refused(f"CreateComputeReservedVMsOperator 'vms': {N2_WITH_L4}'nvidia-l4'"):
        in_dag(
            CreateComputeReservedVMsOperator,
            task_id="vms",
            reservation=RESERVATION,
            resize_by=1,
            machine_type="n2-standard-8",
            accelerator_type="nvidia-l4",
        )


def test_a_failover_placement_is_held_to_the_same_rule() -> None:
    with refused("CreateBatchFlexStartJobOperator 'infer': failover placement us-east4 (e2-standard-8): "):
        batch(
            machine_type="n1-standard-8",
            accelerator_type="nvidia-tesla-t4",
            capacity_retry=1,
            failover=[Placement("us-east4", machine_type="e2-standard-8")],
        )
    with refused("CreateVertexAIFlexStartJobOperator 'train': failover placement us-east4 (n2-standard-8"):
        vertex(
            "g2-standard-8",
            "NVIDIA_L4",
            1,
            capacity_retry=1,
            failover=[Placement("us-east4", machine_type="n2-standard-8", accelerator_type="NVIDIA_L4")],
        )


# -- n1 takes only its own attachable GPUs, in their counts -----------------------------------------


def test_n1_refuses_a_gpu_that_comes_only_with_another_family() -> None:
    with pytest.raises(ValueError) as err:
        batch(machine_type="n1-standard-8", accelerator_type="nvidia-h100-80gb")
    assert str(err.value) == (
        "CreateBatchFlexStartJobOperator 'infer': machine_type 'n1-standard-8' takes only nvidia-tesla-t4, "
        "nvidia-tesla-v100, nvidia-tesla-p100, nvidia-tesla-p4 attached, got 'nvidia-h100-80gb'; "
        "nvidia-h100-80gb comes with the a3-highgpu machine types"
    )


def test_n1_refuses_a_count_the_gpu_does_not_come_in() -> None:
    with refused(
        "CreateComputeFlexStartVMsOperator 'vms': machine_type 'n1-standard-16' takes 1, 2, 4 x "
        "nvidia-tesla-t4, got accelerator_count=3"
    ):
        compute(machine_type="n1-standard-16", accelerator_type="nvidia-tesla-t4", accelerator_count=3)
    assert batch(machine_type="n1-standard-16", accelerator_type="nvidia-tesla-t4", accelerator_count=4)


def test_a_family_without_gpus_and_no_accelerator_says_flex_start_needs_gpus() -> None:
    with refused(
        "CreateBatchFlexStartJobOperator 'infer': machine_type 'n2-standard-8' has no GPUs of its own"
    ):
        batch(machine_type="n2-standard-8")


def test_a_machine_whose_own_gpus_flex_start_does_not_offer_is_refused() -> None:
    # a4x-highgpu-4g brings 4 GB200s, and flex-start VMs are not offered on A4X: refused at parse
    # with or without accelerator_type, on Batch and on Compute Engine.
    said = "machine_type 'a4x-highgpu-4g' comes with nvidia-gb200 GPUs, which Flex Start does not offer"
    with refused(f"CreateBatchFlexStartJobOperator 'infer': {said}"):
        batch(machine_type="a4x-highgpu-4g")
    with refused(f"CreateComputeFlexStartVMsOperator 'vms': {said}"):
        compute(machine_type="a4x-highgpu-4g")
    with refused("CreateBatchFlexStartJobOperator 'infer': accelerator_type must be a GPU Flex Start offers"):
        batch(machine_type="a4x-highgpu-4g", accelerator_type="nvidia-gb200", accelerator_count=4)


# -- fixed machines, unknown families ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "gpu", "own"),
    [
        ("a2-highgpu-1g", "nvidia-a100-80gb", "1 x nvidia-tesla-a100"),
        ("a2-ultragpu-1g", "nvidia-tesla-a100", "1 x nvidia-a100-80gb"),
        ("a3-ultragpu-8g", "nvidia-h100-80gb", "8 x nvidia-h200-141gb"),
        ("a4-highgpu-8g", "nvidia-h200-141gb", "8 x nvidia-b200"),
        ("g2-standard-4", "nvidia-tesla-t4", "1 x nvidia-l4"),
    ],
)
def test_fixed_machines_take_only_their_own_gpus(machine: str, gpu: str, own: str) -> None:
    with refused(
        f"CreateComputeFlexStartVMsOperator 'vms': machine_type '{machine}' comes with exactly {own}"
    ):
        compute(machine_type=machine, accelerator_type=gpu)


def test_a_family_the_tables_do_not_know_is_left_to_the_api() -> None:
    assert catalog.machine_gpu_error("g4-standard-48", "nvidia-l4", 1) is None
    assert catalog.machine_gpu_error("a3-edgegpu-8g", "nvidia-h100-80gb", 8) is None  # a new a3 series


def test_the_family_tables_do_not_overlap() -> None:
    fixed, attached, none = facts.GPU_FIXED_FAMILIES, set(facts.GPU_ATTACHED_ROWS), facts.NO_GPU_FAMILIES
    assert not fixed & attached and not fixed & none and not attached & none
    assert {"a2", "a3", "a4", "a4x", "g2"} <= fixed and "g1" in none and "f1" in none
    for gpus in facts.GPU_ATTACHED_ROWS.values():
        assert set(gpus) <= set(facts.COMPUTE_GPU_NAMES)


# -- GKE and Kueue -------------------------------------------------------------------------------


def test_gke_refuses_a_gpu_the_selected_machine_type_cannot_take() -> None:
    with pytest.raises(ValueError) as err:
        gke(
            {
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "node.kubernetes.io/instance-type": "n2-standard-8",
            }
        )
    assert str(err.value) == (
        "CreateGKEProvisioningRequestOperator 'nodes': pod_template nodeSelector "
        f"node.kubernetes.io/instance-type='n2-standard-8': {N2_WITH_L4}'nvidia-l4'; nvidia-l4 comes with "
        "the g2-standard machine types"
    )
    with refused(
        "CreateGKEProvisioningRequestOperator 'nodes': pod_template nodeSelector "
        "node.kubernetes.io/instance-type='g2-standard-8' comes with 1 x nvidia-l4, not the "
        "cloud.google.com/gke-accelerator 'nvidia-h100-80gb'"
    ):
        gke(
            {
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "node.kubernetes.io/instance-type": "g2-standard-8",
            }
        )
    with refused(
        "CreateGKEProvisioningRequestOperator 'nodes': pod_template the pod asks for 2 x nvidia.com/gpu"
    ):
        gke(
            {
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "node.kubernetes.io/instance-type": "g2-standard-8",
            },
            2,
        )
    assert gke(
        {
            "cloud.google.com/gke-accelerator": "nvidia-l4",
            "node.kubernetes.io/instance-type": "g2-standard-24",
        },
        2,
    )


def test_the_per_node_gpu_limit_of_gke_and_kueue_comes_from_the_same_tables() -> None:
    assert facts.GKE_ACCELERATOR_MAX_GPUS == {
        "nvidia-l4": 8,
        "nvidia-tesla-t4": 4,
        "nvidia-tesla-v100": 8,
        "nvidia-tesla-p100": 4,
        "nvidia-tesla-p4": 4,
        "nvidia-tesla-a100": 16,
        "nvidia-a100-80gb": 8,
        "nvidia-h100-80gb": 8,
        "nvidia-h100-mega-80gb": 8,
        "nvidia-h200-141gb": 8,
        "nvidia-b200": 8,
        "nvidia-gb200": 4,
    }
    with refused(
        "CreateGKEQueuedJobOperator 'job': the pod asks for 5 x nvidia.com/gpu but a node with nvidia-tesla-t4"
    ):
        in_dag(
            CreateGKEQueuedJobOperator,
            task_id="job",
            location="us-central1",
            cluster_name="train",
            queue_name="dws",
            image="i:1",
            gpus=5,
            accelerator="nvidia-tesla-t4",
        )
