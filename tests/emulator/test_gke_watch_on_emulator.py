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


def hear_from_the_watch(
    kind: str, spec: dict[str, Any], names: list[str], blocker: str, waiting: str, until: str
) -> tuple[dict[str, str], dict[str, int]]:
    """Subscribe a wait to each of ``names`` on one shared poller: their first status (from its
    one list) in state or phase ``waiting``; once its watch is open, delete ``blocker`` (capacity
    arrives) and follow each wait until its state is ``until``. Each wait's last state, and the
    poller's counters."""

    async def go() -> tuple[dict[str, str], dict[str, int]]:
        subs = [poller.shared_poller(kind, spec).subscribe(name, INTERVAL) for name in names]
        first = [await sub.next(120) for sub in subs]
        assert all(s is not None and waiting in (s.state, s.phase.value) for s in first), first
        p = subs[0].poller
        for _ in range(4000):  # until the watch is open (generous: a loaded machine is slow)
            if p.stats["watches"]:
                break
            await asyncio.sleep(0.005)
        await asyncio.to_thread(backend().release, blocker)
        seen: dict[str, str] = {}
        for name, sub in zip(names, subs, strict=True):
            while seen.get(name) != until:
                status = await sub.next(120)
                assert status is not None, f"{name}: nothing within 120 s after {seen.get(name)}"
                seen[name] = status.state
        stats = dict(p.stats)
        for sub in subs:
            sub.close()
        return seen, stats

    return asyncio.run(go())


def test_freed_capacity_reaches_every_wait_from_the_watch(emulator: Any) -> None:
    blocker = submit("blocker", 4)  # every H100 of the pool
    waiting = [submit(f"wait{i}", 1) for i in range(3)]
    seen, stats = hear_from_the_watch(
        backend().kind, backend().spec(), waiting, blocker, Phase.WAITING.value, "Provisioned"
    )
    assert seen == dict.fromkeys(waiting, "Provisioned")
    assert stats["lists"] == 1 and stats["watches"] >= 1 and stats["watch_events"] >= 3
    for name in waiting:
        backend().release(name)


def flex_job(task: str, gpus: int = 8) -> str:
    """A flex-start Job of one pod of ``gpus`` H100s, made through its adapter's manifest."""
    from airflow_provider_dws.backends.gke_flex import FlexStartJobBackend
    from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator

    op = CreateGKEFlexStartJobOperator(
        task_id=task,
        project_id="my-project",
        location="us-central1",
        cluster_name="train",
        namespace=NS,
        image="t:1",
        accelerator="nvidia-h100-80gb",
        gpus=gpus,
        env_vars={"DWS_EMULATOR_RUN_SECONDS": "3600"},
    )
    identity = RequestIdentity("watch_dag", task, "manual__1")
    backend = FlexStartJobBackend("my-project", "us-central1", cluster_name="train", namespace=NS)
    status, _ = backend.submit(op.adapter().build(identity, timedelta(hours=2)), identity)
    return status.name


def test_a_jobs_pods_getting_their_nodes_reach_its_wait_from_the_paired_watch(emulator: Any) -> None:
    """A flex-start Job's state is its pods': the watch of the Jobs and the watch of their pods,
    paired, bring a pod's new node to the Job's wait without a list."""
    from airflow_provider_dws.backends.gke_flex import FlexStartJobBackend

    blocker = submit("blocker", 4)  # every H100 of the pool: the Jobs' pods wait for nodes
    waiting = [flex_job(f"flex{i}") for i in range(2)]
    flex = FlexStartJobBackend("my-project", "us-central1", cluster_name="train", namespace=NS)

    seen, stats = hear_from_the_watch(flex.kind, flex.spec(), waiting, blocker, "WaitingForNodes", "Running")
    assert seen == dict.fromkeys(waiting, "Running")
    assert stats["lists"] == 1 and stats["watches"] >= 1 and stats["watch_events"] >= 2
    for name in waiting:
        flex.release(name)


def test_a_kueue_job_admitted_reaches_its_wait_from_the_paired_watch(emulator: Any) -> None:
    """A Kueue Job's state is its Job's and its Workload's: admitted once capacity comes, it
    reaches its wait from the watches of Jobs and Workloads, without a list."""
    from airflow_provider_dws.backends.kueue import KueueJobBackend
    from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator

    blocker = submit("blocker", 4)
    op = CreateGKEQueuedJobOperator(
        task_id="queued",
        project_id="my-project",
        location="us-central1",
        cluster_name="train",
        namespace=NS,
        queue_name="dws-queue",
        image="t:1",
        accelerator="nvidia-h100-80gb",
        gpus=8,
        env_vars={"DWS_EMULATOR_RUN_SECONDS": "3600"},
    )
    identity = RequestIdentity("watch_dag", "queued", "manual__1")
    kueue = KueueJobBackend("my-project", "us-central1", cluster_name="train", namespace=NS)
    name = kueue.submit(op.adapter().build(identity, timedelta(hours=2)), identity)[0].name

    seen, stats = hear_from_the_watch(
        kueue.kind, kueue.spec(), [name], blocker, Phase.WAITING.value, "Running"
    )
    assert seen[name] == "Running" and stats["lists"] == 1 and stats["watch_events"] >= 1, (seen, stats)
    kueue.release(name)
