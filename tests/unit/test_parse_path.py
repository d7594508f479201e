"""What a DAG file's parse loads, and the quick parse-time checks against their explanations.

A DAG file with right parameters loads only the parse-time half of the provider (facts, links,
the check engine, the base operators and the operator's own module): no runtime, scheduling,
catalog, backend, hook or trigger module. A quick check (``Check.ok``) may only accept what its
explanation (``Check.explain``, the detailed check with the messages) accepts, or a DAG file with a
wrong parameter would parse clean; each is compared on many values here.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws import catalog, facts
from airflow_provider_dws.operators import vertex_ai
from airflow_provider_dws.operators.base import _labels_ok
from airflow_provider_dws.specs.labels import check_labels
from airflow_provider_dws.specs.vertex_pools import check_worker_pool_specs
from tests.probe import DAG_PROCESSOR, Probe

ROOT = Path(__file__).resolve().parents[2]

PARSE_PATH = {
    "airflow_provider_dws",
    "airflow_provider_dws.facts",
    "airflow_provider_dws.links",
    "airflow_provider_dws.operators",
    "airflow_provider_dws.operators.base",
    "airflow_provider_dws.operators.batch",
    "airflow_provider_dws.operators.checks",
    "airflow_provider_dws.operators.release",
    "airflow_provider_dws.operators.compute",
    "airflow_provider_dws.operators.compute_release",
    "airflow_provider_dws.operators.compute_instances",
    "airflow_provider_dws.operators.compute_instances_release",
    "airflow_provider_dws.operators.reserved",
    "airflow_provider_dws.operators.tpu",
    "airflow_provider_dws.operators.tpu_release",
    "airflow_provider_dws.operators.vertex_ai",
    "airflow_provider_dws.registry",
    "airflow_provider_dws.specs",
    "airflow_provider_dws.specs.roles",
    "airflow_provider_dws.specs.templates",
}

#: Run the way the dag-processor does: its parent has imported Airflow's processor (and, with it,
#: the providers' metadata); the DAG file's own imports are what the parse adds.
DAG_FILE = """
import json, sys
import airflow.dag_processing.processor, airflow.sdk
before = set(sys.modules)
from datetime import datetime, timedelta
from airflow.sdk import DAG
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator, DeleteTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.compute_instances_release import DeleteComputeFlexStartInstancesOperator

POOL = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8}, "replica_count": 1, "container_spec": {"image_uri": "img:1"}}
with DAG(dag_id="p", schedule=None, start_date=datetime(2026, 1, 1)):
    CreateVertexAIFlexStartJobOperator(task_id="v", project_id="my-project", region="us-central1",
        worker_pool_specs=[POOL, {}], max_wait=timedelta(hours=1), labels={"team": "ml"},
        service_account="sa@my-project.iam.gserviceaccount.com")
    ask = CreateTPUQueuedResourceOperator(task_id="t", project_id="my-project", zone="us-west4-a",
        accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite", max_wait=3600)
    DeleteTPUQueuedResourceOperator(task_id="d", zone="us-west4-a", setup_task_id="t")
    CreateBatchFlexStartJobOperator(task_id="b", project_id="my-project", region="us-central1",
        image_uri="img:1", commands=["--shard", "$BATCH_TASK_INDEX"], task_count=16, parallelism=4,
        machine_type="g2-standard-8", max_wait=timedelta(hours=2), environment={"MODEL": "m"},
        labels={"team": "ml"})
    CreateComputeFlexStartVMsOperator(task_id="c", project_id="my-project", zone="us-central1-a",
        machine_type="a3-highgpu-8g", resize_by=4, max_run=timedelta(hours=6), labels={"team": "ml"})
    DeleteComputeFlexStartVMsOperator(task_id="cd", setup_task_id="c")
    CreateComputeFlexStartInstancesOperator(task_id="ci", project_id="my-project", zone="us-central1-a",
        machine_type="a3-highgpu-8g", count=2, max_run=timedelta(hours=4), labels={"team": "ml"})
    DeleteComputeFlexStartInstancesOperator(task_id="cid", setup_task_id="ci")
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("airflow_provider_dws"))))
"""


#: Every family in one file, with a GKE pod template that asks for GPUs and an off-peak schedule.
EVERY_FAMILY_DAG = (
    DAG_FILE.split("with DAG(")[0]
    + """
from airflow_provider_dws.operators.calendar import (FindCalendarBlockOperator, ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator, WaitForCalendarBlockOperator)
from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
from airflow_provider_dws.operators.gke_release import DeleteGKEProvisioningRequestOperator
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
from airflow_provider_dws.timetables.offpeak import OffPeakTimetable

TEMPLATE = {"spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
    "containers": [{"name": "train", "image": "img:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
with DAG(dag_id="every", schedule=OffPeakTimetable("Mon-Fri 22:00-06:00 America/Chicago"),
        start_date=datetime(2026, 1, 1)):
    CreateVertexAIFlexStartJobOperator(task_id="v", project_id="my-project", region="us-central1",
        worker_pool_specs=[POOL], max_wait=timedelta(hours=1))
    CreateTPUQueuedResourceOperator(task_id="t", project_id="my-project", zone="us-west4-a",
        accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite", max_wait=3600)
    DeleteTPUQueuedResourceOperator(task_id="d", zone="us-west4-a", setup_task_id="t")
    CreateBatchFlexStartJobOperator(task_id="b", project_id="my-project", region="us-central1",
        image_uri="img:1", task_count=16, parallelism=4, machine_type="g2-standard-8",
        accelerator_type="nvidia-l4", max_wait=timedelta(hours=2))
    CreateComputeFlexStartVMsOperator(task_id="c", project_id="my-project", zone="us-central1-a",
        machine_type="a3-highgpu-8g", resize_by=4, max_run=timedelta(hours=6))
    DeleteComputeFlexStartVMsOperator(task_id="cd", setup_task_id="c")
    CreateComputeFlexStartInstancesOperator(task_id="ci", project_id="my-project", zone="us-central1-a",
        machine_type="a3-highgpu-8g", count=2, max_run=timedelta(hours=4))
    DeleteComputeFlexStartInstancesOperator(task_id="cid", setup_task_id="ci")
    FindCalendarBlockOperator(task_id="f", project_id="my-project", zones=["us-central1-a", "us-east4-b"],
        machine_type="a3-highgpu-8g", vm_count=8, duration=timedelta(days=7), latest_start=timedelta(weeks=4))
    ReserveCalendarBlockOperator(task_id="r", project_id="my-project", find_task_id="f")
    WaitForCalendarBlockOperator(task_id="w", project_id="my-project", reserve_task_id="r")
    ReleaseCalendarBlockOperator(task_id="rr", project_id="my-project", setup_task_id="r")
    CreateGKEProvisioningRequestOperator(task_id="g", project_id="my-project", location="us-central1",
        cluster_name="train", pod_template=TEMPLATE, count=2, max_run=timedelta(hours=4))
    DeleteGKEProvisioningRequestOperator(task_id="gd", setup_task_id="g")
    CreateGKEQueuedJobOperator(task_id="k", project_id="my-project", location="us-central1",
        cluster_name="train", queue_name="dws-queue", image="img:1", accelerator="nvidia-l4", gpus=1,
        parallelism=4)
    CreateGKEFlexStartJobOperator(task_id="fx", project_id="my-project", location="us-central1",
        cluster_name="train", image="img:1", tpu="tpu-v6e-slice", tpu_topology="2x4", parallelism=2)
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("airflow_provider_dws"))))
"""
)

#: What the every-family file adds: the other operators' modules and the timetable's; never the
#: catalog (a right GPU pod template is judged by the quick check on ``facts``), nor what runs a task.
EVERY_FAMILY_PATH = PARSE_PATH | {
    "airflow_provider_dws.operators.calendar",
    "airflow_provider_dws.specs.calendar_block",
    "airflow_provider_dws.specs.pod_template",
    "airflow_provider_dws.operators.gke",
    "airflow_provider_dws.operators.gke_checks",
    "airflow_provider_dws.operators.gke_kueue",
    "airflow_provider_dws.operators.gke_flex",
    "airflow_provider_dws.operators.job_params",
    "airflow_provider_dws.operators.gke_release",
    "airflow_provider_dws.scheduling",
    "airflow_provider_dws.patterns",
    "airflow_provider_dws.scheduling._time",
    "airflow_provider_dws.scheduling.windows",
    "airflow_provider_dws.timetables",
    "airflow_provider_dws.timetables.offpeak",
}


@pytest.mark.parametrize(
    ("source", "parse_path"),
    [(DAG_FILE, PARSE_PATH), (EVERY_FAMILY_DAG, EVERY_FAMILY_PATH)],
    ids=["some", "every"],
)
def test_a_dag_file_with_right_parameters_loads_only_the_parse_path(
    tmp_path: Path, probe: Probe, source: str, parse_path: set[str]
) -> None:
    dag = tmp_path / "parse_path_dag.py"
    dag.write_text(source)
    done = probe.run(path=dag, cwd=ROOT, preload=DAG_PROCESSOR)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert loaded - parse_path == set(), "loaded at parse beyond the parse path"
    assert "airflow_provider_dws.catalog" not in loaded


# -- quick checks against their explanations ---------------------------------------------------------


class Op:
    """Stands in for an operator: what the checks call."""

    _rendered = False

    def _param_error(self, message: str) -> ValueError:
        return ValueError(message)


def explained_ok(explain: Any, value: Any) -> bool:
    try:
        explain(Op(), value, lambda part: False)
    except ValueError:
        return False
    return True


GOOD_POOL = {
    "machine_spec": {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    },
    "replica_count": 1,
    "container_spec": {"image_uri": "img:1"},
}


def pool_variants() -> list[Any]:
    """Right pools and many ways to get one wrong."""
    variants: list[Any] = [[GOOD_POOL], [GOOD_POOL, {}], [GOOD_POOL, GOOD_POOL], [], GOOD_POOL, "x", None]
    for machine, (accelerator, count) in facts.GPU_MACHINE_ROWS.items():
        for a, c in ((accelerator, count), (accelerator, count + 1), ("NVIDIA_TESLA_T4", count)):
            pool = copy.deepcopy(GOOD_POOL)
            pool["machine_spec"] = {"machine_type": machine, "accelerator_type": a, "accelerator_count": c}
            variants.append([pool])
    for change in (
        {"replica_count": 0},
        {"replica_count": 1001},
        {"replica_count": True},
        {"replica_count": "1"},
        {"container_spec": {}},
        {"container_spec": None},
        {"container_spec": None, "python_package_spec": {"executor_image_uri": "x"}},
        {"unknown_field": 1},
        {
            "machine_spec": {
                "machine_type": "a3-highgpu-9g",
                "accelerator_type": "NVIDIA_H100_80GB",
                "accelerator_count": 8,
            }
        },
        {
            "machine_spec": {
                "machine_type": "n1-standard-8",
                "accelerator_type": "NVIDIA_L4",
                "accelerator_count": 1,
            }
        },
        {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": 13, "accelerator_count": 8}},
        {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_count": 8}},
        {"machine_spec": None},
    ):
        pool = {**copy.deepcopy(GOOD_POOL), **change}
        variants += [[pool], [GOOD_POOL, pool]]
    other = copy.deepcopy(GOOD_POOL)
    other["machine_spec"]["machine_type"] = "a3-highgpu-4g"
    variants.append([GOOD_POOL, other])
    return variants


@pytest.mark.parametrize("pools", pool_variants())
def test_the_quick_pool_check_accepts_only_what_the_full_one_accepts(pools: Any) -> None:
    if vertex_ai._pools_ok(pools):
        assert explained_ok(check_worker_pool_specs, pools), pools


def test_the_quick_pool_check_takes_the_usual_pools_without_the_full_one() -> None:
    assert vertex_ai._pools_ok([GOOD_POOL])
    assert vertex_ai._pools_ok([GOOD_POOL, {}])
    assert vertex_ai._pools_ok([GOOD_POOL, {**GOOD_POOL, "replica_count": 3}])


LABELS = [
    {},
    {"team": "ml"},
    {"team": "ML"},
    {"1team": "x"},
    {"team": "a" * 63},
    {"team": "a" * 64},
    {"dws_key": "x"},
    {"dws_custom": "x"},
    {"team": 1},
    {f"k{i}": "v" for i in range(56)},
    {f"k{i}": "v" for i in range(57)},
    ["team"],
]


@pytest.mark.parametrize("labels", LABELS)
def test_the_quick_label_check_accepts_only_what_the_full_one_accepts(labels: Any) -> None:
    if _labels_ok(labels):
        assert explained_ok(check_labels, labels), labels


def test_the_facts_agree_with_the_catalog() -> None:
    from airflow_provider_dws.scheduling.identity import RESERVED_LABEL_KEYS

    assert len(RESERVED_LABEL_KEYS) == facts.IDENTITY_LABELS
    for family in catalog.TPU_FAMILIES.values():
        for size in range(max(family.max_size, *family.sizes) + 300):
            name = f"{family.name}-{size}"
            assert facts.tpu_type_offered(name) == (
                catalog.split_tpu_type(name) is not None and family.accepts(size)
            )
    for machine, spec in catalog.GPU_MACHINES.items():
        assert facts.gpu_machine_matches(machine, spec.accelerator_type, spec.accelerator_count)
        assert catalog.gpu_machine_error(machine, spec.accelerator_type, spec.accelerator_count) is None
        assert not facts.gpu_machine_matches(machine, spec.accelerator_type, spec.accelerator_count + 1)
    for bad in ("v5litepod-016", "v5litepod-", "-16", "v9-8", 16, None, "v5p-8-1"):
        assert not facts.tpu_type_offered(bad)


@pytest.mark.parametrize(
    "value",
    [
        1,
        1.0,
        1.5,
        0,
        -1,
        604800,
        604800.0,
        604801,
        True,
        float("inf"),
        float("nan"),
        "60",
        timedelta(seconds=1),
        timedelta(days=7),
        timedelta(days=7, seconds=1),
        timedelta(0),
        timedelta(milliseconds=1500),
    ],
)
def test_the_quick_duration_check_agrees_with_check_duration(value: Any) -> None:
    from airflow_provider_dws.operators.checks import duration
    from airflow_provider_dws.scheduling._time import check_duration

    try:
        expected: Any = check_duration("max_wait", value, facts.MAX_WAIT_LIMIT)
    except (TypeError, ValueError, OverflowError) as err:
        expected = str(err)
    try:
        got: Any = duration(Op(), "max_wait", value, facts.MAX_WAIT_LIMIT)
    except ValueError as err:
        got = str(err)
    assert got == expected


def _pod(gpus: Any = "8", selector: Any = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "train", "image": "img:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    pod: dict[str, Any] = {"containers": [container], **spec}
    if selector is not None:
        pod["nodeSelector"] = selector
    return {"spec": pod}


H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def pod_template_variants() -> list[Any]:
    """Right pod templates and many ways to get one wrong."""
    variants: list[Any] = [_pod(selector=H100), _pod(selector=H100)["spec"], None, "x", {}, {"spec": {}}]
    for accelerator, most in facts.GKE_ACCELERATOR_MAX_GPUS.items():
        for gpus in (0, 1, most, most + 1, str(most), -1, "x", 1.5, True):
            variants.append(_pod(gpus, {"cloud.google.com/gke-accelerator": accelerator}))
    for gpus in (0, "0", 1, None):
        variants.append(_pod(gpus))
    variants += [
        _pod(selector={"cloud.google.com/gke-accelerator": "nvidia-h200"}),
        _pod(selector={**H100, "node.kubernetes.io/instance-type": "a3-highgpu-8g"}),
        _pod(selector={**H100, "node.kubernetes.io/instance-type": "a3-highgpu-4g"}),
        _pod(selector={"node.kubernetes.io/instance-type": "g2-standard-8"}, gpus="1"),
        _pod(selector=["cloud.google.com/gke-accelerator"]),
        _pod(selector="cloud.google.com/gke-accelerator=nvidia-h100-80gb"),
        _pod(selector={"cloud.google.com/gke-accelerator": "{{ params.gpu }}"}),
        _pod("{{ params.gpus }}", H100),
        _pod(
            selector=H100,
            initContainers=[{"name": "i", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "9"}}}],
        ),
        _pod(selector=H100, initContainers=["x"]),
        _pod(affinity={"nodeAffinity": "cloud.google.com/gke-accelerator"}),
        {"spec": {"nodeSelector": H100, "containers": []}},
        {"spec": {"nodeSelector": H100, "containers": [{"name": "a"}]}},
        {"spec": {"nodeSelector": H100, "containers": [{"image": "a"}]}},
        {"spec": {"nodeSelector": H100, "containers": ["x"]}},
        {"spec": {"nodeSelector": H100, "containers": ({"name": "a", "image": "b"},)}},
        {"spec": {"nodeSelector": H100, "containers": [{"name": "a", "image": "b", "resources": []}]}},
    ]
    return variants


@pytest.mark.parametrize("template", pod_template_variants())
def test_the_quick_pod_template_check_accepts_only_what_the_full_one_accepts(template: Any) -> None:
    from airflow_provider_dws.specs.pod_template import check_pod_template, pod_template_ok

    if pod_template_ok(template):
        assert explained_ok(check_pod_template, template), template


def test_the_quick_pod_template_check_takes_a_right_gpu_template_without_the_catalog() -> None:
    from airflow_provider_dws.specs.pod_template import pod_template_ok

    assert pod_template_ok(_pod(selector=H100))
    assert pod_template_ok(_pod("1", {"cloud.google.com/gke-accelerator": "nvidia-l4"}))
    assert pod_template_ok(_pod(0))
