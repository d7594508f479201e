"""CreateGKEQueuedJobOperator: what parse time refuses, with messages that say what to do."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_dws.operators.gke_kueue import (
    CreateGKEQueuedJobOperator,
    gpus_fit,
)


def make(**kwargs: Any) -> CreateGKEQueuedJobOperator:
    args: dict[str, Any] = {
        "task_id": "train",
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "dws-cluster",
        "queue_name": "dws-queue",
        "image": "us-docker.pkg.dev/my-project/train:1",
        "gpus": 8,
        "accelerator": "nvidia-h100-80gb",
    }
    args.update(kwargs)
    return CreateGKEQueuedJobOperator(**args)


def manifest(gpus: Any = "8", accelerator: str | None = "nvidia-h100-80gb", **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "containers": [{"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if accelerator:
        pod["nodeSelector"] = {"cloud.google.com/gke-accelerator": accelerator}
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": pod}, **spec}}


def test_a_good_operator() -> None:
    op = make()
    assert op.max_run.total_seconds() == 7 * 24 * 3600
    assert op.home_placement().location == "us-central1"
    make(image=None, gpus=None, accelerator=None, job=manifest())
    make(location="us-central1-a", namespace="team-a", parallelism=4)
    make(cluster_name=None, kubernetes_conn_id="kubernetes_default", project_id=None)


def test_the_operators_package_exports_it_lazily() -> None:
    import airflow_provider_dws.operators as operators

    assert operators.CreateGKEQueuedJobOperator is CreateGKEQueuedJobOperator
    with pytest.raises(AttributeError):
        _ = operators.NoSuchOperator


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"image": None, "gpus": None, "accelerator": None}, "exactly one of job"),
        ({"job": manifest()}, "exactly one of job"),
        ({"image": None, "job": manifest()}, "gpus, accelerator describe the Job built from image"),
        ({"gpus": 16}, "a node with nvidia-h100-80gb has at most 8"),
        ({"gpus": 9, "accelerator": "nvidia-l4"}, "a node with nvidia-l4 has at most 8"),
        ({"gpus": None}, "needs gpus"),
        ({"accelerator": "nvidia-h100"}, "must be a GKE GPU name"),
        ({"accelerator": None}, "needs an accelerator"),
        ({"gpus": -1}, "whole number of GPUs"),
        ({"queue_name": "Dws_Queue"}, "queue_name must be a Kueue LocalQueue name"),
        ({"namespace": "team a"}, "namespace must be a Kubernetes namespace"),
        ({"cluster_name": "1cluster"}, "cluster_name must be a GKE cluster name"),
        ({"cluster_name": None}, "pass cluster_name"),
        ({"location": "us"}, "location must be a GKE cluster's region or zone"),
        ({"parallelism": 0}, "parallelism must be a whole number from 1"),
        ({"max_run": 8 * 24 * 3600}, "max_run"),
        ({"max_wait": 0}, "max_wait"),
        ({"cmds": "python train.py"}, "cmds must be a list of strings"),
        ({"env_vars": {"A B": "1"}}, "not a valid environment variable name"),
        ({"env_vars": {"EPOCHS": 3}}, "must be a string"),
        ({"failover": ["us-east4"]}, "failover is not supported"),
        ({"use_internal_ip": "yes"}, "use_internal_ip must be True or False"),
    ],
)
def test_parse_time_refusals_say_what_is_wrong(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match="CreateGKEQueuedJobOperator 'train'") as err:
        make(**kwargs)
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ({"apiVersion": "v1", "kind": "Pod"}, "must be a batch/v1 Job"),
        ({"spec": {}}, "spec.template.spec"),
        ({"spec": {"template": {"spec": {"containers": []}}}}, "has no containers"),
        ({"spec": {"template": {"spec": {"containers": [{"name": "x"}]}}}}, "needs a name and an image"),
        (manifest(gpus="16"), "a node with nvidia-h100-80gb has at most 8"),
        (manifest(gpus="two"), "whole number of GPUs"),
        (manifest(accelerator=None), "nodeSelector has no cloud.google.com/gke-accelerator"),
        (manifest(parallelism=0), "spec.parallelism"),
        ({**manifest(), "metadata": {"namespace": "other"}}, "differs from namespace"),
    ],
)
def test_a_job_manifest_the_pods_of_which_cannot_run_is_refused(job: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as err:
        make(image=None, gpus=None, accelerator=None, job=job)
    assert words in str(err.value)


def test_a_templated_manifest_is_checked_after_rendering() -> None:
    op = make(image=None, gpus=None, accelerator=None, job=manifest(gpus="{{ params.gpus }}"))
    op.job = manifest(gpus="16")
    with pytest.raises(ValueError, match="at most 8"):
        op.check_parameters(rendered=True)
    op.job = manifest(gpus="4")
    op.check_parameters(rendered=True)


def test_the_quick_gpu_rule_agrees_with_the_catalogs_explanation() -> None:
    from airflow_provider_dws.specs.kueue_job import gpu_error

    accelerators = [
        None,
        "nvidia-l4",
        "nvidia-h100-80gb",
        "nvidia-tesla-a100",
        "nvidia-gb200",
        "nvidia-h100",
        3,
    ]
    for accelerator in accelerators:
        for gpus in (None, 0, 1, 4, 8, 9, 16, 17, -1, "8"):
            if gpus_fit(accelerator, gpus):
                assert gpu_error(accelerator, gpus) is None, (accelerator, gpus)
    assert gpus_fit("nvidia-l4", 8) and not gpus_fit("nvidia-l4", 9)
    assert gpus_fit("nvidia-tesla-a100", 16)
    assert gpus_fit(None, None) and not gpus_fit(None, 1) and not gpus_fit("nvidia-l4", None)
