"""Cloud TPU v2 queued resources on the emulator, through the real google-cloud-tpu clients."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.tpu_v2 import TpuAsyncClient, TpuClient
from google.cloud.tpu_v2 import types as tpu
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport, TpuGrpcTransport
from google.longrunning import operations_pb2

from dws_emulator.tpu import both_tiers_on_wire, parse_accelerator_type

pytestmark = pytest.mark.emulator

QrState = tpu.QueuedResourceState.State
Initiator = tpu.QueuedResourceState.StateInitiator
_projects = itertools.count()


def fresh_parent(zone: str = "us-west4-a") -> str:
    return f"projects/tpu-{next(_projects)}-{time.monotonic_ns()}/locations/{zone}"


def sync_client(address: str) -> TpuClient:
    return TpuClient(transport=TpuGrpcTransport(channel=grpc.insecure_channel(address)))


def async_client(address: str) -> TpuAsyncClient:
    return TpuAsyncClient(transport=TpuGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(address)))


def make_qr(
    parent: str,
    node_id: str | None = "node",
    *,
    accelerator: str = "v5litepod-4",
    runtime: str = "v2-alpha-tpuv5-lite",
    node_count: int | None = None,
    prefix: str = "",
    spot: bool = False,
    guaranteed: bool = False,
    reservation: str = "",
    labels: dict[str, str] | None = None,
    policy: tpu.QueuedResource.QueueingPolicy | None = None,
    spec_parent: str | None = None,
) -> tpu.QueuedResource:
    spec = tpu.QueuedResource.Tpu.NodeSpec(
        parent=parent if spec_parent is None else spec_parent,
        node=tpu.Node(
            accelerator_type=accelerator,
            runtime_version=runtime,
            labels=labels or {},
            network_config=tpu.NetworkConfig(network="projects/p/global/networks/tpu-net"),
            service_account=tpu.ServiceAccount(email="sa@p.iam.gserviceaccount.com"),
        ),
    )
    if node_count is not None:
        spec.multislice_params = tpu.QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=node_count, node_id_prefix=prefix
        )
    elif node_id is not None:
        spec.node_id = node_id
    qr = tpu.QueuedResource(tpu=tpu.QueuedResource.Tpu(node_spec=[spec]), reservation_name=reservation)
    if spot:
        qr.spot = tpu.QueuedResource.Spot()
    if guaranteed:
        qr.guaranteed = tpu.QueuedResource.Guaranteed()
    if policy is not None:
        qr.queueing_policy = policy
    return qr


def create(client: TpuClient, parent: str, qr_id: str, qr: tpu.QueuedResource) -> tpu.QueuedResource:
    return client.create_queued_resource(parent=parent, queued_resource_id=qr_id, queued_resource=qr).result(
        timeout=10
    )


def wait_state(
    client: TpuClient, name: str, states: Iterable[QrState], timeout: float = 10.0
) -> tpu.QueuedResource:
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while True:
        qr = client.get_queued_resource(name=name)
        if qr.state.state in wanted:
            return qr
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{name} is {qr.state.state.name}, expected {sorted(s.name for s in wanted)}"
            )
        time.sleep(0.05)


def history(emulator, name: str) -> list[str]:
    [record] = [r for r in emulator.control.requests() if r["name"] == name]
    return [h["state"] for h in record["history"]]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dws_emulator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- chip arithmetic (unit) -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("accelerator", "family", "chips", "hosts"),
    [
        ("v5litepod-1", "v5litepod", 1, 1),
        ("v5litepod-4", "v5litepod", 4, 1),
        ("v5litepod-8", "v5litepod", 8, 1),
        ("v5litepod-16", "v5litepod", 16, 4),
        ("v5litepod-256", "v5litepod", 256, 64),
        ("v6e-8", "v6e", 8, 1),
        ("v6e-64", "v6e", 64, 16),
        ("v5p-8", "v5p", 4, 1),
        ("v5p-32", "v5p", 16, 4),
        ("v4-8", "v4", 4, 1),
        ("v4-16", "v4", 8, 2),
        ("v3-8", "v3", 4, 1),
        ("v2-32", "v2", 16, 4),
    ],
)
def test_chip_arithmetic(accelerator: str, family: str, chips: int, hosts: int) -> None:
    shape = parse_accelerator_type(accelerator)
    assert (shape.family, shape.chips, shape.hosts) == (family, chips, hosts)


@pytest.mark.parametrize(
    ("accelerator", "message"),
    [
        ("v5litepod-3", "not a known v5litepod size"),
        ("v5p-4", "not a known v5p size"),
        ("v7-8", "is not a TPU accelerator type"),
        ("V5P-8", "is not a TPU accelerator type"),
        ("v5litepod", "is not a TPU accelerator type"),
    ],
)
def test_unknown_accelerator_types(accelerator: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_accelerator_type(accelerator)


def test_both_tiers_detected_on_the_wire() -> None:
    parent = "projects/p/locations/us-west4-a"
    spot = tpu.CreateQueuedResourceRequest(parent=parent, queued_resource=make_qr(parent, spot=True))
    guaranteed = tpu.CreateQueuedResourceRequest(queued_resource=make_qr(parent, guaranteed=True))
    spot_bytes = tpu.CreateQueuedResourceRequest.serialize(spot)
    assert not both_tiers_on_wire(spot_bytes)
    assert both_tiers_on_wire(spot_bytes + tpu.CreateQueuedResourceRequest.serialize(guaranteed))


# --- life cycle -----------------------------------------------------------------------------
def test_create_active_nodes_delete_and_fifo(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-west4-a/v5litepod": 16})
    client = sync_client(emulator.address)
    parent = fresh_parent()
    qr = make_qr(parent, "trainer", accelerator="v5litepod-16", labels={"team": "ml"})
    operation = client.create_queued_resource(parent=parent, queued_resource_id="qr-1", queued_resource=qr)
    assert operation.operation.name.startswith(f"{parent}/operations/operation-")
    created = operation.result(timeout=10)
    assert isinstance(created, tpu.QueuedResource)
    assert created.name == f"{parent}/queuedResources/qr-1"
    assert created.state.state in (QrState.ACCEPTED, QrState.PROVISIONING)
    assert operation.metadata.verb == "create" and operation.metadata.target == created.name

    active = wait_state(client, created.name, [QrState.ACTIVE])
    assert active.state.state_initiator == Initiator.SERVICE
    assert history(emulator, created.name) == ["CREATING", "ACCEPTED", "PROVISIONING", "ACTIVE"]
    node = client.get_node(name=f"{parent}/nodes/trainer")
    assert node.state == tpu.Node.State.READY
    assert node.accelerator_type == "v5litepod-16"
    assert node.runtime_version == "v2-alpha-tpuv5-lite"
    assert dict(node.labels) == {"team": "ml"}
    assert node.network_config.network == "projects/p/global/networks/tpu-net"
    assert node.service_account.email == "sa@p.iam.gserviceaccount.com"
    assert node.queued_resource == created.name
    assert not node.multislice_node and not node.scheduling_config.spot
    # A v5litepod-16 has 4 hosts: one endpoint each, deterministic private IPs.
    assert [(e.ip_address, e.port) for e in node.network_endpoints] == [
        (f"10.128.0.{i}", 8470) for i in (2, 3, 4, 5)
    ]
    assert [n.name for n in client.list_nodes(parent=parent)] == [node.name]
    assert emulator.control.capacity()["us-west4-a/v5litepod"]["in_use"] == 16

    with pytest.raises(exceptions.AlreadyExists, match="qr-1 already exists"):
        client.create_queued_resource(parent=parent, queued_resource_id="qr-1", queued_resource=qr)

    # The pool is full: a big request waits at the head, a small one waits behind it (strict FIFO).
    big = create(client, parent, "big", make_qr(parent, "big", accelerator="v5litepod-16"))
    small = create(client, parent, "small", make_qr(parent, "small", accelerator="v5litepod-4"))
    wait_state(client, big.name, [QrState.WAITING_FOR_RESOURCES])
    wait_state(client, small.name, [QrState.WAITING_FOR_RESOURCES])

    with pytest.raises(exceptions.FailedPrecondition) as refused:
        client.delete_queued_resource(name=created.name)
    assert "Delete the node(s) first, or set force=true" in refused.value.message
    assert "state ACTIVE" in refused.value.message

    # Deleting the waiting head releases its queue place; force-deleting qr-1 frees 16 chips.
    client.delete_queued_resource(name=big.name).result(timeout=10)
    operation = client.delete_queued_resource(
        request=tpu.DeleteQueuedResourceRequest(name=created.name, force=True)
    )
    operation.result(timeout=10)
    assert operation.metadata.verb == "delete"
    with pytest.raises(exceptions.NotFound):
        client.get_queued_resource(name=created.name)
    with pytest.raises(exceptions.NotFound):
        client.get_node(name=node.name)
    wait_state(client, small.name, [QrState.ACTIVE])
    assert [q.name for q in client.list_queued_resources(parent=parent)] == [small.name]
    assert emulator.control.capacity()["us-west4-a/v5litepod"] == {
        "total": 16,
        "in_use": 4,
        "free": 12,
        "queued": 0,
    }
    assert history(emulator, created.name)[-2:] == ["DELETING", "DELETED"]
    # The id is free again once the resource is gone.
    again = create(client, parent, "qr-1", make_qr(parent, "trainer", accelerator="v5litepod-4"))
    wait_state(client, again.name, [QrState.ACTIVE])
    same_name = [r for r in emulator.control.requests() if r["name"] == created.name]
    assert [(r["deleted"], r["accelerator_type"]) for r in same_name] == [
        (True, "v5litepod-16"),
        (False, "v5litepod-4"),
    ]

    # google.longrunning.Operations serves the TPU operation names.
    operations = client.transport.operations_client
    names = [op.name for op in operations.list_operations(parent, filter_="")]
    assert operation.operation.name in names and len(names) == 6  # 4 creates, 2 deletes
    assert operations.get_operation(operation.operation.name).done
    channel = grpc.insecure_channel(emulator.address)
    wait = channel.unary_unary(
        "/google.longrunning.Operations/WaitOperation",
        request_serializer=operations_pb2.WaitOperationRequest.SerializeToString,
        response_deserializer=operations_pb2.Operation.FromString,
    )
    assert wait(operations_pb2.WaitOperationRequest(name=operation.operation.name), timeout=10).done
    channel.close()
    operations.cancel_operation(operation.operation.name)
    operations.delete_operation(operation.operation.name)
    with pytest.raises(exceptions.NotFound):
        operations.get_operation(operation.operation.name)


def test_async_client_and_pagination(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-central1-a/v5litepod": 4})
    parent = fresh_parent("us-central1-a")

    async def scenario() -> None:
        client = async_client(emulator.address)
        names = []
        for i in range(5):
            operation = await client.create_queued_resource(
                parent=parent,
                queued_resource_id=f"qr-{i}",
                queued_resource=make_qr(parent, f"n-{i}", accelerator="v5litepod-1"),
            )
            created = await operation.result(timeout=10)
            names.append(created.name)
        first = await client.list_queued_resources(
            request=tpu.ListQueuedResourcesRequest(parent=parent, page_size=2)
        )
        assert [q.name for q in first.queued_resources] == names[:2]
        assert first.next_page_token
        listed = [q.name async for q in await client.list_queued_resources(parent=parent)]
        assert listed == names
        pager = await client.list_queued_resources(
            request=tpu.ListQueuedResourcesRequest(parent=parent, page_size=2)
        )
        assert [q.name async for q in pager] == names
        # 4 chips: four v5litepod-1 start, the fifth waits.
        deadline = time.monotonic() + 10
        while True:
            states = [(await client.get_queued_resource(name=n)).state.state for n in names]
            if states[:4] == [QrState.ACTIVE] * 4:
                break
            assert time.monotonic() < deadline, states
            await asyncio.sleep(0.05)
        assert states[4] == QrState.WAITING_FOR_RESOURCES
        node = await client.get_node(name=f"{parent}/nodes/n-0")
        assert node.state == tpu.Node.State.READY and len(node.network_endpoints) == 1
        nodes = [
            n.name
            async for n in await client.list_nodes(request=tpu.ListNodesRequest(parent=parent, page_size=3))
        ]
        assert nodes == [f"{parent}/nodes/n-{i}" for i in range(4)]
        with pytest.raises(exceptions.NotFound):
            await client.get_queued_resource(name=f"{parent}/queuedResources/missing")
        with pytest.raises(exceptions.InvalidArgument, match="Invalid page_token"):
            await client.list_queued_resources(
                request=tpu.ListQueuedResourcesRequest(parent=parent, page_token="x")
            )

    asyncio.run(scenario())


def test_waiting_capacity_and_queueing_policy(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-east5-a/v5p": 0, "us-east1-d/v6e": 8})
    client = sync_client(emulator.address)
    v5p = fresh_parent("us-east5-a")
    v6e = fresh_parent("us-east1-d")
    Policy = tpu.QueuedResource.QueueingPolicy

    waiting = create(client, v5p, "wait", make_qr(v5p, "w", accelerator="v5p-8"))
    expiring = create(
        client,
        v5p,
        "expire",
        make_qr(v5p, "e", accelerator="v5p-8", policy=Policy(valid_until_duration=timedelta(seconds=0.5))),
    )
    past = create(
        client,
        v5p,
        "past",
        make_qr(
            v5p,
            "p",
            accelerator="v5p-8",
            policy=Policy(valid_until_time=datetime.now(timezone.utc) - timedelta(seconds=1)),
        ),
    )
    start = time.monotonic()
    after = create(
        client,
        v6e,
        "after",
        make_qr(v6e, "a", accelerator="v6e-8", policy=Policy(valid_after_duration=timedelta(seconds=1.5))),
    )
    # valid_after: the free v6e chips are not used before the time has come. The create's result is
    # the resource as its create completed (the next tick, ~0.1 s in): held, where a request without
    # valid_after is already PROVISIONING; a later read could come after the 1.5 s on a slow machine.
    assert after.state.state in (QrState.ACCEPTED, QrState.WAITING_FOR_RESOURCES)

    wait_state(client, waiting.name, [QrState.WAITING_FOR_RESOURCES])
    assert history(emulator, waiting.name) == ["CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"]
    for name in (expiring.name, past.name):
        failed = wait_state(client, name, [QrState.FAILED])
        assert failed.state.failed_data.error.code == 8  # RESOURCE_EXHAUSTED
        assert (
            "could not be provisioned before its valid-until time" in failed.state.failed_data.error.message
        )
    assert emulator.control.capacity()["us-east5-a/v5p"]["queued"] == 1

    # ... and they are once it has.
    active = wait_state(client, after.name, [QrState.ACTIVE])
    assert time.monotonic() - start >= 1.5
    assert active.state.state == QrState.ACTIVE
    record = next(r for r in emulator.control.requests() if r["name"] == after.name)
    provisioned = next(h["time"] for h in record["history"] if h["state"] == "PROVISIONING")
    created_at = datetime.fromisoformat(record["create_time"].replace("Z", "+00:00"))
    assert datetime.fromisoformat(provisioned.replace("Z", "+00:00")) - created_at >= timedelta(seconds=1.5)

    # Waiting indefinitely, until capacity shows up.
    time.sleep(0.3)
    assert client.get_queued_resource(name=waiting.name).state.state == QrState.WAITING_FOR_RESOURCES
    emulator.control.set_capacity({"us-east5-a/v5p": 4})  # v5p-8 = 4 chips
    wait_state(client, waiting.name, [QrState.ACTIVE])
    assert emulator.control.capacity()["us-east5-a/v5p"]["in_use"] == 4


def test_multislice_and_reservations(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-west4-a/v5litepod": 24, "us-west4-a/v5litepod@my-res": 16})
    client = sync_client(emulator.address)
    parent = fresh_parent()
    project = parent.split("/")[1]

    multi = create(client, parent, "multi", make_qr(parent, accelerator="v5litepod-16", node_count=2))
    wait_state(client, multi.name, [QrState.WAITING_FOR_RESOURCES])  # 2 x 16 = 32 > 24 chips
    emulator.control.set_capacity({"us-west4-a/v5litepod": 32})
    wait_state(client, multi.name, [QrState.ACTIVE])
    nodes = list(client.list_nodes(parent=parent))
    assert [n.name for n in nodes] == [f"{parent}/nodes/multi-0", f"{parent}/nodes/multi-1"]
    assert all(n.multislice_node and n.queued_resource == multi.name for n in nodes)
    assert emulator.control.capacity()["us-west4-a/v5litepod"]["in_use"] == 32

    reservation = f"projects/{project}/locations/us-west4-a/reservations/my-res"
    reserved = create(
        client,
        parent,
        "reserved",
        make_qr(parent, accelerator="v5litepod-8", node_count=2, prefix="slice", reservation=reservation),
    )
    wait_state(client, reserved.name, [QrState.ACTIVE])
    node = client.get_node(name=f"{parent}/nodes/slice-1")
    assert node.scheduling_config.reserved
    inventory = emulator.control.capacity()
    assert inventory["us-west4-a/v5litepod@my-res"]["in_use"] == 16
    assert inventory["us-west4-a/v5litepod"]["in_use"] == 32

    with pytest.raises(exceptions.InvalidArgument, match=r"reservation .*other-res does not exist"):
        client.create_queued_resource(
            parent=parent,
            queued_resource_id="unknown-res",
            queued_resource=make_qr(parent, "u", reservation=reservation.replace("my-res", "other-res")),
        )
    record = next(r for r in emulator.control.requests() if r["name"] == reserved.name)
    assert record["reservation"] == reservation and record["pool"] == "us-west4-a/v5litepod@my-res"
    assert record["chips"] == 16 and record["node_count"] == 2


def test_spot_preemption_and_tiers(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-west4-a/v5litepod": 8})
    client = sync_client(emulator.address)
    parent = fresh_parent()

    spot = create(client, parent, "spot", make_qr(parent, "spot-node", accelerator="v5litepod-8", spot=True))
    wait_state(client, spot.name, [QrState.ACTIVE])
    assert client.get_node(name=f"{parent}/nodes/spot-node").scheduling_config.spot
    queued = create(client, parent, "guaranteed", make_qr(parent, "g-node", guaranteed=True))
    wait_state(client, queued.name, [QrState.WAITING_FOR_RESOURCES])

    result = run_cli("preempt", "--port", str(emulator.port), spot.name)
    assert result.returncode == 0, result.stderr
    assert f"preempted {spot.name}: SUSPENDING" in result.stdout
    suspended = wait_state(client, spot.name, [QrState.SUSPENDED])
    assert suspended.state.state_initiator == Initiator.SERVICE
    assert client.get_node(name=f"{parent}/nodes/spot-node").state == tpu.Node.State.PREEMPTED
    wait_state(client, queued.name, [QrState.ACTIVE])  # the freed chips go to the next in line

    with pytest.raises(grpc.RpcError) as info:
        emulator.control.preempt(queued.name)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "is not a Spot (guaranteed) queued resource" in info.value.details()
    refused = run_cli("preempt", "--port", str(emulator.port), spot.name)
    assert refused.returncode == 1 and "only an ACTIVE one can be preempted" in refused.stderr
    with pytest.raises(grpc.RpcError) as info:
        emulator.control.preempt(f"{parent}/queuedResources/missing")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

    with pytest.raises(exceptions.FailedPrecondition, match="state SUSPENDED"):
        client.delete_queued_resource(name=spot.name)
    client.delete_queued_resource(request=tpu.DeleteQueuedResourceRequest(name=spot.name, force=True)).result(
        timeout=10
    )

    # spot and guaranteed together: as a node scheduling_config through the client, and as both
    # oneof members on the wire (protobuf parsing would silently keep only the last one).
    with pytest.raises(exceptions.InvalidArgument, match="spot and guaranteed are mutually exclusive"):
        bad = make_qr(parent, "x", guaranteed=True)
        bad.tpu.node_spec[0].node.scheduling_config = tpu.SchedulingConfig(spot=True)
        client.create_queued_resource(parent=parent, queued_resource_id="both", queued_resource=bad)
    spot_part = tpu.CreateQueuedResourceRequest(
        parent=parent, queued_resource_id="both", queued_resource=make_qr(parent, "x", spot=True)
    )
    guaranteed_part = tpu.CreateQueuedResourceRequest(queued_resource=tpu.QueuedResource(guaranteed={}))
    channel = grpc.insecure_channel(emulator.address)
    call = channel.unary_unary("/google.cloud.tpu.v2.Tpu/CreateQueuedResource")
    with pytest.raises(grpc.RpcError) as info:
        call(
            tpu.CreateQueuedResourceRequest.serialize(spot_part)
            + tpu.CreateQueuedResourceRequest.serialize(guaranteed_part),
            timeout=10,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'queued_resource.tier': spot and guaranteed are mutually exclusive" in info.value.details()
    channel.close()


def test_cli_requests_json_shows_queued_resources(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({"us-west4-a/v5litepod": 4, "us-central1/NVIDIA_H100_80GB": 8})
    client = sync_client(emulator.address)
    parent = fresh_parent()
    qr = create(client, parent, "cli-qr", make_qr(parent, "cli-node", spot=True, labels={"run": "r1"}))
    wait_state(client, qr.name, [QrState.ACTIVE])
    port = str(emulator.port)

    result = run_cli("requests", "--port", port, "--json")
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    assert record["kind"] == "QueuedResource"
    assert record["name"] == qr.name
    assert record["project"] == parent.split("/")[1]
    assert record["location"] == "us-west4-a"
    assert record["accelerator_type"] == "v5litepod-4"
    assert (record["chips"], record["node_count"], record["tier"]) == (4, 1, "spot")
    assert record["reservation"] is None
    assert record["labels"] == {"run": "r1"}
    assert record["state"] == "ACTIVE" and record["deleted"] is False
    assert record["error"] is None
    assert record["nodes"] == [f"{parent}/nodes/cli-node"]
    assert [h["state"] for h in record["history"]] == ["CREATING", "ACCEPTED", "PROVISIONING", "ACTIVE"]
    assert record["history"][0]["initiator"] == "USER"
    assert datetime.fromisoformat(record["create_time"].replace("Z", "+00:00"))

    table = run_cli("requests", "--port", port)
    assert table.returncode == 0, table.stderr
    assert "cli-qr" in table.stdout and "v5litepod-4 (4 chips)" in table.stdout and "spot" in table.stdout
    assert f"nodes: {parent}/nodes/cli-node" in table.stdout
    assert "QueuedResource " + qr.name + ": CREATING -> ACCEPTED" in emulator.logs()


def test_unimplemented_and_bad_names(dws_emulator) -> None:
    client = sync_client(dws_emulator.address)
    parent = fresh_parent()
    with pytest.raises(exceptions.MethodNotImplemented):
        client.create_node(parent=parent, node_id="n", node=tpu.Node(accelerator_type="v5litepod-4"))
    with pytest.raises(exceptions.MethodNotImplemented):
        list(client.list_accelerator_types(parent=parent))
    with pytest.raises(exceptions.InvalidArgument, match="Invalid QueuedResource name"):
        client.get_queued_resource(name=f"{parent}/nodes/x")
    with pytest.raises(exceptions.NotFound, match=r"Node .* does not exist"):
        client.get_node(name=f"{parent}/nodes/none")
    with pytest.raises(exceptions.InvalidArgument, match="Invalid parent"):
        list(client.list_queued_resources(parent="projects/p"))


# --- validation ---------------------------------------------------------------------------
NODE = "queued_resource.tpu.node_spec[0]"


def _with(change):
    def build(parent: str) -> tpu.QueuedResource:
        qr = make_qr(parent, "v-node")
        change(qr, parent)
        return qr

    return build


def _two_specs(qr, parent):
    qr.tpu.node_spec.append(qr.tpu.node_spec[0])


def _no_specs(qr, parent):
    qr.tpu = tpu.QueuedResource.Tpu()


def _policy(**kwargs):
    def change(qr, parent):
        qr.queueing_policy = tpu.QueuedResource.QueueingPolicy(**kwargs)

    return change


def _set_node(**kwargs):
    def change(qr, parent):
        for key, value in kwargs.items():
            setattr(qr.tpu.node_spec[0].node, key, value)

    return change


VALIDATION_CASES = [
    ("id-uppercase", "Bad-Id", _with(lambda qr, p: None), "Invalid value for field 'queued_resource_id'"),
    ("id-digit-first", "1abc", _with(lambda qr, p: None), "start with a lowercase letter"),
    ("id-trailing-dash", "abc-", _with(lambda qr, p: None), "not end with '-'"),
    ("id-too-long", "a" * 64, _with(lambda qr, p: None), "1-63 characters"),
    ("id-underscore", "a_b", _with(lambda qr, p: None), "'queued_resource_id'"),
    (
        "two-node-specs",
        "v",
        _with(_two_specs),
        "'queued_resource.tpu.node_spec': Exactly one node_spec is required, got 2",
    ),
    ("no-node-spec", "v", _with(_no_specs), "Exactly one node_spec is required, got 0"),
    (
        "spec-parent",
        "v",
        _with(lambda qr, p: setattr(qr.tpu.node_spec[0], "parent", "projects/x/locations/us-west4-a")),
        f"'{NODE}.parent': 'projects/x/locations/us-west4-a' must equal the request parent",
    ),
    (
        "no-node-id",
        "v",
        lambda p: make_qr(p, None),
        f"'{NODE}': Exactly one of node_id or multislice_params must be set",
    ),
    (
        "bad-node-id",
        "v",
        lambda p: make_qr(p, "Node_1"),
        f"'{NODE}.node_id': 'Node_1' must be 1-63 characters",
    ),
    (
        "multislice-one",
        "v",
        lambda p: make_qr(p, node_count=1),
        f"'{NODE}.multislice_params.node_count': Must be greater than 1",
    ),
    (
        "accelerator-pattern",
        "v",
        _with(_set_node(accelerator_type="tpu-v5")),
        f"'{NODE}.node.accelerator_type': 'tpu-v5' is not a TPU accelerator type",
    ),
    (
        "accelerator-size",
        "v",
        _with(_set_node(accelerator_type="v5litepod-12")),
        "'v5litepod-12' is not a known v5litepod size",
    ),
    (
        "accelerator-missing",
        "v",
        _with(_set_node(accelerator_type="")),
        f"'{NODE}.node.accelerator_type': Required",
    ),
    (
        "runtime-missing",
        "v",
        _with(_set_node(runtime_version="")),
        f"'{NODE}.node.runtime_version': Required",
    ),
    (
        "no-pool-in-zone",
        "v",
        _with(_set_node(accelerator_type="v5p-8")),
        "accelerator type v5p-8 is not available in us-west4-a. Available in: us-east5-a",
    ),
    (
        "negative-until",
        "v",
        _with(_policy(valid_until_duration=timedelta(seconds=-1))),
        "'queued_resource.queueing_policy.valid_until_duration': Must not be negative",
    ),
    (
        "negative-after",
        "v",
        _with(_policy(valid_after_duration=timedelta(seconds=-5))),
        "'queued_resource.queueing_policy.valid_after_duration': Must not be negative",
    ),
    (
        "interval-reversed",
        "v",
        _with(
            _policy(
                valid_interval={
                    "start_time": datetime(2030, 1, 2, tzinfo=timezone.utc),
                    "end_time": datetime(2030, 1, 1, tzinfo=timezone.utc),
                }
            )
        ),
        "'queued_resource.queueing_policy.valid_interval': end_time must not be before start_time",
    ),
    (
        "reservation-format",
        "v",
        _with(lambda qr, p: setattr(qr, "reservation_name", "my-res")),
        "'queued_resource.reservation_name': 'my-res' must look like projects/",
    ),
    (
        "reservation-zone",
        "v",
        _with(
            lambda qr, p: setattr(qr, "reservation_name", "projects/p/locations/us-east1-d/reservations/r")
        ),
        "The reservation is in us-east1-d, but the queued resource is in us-west4-a",
    ),
    (
        "label-key",
        "v",
        _with(_set_node(labels={"Team": "ml"})),
        f"'{NODE}.node.labels': Label key 'Team' is invalid",
    ),
    (
        "label-value",
        "v",
        _with(_set_node(labels={"team": "ML!"})),
        "Label value 'ML!' for key 'team' is invalid",
    ),
]


@pytest.mark.parametrize(
    ("qr_id", "build", "message"), [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES]
)
def test_invalid_requests(dws_emulator, qr_id, build, message) -> None:
    client = sync_client(dws_emulator.address)
    parent = fresh_parent()
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.create_queued_resource(parent=parent, queued_resource_id=qr_id, queued_resource=build(parent))
    assert message in info.value.message
    assert not [r for r in dws_emulator.control.requests() if r["project"] == parent.split("/")[1]]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_deleting_lasts_delete_seconds_and_a_second_delete_is_refused_as_in_progress() -> None:
    """D4: the real API refuses a delete while one is in progress; with DELETING lasting zero
    ticks, no client could ever meet that answer."""
    from dws_emulator.server import EmulatorServer
    from dws_emulator.state import EmulatorState

    clock = FakeClock()
    server = EmulatorServer({"us-west4-a/v5litepod": 16})
    server.state = EmulatorState({"us-west4-a/v5litepod": 16}, clock=clock)
    server.state.tpu.delete_seconds = 30.0
    server.start()
    try:
        client = sync_client(server.address)
        parent = fresh_parent()
        qr = create(client, parent, "qr", make_qr(parent, "n", accelerator="v5litepod-4"))
        client.delete_queued_resource(name=qr.name)
        assert client.get_queued_resource(name=qr.name).state.state == QrState.DELETING
        with pytest.raises(exceptions.FailedPrecondition, match="is already being deleted"):
            client.delete_queued_resource(name=qr.name)
        clock.now += 29.0
        assert client.get_queued_resource(name=qr.name).state.state == QrState.DELETING
        clock.now += 1.0
        with pytest.raises(exceptions.NotFound):
            client.get_queued_resource(name=qr.name)
    finally:
        server.stop()


def test_delete_seconds_defaults_to_the_next_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    from dws_emulator.state import EmulatorState
    from dws_emulator.tpu.state import DELETE_SECONDS_ENV

    monkeypatch.delenv(DELETE_SECONDS_ENV, raising=False)
    assert EmulatorState().tpu.delete_seconds == 0.0
    monkeypatch.setenv(DELETE_SECONDS_ENV, "2.5")
    assert EmulatorState().tpu.delete_seconds == 2.5


def test_nodes_are_creating_while_provisioning_and_ready_once_active(dws_emulator_server_factory) -> None:
    """``Node.State`` has CREATING before READY: a client that reads a node while its queued
    resource provisions sees it CREATING, never READY before the request is ACTIVE."""
    from dws_emulator.testing import FakeClock as MovingClock
    from dws_emulator.tpu.state import PROVISION_SECONDS

    clock = MovingClock()
    emulator = dws_emulator_server_factory({"us-west4-a/v5litepod": 16}, clock=clock)
    client = sync_client(emulator.address)
    parent = fresh_parent()
    client.create_queued_resource(
        parent=parent, queued_resource_id="qr", queued_resource=make_qr(parent, "n")
    )
    name = f"{parent}/queuedResources/qr"
    clock.advance(0.01)
    assert client.get_queued_resource(name=name).state.state == QrState.PROVISIONING
    assert client.get_node(name=f"{parent}/nodes/n").state == tpu.Node.State.CREATING
    clock.advance(PROVISION_SECONDS)
    assert client.get_queued_resource(name=name).state.state == QrState.ACTIVE
    assert client.get_node(name=f"{parent}/nodes/n").state == tpu.Node.State.READY


def test_a_node_that_never_got_ready_is_gone_with_its_failed_request(dws_emulator_server_factory) -> None:
    from dws_emulator.testing import FakeClock as MovingClock
    from dws_emulator.tpu.state import PROVISION_SECONDS

    clock = MovingClock()
    emulator = dws_emulator_server_factory({"us-west4-a/v5litepod": 16}, clock=clock)
    client = sync_client(emulator.address)
    parent = fresh_parent()
    policy = tpu.QueuedResource.QueueingPolicy(valid_until_duration={"seconds": 0, "nanos": 100_000_000})
    qr = make_qr(parent, "n", policy=policy)
    client.create_queued_resource(parent=parent, queued_resource_id="qr", queued_resource=qr)
    clock.advance(0.01)
    assert client.get_node(name=f"{parent}/nodes/n").state == tpu.Node.State.CREATING
    clock.advance(PROVISION_SECONDS)  # valid_until (0.1 s) passes while it provisions
    assert client.get_queued_resource(name=f"{parent}/queuedResources/qr").state.state == QrState.FAILED
    with pytest.raises(exceptions.NotFound):
        client.get_node(name=f"{parent}/nodes/n")
