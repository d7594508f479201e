"""Vertex AI inference (v1beta1 BatchPredictionJobs) through the real google-cloud-aiplatform
``aiplatform_v1beta1`` clients over gRPC; the endpoints are :mod:`test_emulator_vertex_endpoints`.

Time is a ``FakeClock`` wherever it matters; every RPC ticks the emulator first, and
``tick(emulator)`` ticks it directly, so no test waits on the wall clock for a transition.
"""

from __future__ import annotations

import itertools
import re
import time
from datetime import timedelta

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient as V1JobServiceClient
from google.cloud.aiplatform_v1 import types as v1
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport as V1Transport
from google.cloud.aiplatform_v1beta1 import EndpointServiceClient, JobServiceClient, types
from google.cloud.aiplatform_v1beta1.services.endpoint_service.transports import EndpointServiceGrpcTransport
from google.cloud.aiplatform_v1beta1.services.job_service.transports import JobServiceGrpcTransport
from google.protobuf import empty_pb2

from dws_emulator.testing import FakeClock, InProcessEmulator

pytestmark = pytest.mark.emulator

State = types.JobState
H100 = "us-central1/NVIDIA_H100_80GB"
HOUR = 3600.0
_projects = itertools.count()


def fresh_parent(location: str = "us-central1") -> str:
    """A project of its own, so listings on a shared emulator only see this test's resources."""
    return f"projects/vi-{next(_projects)}-{time.monotonic_ns()}/locations/{location}"


def job_client(address: str) -> JobServiceClient:
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def endpoint_client(address: str) -> EndpointServiceClient:
    return EndpointServiceClient(
        transport=EndpointServiceGrpcTransport(channel=grpc.insecure_channel(address))
    )


def tick(emulator: InProcessEmulator, times: int = 1) -> None:
    """Tick the in-process emulator (a "next tick" transition without waiting for its ticker)."""
    for _ in range(times):
        emulator.server.state.tick()


def machine(
    machine_type: str = "a3-highgpu-8g", accelerator: str | None = "NVIDIA_H100_80GB", count: int = 8
) -> types.MachineSpec:
    spec = types.MachineSpec(machine_type=machine_type)
    if accelerator:
        spec.accelerator_type = accelerator
        spec.accelerator_count = count
    return spec


def make_job(
    display_name: str = "predict",
    *,
    flex: float | None = HOUR,
    spot: bool = False,
    spec: types.MachineSpec | None = None,
    replicas: int = 1,
    labels: dict[str, str] | None = None,
    run_seconds: int | None = 60,
    uris: int = 2,
) -> types.BatchPredictionJob:
    """A job from a registry model reading ``uris`` JSONL files, its run time in its labels."""
    labels = dict(labels or {})
    if run_seconds is not None:
        labels.setdefault("dws-emulator-run-seconds", str(run_seconds))
    resources = types.BatchDedicatedResources(
        machine_spec=machine() if spec is None else spec,
        starting_replica_count=replicas,
        max_replica_count=max(replicas, 1),
        spot=spot,
    )
    if flex is not None:
        resources.flex_start = types.FlexStart(max_runtime_duration=timedelta(seconds=flex))
    return types.BatchPredictionJob(
        display_name=display_name,
        model="projects/p/locations/us-central1/models/123@2",
        input_config=types.BatchPredictionJob.InputConfig(
            instances_format="jsonl",
            gcs_source=types.GcsSource(uris=[f"gs://in/{i}.jsonl" for i in range(uris)]),
        ),
        output_config=types.BatchPredictionJob.OutputConfig(
            predictions_format="jsonl",
            gcs_destination=types.GcsDestination(output_uri_prefix="gs://out/preds/"),
        ),
        dedicated_resources=resources,
        labels=labels,
    )


def custom_job(display_name: str, run_seconds: float) -> v1.CustomJob:
    """A v1 FLEX_START CustomJob on 8 H100s: another API's request in the same pool's FIFO."""
    env = [v1.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value=str(run_seconds))]
    spec = v1.MachineSpec(
        machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_H100_80GB", accelerator_count=8
    )
    return v1.CustomJob(
        display_name=display_name,
        job_spec=v1.CustomJobSpec(
            worker_pool_specs=[
                v1.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=spec,
                    container_spec=v1.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/t:1", env=env),
                )
            ],
            scheduling=v1.Scheduling(strategy="FLEX_START"),
        ),
    )


@pytest.fixture
def private(dws_emulator_server_factory):
    """A private emulator with 8 H100s in us-central1 on a FakeClock: ``(emulator, clock)``."""
    clock = FakeClock()
    return dws_emulator_server_factory({H100: 8}, clock=clock), clock


# --- life cycle ---------------------------------------------------------------------------------
def test_flex_job_runs_to_success_with_its_output(private) -> None:
    emulator, clock = private
    client = job_client(emulator.address)
    parent = fresh_parent()
    created = client.create_batch_prediction_job(
        parent=parent, batch_prediction_job=make_job("nightly", labels={"team": "ml"})
    )
    assert re.fullmatch(rf"{parent}/batchPredictionJobs/\d+", created.name)
    assert created.state == State.JOB_STATE_QUEUED
    assert created.create_time and "start_time" not in created and "output_info" not in created

    running = client.get_batch_prediction_job(name=created.name)  # the next tick: PENDING, RUNNING
    assert running.state == State.JOB_STATE_RUNNING
    assert emulator.control.capacity()[H100]["in_use"] == 8
    clock.advance(59)
    assert client.get_batch_prediction_job(name=created.name).state == State.JOB_STATE_RUNNING
    clock.advance(1)
    done = client.get_batch_prediction_job(name=created.name)
    assert done.state == State.JOB_STATE_SUCCEEDED
    assert (done.end_time - done.start_time).total_seconds() == pytest.approx(60, abs=1e-3)
    stamp = (
        created.create_time.strftime("%Y_%m_%dT%H_%M_%S_") + f"{created.create_time.microsecond // 1000:03d}Z"
    )
    assert done.output_info.gcs_output_directory == f"gs://out/preds/prediction-nightly-{stamp}"
    assert done.completion_stats.successful_count == 200  # 2 input files x 100
    assert done.resources_consumed.replica_hours == pytest.approx(60 / HOUR)
    assert emulator.control.capacity()[H100]["in_use"] == 0

    [record] = [r for r in emulator.control.requests() if r["kind"] == "BatchPredictionJob"]
    assert record["name"] == created.name and record["strategy"] == "FLEX_START"
    assert (record["accelerator_type"], record["accelerator_count"]) == ("NVIDIA_H100_80GB", 8)
    assert [h["state"] for h in record["history"]] == [
        "JOB_STATE_QUEUED",
        "JOB_STATE_PENDING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_SUCCEEDED",
    ]


@pytest.mark.parametrize(
    ("output_uri", "dataset", "table"),
    [
        ("bq://proj", "prediction_my_job_{stamp}", "predictions"),
        ("bq://proj.results", "results", "predictions_{stamp}"),
        ("bq://proj.results.scores", "results", "scores"),
    ],
)
def test_bigquery_output(private, output_uri: str, dataset: str, table: str) -> None:
    emulator, _ = private
    client = job_client(emulator.address)
    job = make_job("my-job", run_seconds=0)
    job.input_config = types.BatchPredictionJob.InputConfig(
        instances_format="bigquery", bigquery_source=types.BigQuerySource(input_uri="bq://proj.data.rows")
    )
    job.output_config = types.BatchPredictionJob.OutputConfig(
        predictions_format="bigquery", bigquery_destination=types.BigQueryDestination(output_uri=output_uri)
    )
    created = client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=job)
    tick(emulator, 2)  # started, then its run of 0 s ends
    done = client.get_batch_prediction_job(name=created.name)
    assert done.state == State.JOB_STATE_SUCCEEDED
    stamp = (
        created.create_time.strftime("%Y_%m_%dT%H_%M_%S_") + f"{created.create_time.microsecond // 1000:03d}Z"
    )
    assert done.output_info.bigquery_output_dataset == f"bq://proj.{dataset.format(stamp=stamp)}"
    assert done.output_info.bigquery_output_table == table.format(stamp=stamp)
    assert done.completion_stats.successful_count == 100


def test_flex_job_waits_in_the_fifo_shared_with_custom_jobs(private) -> None:
    emulator, clock = private
    jobs, custom = (
        job_client(emulator.address),
        V1JobServiceClient(transport=V1Transport(channel=grpc.insecure_channel(emulator.address))),
    )
    parent = fresh_parent()
    first = custom.create_custom_job(parent=parent, custom_job=custom_job("first", 100)).name
    tick(emulator)
    assert custom.get_custom_job(name=first).state == v1.JobState.JOB_STATE_RUNNING
    batch = jobs.create_batch_prediction_job(
        parent=parent, batch_prediction_job=make_job(run_seconds=50)
    ).name
    last = custom.create_custom_job(parent=parent, custom_job=custom_job("last", 10)).name
    tick(emulator)
    assert jobs.get_batch_prediction_job(name=batch).state == State.JOB_STATE_PENDING
    assert emulator.control.capacity()[H100] == {"total": 8, "in_use": 8, "free": 0, "queued": 2}

    clock.advance(99)
    assert jobs.get_batch_prediction_job(name=batch).state == State.JOB_STATE_PENDING
    clock.advance(1)  # the first CustomJob ends: the head of the queue, the batch job, starts
    tick(emulator)
    assert jobs.get_batch_prediction_job(name=batch).state == State.JOB_STATE_RUNNING
    assert custom.get_custom_job(name=last).state == v1.JobState.JOB_STATE_PENDING
    clock.advance(50)
    tick(emulator)
    assert jobs.get_batch_prediction_job(name=batch).state == State.JOB_STATE_SUCCEEDED
    assert custom.get_custom_job(name=last).state == v1.JobState.JOB_STATE_RUNNING


def test_flex_job_waits_until_capacity_is_added(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 0}, clock=clock)
    client = job_client(emulator.address)
    name = client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=make_job()).name
    clock.advance(30 * 24 * HOUR)
    assert client.get_batch_prediction_job(name=name).state == State.JOB_STATE_PENDING
    emulator.control.set_capacity({H100: 8})
    running = client.get_batch_prediction_job(name=name)
    assert running.state == State.JOB_STATE_RUNNING and running.start_time


def test_workload_failure_from_labels_and_container_env(private) -> None:
    emulator, clock = private
    client = job_client(emulator.address)
    failing = make_job(labels={"dws-emulator-exit-code": "3"}, spec=machine(count=4))
    name = client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=failing).name
    # The container's env wins over the labels: runs 10 s, exits 0.
    by_env = make_job(labels={"dws-emulator-exit-code": "3"}, run_seconds=60, spec=machine(count=4))
    by_env.model = ""
    by_env.unmanaged_container_model = types.UnmanagedContainerModel(
        container_spec=types.ModelContainerSpec(
            image_uri="us-docker.pkg.dev/p/r/serve:1",
            env=[
                types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value="10"),
                types.EnvVar(name="DWS_EMULATOR_EXIT_CODE", value="0"),
            ],
        )
    )
    other = client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=by_env).name
    tick(emulator)
    clock.advance(10)
    assert client.get_batch_prediction_job(name=other).state == State.JOB_STATE_SUCCEEDED
    clock.advance(50)
    failed = client.get_batch_prediction_job(name=name)
    assert failed.state == State.JOB_STATE_FAILED and failed.start_time
    assert failed.error.code == 13
    assert "exited with a non-zero status of 3" in failed.error.message
    assert "output_info" not in failed


def test_flex_max_runtime_fails_the_job(private) -> None:
    emulator, clock = private
    client = job_client(emulator.address)
    name = client.create_batch_prediction_job(
        parent=fresh_parent(), batch_prediction_job=make_job(flex=HOUR, run_seconds=2 * int(HOUR))
    ).name
    tick(emulator)
    clock.advance(HOUR)
    failed = client.get_batch_prediction_job(name=name)
    assert failed.state == State.JOB_STATE_FAILED
    assert failed.error.code == 4
    assert "flex-start max runtime of 3600s" in failed.error.message
    assert (failed.end_time - failed.start_time).total_seconds() == pytest.approx(HOUR, abs=1e-3)
    assert emulator.control.capacity()[H100]["in_use"] == 0


def test_on_demand_and_spot_stock_out(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 4}, clock=FakeClock())
    client = job_client(emulator.address)
    for spot in (False, True):
        job = client.create_batch_prediction_job(
            parent=fresh_parent(), batch_prediction_job=make_job(flex=None, spot=spot)
        )
        assert job.state == State.JOB_STATE_FAILED
        assert job.error.code == 8
        assert "Resources are insufficient in region: us-central1" in job.error.message
        assert "start_time" not in job
    fits = client.create_batch_prediction_job(
        parent=fresh_parent(), batch_prediction_job=make_job(flex=None, spec=machine(count=2), replicas=2)
    )
    assert fits.state == State.JOB_STATE_QUEUED
    assert emulator.control.capacity()[H100]["in_use"] == 4  # taken at create
    assert client.get_batch_prediction_job(name=fits.name).state == State.JOB_STATE_RUNNING
    cpu = make_job(flex=None, spec=machine("n1-standard-4", None))
    cpu_job = client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=cpu)
    assert client.get_batch_prediction_job(name=cpu_job.name).state == State.JOB_STATE_RUNNING


# --- list / cancel / delete ---------------------------------------------------------------------
def test_list_filters_and_pages(private) -> None:
    emulator, _ = private
    client = job_client(emulator.address)
    parent = fresh_parent()

    def create(display_name: str, labels: dict[str, str], **kwargs) -> str:
        job = make_job(display_name, labels=labels, spec=machine(count=1), **kwargs)
        return client.create_batch_prediction_job(parent=parent, batch_prediction_job=job).name

    ok = create("daily", {"team": "data"}, run_seconds=0)
    bad = create("hourly", {"team": "ml", "dws-emulator-exit-code": "1"}, run_seconds=0)
    long = create("weekly", {"owner": "me"}, run_seconds=600)
    tick(emulator, 2)

    def names(filter_text: str) -> set[str]:
        return {
            j.name
            for j in client.list_batch_prediction_jobs(request={"parent": parent, "filter": filter_text})
        }

    assert names("") == {ok, bad, long}
    assert names('labels.team="data"') == {ok}
    assert names("labels.team:*") == {ok, bad}
    assert names('state="JOB_STATE_RUNNING"') == {long}
    assert names('state="JOB_STATE_SUCCEEDED" OR state="JOB_STATE_FAILED"') == {ok, bad}
    assert names('labels.team:* AND NOT state="JOB_STATE_FAILED"') == {ok}
    assert names('display_name:"*ly" AND labels.owner="me"') == {long}
    assert names('create_time<"2999-01-01T00:00:00Z"') == {ok, bad, long}
    with pytest.raises(exceptions.InvalidArgument, match="unsupported filter field 'model_display_name'"):
        names('model_display_name="m"')

    pager = client.list_batch_prediction_jobs(request={"parent": parent, "page_size": 2})
    pages = [[j.name for j in page.batch_prediction_jobs] for page in pager.pages]
    assert pages == [[long, bad], [ok]]  # newest first
    assert list(client.list_batch_prediction_jobs(parent=fresh_parent("us-east4"))) == []
    with pytest.raises(exceptions.InvalidArgument, match="page_token"):
        client.list_batch_prediction_jobs(request={"parent": parent, "page_token": "x"})


def test_cancel_and_delete(private) -> None:
    emulator, _ = private
    client = job_client(emulator.address)
    parent = fresh_parent()
    running = client.create_batch_prediction_job(parent=parent, batch_prediction_job=make_job("running")).name
    waiting = client.create_batch_prediction_job(parent=parent, batch_prediction_job=make_job("waiting")).name
    tick(emulator)
    assert emulator.control.capacity()[H100]["queued"] == 1
    with pytest.raises(exceptions.FailedPrecondition, match="only jobs in a final state"):
        client.delete_batch_prediction_job(name=running)

    client.cancel_batch_prediction_job(name=waiting)  # leaves the FIFO at once
    assert emulator.control.capacity()[H100]["queued"] == 0
    client.cancel_batch_prediction_job(name=running)  # capacity released at once
    assert emulator.control.capacity()[H100]["in_use"] == 0  # (the call ticks: CANCELLED by now)
    for name in (running, waiting):
        cancelled = client.get_batch_prediction_job(name=name)
        assert cancelled.state == State.JOB_STATE_CANCELLED and cancelled.error.code == 1
        record = next(r for r in emulator.control.requests() if r["name"] == name)
        assert [h["state"] for h in record["history"]][-2:] == ["JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"]
    with pytest.raises(exceptions.FailedPrecondition, match="JOB_STATE_CANCELLED"):
        client.cancel_batch_prediction_job(name=running)

    operation = client.delete_batch_prediction_job(name=running)
    assert operation.operation.name.startswith(f"{running}/operations/")
    tick(emulator)
    assert operation.result(timeout=10) == empty_pb2.Empty()
    assert operation.metadata.generic_metadata.create_time
    with pytest.raises(exceptions.NotFound):
        client.get_batch_prediction_job(name=running)
    assert [j.name for j in client.list_batch_prediction_jobs(parent=parent)] == [waiting]
    record = next(r for r in emulator.control.requests() if r["name"] == running)
    assert record["deleted"] and record["history"][-1]["state"] == "DELETED"


def test_unknown_names_and_methods(dws_emulator_server) -> None:
    client = job_client(dws_emulator_server.address)
    missing = "projects/p/locations/us-central1/batchPredictionJobs/1"
    for call in (
        client.get_batch_prediction_job,
        client.cancel_batch_prediction_job,
        client.delete_batch_prediction_job,
    ):
        with pytest.raises(exceptions.NotFound, match="does not exist"):
            call(name=missing)
    with pytest.raises(exceptions.InvalidArgument, match="Invalid BatchPredictionJob name"):
        client.get_batch_prediction_job(name="projects/p/batchPredictionJobs/1")
    with pytest.raises(exceptions.InvalidArgument, match="Invalid parent"):
        client.create_batch_prediction_job(parent="projects/p", batch_prediction_job=make_job())
    with pytest.raises(exceptions.MethodNotImplemented):  # v1beta1 CustomJobs are not served
        client.get_custom_job(name="projects/p/locations/us-central1/customJobs/1")
    if "endpoint" not in types.BatchPredictionJob.pb().DESCRIPTOR.fields_by_name:
        return  # google-cloud-aiplatform 1.145 has no bring-your-own-endpoint field
    byoe = make_job()
    byoe.model = ""
    byoe.endpoint = "projects/p/locations/us-central1/endpoints/1"
    with pytest.raises(exceptions.MethodNotImplemented, match="bring-your-own-endpoint"):
        client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=byoe)


# --- validation ---------------------------------------------------------------------------------
def _with(**changes) -> types.BatchPredictionJob:
    job = make_job()
    for path, value in changes.items():
        target = job
        *parents, leaf = path.split("__")
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return job


def _without(field: str) -> types.BatchPredictionJob:
    job = make_job()
    types.BatchPredictionJob.pb(job).ClearField(field)
    return job


def _both_model_sources() -> types.BatchPredictionJob:
    job = make_job()
    job.unmanaged_container_model = types.UnmanagedContainerModel(
        container_spec=types.ModelContainerSpec(image_uri="us-docker.pkg.dev/p/r/s:1")
    )
    return job


P = "batch_prediction_job"
D = f"{P}.dedicated_resources"
INVALID = [
    ("display_name", lambda: make_job(""), f"{P}.display_name; Message: Required field is not set."),
    ("no model", lambda: _with(model=""), f"{P}.model; Message: Required field is not set."),
    ("bad model", lambda: _with(model="models/1"), f"{P}.model; Message: Invalid model name"),
    ("model elsewhere", lambda: _with(model="projects/p/locations/us-east4/models/1"), "job's location"),
    ("two model sources", _both_model_sources, f"{P}.unmanaged_container_model; Message: Exactly one of"),
    (
        "container without image",
        lambda: _with(
            model="", unmanaged_container_model=types.UnmanagedContainerModel(artifact_uri="gs://m")
        ),
        f"{P}.unmanaged_container_model.container_spec.image_uri",
    ),
    ("no input_config", lambda: _without("input_config"), f"{P}.input_config; Message: Required"),
    ("instances_format", lambda: _with(input_config__instances_format=""), "input_config.instances_format;"),
    (
        "no source",
        lambda: _with(input_config=types.BatchPredictionJob.InputConfig(instances_format="jsonl")),
        "input_config; Message: One of gcs_source or bigquery_source is required.",
    ),
    ("gcs uri", lambda: _with(input_config__gcs_source__uris=["s3://x"]), "input_config.gcs_source.uris;"),
    ("no output_config", lambda: _without("output_config"), f"{P}.output_config; Message: Required"),
    (
        "predictions_format",
        lambda: _with(output_config__predictions_format=""),
        "output_config.predictions_format;",
    ),
    (
        "no destination",
        lambda: _with(output_config=types.BatchPredictionJob.OutputConfig(predictions_format="jsonl")),
        "One of gcs_destination or bigquery_destination is required.",
    ),
    (
        "bigquery output",
        lambda: _with(
            output_config=types.BatchPredictionJob.OutputConfig(
                predictions_format="bigquery",
                bigquery_destination=types.BigQueryDestination(output_uri="proj"),
            )
        ),
        "output_config.bigquery_destination.output_uri;",
    ),
    (
        "no machine_spec",
        lambda: _with(dedicated_resources=types.BatchDedicatedResources(max_replica_count=1)),
        f"{D}.machine_spec; Message: Required",
    ),
    (
        "no machine_type",
        lambda: make_job(spec=machine("")),
        f"{D}.machine_spec.machine_type; Message: Required",
    ),
    (
        "GPU of another machine",
        lambda: make_job(spec=machine(accelerator="NVIDIA_L4")),
        "must be NVIDIA_H100_80GB",
    ),
    ("too many GPUs", lambda: make_job(spec=machine(count=9)), "accelerator_count; Message: Must be 1 to 8"),
    ("H100 on N1", lambda: make_job(spec=machine("n1-standard-8")), "comes with its own machine types"),
    (
        "T4 on N2",
        lambda: make_job(flex=None, spec=machine("n2-standard-8", "NVIDIA_TESLA_T4", 1)),
        "N1 machine",
    ),
    ("unknown A3 type", lambda: make_job(spec=machine("a3-highgpu-3g")), "a3-highgpu-3g does not exist"),
    (
        "count without type",
        lambda: make_job(spec=types.MachineSpec(machine_type="n1-standard-4", accelerator_count=2)),
        "A valid accelerator type",
    ),
    (
        "starting > max",
        lambda: _with(dedicated_resources__starting_replica_count=3),
        f"{D}.starting_replica_count",
    ),
    (
        "runtime 0",
        lambda: make_job(flex=0),
        "flex_start.max_runtime_duration; Message: Must be greater than 0",
    ),
    ("runtime 8 days", lambda: make_job(flex=8 * 24 * HOUR), "Must be at most 7 days (604800s)"),
    (
        "flex and spot",
        lambda: make_job(spot=True),
        f"{D}.spot; Message: spot and flex_start cannot both be set.",
    ),
    (
        "flex on TPU",
        lambda: make_job(spec=machine("ct5lp-hightpu-4t", None)),
        f"{D}.flex_start; Message: Flex-start VMs do not support TPU Pods",
    ),
    (
        "pool not here",
        lambda: make_job(flex=None, spec=machine("n1-standard-8", "NVIDIA_TESLA_T4", 1)),
        "NVIDIA_TESLA_T4 is not available in us-central1",
    ),
    (
        "label key",
        lambda: make_job(labels={"Team": "x"}),
        f"{P}.labels; Message: Label key 'Team' is invalid",
    ),
    ("label value", lambda: make_job(labels={"team": "A B"}), "Label value 'A B'"),
    (
        "run seconds label",
        lambda: make_job(labels={"dws-emulator-run-seconds": "soon"}),
        f"{P}.labels; Message: DWS_EMULATOR_RUN_SECONDS",
    ),
]


@pytest.mark.parametrize(("case", "build", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_batch_prediction_jobs(dws_emulator_server, case, build, message) -> None:
    client = job_client(dws_emulator_server.address)
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=build())
    assert message in info.value.message
