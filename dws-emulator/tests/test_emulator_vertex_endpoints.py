"""Vertex AI inference (v1beta1 Endpoints and model deployments) through the real
google-cloud-aiplatform ``aiplatform_v1beta1`` EndpointServiceClient over gRPC, with its
operation futures and the ``google.longrunning.Operations`` mixins; helpers from
:mod:`test_emulator_vertex_inference`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1beta1 import types
from google.protobuf import empty_pb2
from test_emulator_vertex_inference import (
    H100,
    HOUR,
    endpoint_client,
    fresh_parent,
    job_client,
    machine,
    make_job,
    tick,
)

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

Stage = types.DeploymentStage
MODEL = "projects/p/locations/us-central1/models/llm"


def deployed_model(
    *,
    flex: float | None = 5 * HOUR,
    spot: bool = False,
    spec: types.MachineSpec | None = None,
    replicas: int = 1,
    model_id: str = "",
    display_name: str = "",
) -> types.DeployedModel:
    spec = machine() if spec is None else spec  # (an empty MachineSpec is falsy)
    resources = types.DedicatedResources(machine_spec=spec, min_replica_count=replicas, spot=spot)
    if flex is not None:
        resources.flex_start = types.FlexStart(max_runtime_duration=timedelta(seconds=flex))
    return types.DeployedModel(
        model=MODEL, id=model_id, display_name=display_name, dedicated_resources=resources
    )


def cpu_model(model_id: str = "") -> types.DeployedModel:
    return deployed_model(flex=None, spec=machine("n1-standard-4", None), model_id=model_id)


def new_endpoint(client, parent: str, endpoint_id: str = "", **fields) -> str:
    operation = client.create_endpoint(
        parent=parent, endpoint=types.Endpoint(display_name="ep", **fields), endpoint_id=endpoint_id
    )
    return operation.result(timeout=10).name


def deploy(emulator, client, endpoint: str, model: types.DeployedModel, **kwargs):
    """DeployModel, then the two ticks a deployment with a free set needs (set taken, deployed)."""
    operation = client.deploy_model(endpoint=endpoint, deployed_model=model, **kwargs)
    tick(emulator, 2)
    return operation


@pytest.fixture
def private(dws_emulator_server_factory):
    """``(emulator, clock, client)``: 8 H100s in us-central1, on a FakeClock."""
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 8}, clock=clock)
    return emulator, clock, endpoint_client(emulator.address)


# --- endpoints ----------------------------------------------------------------------------------
def test_endpoint_create_get_list_delete(private) -> None:
    emulator, _, client = private
    parent = fresh_parent()
    operation = client.create_endpoint(
        parent=parent,
        endpoint=types.Endpoint(display_name="chat", labels={"team": "ml"}),
        endpoint_id="chat-ep",
    )
    assert operation.operation.name.startswith(f"{parent}/endpoints/chat-ep/operations/")
    chat = operation.result(timeout=10)
    assert chat.name == f"{parent}/endpoints/chat-ep" and chat.create_time and not chat.deployed_models
    assert operation.metadata.generic_metadata.create_time
    with pytest.raises(exceptions.AlreadyExists, match="already exists"):
        client.create_endpoint(
            parent=parent, endpoint=types.Endpoint(display_name="x"), endpoint_id="chat-ep"
        )
    auto = new_endpoint(client, parent)
    assert re.fullmatch(r"\d{19}", auto.rsplit("/", 1)[1])
    numeric = new_endpoint(client, parent, "123456789", labels={"team": "data"})

    def names(filter_text: str) -> list[str]:
        return [e.name for e in client.list_endpoints(request={"parent": parent, "filter": filter_text})]

    assert names("") == [chat.name, auto, numeric]  # oldest first
    assert names('labels.team="ml"') == [chat.name]
    assert names('display_name="ep"') == [auto, numeric]
    assert names('endpoint="123456789"') == [numeric]
    assert names('endpoint!="123456789" AND labels.team:*') == [chat.name]
    with pytest.raises(exceptions.InvalidArgument, match="unsupported filter field 'state'"):
        names('state="JOB_STATE_RUNNING"')
    pager = client.list_endpoints(request={"parent": parent, "page_size": 2})
    pages = [[e.name for e in page.endpoints] for page in pager.pages]
    assert pages == [[chat.name, auto], [numeric]]

    deletion = client.delete_endpoint(name=numeric)
    assert deletion.operation.name.startswith(f"{numeric}/operations/")
    tick(emulator)
    assert deletion.result(timeout=10) == empty_pb2.Empty()
    assert names("") == [chat.name, auto]
    with pytest.raises(exceptions.NotFound):
        client.get_endpoint(name=numeric)
    with pytest.raises(exceptions.NotFound):
        client.delete_endpoint(name=numeric)
    with pytest.raises(exceptions.NotFound):
        client.deploy_model(endpoint=numeric, deployed_model=cpu_model())
    with pytest.raises(exceptions.NotFound):
        client.undeploy_model(endpoint=numeric, deployed_model_id="1")
    with pytest.raises(exceptions.InvalidArgument, match="Invalid Endpoint name"):
        client.get_endpoint(name=f"{parent}/models/1")
    assert new_endpoint(client, parent, "123456789") == numeric  # a deleted endpoint's id is free again


BAD_ENDPOINTS = [
    ("id starts with a digit, has letters", "1abc", "endpoint_id"),
    ("leading zero", "0123", "endpoint_id"),
    ("ten digits", "1234567890", "endpoint_id"),
    ("64 characters", "a" * 64, "endpoint_id"),
    ("ends with a dash", "my-ep-", "endpoint_id"),
    ("upper case", "My-ep", "endpoint_id"),
    ("underscore", "my_ep", "endpoint_id"),
]


@pytest.mark.parametrize(("case", "endpoint_id", "field"), BAD_ENDPOINTS, ids=[c[0] for c in BAD_ENDPOINTS])
def test_bad_endpoint_ids(dws_emulator_server, case, endpoint_id, field) -> None:
    client = endpoint_client(dws_emulator_server.address)
    with pytest.raises(exceptions.InvalidArgument, match=f"Field: {field}; Message: Invalid endpoint_id"):
        client.create_endpoint(
            parent=fresh_parent(), endpoint=types.Endpoint(display_name="x"), endpoint_id=endpoint_id
        )


def test_endpoint_ids_and_fields_accepted_or_refused(dws_emulator_server) -> None:
    client = endpoint_client(dws_emulator_server.address)
    parent = fresh_parent()
    for good in ("a", "123456789", "x" * 63, "a-1"):
        assert new_endpoint(client, parent, good) == f"{parent}/endpoints/{good}"
    for endpoint, message in [
        (types.Endpoint(), "endpoint.display_name; Message: Required field is not set."),
        (types.Endpoint(display_name="x" * 129), "Must be at most 128 characters"),
        (types.Endpoint(display_name="x", labels={"Bad": "v"}), "endpoint.labels; Message: Label key 'Bad'"),
    ]:
        with pytest.raises(exceptions.InvalidArgument) as info:
            client.create_endpoint(parent=parent, endpoint=endpoint)
        assert message in info.value.message


# --- deployments --------------------------------------------------------------------------------
def test_flex_deploy_waits_for_capacity_then_is_listed(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 0}, clock=clock)
    client = endpoint_client(emulator.address)
    endpoint = new_endpoint(client, fresh_parent())
    operation = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(display_name="llm-v1"))
    assert operation.operation.name.startswith(f"{endpoint}/operations/")
    assert operation.metadata.deployment_stage == Stage.STARTING_DEPLOYMENT
    assert not operation.done()  # refreshed: the next tick is past
    assert operation.metadata.deployment_stage == Stage.ADDING_NODES_TO_CLUSTER
    clock.advance(HOUR)
    assert not client.get_endpoint(name=endpoint).deployed_models  # not listed while it waits
    listed = {op.name: op.done for op in client.list_operations(request={"name": endpoint}).operations}
    assert listed[operation.operation.name] is False  # beside the done CreateEndpoint operation
    assert len(listed) == 2
    [report] = emulator.control.vertex_deployments()
    [waiting] = report["waiting"]
    assert (waiting["state"], waiting["accelerator_count"], report["deployed_models"]) == ("WAITING", 8, [])
    # Python 3.10's fromisoformat does not read "Z".
    expire, created = (
        datetime.fromisoformat(waiting[k].replace("Z", "+00:00")) for k in ("expire_time", "create_time")
    )
    expiry = expire - created
    assert expiry == timedelta(hours=5)  # counted from the DeployModel request

    emulator.control.set_capacity({H100: 8})  # its set is taken; deployed on the next tick
    tick(emulator)
    model = operation.result(timeout=10).deployed_model
    assert re.fullmatch(r"\d{19}", model.id) and model.display_name == "llm-v1" and model.create_time
    assert model.dedicated_resources.flex_start.max_runtime_duration == timedelta(hours=5)
    assert model.dedicated_resources.max_replica_count == 1  # unset: the minimum
    assert operation.metadata.deployment_stage == Stage.SUCCESSFULLY_DEPLOYED
    listed_endpoint = client.get_endpoint(name=endpoint)
    assert [m.id for m in listed_endpoint.deployed_models] == [model.id]
    assert dict(listed_endpoint.traffic_split) == {model.id: 100}
    [report] = emulator.control.vertex_deployments()
    assert [d["state"] for d in report["deployed_models"]] == ["DEPLOYED"] and report["waiting"] == []
    assert emulator.control.capacity()[H100]["in_use"] == 8


def test_max_runtime_undeploys_or_drops_the_deployment(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 0}, clock=clock)
    client = endpoint_client(emulator.address)
    endpoint = new_endpoint(client, fresh_parent())
    operation = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(flex=5 * HOUR))
    clock.advance(2 * HOUR)  # two of its five hours pass in the queue
    emulator.control.set_capacity({H100: 8})
    tick(emulator)
    model_id = operation.result(timeout=10).deployed_model.id
    clock.advance(3 * HOUR - 1)
    assert [m.id for m in client.get_endpoint(name=endpoint).deployed_models] == [model_id]
    clock.advance(1)
    undeployed = client.get_endpoint(name=endpoint)
    assert not undeployed.deployed_models and not undeployed.traffic_split
    assert emulator.control.capacity()[H100]["in_use"] == 0
    record = next(r for r in emulator.control.requests() if r["name"] == operation.operation.name)
    assert record["kind"] == "ModelDeployment" and record["state"] == "EXPIRED"

    emulator.control.set_capacity({H100: 0})
    late = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(flex=HOUR))
    clock.advance(HOUR)
    with pytest.raises(exceptions.DeadlineExceeded, match="max runtime passed before capacity was obtained"):
        late.result(timeout=10)
    assert late.metadata.deployment_stage == Stage.FAILED_TO_DEPLOY
    assert emulator.control.capacity()[H100]["queued"] == 0


def test_undeploy_frees_capacity_for_the_next_in_the_queue(private) -> None:
    emulator, _, client = private
    jobs = job_client(emulator.address)
    parent = fresh_parent()
    endpoint = new_endpoint(client, parent)
    model = deploy(emulator, client, endpoint, deployed_model(flex=None)).result(timeout=10).deployed_model
    batch = jobs.create_batch_prediction_job(parent=parent, batch_prediction_job=make_job()).name
    tick(emulator)
    assert jobs.get_batch_prediction_job(name=batch).state == types.JobState.JOB_STATE_PENDING
    with pytest.raises(exceptions.NotFound, match="DeployedModel 42 does not exist"):
        client.undeploy_model(endpoint=endpoint, deployed_model_id="42")

    operation = client.undeploy_model(endpoint=endpoint, deployed_model_id=model.id)
    assert operation.operation.name.startswith(f"{endpoint}/operations/")
    emptied = client.get_endpoint(name=endpoint)
    assert not emptied.deployed_models and not emptied.traffic_split
    assert isinstance(operation.result(timeout=10), types.UndeployModelResponse)
    assert jobs.get_batch_prediction_job(name=batch).state == types.JobState.JOB_STATE_RUNNING


def test_cancel_operation_withdraws_a_waiting_deployment(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 0}, clock=FakeClock())
    client = endpoint_client(emulator.address)
    endpoint = new_endpoint(client, fresh_parent())
    waiting = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(model_id="7"))
    with pytest.raises(exceptions.AlreadyExists, match="DeployedModel 7"):
        client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(model_id="7"))
    assert emulator.control.capacity()[H100]["queued"] == 1
    client.cancel_operation(request={"name": waiting.operation.name})
    assert emulator.control.capacity()[H100]["queued"] == 0
    with pytest.raises(exceptions.Cancelled, match="cancelled before it was deployed"):
        waiting.result(timeout=10)
    assert waiting.metadata.deployment_stage == Stage.DEPLOYMENT_TERMINATED

    # UndeployModel of an id still on its way withdraws it the same way.
    again = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(model_id="7"))
    undeploy = client.undeploy_model(endpoint=endpoint, deployed_model_id="7")
    with pytest.raises(exceptions.Cancelled):
        again.result(timeout=10)
    assert isinstance(undeploy.result(timeout=10), types.UndeployModelResponse)

    # Cancelling a deployment already done changes nothing (best effort, AIP-151).
    emulator.control.set_capacity({H100: 8})
    done = deploy(emulator, client, endpoint, deployed_model(model_id="8"))
    done.result(timeout=10)
    client.cancel_operation(request={"name": done.operation.name})
    tick(emulator)
    assert [m.id for m in client.get_endpoint(name=endpoint).deployed_models] == ["8"]
    assert not client.get_operation(request={"name": done.operation.name}).HasField("error")


def test_delete_endpoint_refused_while_models_are_deployed_or_on_their_way(private) -> None:
    emulator, _, client = private
    endpoint = new_endpoint(client, fresh_parent())
    deploy(emulator, client, endpoint, deployed_model(flex=None, spec=machine(count=4), model_id="1")).result(
        timeout=10
    )
    client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(model_id="2"))  # needs 8: waits
    with pytest.raises(exceptions.FailedPrecondition, match=r"deployed: 1; being deployed: 2\)"):
        client.delete_endpoint(name=endpoint)
    client.undeploy_model(endpoint=endpoint, deployed_model_id="2")
    client.undeploy_model(endpoint=endpoint, deployed_model_id="1")
    tick(emulator)
    assert client.delete_endpoint(name=endpoint).result(timeout=10) == empty_pb2.Empty()


def test_stock_out_cpu_and_automatic_resources(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 4}, clock=FakeClock())
    client = endpoint_client(emulator.address)
    endpoint = new_endpoint(client, fresh_parent())
    stock_out = client.deploy_model(endpoint=endpoint, deployed_model=deployed_model(flex=None))
    with pytest.raises(
        exceptions.ResourceExhausted, match="Resources are insufficient in region: us-central1"
    ):
        stock_out.result(timeout=10)
    assert stock_out.metadata.deployment_stage == Stage.FAILED_TO_DEPLOY
    cpu = deploy(emulator, client, endpoint, deployed_model(flex=None, spec=types.MachineSpec()))
    spec = cpu.result(timeout=10).deployed_model.dedicated_resources.machine_spec
    assert spec.machine_type == "n1-standard-2"  # MachineSpec's default for a DeployedModel
    automatic = types.DeployedModel(
        model="publishers/google/models/gemma2",
        automatic_resources=types.AutomaticResources(min_replica_count=1),
    )
    auto = deploy(emulator, client, endpoint, automatic).result(timeout=10).deployed_model
    assert auto.display_name == "gemma2"
    listed = client.get_endpoint(name=endpoint)
    first = listed.deployed_models[0].id
    assert len(listed.deployed_models) == 2 and dict(listed.traffic_split) == {first: 100}
    assert emulator.control.capacity()[H100]["in_use"] == 0
    with pytest.raises(exceptions.MethodNotImplemented, match="shared_resources"):
        client.deploy_model(
            endpoint=endpoint, deployed_model=types.DeployedModel(model=MODEL, shared_resources="x")
        )


def test_traffic_split(private) -> None:
    emulator, _, client = private
    endpoint = new_endpoint(client, fresh_parent())
    deploy(emulator, client, endpoint, cpu_model("1")).result(timeout=10)
    for split, message in [
        ({"0": 50, "1": 40}, "add up to 100, got 90"),
        ({"0": 50, "9": 50}, "'9' is not deployed"),
    ]:
        with pytest.raises(exceptions.InvalidArgument, match=message):
            client.deploy_model(endpoint=endpoint, deployed_model=cpu_model("2"), traffic_split=split)
    deploy(emulator, client, endpoint, cpu_model("2"), traffic_split={"0": 30, "1": 70}).result(timeout=10)
    assert dict(client.get_endpoint(name=endpoint).traffic_split) == {"1": 70, "2": 30}
    with pytest.raises(exceptions.FailedPrecondition, match="has 70% of endpoint"):
        client.undeploy_model(endpoint=endpoint, deployed_model_id="1")
    with pytest.raises(exceptions.InvalidArgument, match="Must not give traffic to DeployedModel 1"):
        client.undeploy_model(endpoint=endpoint, deployed_model_id="1", traffic_split={"1": 100})
    client.undeploy_model(endpoint=endpoint, deployed_model_id="1", traffic_split={"2": 100})
    assert dict(client.get_endpoint(name=endpoint).traffic_split) == {"2": 100}
    client.undeploy_model(endpoint=endpoint, deployed_model_id="2")  # the last one: no split needed
    assert not client.get_endpoint(name=endpoint).traffic_split


R = "deployed_model.dedicated_resources"
BAD_DEPLOYMENTS = [
    (
        "no model",
        lambda: types.DeployedModel(dedicated_resources=deployed_model().dedicated_resources),
        "deployed_model.model; Message: Required",
    ),
    (
        "bad model",
        lambda: types.DeployedModel(model="models/x", automatic_resources={}),
        "Invalid model name",
    ),
    (
        "id with letters",
        lambda: deployed_model(model_id="abc"),
        "deployed_model.id; Message: Must be 1-10 characters",
    ),
    ("id of 11 digits", lambda: deployed_model(model_id="12345678901"), "deployed_model.id;"),
    (
        "no resources",
        lambda: types.DeployedModel(model=MODEL),
        f"{R}; Message: One of dedicated_resources or",
    ),
    (
        "no machine_spec",
        lambda: types.DeployedModel(model=MODEL, dedicated_resources={"min_replica_count": 1}),
        f"{R}.machine_spec; Message: Required",
    ),
    (
        "min replicas 0",
        lambda: deployed_model(replicas=0),
        f"{R}.min_replica_count; Message: Must be at least 1",
    ),
    (
        "max below min",
        lambda: types.DeployedModel(
            model=MODEL,
            dedicated_resources={
                "machine_spec": {"machine_type": "n1-standard-2"},
                "min_replica_count": 2,
                "max_replica_count": 1,
            },
        ),
        f"{R}.max_replica_count",
    ),
    (
        "runtime 0",
        lambda: deployed_model(flex=0),
        f"{R}.flex_start.max_runtime_duration; Message: Must be greater than 0",
    ),
    (
        "runtime over 7 days",
        lambda: deployed_model(flex=604801),
        "Must be at most 7 days (604800s), got 604801s.",
    ),
    (
        "flex and spot",
        lambda: deployed_model(spot=True),
        f"{R}.spot; Message: spot and flex_start cannot both be set.",
    ),
    (
        "flex on TPU",
        lambda: deployed_model(spec=machine("ct5lp-hightpu-4t", None)),
        f"{R}.flex_start; Message: Flex-start VMs do not support TPU Pods",
    ),
    (
        "flex on another TPU",
        lambda: deployed_model(spec=machine("ct5p-hightpu-4t", None)),
        "do not support TPU Pods",
    ),
    (
        "GPU of another machine",
        lambda: deployed_model(spec=machine(accelerator="NVIDIA_L4")),
        f"{R}.machine_spec.accelerator_type",
    ),
    (
        "too many GPUs",
        lambda: deployed_model(spec=machine(count=9)),
        "Must be 1 to 8 on a3-highgpu-8g, got 9.",
    ),
    (
        "pool not here",
        lambda: deployed_model(flex=None, spec=machine("n1-standard-8", "NVIDIA_TESLA_T4", 1)),
        "NVIDIA_TESLA_T4 is not available in us-central1",
    ),
]


@pytest.mark.parametrize(("case", "build", "message"), BAD_DEPLOYMENTS, ids=[c[0] for c in BAD_DEPLOYMENTS])
def test_invalid_deployments(dws_emulator_server, case, build, message) -> None:
    client = endpoint_client(dws_emulator_server.address)
    endpoint = new_endpoint(client, fresh_parent())
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.deploy_model(endpoint=endpoint, deployed_model=build())
    assert message in info.value.message


# --- control, requests, counters, faults ---------------------------------------------------------
def test_control_methods_requests_stats_and_faults(private) -> None:
    emulator, _, client = private
    control = emulator.control
    endpoint = new_endpoint(client, fresh_parent(), labels={"dws_dag": "d"})
    model_id = deploy(emulator, client, endpoint, deployed_model()).result(timeout=10).deployed_model.id
    record = control.expire_vertex_deployment(endpoint, model_id)
    assert (record["state"], record["labels"]) == ("EXPIRED", {"dws_dag": "d"})
    assert not client.get_endpoint(name=endpoint).deployed_models
    assert control.capacity()[H100]["in_use"] == 0
    deploy(emulator, client, endpoint, cpu_model("5")).result(timeout=10)
    for body, code in [
        ({"endpoint": endpoint, "deployed_model_id": "5"}, grpc.StatusCode.FAILED_PRECONDITION),
        ({"endpoint": endpoint, "deployed_model_id": "6"}, grpc.StatusCode.NOT_FOUND),
        ({"endpoint": endpoint}, grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            control.call("ExpireVertexDeployment", body)
        assert info.value.code() == code
    [report] = control.vertex_deployments()
    assert [d["deployed_model_id"] for d in report["deployed_models"]] == ["5"]
    kinds = [r["kind"] for r in control.requests()]
    assert kinds.count("ModelDeployment") == 2
    assert control.stats()["calls"]["google.cloud.aiplatform.v1beta1.EndpointService/DeployModel"] == 2

    control.set_faults(["CreateBatchPredictionJob=UNAVAILABLE@1x1"])
    jobs = job_client(emulator.address)
    with pytest.raises(exceptions.ServiceUnavailable, match="injected fault"):
        jobs.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=make_job())
    assert jobs.create_batch_prediction_job(parent=fresh_parent(), batch_prediction_job=make_job()).name
    control.clear_faults()
