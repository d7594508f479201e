"""The Batch job a trigger makes from JSON (issue 36) is the message the worker built before.

``old_build`` is the worker-side builder as it was before the request became JSON (proto-plus
messages, the client imported); each case builds the same operator both ways and compares the
messages field by field.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud.batch_v1 import AllocationPolicy, Job, LogsPolicy, ServiceAccount

from airflow_provider_dws.backends.batch import LABEL_MAX_WAIT, job_from_spec
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.runtime.batch import BatchFlexStartAdapter, _gpus
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.batch_job import as_job_dict

IDENTITY = RequestIdentity("batch_dag", "infer", "manual__2026-03-01", try_number=2, attempt=3)


def old_build(
    op: Any, identity: RequestIdentity, placement: Placement | None, max_wait: timedelta | None
) -> Job:
    """The builder of the worker's path before issue 36, kept here as the reference."""
    from google.cloud.batch_v1 import Environment, Runnable, TaskGroup, TaskSpec

    if op.job is not None:
        job = Job(as_job_dict(op.job))
    else:
        if op.image_uri:
            runnable = Runnable(
                container=Runnable.Container(
                    image_uri=op.image_uri, commands=list(op.commands or []), entrypoint=op.entrypoint or ""
                )
            )
        else:
            runnable = Runnable(script=Runnable.Script(text=op.script or ""))
        spec = TaskSpec(runnables=[runnable])
        if op.environment:
            spec.environment = Environment(variables=dict(op.environment))
        group = TaskGroup(task_spec=spec, task_count=op.task_count or 1, parallelism=op.parallelism or 0)
        gpus = _gpus(op.machine_type, op.accelerator_type, op.accelerator_count)
        policy = AllocationPolicy.InstancePolicy(
            machine_type=op.machine_type,
            accelerators=[AllocationPolicy.Accelerator(type_=gpus[0], count=gpus[1])] if gpus else [],
        )
        instance = AllocationPolicy.InstancePolicyOrTemplate(
            policy=policy, install_gpu_drivers=op.install_gpu_drivers
        )
        job = Job(task_groups=[group], allocation_policy=AllocationPolicy(instances=[instance]))
    if op.max_run is not None:
        for group in job.task_groups:
            group.task_spec.max_run_duration = op.max_run
    for instance in job.allocation_policy.instances:
        policy = instance.policy
        if placement is not None and placement.machine_type:
            current = policy.accelerators[0] if policy.accelerators else None
            gpus = _gpus(
                placement.machine_type,
                placement.accelerator_type or (current.type_ if current else None),
                current.count if current else None,
            )
            policy.machine_type = placement.machine_type
            policy.accelerators = [AllocationPolicy.Accelerator(type_=gpus[0], count=gpus[1])] if gpus else []
        policy.provisioning_model = AllocationPolicy.ProvisioningModel.FLEX_START
    if op.service_account:
        job.allocation_policy.service_account = ServiceAccount(email=op.service_account)
    if op.network or op.subnetwork:
        interface = AllocationPolicy.NetworkInterface(
            network=op.network or "", subnetwork=op.subnetwork or ""
        )
        job.allocation_policy.network = AllocationPolicy.NetworkPolicy(network_interfaces=[interface])
    if not job.logs_policy.destination:
        job.logs_policy = LogsPolicy(destination=LogsPolicy.Destination.CLOUD_LOGGING)
    wait = max_wait or op.max_wait
    job.labels = {
        **dict(job.labels),
        **(op.labels or {}),
        **identity.labels(),
        LABEL_MAX_WAIT: str(round(wait.total_seconds())),
    }
    return job


def make(**kwargs: Any) -> CreateBatchFlexStartJobOperator:
    args: dict[str, Any] = {
        "task_id": "infer",
        "project_id": "my-project",
        "region": "us-central1",
        "image_uri": "us-docker.pkg.dev/my-project/infer/batch:1",
        "machine_type": "g2-standard-8",
    }
    args.update(kwargs)
    return CreateBatchFlexStartJobOperator(**args)


WHOLE_JOB = {
    "task_groups": [
        {
            "task_count": 4,
            "task_count_per_node": 2,
            "task_spec": {
                "runnables": [{"script": {"text": "nvidia-smi"}}],
                "max_retry_count": 2,
                "compute_resource": {"cpu_milli": 2000, "memory_mib": 4096},
            },
        }
    ],
    "allocation_policy": {
        "instances": [
            {
                "policy": {
                    "machine_type": "n1-standard-8",
                    "accelerators": [{"type_": "nvidia-tesla-t4", "count": 2}],
                },
                "install_gpu_drivers": True,
            }
        ],
        "service_account": {"email": "own@p.iam.gserviceaccount.com", "scopes": ["x"]},
    },
    "logs_policy": {"destination": "PATH", "logs_path": "/mnt/logs"},
    "labels": {"owner": "ml"},
}
WHOLE_MESSAGE = Job(WHOLE_JOB)

CASES = {
    "parameters": ({}, None, None),
    "script, tasks, environment, labels, max run": (
        {
            "script": "python infer.py",
            "image_uri": None,
            "task_count": 16,
            "parallelism": 4,
            "environment": {"MODEL": "llama"},
            "labels": {"team": "ml"},
            "max_run": timedelta(hours=2),
        },
        None,
        timedelta(minutes=30),
    ),
    "container commands, account, network": (
        {
            "commands": ["--shard", "$BATCH_TASK_INDEX"],
            "entrypoint": "/bin/run",
            "service_account": "runner@my-project.iam.gserviceaccount.com",
            "network": "projects/my-project/global/networks/gpu",
            "subnetwork": "projects/my-project/regions/us-central1/subnetworks/gpu",
        },
        None,
        None,
    ),
    "explicit gpus, failover to a gpu machine": (
        {"machine_type": "n1-standard-8", "accelerator_type": "nvidia-tesla-t4", "accelerator_count": 2},
        Placement("us-east4", machine_type="a2-highgpu-1g"),
        timedelta(hours=1),
    ),
    "explicit gpus, failover keeps them": (
        {"machine_type": "n1-standard-8", "accelerator_type": "nvidia-tesla-t4", "accelerator_count": 2},
        Placement("us-east4", machine_type="n1-standard-16"),
        None,
    ),
    "a whole job as a dict": ({"image_uri": None, "machine_type": None, "job": WHOLE_JOB}, None, None),
    "a whole job as a message, with failover and max run": (
        {"image_uri": None, "machine_type": None, "job": WHOLE_MESSAGE, "max_run": 600, "labels": {"a": "b"}},
        Placement("europe-west4", machine_type="g2-standard-4"),
        timedelta(minutes=45),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_request_spec_makes_the_message_the_worker_built(case: str) -> None:
    kwargs, placement, max_wait = CASES[case]
    op = make(**kwargs)
    adapter = BatchFlexStartAdapter(op)
    spec = adapter.request_spec(IDENTITY, placement, max_wait)
    expected = old_build(op, IDENTITY, placement, max_wait)
    made = job_from_spec(spec)
    assert Job.to_dict(made) == Job.to_dict(expected)
    assert Job.pb(made) == Job.pb(expected)  # presence of every field too
    assert adapter.build(IDENTITY, placement, max_wait) == made


def test_a_spec_the_api_would_refuse_is_refused_with_its_field() -> None:
    with pytest.raises(ValueError, match="not a valid Batch Job"):
        job_from_spec({"task_groups": [{"no_such_field": 1}]})
