"""The shared poller's watch (triggers/watching.py) on the emulated cluster, through the unmodified
``kubernetes_asyncio`` client: capacity freed for queued ProvisioningRequests reaches their waits
from the watch, long before the poller's next list."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends.kubernetes import ProvisioningRequestBackend
from airflow_provider_dws.hooks.base import EMULATOR_HOST_ENV
from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers import poller
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

NS = "default"
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
#: Far longer than the test: any status after the first list can only have come from the watch.
INTERVAL = 3600.0


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = dws_emulator_server_factory(clock=FakeClock())
    monkeypatch.setenv(EMULATOR_HOST_ENV, server.address)
    return server


def backend() -> ProvisioningRequestBackend:
    return ProvisioningRequestBackend("my-project", "us-central1", cluster_name="train", namespace=NS)


def submit(task: str, count: int) -> str:
    container = {"name": "t", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    op = CreateGKEProvisioningRequestOperator(
        task_id=task,
        project_id="my-project",
        location="us-central1",
        cluster_name="train",
        namespace=NS,
        pod_template={"containers": [container], "nodeSelector": dict(H100), "restartPolicy": "Never"},
        count=count,
        max_run=timedelta(hours=1),
    )
    identity = RequestIdentity("watch_dag", task, "manual__1")
    status, _ = backend().submit(op.adapter().build(identity, timedelta(hours=2)), identity)
    return status.name


def test_freed_capacity_reaches_every_wait_from_the_watch(emulator: Any) -> None:
    blocker = submit("blocker", 4)  # every H100 of the pool
    waiting = [submit(f"wait{i}", 1) for i in range(3)]
    spec = backend().spec()

    async def go() -> tuple[dict[str, str], dict[str, int]]:
        subs = [poller.shared_poller(backend().kind, spec).subscribe(name, INTERVAL) for name in waiting]
        first = [await sub.next(120) for sub in subs]
        assert all(s is not None and s.phase is Phase.WAITING for s in first)
        p = subs[0].poller
        for _ in range(4000):  # until the watch is open (generous: a loaded machine is slow)
            if p.stats["watches"]:
                break
            await asyncio.sleep(0.005)
        await asyncio.to_thread(backend().release, blocker)
        seen: dict[str, str] = {}
        for name, sub in zip(waiting, subs, strict=True):
            while seen.get(name) != "Provisioned":
                status = await sub.next(120)
                assert status is not None, f"{name}: nothing within 120 s"
                seen[name] = status.state
        stats = dict(p.stats)
        for sub in subs:
            sub.close()
        return seen, stats

    seen, stats = asyncio.run(go())
    assert seen == dict.fromkeys(waiting, "Provisioned")
    assert stats["lists"] == 1 and stats["watches"] >= 1 and stats["watch_events"] >= 3
    for name in waiting:
        backend().release(name)
