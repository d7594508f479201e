"""Ring 2: many triggers in one event loop against a live dws-emulator, through the real async
clients: one paged list per interval serves them all, mixed outcomes reach the right trigger,
cancelling one wait leaves the others, and a TPU zone is served the same way.

No wall-clock ranges: the tests wait for counted events (list rounds, backoffs) with generous
timeouts, and bound the number of lists only from above by the time that really passed, which a
slow machine can only loosen.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Container
from typing import Any

import pytest
from google.cloud.aiplatform_v1 import CustomJob

from airflow_provider_dws.backends import tpu as tpu_backend
from airflow_provider_dws.backends import vertex_ai
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.control import EmulatorControl

pytestmark = pytest.mark.emulator

REGION = "us-central1"
POOL = f"{REGION}/NVIDIA_H100_80GB"
INTERVAL = 0.3
_runs = itertools.count()


async def until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    """Wait in the event loop until ``predicate()`` holds; fail after a generous ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        await asyncio.sleep(0.02)


def most_lists(elapsed: float) -> float:
    """The most list rounds one poller may start in ``elapsed`` seconds: each starts at least one
    interval after the previous one (plus one for rounding). Waits polling on their own, or a
    poller that ignores its interval, list far more often."""
    return 2 + elapsed / INTERVAL


async def stopped(shared: poller.SharedPoller) -> None:
    """The poller stops once its last wait has gone (a leaked subscription keeps it polling)."""
    await until(lambda: shared.closed, "the shared poller to stop after its last wait", timeout=10)
    assert len(shared) == 0


def job(index: int, exit_code: int = 0) -> tuple[CustomJob, RequestIdentity]:
    """An 8 x H100 Flex Start job labelled like the operator labels it."""
    op = CreateVertexAIFlexStartJobOperator(
        task_id=f"t{index}",
        project_id="emu-project",
        region=REGION,
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
                    "env": [
                        {"name": "DWS_EMULATOR_RUN_SECONDS", "value": "0.2"},
                        {"name": "DWS_EMULATOR_EXIT_CODE", "value": str(exit_code)},
                    ],
                },
            }
        ],
    )
    identity = RequestIdentity("shared_poller", f"t{index}", f"run{next(_runs)}_{time.monotonic_ns()}")
    return op.adapter().build(identity), identity


class Spy:
    """Counts the shared backend's calls: lists started and finished (each reads every page), reads,
    and the requests each list of ended requests found; and how often each request was learned of
    (read or found ended) in each round (by the number of lists started)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, cls: Any) -> None:
        self.lists = 0
        self.lists_done = 0
        self.reads: Counter[str] = Counter()
        self.ended: Counter[str] = Counter()
        self.per_round: Counter[tuple[int, str]] = Counter()
        spy = self
        if hasattr(cls, "alist_ended"):
            original_ended = cls.alist_ended

            async def alist_ended(backend: Any, *args: Any) -> dict[str, RequestStatus]:
                found: dict[str, RequestStatus] = await original_ended(backend, *args)
                spy.ended.update(found.keys())
                spy.per_round.update((spy.lists, name) for name in found)
                return found

            monkeypatch.setattr(cls, "alist_ended", alist_ended)
        original_list, original_get = cls.alist_live, cls.aget_status

        async def alist_live(backend: Any, only: Container[str] | None = None) -> dict[str, RequestStatus]:
            spy.lists += 1
            try:
                return await original_list(backend, only)
            finally:
                spy.lists_done += 1

        async def aget_status(backend: Any, name: str) -> RequestStatus:
            spy.reads[name] += 1
            spy.per_round[spy.lists, name] += 1
            return await original_get(backend, name)

        monkeypatch.setattr(cls, "alist_live", alist_live)
        monkeypatch.setattr(cls, "aget_status", aget_status)


def test_many_vertex_waits_one_paged_list_mixed_outcomes(
    dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = dws_emulator_server_factory({POOL: 0})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    monkeypatch.setattr(vertex_ai, "LIST_PAGE_SIZE", 7)  # 40 waits: 6 pages per list
    spy = Spy(monkeypatch, vertex_ai, VertexCustomJobBackend)
    backend = VertexCustomJobBackend("emu-project", REGION)
    n = 40
    failing = set(range(1, n, 5))
    names = [backend.submit(*job(i, exit_code=3 if i in failing else 0))[0].name for i in range(n)]
    cancelled = names[2]
    control = EmulatorControl(emulator.address)

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        triggers = [
            CapacityRequestTrigger("vertex_custom_job", backend.spec(), name, poll_interval=INTERVAL)
            for name in names
        ]
        tasks = [asyncio.ensure_future(first_event(t)) for t in triggers]
        await until(lambda: spy.lists_done >= 4, "four list rounds while every request waits")
        elapsed = loop.time() - started
        pages = emulator.calls("ListCustomJobs")
        shared = poller.shared_poller("vertex_custom_job", backend.spec())
        assert len(shared) == n  # every wait follows the one poller
        assert spy.lists <= most_lists(elapsed), (spy.lists, elapsed)
        # Each round is one list reading all 6 pages; rounds never overlap.
        assert spy.lists - spy.lists_done <= 1
        assert 6 * spy.lists_done <= pages <= 6 * spy.lists, (pages, spy.lists_done, spy.lists)
        assert sum(spy.reads.values()) == 0  # nobody read directly while listed
        # One wait is given up by its task (cancelled like the triggerer does): the others go on.
        tasks[3].cancel("__airflow_user_action__")
        await asyncio.gather(tasks[3], return_exceptions=True)
        await triggers[2].backend.arelease(cancelled)  # one job is cancelled outside the triggers
        await asyncio.to_thread(control.set_capacity, {POOL: 8 * n})
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await stopped(shared)
        return results

    results = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert isinstance(results[3], asyncio.CancelledError)
    for i, event in enumerate(results):
        if i == 3:
            continue
        expected = "cancelled" if i == 2 else "failed" if i in failing else "succeeded"
        assert event["phase"] == expected, (i, event)
        assert event["name"] == names[i]
        if expected != "cancelled":
            assert event["timings"]["run_seconds"] is not None
    # A request that ended left the live list and was learned of once: most from one list of the
    # ended ones (they ended together), a few stragglers read directly; never twice in one round.
    # Once more in the next round at most: its trigger may not have left yet on a loaded machine.
    learned = spy.reads + spy.ended
    assert set(learned) == set(names) - {names[3]}
    assert all(count == 1 for count in spy.per_round.values()), spy.per_round
    assert max(learned.values()) <= 2, learned
    assert sum(spy.ended.values()) >= poller.ENDED_LIST_MIN


def test_api_errors_on_lists_and_reads_end_no_wait_early(
    dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quota bursts and unavailability on the emulator's lists and reads: every wait still ends
    with its own outcome, the poller backs off as a whole, and a job deleted outside ends only its
    own wait (NOT_FOUND)."""
    emulator = dws_emulator_server_factory({POOL: 0})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    monkeypatch.setattr(vertex_ai, "LIST_PAGE_SIZE", 5)  # 20 waits: 4 pages per list
    monkeypatch.setattr(poller, "QUOTA_BACKOFF_INITIAL", 0.4)
    backend = VertexCustomJobBackend("emu-project", REGION)
    n = 20
    failing = {4, 9}
    names = [backend.submit(*job(i, exit_code=3 if i in failing else 0))[0].name for i in range(n)]
    # One job ends and is deleted before its trigger starts: it is in no list, and its read says
    # NOT_FOUND.
    deleted = names[7]
    backend.release(deleted)
    control = EmulatorControl(emulator.address)
    seen: list[dict[str, Any]] = []

    async def scenario() -> list[dict[str, Any]]:
        # Cancelled is final on the emulator's next tick, and every call ticks first.
        await asyncio.to_thread(lambda: backend._client().delete_custom_job(name=deleted).result(30))
        control.set_faults(
            [
                "ListCustomJobs=RESOURCE_EXHAUSTEDx2",
                "ListCustomJobs=UNAVAILABLE@0.3",
                "GetCustomJob=UNAVAILABLE@0.5",
            ],
            seed=11,
        )
        triggers = [
            CapacityRequestTrigger("vertex_custom_job", backend.spec(), name, poll_interval=INTERVAL)
            for name in names
        ]
        tasks = [asyncio.ensure_future(first_event(t)) for t in triggers]
        shared = poller.shared_poller("vertex_custom_job", backend.spec())
        # Past both quota answers and a few more rounds (some of them faulted).
        await until(
            lambda: shared.stats["backoffs"] >= 2 and shared.stats["cycles"] >= 5,
            "two quota backoffs and five poll rounds",
        )
        seen.append(dict(shared.stats))
        assert all(not task.done() for i, task in enumerate(tasks) if i != 7)
        await asyncio.to_thread(control.set_capacity, {POOL: 8 * n})
        events = list(await asyncio.gather(*tasks))
        await stopped(shared)
        return events

    events = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    injected = control.faults()["injected"]
    for i, event in enumerate(events):
        expected = "cancelled" if i == 7 else "failed" if i in failing else "succeeded"
        assert event["phase"] == expected, (i, event)
        assert event["name"] == names[i]
    assert events[7]["state"] == "NOT_FOUND"
    # Two quota answers to the shared list made the one poller back off twice (20 waits would
    # have backed off 40 times on their own); the other faults were really injected.
    assert seen[0]["backoffs"] == 2
    lists = injected["google.cloud.aiplatform.v1.JobService/ListCustomJobs"]
    assert lists["RESOURCE_EXHAUSTED"] == 2
    assert sum(lists.values()) >= 3


def test_tpu_waits_share_one_list_per_zone(
    dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator

    zone = "us-west4-a"
    emulator = dws_emulator_server_factory({f"{zone}/v5litepod": 0})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    spy = Spy(monkeypatch, tpu_backend, tpu_backend.TpuQueuedResourceBackend)
    backend = tpu_backend.TpuQueuedResourceBackend("emu-project", zone)
    names = []
    for i in range(6):
        op = CreateTPUQueuedResourceOperator(
            task_id=f"slice{i}",
            project_id="emu-project",
            zone=zone,
            accelerator_type="v5litepod-8",
            runtime_version="v2-alpha-tpuv5-lite",
        )
        identity = RequestIdentity("shared_poller_tpu", f"slice{i}", f"run{next(_runs)}")
        qr_id = op.adapter().id_for(identity)
        qr, _ = backend.submit(op.adapter().build(identity.labels(), backend.parent, qr_id), identity, qr_id)
        names.append(qr.name)
    control = EmulatorControl(emulator.address)

    async def scenario() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        tasks = [
            asyncio.ensure_future(
                first_event(
                    CapacityRequestTrigger(
                        "tpu_queued_resource", backend.spec(), name, poll_interval=INTERVAL, target="running"
                    )
                )
            )
            for name in names
        ]
        await until(lambda: spy.lists_done >= 3, "three list rounds while every slice waits")
        elapsed = loop.time() - started
        shared = poller.shared_poller("tpu_queued_resource", backend.spec())
        assert len(shared) == len(names)
        assert sum(spy.reads.values()) == 0
        assert spy.lists <= most_lists(elapsed), (spy.lists, elapsed)
        await asyncio.to_thread(control.set_capacity, {f"{zone}/v5litepod": 8 * len(names)})
        events = list(await asyncio.gather(*tasks))
        await stopped(shared)
        return events

    events = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert [e["phase"] for e in events] == ["running"] * len(names)
    assert [e["name"] for e in events] == names
    assert sum(spy.reads.values()) == 0  # ACTIVE slices are still in the zone's list
