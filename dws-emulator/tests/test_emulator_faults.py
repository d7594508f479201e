"""Fault injection in the emulator: per-method error codes, latency, count limits, seeds, outages.

The emulator runs in this process, except where the point is the ``dws-emulator`` CLI.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, types
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2 import types as tpu
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport

from dws_emulator.core.faults import FaultInjector, FaultRule, FaultSpecError
from dws_emulator.testing import wait_until

pytestmark = pytest.mark.emulator

JOBS = "google.cloud.aiplatform.v1.JobService"
_projects = itertools.count()


def fresh_parent(location: str = "us-central1") -> str:
    return f"projects/faults-{next(_projects)}-{time.monotonic_ns()}/locations/{location}"


def job_client(address: str) -> JobServiceClient:
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def tpu_client(address: str) -> TpuClient:
    return TpuClient(transport=TpuGrpcTransport(channel=grpc.insecure_channel(address)))


def make_job(labels: dict[str, str] | None = None) -> types.CustomJob:
    """A job without accelerators: it runs at once and needs no capacity."""
    return types.CustomJob(
        display_name="faulty",
        labels=labels or {},
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(machine_type="n1-standard-4"),
                    container_spec=types.ContainerSpec(
                        image_uri="us-docker.pkg.dev/p/r/train:1",
                        env=[types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value="30")],
                    ),
                )
            ]
        ),
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dws_emulator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- spec syntax ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "GetCustomJob=UNAVAILABLE@0.2",
            {"method": f"{JOBS}/GetCustomJob", "code": "UNAVAILABLE", "rate": 0.2, "latency": 0.0},
        ),
        ("*=RESOURCE_EXHAUSTED@0.05", {"method": "*", "code": "RESOURCE_EXHAUSTED", "rate": 0.05}),
        (
            "CreateCustomJob=DEADLINE_EXCEEDED@1x1",
            {"method": f"{JOBS}/CreateCustomJob", "code": "DEADLINE_EXCEEDED", "rate": 1.0, "count": 1},
        ),
        ("*=latency:0.3", {"method": "*", "code": None, "latency": 0.3, "rate": 1.0, "count": None}),
        (
            "google.cloud.tpu.v2.Tpu/GetQueuedResource=internal,latency:0.1@0.5x3+1..5",
            {
                "method": "google.cloud.tpu.v2.Tpu/GetQueuedResource",
                "code": "INTERNAL",
                "latency": 0.1,
                "rate": 0.5,
                "count": 3,
                "start": 1.0,
                "until": 5.0,
            },
        ),
        ("google.longrunning.Operations/*=UNAVAILABLE..10", {"method": "google.longrunning.Operations/*"}),
    ],
)
def test_spec_parsing(spec: str, expected: dict[str, Any]) -> None:
    rule = FaultRule.parse(spec)
    data = rule.to_json()
    for key, value in expected.items():
        assert data[key] == value, key
    # The canonical spec parses back to the same rule.
    assert FaultRule.parse(rule.spec).to_json() == data


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("GetCustomJob", "expected METHOD=EFFECT"),
        ("GetCustomJobs=UNAVAILABLE", "unknown method 'GetCustomJobs'"),
        ("dws.emulator.v1.Control/ListRequests=UNAVAILABLE", "unknown service 'dws.emulator.v1.Control'"),
        ("google.cloud.tpu.v2.Tpu/GetCustomJob=UNAVAILABLE", "has no emulated method 'GetCustomJob'"),
        ("GetCustomJob=NOT_FOUND", "unknown effect 'NOT_FOUND'"),
        ("GetCustomJob=UNAVAILABLE@1.5", "rate must be between 0 and 1"),
        ("GetCustomJob=UNAVAILABLE@x", "cannot parse"),
        ("GetCustomJob=UNAVAILABLE,INTERNAL", "one error code per rule"),
        ("*=latency:0", "latency must be > 0"),
        ("*=latency:soon", "latency must be a number"),
        ("*=UNAVAILABLEx0", "count must be an integer >= 1"),
        ("*=UNAVAILABLE+5..2", "ends (2s) before it starts (5s)"),
    ],
)
def test_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        FaultRule.parse(spec)
    assert message in str(info.value)
    assert repr(spec) in str(info.value) or spec.split("=")[0] in str(info.value)


def test_rule_objects_and_windows() -> None:
    now = [100.0]
    injector = FaultInjector(clock=lambda: now[0])
    injector.set(
        [{"method": "GetNode", "code": "INTERNAL", "start": 1, "until": 2}, "ListNodes=latency:0.5x2"]
    )
    node = "google.cloud.tpu.v2.Tpu/GetNode"
    assert injector.decide(node).code is None  # before the window
    now[0] += 1.5
    assert injector.decide(node).code == "INTERNAL"
    now[0] += 1
    assert injector.decide(node).code is None  # after it
    nodes = "google.cloud.tpu.v2.Tpu/ListNodes"
    assert [injector.decide(nodes).latency for _ in range(3)] == [0.5, 0.5, 0.0]
    report = injector.to_json()
    assert report["injected"] == {node: {"INTERNAL": 1}, nodes: {"LATENCY": 2}}
    assert report["total"] == 1
    with pytest.raises(FaultSpecError, match="unknown fault rule fields: colour"):
        injector.set([{"method": "*", "code": "INTERNAL", "colour": "red"}])
    injector.clear()
    assert not injector.enabled and injector.to_json()["rules"] == []


# --- against a live emulator ---------------------------------------------------------------
def test_unavailable_on_one_method_only(dws_emulator_factory: Any) -> None:
    emulator = dws_emulator_factory(faults=["GetCustomJob=UNAVAILABLE"])
    client = job_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job())
    with pytest.raises(exceptions.ServiceUnavailable, match="injected fault"):
        client.get_custom_job(name=job.name)
    assert [j.name for j in client.list_custom_jobs(parent=parent)] == [job.name]
    client.cancel_custom_job(name=job.name)
    # The control service is never subject to faults, even under a catch-all rule.
    emulator.control.set_faults(["*=UNAVAILABLE"])
    assert [r["name"] for r in emulator.control.requests()] == [job.name]
    listing = run_cli("requests", "--port", str(emulator.port), "--json")
    assert listing.returncode == 0, listing.stderr
    assert [r["name"] for r in json.loads(listing.stdout)] == [job.name]
    report = emulator.control.faults()
    assert report["injected"] == {f"{JOBS}/GetCustomJob": {"UNAVAILABLE": 1}}
    assert report["history"][0]["method"] == f"{JOBS}/GetCustomJob"
    assert report["history"][0]["time"].endswith("Z")


def test_deadline_exceeded_applies_the_change_once(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory(faults=["CreateCustomJob=DEADLINE_EXCEEDED@1x1"])
    client = job_client(emulator.address)
    parent = fresh_parent()
    with pytest.raises(exceptions.DeadlineExceeded):
        client.create_custom_job(parent=parent, custom_job=make_job({"attempt": "1"}))
    [created] = list(client.list_custom_jobs(parent=parent))
    assert dict(created.labels) == {"attempt": "1"}
    # Count-limited: the rule fired once, the next create answers normally.
    second = client.create_custom_job(parent=parent, custom_job=make_job({"attempt": "2"}))
    assert {j.name for j in client.list_custom_jobs(parent=parent)} == {created.name, second.name}
    [rule] = emulator.control.faults()["rules"]
    assert rule["fired"] == 1 and rule["count"] == 1


def test_resource_exhausted_on_tpu_get(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory(faults=["GetQueuedResource=RESOURCE_EXHAUSTED"])
    client = tpu_client(emulator.address)
    parent = fresh_parent("us-west4-a")
    spec = tpu.QueuedResource.Tpu.NodeSpec(
        parent=parent,
        node_id="node",
        node=tpu.Node(accelerator_type="v5litepod-4", runtime_version="v2-alpha-tpuv5-lite"),
    )
    qr = tpu.QueuedResource(tpu=tpu.QueuedResource.Tpu(node_spec=[spec]))
    created = client.create_queued_resource(
        parent=parent, queued_resource_id="qr", queued_resource=qr
    ).result(timeout=10)
    with pytest.raises(exceptions.ResourceExhausted, match="Quota exceeded"):
        client.get_queued_resource(name=created.name)
    assert [r.name for r in client.list_queued_resources(parent=parent)] == [created.name]


def test_latency(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory(faults=["GetCustomJob=latency:0.6"])
    client = job_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job())
    started = time.monotonic()
    assert client.get_custom_job(name=job.name).name == job.name
    assert time.monotonic() - started >= 0.6  # a lower bound: only a missing delay breaks it
    list(client.list_custom_jobs(parent=parent))
    # Other methods are not delayed: the one delay injected was the get's (counted, not timed).
    report = emulator.control.faults()
    assert report["injected"] == {f"{JOBS}/GetCustomJob": {"LATENCY": 1}}
    assert [h["method"] for h in report["history"]] == [f"{JOBS}/GetCustomJob"]


def _pattern(address: str, name: str, calls: int = 24) -> list[bool]:
    client = job_client(address)
    pattern = []
    for _ in range(calls):
        try:
            client.get_custom_job(name=name)
            pattern.append(False)
        except exceptions.ServiceUnavailable:
            pattern.append(True)
    return pattern


def test_seeded_reproducibility(dws_emulator_server_factory: Any) -> None:
    spec = "GetCustomJob=UNAVAILABLE@0.5"
    first = dws_emulator_server_factory(seed=7, faults=[spec])
    second = dws_emulator_server_factory(seed=7, faults=[spec])
    other = dws_emulator_server_factory(seed=8, faults=[spec])
    names = [
        job_client(e.address).create_custom_job(parent=fresh_parent(), custom_job=make_job()).name
        for e in (first, second, other)
    ]
    pattern = _pattern(first.address, names[0])
    assert 0 < sum(pattern) < len(pattern)
    assert _pattern(second.address, names[1]) == pattern
    assert _pattern(other.address, names[2]) != pattern
    # Reseeding at run time replays the same sequence.
    first.control.set_faults([spec], seed=7)
    assert _pattern(first.address, names[0]) == pattern


def test_cli_faults_and_outage(dws_emulator_factory: Any) -> None:
    emulator = dws_emulator_factory()
    port = str(emulator.port)
    client = job_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job())
    assert run_cli("faults", "--port", port).stdout.strip() == "no fault rules"

    bad = run_cli("faults", "--port", port, "GetCustomJob=UNAVAILABLE@7")
    assert bad.returncode == 2 and "rate must be between 0 and 1" in bad.stderr

    set_ = run_cli("faults", "--port", port, "GetCustomJob=INTERNAL", "ListCustomJobs=UNAVAILABLE@0.5x2")
    assert set_.returncode == 0, set_.stderr
    assert "GetCustomJob=INTERNAL" in set_.stdout and "ListCustomJobs=UNAVAILABLE@0.5x2" in set_.stdout
    with pytest.raises(exceptions.InternalServerError):
        client.get_custom_job(name=job.name)
    shown = run_cli("faults", "--port", port, "--json")
    report = json.loads(shown.stdout)
    assert [r["spec"] for r in report["rules"]] == [
        "GetCustomJob=INTERNAL",
        "ListCustomJobs=UNAVAILABLE@0.5x2",
    ]
    assert report["injected"] == {f"{JOBS}/GetCustomJob": {"INTERNAL": 1}}
    assert "INTERNAL" in run_cli("faults", "--port", port).stdout  # the human-readable table

    cleared = run_cli("faults", "--port", port, "--clear", "--json")
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["rules"] == []
    assert client.get_custom_job(name=job.name).name == job.name

    outage = run_cli("outage", "--port", port, "1")
    assert outage.returncode == 0, outage.stderr
    assert outage.stdout.startswith(f"outage: 127.0.0.1:{port} refuses connections for 1s")
    # Control calls wait for the outage to end; the same state is served again.
    assert [r["name"] for r in emulator.control.requests()] == [job.name]
    assert len(emulator.control.faults()["outages"]) == 1


def test_outage_refuses_connections_then_serves_same_state(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory()
    client = job_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job())
    started = time.monotonic()
    reply = emulator.control.outage(3)
    assert reply["seconds"] == 3
    # The reply came before the outage ended (had it waited for the end, nothing would refuse).

    def refuses() -> bool:
        try:
            client.get_custom_job(name=job.name)
        except exceptions.Cancelled:
            return False  # in flight as the listener closed
        except exceptions.ServiceUnavailable as err:
            # Not "Cancelling all calls": that one was in flight as the listener closed, too.
            return "Connection refused" in str(err) or "failed to connect" in str(err)
        return False

    wait_until(refuses, timeout=3, what="the emulator to refuse connections during its outage")
    with pytest.raises(exceptions.ServiceUnavailable):
        job_client(emulator.address).list_custom_jobs(parent=parent)  # a fresh channel too
    deadline = started + 15
    while True:  # the client's channel reconnects with its own backoff
        try:
            again = client.get_custom_job(name=job.name)
            break
        except exceptions.ServiceUnavailable:
            assert time.monotonic() < deadline, "the emulator did not come back"
            time.sleep(0.1)
    assert time.monotonic() - started >= 3
    assert again.name == job.name and again.create_time == job.create_time
    assert [j.name for j in client.list_custom_jobs(parent=parent)] == [job.name]
    assert client.create_custom_job(parent=parent, custom_job=make_job()).name != job.name


def test_a_second_emulator_cannot_bind_a_port_one_holds(dws_emulator_server_factory: Any) -> None:
    """gRPC's default SO_REUSEPORT would let two emulators share a port, the kernel dealing the
    connections between them: a test would then read another test's requests."""
    from dws_emulator.server import EmulatorServer

    emulator = dws_emulator_server_factory()
    second = EmulatorServer(port=emulator.server.port)
    with pytest.raises(OSError):
        second.start()
    second.stop()


def test_an_outage_keeps_its_ports_from_other_servers(dws_emulator_server_factory: Any) -> None:
    """During an outage nothing listens, yet the ports stay bound: a server asking for any free
    port cannot be given them, and the restart finds them free."""
    import socket

    emulator = dws_emulator_server_factory()
    ports = (emulator.server.port, emulator.server.rest_port)
    emulator.control.outage(3)

    def held() -> bool:
        for port in ports:
            with socket.socket() as other:
                try:
                    other.bind(("127.0.0.1", port))
                    return False  # free for anyone: not held (or the outage has not begun)
                except OSError:
                    pass
            with socket.socket() as probe:
                try:
                    probe.connect(("127.0.0.1", port))
                    return False  # still listening: the outage has not begun
                except ConnectionRefusedError:
                    pass
        return True

    wait_until(held, timeout=3, what="the outage to close both listeners and hold both ports")
    client = job_client(emulator.address)
    wait_until(lambda: _lists(client), timeout=20, what="the emulator to serve again on the same port")


def _lists(client: JobServiceClient) -> bool:
    try:
        client.list_custom_jobs(parent=fresh_parent())
    except exceptions.ServiceUnavailable:
        return False
    return True
