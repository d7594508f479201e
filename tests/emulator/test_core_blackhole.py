"""D3 against a black-holed connection: a proxy that accepts and never answers. Every call has a
deadline, so the shared poller keeps cycling through the outage (instead of stalling every wait
behind one call until the kernel gives up on the TCP connection), and the wait ends normally once
the network heals."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.control import EmulatorControl
from dws_emulator.server import EmulatorServer
from tests.tcp_proxy import OutageProxy

pytestmark = pytest.mark.emulator

H100 = "us-central1/NVIDIA_H100_80GB"


@pytest.fixture
def emulator() -> Any:
    server = EmulatorServer({H100: 0}).start()
    yield server
    server.stop()


def job_request(identity: RequestIdentity) -> Any:
    op = CreateVertexAIFlexStartJobOperator(
        task_id="blackhole",
        project_id="emu-project",
        region="us-central1",
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "a3-highgpu-8g",
                    "accelerator_type": "NVIDIA_H100_80GB",
                    "accelerator_count": 8,
                },
                "replica_count": 1,
                "container_spec": {
                    "image_uri": "us-docker.pkg.dev/p/r/train:1",
                    "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": "0.2"}],
                },
            }
        ],
    )
    return op.adapter().build(identity)


async def until(condition: Any, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit  # generous: a loaded machine is slow, never wrong
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_black_holed_connection_does_not_stall_the_poller(
    emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    identity = RequestIdentity("dag", "blackhole", f"run-{time.monotonic_ns()}")
    submitted, _ = VertexCustomJobBackend("emu-project", "us-central1").submit(
        job_request(identity), identity
    )
    proxy = OutageProxy(emulator.address)
    monkeypatch.setenv("DWS_EMULATOR_HOST", proxy.address)  # the triggerer's side goes through it
    waiting = VertexCustomJobBackend("emu-project", "us-central1", rpc_timeout=0.5)
    trigger = CapacityRequestTrigger(waiting.kind, waiting.spec(), submitted.name, poll_interval=0.2)

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        await until(
            lambda: poller.poller_key(waiting.kind, waiting.spec()) in poller._POLLERS.get(loop(), {}),
            "the poller",
        )
        shared = poller._POLLERS[loop()][poller.poller_key(waiting.kind, waiting.spec())]
        await until(lambda: shared.stats["lists"] >= 2, "two lists through the proxy")
        proxy.black_hole()
        before = shared.stats["cycles"]
        # Each round now sends its list into the void on the open connection and ends at the
        # call's deadline; without one it would wait as long as the connection looks alive.
        await until(lambda: shared.stats["cycles"] >= before + 4, "rounds during the outage")
        assert not task.done() and not shared.closed
        await asyncio.to_thread(EmulatorControl(emulator.address).set_capacity, {H100: 8})
        proxy.heal()
        return await asyncio.wait_for(task, 120)

    def loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    try:
        event = asyncio.run(scenario())
    finally:
        proxy.close()
    assert event["phase"] == "succeeded" and event["name"] == submitted.name
