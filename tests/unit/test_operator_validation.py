"""CreateVertexAIFlexStartJobOperator: parameters are checked at DAG-parse time, with precise messages."""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from airflow.sdk import DAG
from google.cloud.aiplatform_v1 import (
    ContainerSpec,
    CustomJob,
    MachineSpec,
    Scheduling,
    WorkerPoolSpec,
)

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity

H100 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
POOL = {
    "machine_spec": H100,
    "replica_count": 1,
    "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/train:1"},
}
IDENTITY = RequestIdentity("train_dag", "fit", "manual__2026-01-01", 2)


def pool(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(POOL)
    spec.update(changes)
    return spec


def machine(**changes: Any) -> dict[str, Any]:
    return pool(machine_spec={**H100, **changes})


def make(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    args: dict[str, Any] = {"task_id": "t", "region": "us-central1"}
    if "custom_job" not in kwargs:
        args["worker_pool_specs"] = [pool()]
    args.update(kwargs)
    return CreateVertexAIFlexStartJobOperator(**args)


def custom_job(scheduling: dict[str, Any]) -> dict[str, Any]:
    return {"display_name": "x", "job_spec": {"worker_pool_specs": [pool()], "scheduling": scheduling}}


ACCELERATORS = "['NVIDIA_A100_80GB', 'NVIDIA_B200', 'NVIDIA_GB200', 'NVIDIA_H100_80GB', "
W0 = "worker_pool_specs[0]"
LIMIT = "must be greater than 0 and at most 7 days, 0:00:00"

BAD = [
    # (id, kwargs, exception type, expected message fragment (literal))
    (
        "region-upper",
        {"region": "US-CENTRAL1"},
        "region must be a Vertex AI region such as 'us-central1', got 'US-CENTRAL1'",
    ),
    ("region-no-digit", {"region": "europe-west"}, "region must be a Vertex AI region such as 'us-central1'"),
    ("region-int", {"region": 5}, "region must be a Vertex AI region such as 'us-central1', got 5"),
    (
        "project-short",
        {"project_id": "abc"},
        "project_id must be a Google Cloud project id (6-30 lowercase letters",
    ),
    ("project-upper", {"project_id": "My-Project"}, "project_id must be a Google Cloud project id"),
    ("project-digit-first", {"project_id": "1project"}, "got '1project'"),
    (
        "display-name-long",
        {"display_name": "x" * 129},
        "display_name must be a string of 1 to 128 characters",
    ),
    (
        "display-name-empty",
        {"display_name": ""},
        "display_name must be a string of 1 to 128 characters, got ''",
    ),
    ("neither-spec", {"worker_pool_specs": None}, "pass exactly one of worker_pool_specs and custom_job"),
    (
        "both-specs",
        {"custom_job": custom_job({}), "worker_pool_specs": [POOL]},
        "pass exactly one of worker_pool_specs and custom_job",
    ),
    ("pools-empty", {"worker_pool_specs": []}, "worker_pool_specs must hold at least one worker pool spec"),
    (
        "pools-dict",
        {"worker_pool_specs": POOL},
        "worker_pool_specs must be a list of worker pool specs, got dict",
    ),
    (
        "pools-str",
        {"worker_pool_specs": "pool"},
        "worker_pool_specs must be a list of worker pool specs, got str",
    ),
    (
        "pool-not-dict",
        {"worker_pool_specs": [42]},
        f"{W0} must be a dict or a google.cloud.aiplatform_v1 message, got int",
    ),
    (
        "first-pool-empty",
        {"worker_pool_specs": [{}]},
        f"{W0} is empty; the first worker pool (the chief) is required",
    ),
    ("unknown-field", {"worker_pool_specs": [pool(replicas=2)]}, f"{W0} has unknown field(s) ['replicas']"),
    (
        "no-machine-type",
        {"worker_pool_specs": [machine(machine_type="")]},
        f"{W0}.machine_spec.machine_type is required",
    ),
    (
        "no-machine-spec",
        {"worker_pool_specs": [pool(machine_spec=None)]},
        f"{W0}.machine_spec.machine_type is required (e.g. 'a3-highgpu-8g')",
    ),
    (
        "no-accelerator",
        {"worker_pool_specs": [pool(machine_spec={"machine_type": "a3-highgpu-8g", "accelerator_count": 8})]},
        f"{W0}.machine_spec.accelerator_type is required: Flex Start schedules GPUs, one of {ACCELERATORS}",
    ),
    (
        "unknown-accelerator",
        {"worker_pool_specs": [machine(accelerator_type="NVIDIA_H999")]},
        f"{W0}.machine_spec.accelerator_type 'NVIDIA_H999' is not a Vertex AI accelerator type; Flex Start accepts {ACCELERATORS}",
    ),
    (
        "t4-not-flex-start",
        {"worker_pool_specs": [machine(accelerator_type="NVIDIA_TESLA_T4")]},
        f"{W0}.machine_spec.accelerator_type 'NVIDIA_TESLA_T4' is not offered by Flex Start; use one of {ACCELERATORS}",
    ),
    (
        "accel-count-0",
        {"worker_pool_specs": [machine(accelerator_count=0)]},
        f"{W0}.machine_spec.accelerator_count must be an integer from 1 to 16, got 0",
    ),
    (
        "accel-count-17",
        {"worker_pool_specs": [machine(accelerator_count=17)]},
        "accelerator_count must be an integer from 1 to 16, got 17",
    ),
    (
        "accel-count-str",
        {"worker_pool_specs": [machine(accelerator_count="8")]},
        "accelerator_count must be an integer from 1 to 16, got '8'",
    ),
    (
        "accel-count-bool",
        {"worker_pool_specs": [machine(accelerator_count=True)]},
        "accelerator_count must be an integer from 1 to 16, got True",
    ),
    (
        "replicas-0-first",
        {"worker_pool_specs": [pool(replica_count=0)]},
        f"{W0}.replica_count must be an integer from 1 to 1000, got 0",
    ),
    (
        "replicas-too-many",
        {"worker_pool_specs": [pool(replica_count=1001)]},
        "replica_count must be an integer from 1 to 1000, got 1001",
    ),
    (
        "second-pool-negative",
        {"worker_pool_specs": [pool(), pool(replica_count=-1)]},
        "worker_pool_specs[1].replica_count must be an integer from 0 to 1000, got -1",
    ),
    (
        "no-container",
        {"worker_pool_specs": [pool(container_spec=None)]},
        f"{W0} needs a container_spec (with image_uri) or a python_package_spec",
    ),
    (
        "no-image-uri",
        {"worker_pool_specs": [pool(container_spec={"command": ["python"]})]},
        f"{W0}.container_spec.image_uri is required",
    ),
    (
        "different-machines",
        {"worker_pool_specs": [pool(), machine(accelerator_count=4)]},
        "worker_pool_specs: every worker pool must use the same machine_spec under Flex Start",
    ),
    ("max-wait-0", {"max_wait": 0}, f"max_wait {LIMIT}, got 0:00:00"),
    ("max-wait-negative", {"max_wait": timedelta(minutes=-1)}, f"max_wait {LIMIT}, got -1 day, 23:59:00"),
    ("max-wait-8-days", {"max_wait": timedelta(days=8)}, f"max_wait {LIMIT}, got 8 days, 0:00:00"),
    ("max-wait-str", {"max_wait": "1h"}, "max_wait must be a datetime.timedelta (or seconds), got str"),
    ("max-run-8-days", {"max_run": timedelta(days=7, hours=1)}, f"max_run {LIMIT}, got 7 days, 1:00:00"),
    ("reserved-label", {"labels": {"dws_key": "x"}}, "labels ['dws_key'] are reserved"),
    (
        "label-key-upper",
        {"labels": {"Team": "ml"}},
        "label key 'Team' is invalid: it must start with a lowercase letter",
    ),
    (
        "label-key-digit",
        {"labels": {"1team": "ml"}},
        "label key '1team' is invalid: it must start with a lowercase letter",
    ),
    (
        "label-value-bad",
        {"labels": {"team": "ML Team"}},
        "label value 'ML Team' (key 'team') is invalid: only lowercase letters, digits, '_' and '-', at most 63 characters",
    ),
    ("label-value-long", {"labels": {"team": "a" * 64}}, "(key 'team') is invalid"),
    ("labels-not-dict", {"labels": ["a"]}, "labels must be a dict of strings, got list"),
    (
        "too-many-labels",
        {"labels": {f"k{i}": "v" for i in range(58)}},
        "labels can have at most 56 entries (8 of the API's 64 are used for identity), got 58",
    ),
    ("poll-0", {"poll_interval": 0}, "poll_interval must be greater than 0 and at most 3600 seconds, got 0"),
    (
        "poll-too-long",
        {"poll_interval": 3601},
        "poll_interval must be greater than 0 and at most 3600 seconds, got 3601",
    ),
    ("poll-str", {"poll_interval": "30"}, "poll_interval must be a number of seconds, got '30'"),
    ("deferrable-str", {"deferrable": "yes"}, "deferrable must be True or False, got 'yes'"),
    ("cancel-on-kill-int", {"cancel_on_kill": 1}, "cancel_on_kill must be True or False, got 1"),
    (
        "network-bad",
        {"network": "default"},
        "network must look like 'projects/<project number>/global/networks/<name>', got 'default'",
    ),
    (
        "service-account-bad",
        {"service_account": "trainer"},
        "service_account must be a service account email, got 'trainer'",
    ),
    (
        "output-not-gcs",
        {"base_output_directory": "s3://bucket/x"},
        "base_output_directory must be a Cloud Storage URI 'gs://bucket/path', got 's3://bucket/x'",
    ),
    (
        "custom-job-spot",
        {"custom_job": custom_job({"strategy": "SPOT"})},
        "custom_job.job_spec.scheduling.strategy is set by the operator (strategy FLEX_START, max_wait, max_run); remove it, got 'SPOT'",
    ),
    (
        "custom-job-timeout",
        {"custom_job": custom_job({"timeout": "3600s"})},
        "custom_job.job_spec.scheduling.timeout is set by the operator",
    ),
    (
        "custom-job-max-wait",
        {"custom_job": custom_job({"max_wait_duration": "60s"})},
        "custom_job.job_spec.scheduling.max_wait_duration is set by the operator",
    ),
    (
        "custom-job-no-spec",
        {"custom_job": {"display_name": "x"}},
        "custom_job.job_spec is required (with worker_pool_specs)",
    ),
    (
        "custom-job-bad-pool",
        {"custom_job": {"job_spec": {"worker_pool_specs": [machine(accelerator_type="NVIDIA_TESLA_T4")]}}},
        "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type 'NVIDIA_TESLA_T4' is not offered",
    ),
    ("conn-id-empty", {"gcp_conn_id": ""}, "gcp_conn_id must be a non-empty connection id, got ''"),
    (
        "impersonation-empty-list",
        {"impersonation_chain": []},
        "impersonation_chain must be a service account email or a list of them, got []",
    ),
    (
        "impersonation-bad-item",
        {"impersonation_chain": ["a@b.iam.gserviceaccount.com", ""]},
        "impersonation_chain must be a service account email or a list of them",
    ),
    (
        "impersonation-int",
        {"impersonation_chain": 3},
        "impersonation_chain must be a service account email or a list of them, got 3",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), [pytest.param(k, m, id=i) for i, k, m in BAD])
def test_bad_parameter_is_refused_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^CreateVertexAIFlexStartJobOperator 't': .*" + re.escape(message)):
        make(**kwargs)


def test_there_are_enough_bad_cases() -> None:
    assert len(BAD) >= 25


def test_valid_spec_builds_outside_a_dag() -> None:
    op = make()
    assert op.task_id == "t"
    assert op.max_wait == timedelta(hours=24)
    assert op.max_run == timedelta(days=7)


def test_valid_spec_builds_inside_a_dag() -> None:
    with DAG("d", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        op = make(max_wait=3600, max_run=timedelta(hours=2), labels={"team": "ml"})
    assert op.dag is dag
    assert op.max_wait == timedelta(hours=1)


def test_validation_also_fails_inside_a_dag() -> None:
    with DAG("d", schedule=None, start_date=datetime(2026, 1, 1)), pytest.raises(ValueError, match="region"):
        make(region="nowhere")


def test_templated_values_are_not_rejected_at_construction() -> None:
    op = make(
        region="{{ params.region }}",
        project_id="{{ var.value.project }}",
        worker_pool_specs=[machine(accelerator_count="{{ params.n }}", accelerator_type="{{ params.gpu }}")],
        labels={"team": "{{ params.team }}", "{{ params.k }}": "v"},
        max_wait=600,
    )
    assert op.region == "{{ params.region }}"
    assert op.labels == {"team": "{{ params.team }}", "{{ params.k }}": "v"}
    # After rendering, the same checks run; a bad rendered value is refused then.
    op = make(region="{{ params.region }}")
    op.check_parameters(rendered=False)
    op.region = "Nowhere"
    with pytest.raises(ValueError, match="region must be a Vertex AI region"):
        op.check_parameters(rendered=True)


def test_templated_pool_list_is_not_rejected() -> None:
    assert make(worker_pool_specs="{{ params.pools }}").worker_pool_specs == "{{ params.pools }}"


def test_template_fields() -> None:
    assert set(CreateVertexAIFlexStartJobOperator.template_fields) >= {
        "project_id",
        "region",
        "display_name",
        "worker_pool_specs",
        "custom_job",
        "labels",
        "service_account",
        "network",
        "base_output_directory",
        "impersonation_chain",
    }


def test_build_custom_job() -> None:
    op = make(
        max_wait=timedelta(hours=2),
        max_run=timedelta(hours=10),
        labels={"team": "ml"},
        service_account="trainer@proj-123456.iam.gserviceaccount.com",
        network="projects/123456/global/networks/vpc",
        base_output_directory="gs://bucket/out",
    )
    job = op.adapter().build(IDENTITY)
    assert isinstance(job, CustomJob)
    scheduling = job.job_spec.scheduling
    assert scheduling.strategy == Scheduling.Strategy.FLEX_START
    assert scheduling.max_wait_duration == timedelta(hours=2)
    assert scheduling.timeout == timedelta(hours=10)
    assert job.display_name == "train_dag.fit[2]"
    assert dict(job.labels) == {"team": "ml", **IDENTITY.labels()}
    assert job.job_spec.service_account == "trainer@proj-123456.iam.gserviceaccount.com"
    assert job.job_spec.network == "projects/123456/global/networks/vpc"
    assert job.job_spec.base_output_directory.output_uri_prefix == "gs://bucket/out"
    (built,) = job.job_spec.worker_pool_specs
    assert built.machine_spec.machine_type == "a3-highgpu-8g"
    assert built.machine_spec.accelerator_count == 8
    assert built.container_spec.image_uri == "us-docker.pkg.dev/p/r/train:1"


def test_build_custom_job_defaults_and_explicit_display_name() -> None:
    job = make().adapter().build(IDENTITY)
    assert job.job_spec.scheduling.max_wait_duration == timedelta(hours=24)
    assert job.job_spec.scheduling.timeout == timedelta(days=7)
    assert not job.job_spec.service_account
    assert make(display_name="nightly").adapter().build(IDENTITY).display_name == "nightly"


def test_build_from_custom_job_keeps_its_fields_and_overrides_scheduling() -> None:
    user_job = custom_job({"strategy": "FLEX_START", "disable_retries": True})
    user_job["labels"] = {"owner": "me", "dws_key": "forged"}
    job = make(custom_job=user_job, max_wait=900).adapter().build(IDENTITY)
    assert job.display_name == "x"
    assert job.job_spec.scheduling.disable_retries is True
    assert job.job_spec.scheduling.max_wait_duration == timedelta(minutes=15)
    assert job.labels["owner"] == "me"
    assert job.labels["dws_key"] == IDENTITY.key


def proto_pool() -> WorkerPoolSpec:
    return WorkerPoolSpec(
        machine_spec=MachineSpec(
            machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_H100_80GB", accelerator_count=8
        ),
        replica_count=1,
        container_spec=ContainerSpec(image_uri="us-docker.pkg.dev/p/r/train:1"),
    )


def test_proto_worker_pool_spec_is_accepted() -> None:
    op = make(worker_pool_specs=[proto_pool()])
    (built,) = op.adapter().build(IDENTITY).job_spec.worker_pool_specs
    assert built.replica_count == 1
    assert built.machine_spec.accelerator_count == 8


def test_bad_proto_worker_pool_spec_is_refused() -> None:
    bad = proto_pool()
    bad.machine_spec.accelerator_type = "NVIDIA_TESLA_T4"
    with pytest.raises(ValueError, match="'NVIDIA_TESLA_T4' is not offered by Flex Start"):
        make(worker_pool_specs=[bad])


@pytest.mark.parametrize("value", [float("inf"), 10**20])
def test_absurd_max_wait_is_refused_with_the_operator_message(value: float) -> None:
    with pytest.raises(
        ValueError, match=r"^CreateVertexAIFlexStartJobOperator 't': max_wait must be greater than 0"
    ):
        make(max_wait=value)
