"""The emulator's REST front: address convention, loopback, faults and counters, outages, error
bodies, and Compute Engine requests in the control API and the CLI."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests
from google.api_core import exceptions
from google.cloud import compute_v1
from test_emulator_compute import (
    ZONE,
    Clients,
    flex_template,
    get,
    make_mig,
    reason,
    resize,
    vms,
)

from dws_emulator import cli
from dws_emulator.core.faults import FaultRule
from dws_emulator.server import EmulatorServer
from dws_emulator.testing import FakeClock, wait_until

pytestmark = pytest.mark.emulator

P = "compute-test"
SERVICE = "compute.v1"


@pytest.fixture
def emulator(dws_emulator_server_factory):
    return dws_emulator_server_factory(
        {"us-central1/NVIDIA_H100_80GB": 16, "us-east4/NVIDIA_H100_80GB": 8}, clock=FakeClock()
    )


@pytest.fixture
def gce(emulator) -> Clients:
    return Clients(emulator.server.rest_url)


def raw(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_rest_listens_on_the_grpc_port_plus_one_on_loopback_only(emulator) -> None:
    server = emulator.server
    assert server.rest_port == server.port + 1
    assert server.rest_address == f"127.0.0.1:{server.port + 1}"
    assert server.rest_url == f"http://127.0.0.1:{server.port + 1}"
    tcp = Path("/proc/net/tcp")
    if tcp.exists():  # the listener's local address is 127.0.0.1 (0100007F), not a wildcard
        listening = [line.split()[1] for line in tcp.read_text().splitlines()[1:] if line.split()[3] == "0A"]
        assert f"0100007F:{server.rest_port:04X}" in listening
    with pytest.raises(ValueError, match="loopback"):
        EmulatorServer(host="0.0.0.0")


def test_a_given_port_whose_next_port_is_taken_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            EmulatorServer(port=port - 1).start()
        assert cli.main(["serve", "--port", str(port - 1)]) == 2  # a message, not a traceback


def test_port_zero_tries_another_pair_when_the_next_port_is_taken() -> None:
    class Unlucky(EmulatorServer):
        tried: list[int] = []

        def _serve_rest(self, port: int) -> int:
            self.tried.append(port)
            if len(self.tried) == 1:  # as if another process held the first gRPC port + 1
                raise OSError("taken")
            return super()._serve_rest(port)

    with Unlucky({}) as server:
        # The first pair was refused, so another was tried; on a busy machine a real process may
        # hold the next pair's port + 1 too, so more than two pairs may be tried before one serves.
        assert len(Unlucky.tried) >= 2 and server.rest_port == Unlucky.tried[-1] == server.port + 1
        status, _ = raw(f"{server.rest_url}/compute/v1/projects/{P}/global/instanceTemplates/x")
        assert status == 404


def test_error_bodies_unknown_paths_and_bad_json(emulator) -> None:
    url = emulator.server.rest_url
    status, body = raw(f"{url}/compute/v1/projects/{P}/zones/{ZONE}/instances/nope")
    assert status == 404
    assert body["error"]["code"] == 404 and body["error"]["status"] == "NOT_FOUND"
    assert body["error"]["errors"] == [
        {
            "message": f"The resource 'projects/{P}/zones/{ZONE}/instances/nope' was not found",
            "domain": "global",
            "reason": "notFound",
        }
    ]
    status, body = raw(f"{url}/compute/v1/nothing/here")
    assert status == 404 and body["error"]["errors"][0]["reason"] == "notFound"
    status, body = raw(f"{url}/compute/v1/projects/{P}/zones/{ZONE}/instances/x", method="PUT")
    assert status == 405 and body["error"]["code"] == 405
    templates = f"{url}/compute/v1/projects/{P}/global/instanceTemplates"
    status, body = raw(templates, "POST", b"{not json")
    assert status == 400 and body["error"]["errors"][0]["reason"] == "parseError"
    status, body = raw(templates, "POST", json.dumps({"name": "t", "noSuchField": 1}).encode())
    assert status == 400 and "noSuchField" in body["error"]["message"]


def test_faults_on_rest_routes_answer_google_errors_and_every_call_is_counted(gce, emulator) -> None:
    assert FaultRule.parse("compute.instances.get=UNAVAILABLE").method == f"{SERVICE}/compute.instances.get"
    make_mig(gce)
    resize(gce, "rr")
    emulator.server.stats.reset()
    emulator.control.set_faults(
        [
            "compute.instanceGroupManagerResizeRequests.get=UNAVAILABLEx1",
            "compute.instanceGroupManagers.get=RESOURCE_EXHAUSTEDx1",
            "compute.instanceTemplates.get=INTERNALx1",
        ]
    )
    with pytest.raises(exceptions.ServiceUnavailable) as unavailable:
        gce.resize.get(project=P, zone=ZONE, instance_group_manager="mig", resize_request="rr", retry=None)
    assert unavailable.value.code == 503 and reason(unavailable.value) == "backendError"
    assert get(gce, "rr").state == "SUCCEEDED"
    with pytest.raises(exceptions.TooManyRequests) as exhausted:
        gce.migs.get(project=P, zone=ZONE, instance_group_manager="mig")
    assert reason(exhausted.value) == "rateLimitExceeded"
    with pytest.raises(exceptions.InternalServerError):
        gce.templates.get(project=P, instance_template="tpl")
    assert gce.templates.get(project=P, instance_template="tpl").name == "tpl"

    calls = emulator.server.stats.snapshot()["calls"]
    assert calls[f"{SERVICE}/compute.instanceGroupManagerResizeRequests.get"] == 2
    assert calls[f"{SERVICE}/compute.instanceGroupManagers.get"] == 1
    assert calls[f"{SERVICE}/compute.instanceTemplates.get"] == 2
    injected = emulator.control.faults()["injected"]
    assert injected[f"{SERVICE}/compute.instanceGroupManagerResizeRequests.get"] == {"UNAVAILABLE": 1}

    # The client's own retry absorbs a 503 on get, as it would against Google.
    emulator.control.set_faults(["compute.instanceGroupManagerResizeRequests.get=UNAVAILABLEx1"])
    assert get(gce, "rr").state == "SUCCEEDED"
    assert (
        emulator.server.stats.snapshot()["calls"][f"{SERVICE}/compute.instanceGroupManagerResizeRequests.get"]
        == 4
    )


def test_deadline_exceeded_on_insert_applies_the_request_and_loses_the_answer(gce, emulator) -> None:
    make_mig(gce)
    emulator.control.set_faults(["compute.instanceGroupManagerResizeRequests.insert=DEADLINE_EXCEEDEDx1"])
    with pytest.raises(exceptions.GatewayTimeout):
        resize(gce, "lost")
    assert get(gce, "lost").state == "SUCCEEDED"
    with pytest.raises(exceptions.Conflict):
        resize(gce, "lost")
    emulator.control.set_faults([f"{SERVICE}/*=UNAVAILABLE"])
    with pytest.raises(exceptions.ServiceUnavailable):
        gce.migs.delete_unary(project=P, zone=ZONE, instance_group_manager="mig")
    emulator.control.clear_faults()
    assert len(vms(gce)) == 1


def test_an_outage_refuses_rest_connections_then_serves_the_same_state(gce, emulator) -> None:
    gce.templates.insert_unary(project=P, instance_template_resource=flex_template())
    server = emulator.server

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", server.rest_port), timeout=5).close()
        except ConnectionRefusedError:
            return True
        return False

    emulator.control.outage(3)
    wait_until(refused, timeout=30, what="the REST port to refuse connections")
    with pytest.raises(requests.exceptions.ConnectionError):
        gce.templates.get(project=P, instance_template="tpl", retry=None)

    def served() -> bool:
        with contextlib.suppress(requests.exceptions.ConnectionError):
            return gce.templates.get(project=P, instance_template="tpl", retry=None).name == "tpl"
        return False

    wait_until(served, timeout=60, what="the REST front to serve again")
    assert server.rest_port == server.port + 1


def test_templates_without_gpus_and_gpus_without_a_pool(gce) -> None:
    gce.templates.insert_unary(project=P, instance_template_resource=flex_template("cpu", "n2-standard-8"))
    make_mig(gce, "cpu", template="cpu", create=False)
    resize(gce, "rr", mig="cpu", count=3)
    assert get(gce, "rr", mig="cpu").state == "SUCCEEDED"
    [vm] = vms(gce, "cpu")[:1]
    assert not gce.instances.get(project=P, zone=ZONE, instance=vm.name).guest_accelerators

    accel = compute_v1.AcceleratorConfig(accelerator_type="nvidia-tesla-t4", accelerator_count=2)
    t4 = flex_template("t4", "n1-standard-8")
    t4.properties.guest_accelerators = [accel]
    gce.templates.insert_unary(project=P, instance_template_resource=t4)
    make_mig(gce, "t4", template="t4", create=False)
    resize(gce, "rr", mig="t4")
    failed = get(gce, "rr", mig="t4")
    assert failed.state == "FAILED" and failed.status.error.errors[0].code == "RESOURCE_NOT_FOUND"
    assert "acceleratorTypes/nvidia-tesla-t4" in failed.status.error.errors[0].message


def test_cli_requests_lists_resize_requests(gce, emulator, capsys, monkeypatch) -> None:
    # The emulator's own log lines stay out of the CLI's output: a test process that imported
    # Airflow 3.0 has a root logger that writes to whatever sys.stdout is when a line is logged.
    monkeypatch.setattr(logging.getLogger("dws_emulator"), "propagate", False)
    make_mig(gce)
    resize(gce, "rr", count=2)
    assert cli.main(["requests", "--port", str(emulator.port), "--json"]) == 0
    [record] = [r for r in json.loads(capsys.readouterr().out) if r["kind"] == "ResizeRequest"]
    assert record["display_name"] == "rr" and record["state"] == "SUCCEEDED"
    assert len(record["instances"]) == 2 and not any(vm["deleted"] for vm in record["instances"])
    assert record["history"][0]["state"] == "CREATING" and record["create_time"]
    assert cli.main(["requests", "--port", str(emulator.port)]) == 0
    out = capsys.readouterr().out
    assert (
        "ResizeRequest projects/compute-test/zones/us-central1-a/instanceGroupManagers/mig/resizeRequests/rr"
        in out
    )
    assert "instances: " in out


def test_a_waiting_request_starts_when_the_shared_pool_grows(gce, emulator) -> None:
    emulator.control.set_capacity({"us-central1/NVIDIA_H100_80GB": 8})
    make_mig(gce)
    resize(gce, "big", count=2)  # 16 GPUs at once, 8 in the pool
    assert get(gce, "big").state == "ACCEPTED" and vms(gce) == []
    assert emulator.control.capacity()["us-central1/NVIDIA_H100_80GB"]["queued"] == 1
    emulator.control.set_capacity({"us-central1/NVIDIA_H100_80GB": 16})
    assert get(gce, "big").state == "SUCCEEDED" and len(vms(gce)) == 2
