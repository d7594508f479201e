"""Vertex AI inference on flex-start: the parse-time checks of the batch prediction and deploy
operators, the requests they build, how a batch job and a deploy operation are classified, and the
errors each end raises."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.cloud.aiplatform_v1beta1 import (
    BatchPredictionJob,
    DeployedModel,
    DeploymentStage,
    DeployModelOperationMetadata,
    DeployModelResponse,
)
from google.longrunning import operations_pb2
from google.protobuf import timestamp_pb2

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.vertex_batch import VertexBatchPredictionBackend, batch_status
from airflow_provider_dws.backends.vertex_endpoint import VertexDeploymentBackend, deployment_status
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.runtime.vertex_batch import VertexBatchPredictionAdapter
from airflow_provider_dws.runtime.vertex_endpoint import VertexDeploymentAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.vertex_inference import deployed_model_id, endpoint_id

IDENTITY = RequestIdentity(
    "score_dag", "score", "scheduled__2026-12-01T22:00:00+00:00", attempt=1, try_number=1
)
MODEL = "projects/my-project/locations/us-central1/models/123"
T0 = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
OP_NAME = "projects/my-project/locations/us-central1/endpoints/dws-abc/operations/77"


def batch(**kwargs: Any) -> CreateVertexAIFlexStartBatchPredictionOperator:
    args: dict[str, Any] = {
        "task_id": "score",
        "project_id": "my-project",
        "region": "us-central1",
        "model": MODEL,
        "machine_type": "g2-standard-48",
        "replica_count": 2,
        "gcs_source": "gs://inputs/night/*.jsonl",
        "gcs_destination_prefix": "gs://outputs/night",
        "max_wait": timedelta(hours=2),
        "max_run": timedelta(hours=6),
        "labels": {"team": "ml"},
    }
    args.update(kwargs)
    return CreateVertexAIFlexStartBatchPredictionOperator(**args)


def deploy(**kwargs: Any) -> DeployVertexAIFlexStartModelOperator:
    args: dict[str, Any] = {
        "task_id": "serve",
        "project_id": "my-project",
        "region": "us-central1",
        "model": MODEL,
        "machine_type": "a3-highgpu-1g",
        "max_wait": timedelta(hours=1),
        "max_run": timedelta(hours=8),
    }
    args.update(kwargs)
    return DeployVertexAIFlexStartModelOperator(**args)


# -- the requests built ----------------------------------------------------------------------------


def test_the_batch_job_asks_for_flex_start_machines_with_their_own_gpus() -> None:
    spec = VertexBatchPredictionAdapter(batch()).request_spec(IDENTITY)
    assert spec["dedicated_resources"] == {
        "machine_spec": {
            "machine_type": "g2-standard-48",
            "accelerator_type": "NVIDIA_L4",
            "accelerator_count": 4,
        },
        "starting_replica_count": 2,
        "max_replica_count": 2,
        "flex_start": {"max_runtime_duration": "21600s"},
    }
    assert spec["input_config"] == {
        "instances_format": "jsonl",
        "gcs_source": {"uris": ["gs://inputs/night/*.jsonl"]},
    }
    assert spec["output_config"] == {
        "predictions_format": "jsonl",
        "gcs_destination": {"output_uri_prefix": "gs://outputs/night"},
    }
    assert spec["labels"]["team"] == "ml"
    assert spec["labels"].items() >= IDENTITY.labels().items()
    assert spec["display_name"] == "score_dag.score"
    # The client accepts it as a BatchPredictionJob (every field name is one of v1beta1's).
    assert (
        VertexBatchPredictionAdapter(batch())
        .build(IDENTITY)
        .dedicated_resources.flex_start.max_runtime_duration
    )


def test_a_failover_placement_swaps_the_machine_type() -> None:
    op = batch(failover=[Placement(location="us-central1", machine_type="a2-ultragpu-1g")], capacity_retry=1)
    spec = VertexBatchPredictionAdapter(op).request_spec(IDENTITY, op.placements()[1])
    assert spec["dedicated_resources"]["machine_spec"] == {
        "machine_type": "a2-ultragpu-1g",
        "accelerator_type": "NVIDIA_A100_80GB",
        "accelerator_count": 1,
    }


def test_bigquery_in_and_out() -> None:
    op = batch(
        gcs_source=None,
        gcs_destination_prefix=None,
        bigquery_source="bq://my-project.night.inputs",
        bigquery_destination_prefix="bq://my-project.scores",
    )
    spec = VertexBatchPredictionAdapter(op).request_spec(IDENTITY)
    assert spec["input_config"] == {
        "instances_format": "bigquery",
        "bigquery_source": {"input_uri": "bq://my-project.night.inputs"},
    }
    assert spec["output_config"] == {
        "predictions_format": "bigquery",
        "bigquery_destination": {"output_uri": "bq://my-project.scores"},
    }


def test_the_deployed_model_has_the_identity_s_id_and_a_max_runtime() -> None:
    spec = VertexDeploymentAdapter(deploy(replica_count=2)).deployed_model(IDENTITY, Placement("us-central1"))
    assert spec["id"] == deployed_model_id(IDENTITY.key, 1, 1)
    assert re.fullmatch(r"[1-9][0-9]{9}", spec["id"])
    assert (
        len({spec["id"], deployed_model_id(IDENTITY.key, 1, 2), deployed_model_id(IDENTITY.key, 2, 1)}) == 3
    )
    assert spec["dedicated_resources"]["flex_start"] == {"max_runtime_duration": "28800s"}
    assert spec["dedicated_resources"]["min_replica_count"] == 2
    DeployedModel(spec)  # the client accepts every field


def test_the_endpoint_id_is_the_task_instance_s() -> None:
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,62}[a-z0-9]", endpoint_id(IDENTITY.key))
    later = RequestIdentity(IDENTITY.dag_id, IDENTITY.task_id, IDENTITY.run_id, attempt=3, try_number=2)
    assert endpoint_id(later.key) == endpoint_id(IDENTITY.key)


# -- parse-time checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"machine_type": "n1-standard-8"}, "machine_type must be an accelerator-optimized machine type"),
        ({"machine_type": "a4x-highgpu-4g"}, "no TPU, no A4X"),
        ({"machine_type": "ct5lp-hightpu-4t"}, "machine_type must be"),
        ({"model": "my-model"}, "model must be a model's resource name"),
        ({"model": "projects/p/locations/europe-west4/models/1"}, "not in region 'us-central1'"),
        ({"bigquery_source": "bq://my-project.a.b"}, "exactly one of gcs_source and bigquery_source"),
        ({"gcs_source": None}, "exactly one of gcs_source and bigquery_source"),
        (
            {"gcs_destination_prefix": None},
            "exactly one of gcs_destination_prefix and bigquery_destination_prefix",
        ),
        ({"instances_format": "bigquery"}, "instances_format 'bigquery' goes with bigquery_source"),
        ({"instances_format": "parquet"}, "instances_format must be one of"),
        ({"gcs_source": "s3://bucket/x"}, "gcs_source must be a 'gs://' URI"),
        ({"max_run": timedelta(days=8)}, "max_run"),
        ({"replica_count": 0}, "replica_count must be an integer from 1 to 1000"),
        ({"max_replica_count": 1}, "max_replica_count (1) must be at least replica_count (2)"),
        ({"region": "us central"}, "region must be a Vertex AI region"),
        ({"failover": ["us-east4"]}, "stays in its model's region 'us-central1'"),
        (
            {"failover": [Placement(location="us-central1", machine_type="n1-standard-4")]},
            "machine_type must be",
        ),
    ],
)
def test_the_batch_operator_refuses_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        batch(**kwargs)


def test_templated_values_wait_for_rendering() -> None:
    op = batch(
        model="{{ var.value.model }}", machine_type="{{ params.machine }}", gcs_source="{{ params.inputs }}"
    )
    assert op.model == "{{ var.value.model }}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_run": timedelta(hours=1)}, "max_run (1:00:00) must be longer than max_wait (1:00:00)"),
        ({"max_run": timedelta(days=8)}, "max_run"),
        ({"machine_type": "g2-standard-4x"}, "machine_type must be"),
        ({"replica_count": 2, "max_replica_count": 1}, "must be at least replica_count (2)"),
        ({"endpoint_display_name": ""}, "endpoint_display_name must be a string of 1 to 128"),
        ({"model": "projects/p/locations/us-east4/models/1"}, "not in region 'us-central1'"),
        ({"model": "publishers/google/models/gemma"}, "DeployModel takes no publisher's model"),
    ],
)
def test_the_deploy_operator_refuses_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        deploy(**kwargs)


# -- classification --------------------------------------------------------------------------------


def stamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(T0 + timedelta(seconds=seconds))
    return ts


def batch_job(state: str, *, started: bool = False, code: int = 0, **fields: Any) -> BatchPredictionJob:
    raw = BatchPredictionJob.pb()(
        name="projects/my-project/locations/us-central1/batchPredictionJobs/42",
        display_name="score_dag.score",
        state=BatchPredictionJob.pb()
        .DESCRIPTOR.fields_by_name["state"]
        .enum_type.values_by_name[state]
        .number,
        labels={"dws_attempt": "2"},
    )
    raw.create_time.CopyFrom(stamp(0))
    raw.dedicated_resources.machine_spec.machine_type = "g2-standard-48"
    raw.dedicated_resources.machine_spec.accelerator_type = 11  # NVIDIA_L4
    raw.dedicated_resources.machine_spec.accelerator_count = 4
    raw.dedicated_resources.starting_replica_count = 2
    if started:
        raw.start_time.CopyFrom(stamp(600))
    if code:
        raw.error.code = code
        raw.error.message = "the reason"
    for key, value in fields.items():
        getattr(raw, key).CopyFrom(value)
    return BatchPredictionJob.wrap(raw)


@pytest.mark.parametrize(
    ("state", "started", "code", "phase", "failure"),
    [
        ("JOB_STATE_QUEUED", False, 0, Phase.WAITING, None),
        ("JOB_STATE_PENDING", False, 0, Phase.WAITING, None),
        ("JOB_STATE_RUNNING", True, 0, Phase.RUNNING, None),
        ("JOB_STATE_SUCCEEDED", True, 0, Phase.SUCCEEDED, None),
        ("JOB_STATE_FAILED", False, 8, Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED),
        ("JOB_STATE_FAILED", False, 3, Phase.FAILED, FailureKind.BAD_REQUEST),
        # A missing input or permission is no stock-out: not retried as one, not failed over.
        ("JOB_STATE_FAILED", False, 5, Phase.FAILED, FailureKind.BAD_REQUEST),
        ("JOB_STATE_FAILED", False, 7, Phase.FAILED, FailureKind.BAD_REQUEST),
        ("JOB_STATE_FAILED", False, 13, Phase.FAILED, FailureKind.WORKLOAD_FAILED),
        ("JOB_STATE_FAILED", False, 14, Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED),
        # Its predictions are there, the failed ones counted in completion_stats.
        ("JOB_STATE_PARTIALLY_SUCCEEDED", True, 0, Phase.SUCCEEDED, None),
        ("JOB_STATE_FAILED", True, 4, Phase.FAILED, FailureKind.WORKLOAD_FAILED),
        ("JOB_STATE_CANCELLED", False, 0, Phase.CANCELLED, FailureKind.CANCELLED),
    ],
)
def test_a_batch_job_is_classified(
    state: str, started: bool, code: int, phase: Phase, failure: FailureKind | None
) -> None:
    status = batch_status(batch_job(state, started=started, code=code))
    assert (status.phase, status.outcome.failure) == (phase, failure)
    assert status.description == "flex-start 8 x NVIDIA_L4 in us-central1"
    assert status.details["attempt"] == 2
    assert status.details["max_wait_seconds"] is None
    assert status.timings.submitted == T0
    assert (RESULT in status.details) == (phase is Phase.SUCCEEDED)


def deploy_op(*, done: bool = False, code: int = 0, model_id: str = "", stage: str = "") -> Any:
    meta = DeployModelOperationMetadata.pb()()
    meta.generic_metadata.create_time.CopyFrom(stamp(0))
    if stage:
        meta.deployment_stage = DeploymentStage[stage].value
    op = operations_pb2.Operation(name=OP_NAME, done=done)
    op.metadata.Pack(meta)
    if code:
        op.error.code = code
        op.error.message = "why"
    elif model_id:
        response = DeployModelResponse.pb()()
        response.deployed_model.id = model_id
        response.deployed_model.model = MODEL
        response.deployed_model.create_time.CopyFrom(stamp(900))
        op.response.Pack(response)
    return op


@pytest.mark.parametrize(
    ("op", "deployed", "state", "phase", "failure"),
    [
        (deploy_op(stage="ADDING_NODES_TO_CLUSTER"), None, "DEPLOYING", Phase.WAITING, None),
        (
            deploy_op(done=True, code=8),
            None,
            "FAILED_TO_DEPLOY",
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
        ),
        (
            deploy_op(done=True, code=4),
            None,
            "FAILED_TO_DEPLOY",
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
        ),
        (deploy_op(done=True, code=1), None, "FAILED_TO_DEPLOY", Phase.CANCELLED, FailureKind.CANCELLED),
        (deploy_op(done=True, code=3), None, "FAILED_TO_DEPLOY", Phase.FAILED, FailureKind.BAD_REQUEST),
        (deploy_op(done=True, code=13), None, "FAILED_TO_DEPLOY", Phase.FAILED, FailureKind.WORKLOAD_FAILED),
        (deploy_op(done=True, model_id="1234567890"), {"1234567890"}, "DEPLOYED", Phase.RUNNING, None),
        (
            deploy_op(done=True, model_id="1234567890"),
            set(),
            "UNDEPLOYED",
            Phase.FAILED,
            FailureKind.PREEMPTED,
        ),
    ],
)
def test_a_deployment_is_classified(
    op: Any, deployed: set[str] | None, state: str, phase: Phase, failure: FailureKind | None
) -> None:
    status = deployment_status(op, deployed)
    assert (status.state, status.phase, status.outcome.failure) == (state, phase, failure)
    assert status.details["endpoint"] == OP_NAME.rsplit("/operations/", 1)[0]
    assert status.timings.submitted == T0
    if state == "DEPLOYING":
        assert status.outcome.message == "adding nodes to cluster"
    if state == "DEPLOYED":
        assert status.details[RESULT] == {
            "endpoint": "projects/my-project/locations/us-central1/endpoints/dws-abc",
            "endpoint_id": "dws-abc",
            "deployed_model_id": "1234567890",
            "model": MODEL,
            "region": "us-central1",
        }
        assert status.timings.started == T0 + timedelta(seconds=900)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (8, CapacityNotObtainedError),
        (3, BadRequestError),
        (13, WorkloadFailedError),
        (1, RequestCancelledError),
    ],
)
def test_each_end_of_a_deployment_raises_its_error(code: int, error: type[Exception]) -> None:
    status = deployment_status(deploy_op(done=True, code=code), None)
    raised = VertexDeploymentAdapter(deploy()).error(status, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(raised, error)
    assert OP_NAME in str(raised)


def test_the_backends_are_rebuilt_in_the_triggerer_from_their_kind() -> None:
    for cls in (VertexBatchPredictionBackend, VertexDeploymentBackend):
        backend = cls("my-project", "us-central1")
        rebuilt = backend_from_spec(backend.kind, backend.spec())
        assert type(rebuilt) is cls and rebuilt.spec() == backend.spec()
    assert (
        VertexDeploymentBackend("p", "us-central1").poll_group(OP_NAME)
        == OP_NAME.rsplit("/operations/", 1)[0]
    )


def test_the_deploy_operator_needs_its_max_run() -> None:
    with pytest.raises(TypeError, match="missing required argument 'max_run'"):
        DeployVertexAIFlexStartModelOperator(
            task_id="serve", region="us-central1", model=MODEL, machine_type="a3-highgpu-1g"
        )


def endpoint_with(split: dict[str, int], models: list[str]) -> Any:
    from google.cloud.aiplatform_v1beta1 import Endpoint

    raw = Endpoint.pb()(traffic_split=split)
    for model_id in models:
        raw.deployed_models.add(id=model_id)
    return raw


@pytest.mark.parametrize(
    ("split", "models", "removed", "left"),
    [
        ({"1": 100}, ["1"], "1", {}),
        ({"1": 0, "2": 100}, ["1", "2"], "1", {"2": 100}),
        ({"1": 100, "2": 0}, ["1", "2"], "1", {"2": 100}),
        ({"1": 30, "2": 50, "3": 20}, ["1", "2", "3"], "2", {"1": 80, "3": 20}),
    ],
)
def test_an_undeployed_model_s_traffic_goes_to_the_models_that_stay(
    split: dict[str, int], models: list[str], removed: str, left: dict[str, int]
) -> None:
    from airflow_provider_dws.backends.vertex_endpoint import split_without

    assert split_without(endpoint_with(split, models), removed) == left
