"""D3 against a black-holed connection: a proxy that accepts and never answers. Every call has a
deadline, so the shared poller keeps cycling through the outage (instead of stalling every wait
behind one call until the kernel gives up on the TCP connection), and the wait ends normally once
the network heals."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

import pytest

from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
from airflow_provider_dws.emulator.control import EmulatorControl
from airflow_provider_dws.emulator.server import EmulatorServer
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event

pytestmark = pytest.mark.emulator

H100 = "us-central1/NVIDIA_H100_80GB"


class BlackHoleProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``. ``black_hole()``: from then on every byte is
    swallowed, on the open connections too (they stay up, as through a dead route: the client
    sees nothing wrong but no answer), and new connections are accepted and never answered.
    ``heal()`` drops every connection (as TCP eventually would) and forwards again."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._swallowing = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def black_hole(self) -> None:
        self._swallowing = True

    def heal(self) -> None:
        self._swallowing = False
        self._drop()

    def close(self) -> None:
        self.listener.close()
        self._drop()

    def _drop(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._swallowing:
                with self._lock:
                    self._conns.append(client)  # held open, never read, never answered
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._swallowing:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


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
    return op.build_custom_job(identity)


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
    proxy = BlackHoleProxy(emulator.address)
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
