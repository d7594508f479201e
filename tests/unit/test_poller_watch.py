"""The watch beside the shared poller's list (triggers/watching.py), against a scripted fake
Watcher: a change reaches the wait without a list, a deletion makes the poller list again, 410
Gone lists again and watches from the new list, a refused watch falls back to polling, the list
only resyncs while the watch holds, and a list older than a watched change never undoes it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Container
from typing import Any

import pytest

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RequestStatus, Watcher
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import poller, watching

SPEC = {"project_id": "p", "location": "us-central1", "cluster_name": "c", "namespace": "ml"}
KIND = "gke_provisioning_request"
END = object()


def st(request: str, state: str, phase: Phase) -> RequestStatus:
    return RequestStatus(request, state, Outcome(phase, None, ""), RequestTimings())


class Cluster:
    """A fake Watcher: a list of states, and a queue of watch events (or errors) the test feeds."""

    kind = KIND

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.lists = 0
        self.version = 0
        self.watches: list[str] = []
        self.events: asyncio.Queue[Any] | None = None
        self.list_hook: Any = None

    def spec(self) -> dict[str, Any]:
        return SPEC

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        self.lists += 1
        snapshot = dict(self.states)
        if self.list_hook is not None:
            await self.list_hook()
        self.version += 1
        phase = {"Accepted": Phase.WAITING, "Provisioned": Phase.SUCCEEDED}
        return {n: st(n, s, phase[s]) for n, s in snapshot.items() if only is None or n in only}

    async def aget_status(self, request: str) -> RequestStatus:
        raise errors.RequestNotFoundError(f"{request} not found")

    async def arelease(self, request: str) -> bool:
        return True

    def list_version(self) -> str | None:
        return str(self.version) if self.lists else None

    def watch_version(self) -> str | None:
        return str(self.version)

    async def awatch(
        self, resource_version: str, timeout: float
    ) -> AsyncIterator[tuple[str, RequestStatus | None]]:
        self.watches.append(resource_version)
        assert self.events is not None
        while True:
            item = await self.events.get()
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster()
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: c)
    monkeypatch.setattr(poller, "MIN_GAP_SECONDS", 0.01)
    return c


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def until(condition: Any, what: str) -> None:
    """Wait (generously: a loaded machine is slow, never wrong) until ``condition()`` holds."""
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def watched(cluster: Cluster, interval: float = 1.0) -> Any:
    """One wait on ``r1`` (Accepted) whose poller listed once and opened its watch."""
    cluster.events = asyncio.Queue()
    cluster.states["r1"] = "Accepted"
    sub = poller.shared_poller(KIND, SPEC).subscribe("r1", interval)
    first = await sub.next(30)
    assert first is not None and first.state == "Accepted"
    await until(lambda: cluster.watches, "the watch")
    return sub


def test_the_fake_is_a_watcher() -> None:
    assert isinstance(Cluster(), Watcher)


def test_a_change_reaches_the_wait_from_the_watch_and_the_list_only_resyncs(cluster: Cluster) -> None:
    async def go() -> None:
        cluster.events = asyncio.Queue()
        cluster.states["r1"] = "Accepted"
        # An interval of 1 s: without the watch the poller would list every second.
        sub = poller.shared_poller(KIND, SPEC).subscribe("r1", 1.0)
        assert (await sub.next(30)).state == "Accepted"
        p = sub.poller
        await until(lambda: cluster.watches == ["1"], "the watch from the first list's version")
        assert p.watch.holding and p.watch.delay(1.0) == watching.RESYNC_SECONDS
        cluster.events.put_nowait(("r1", st("r1", "Provisioned", Phase.SUCCEEDED)))
        got = await sub.next(30)
        assert got is not None and got.state == "Provisioned"
        assert cluster.lists == 1 and p.stats["watch_events"] == 1
        # The server ends the watch: it is renewed from the last change it showed.
        cluster.events.put_nowait(END)
        await until(lambda: len(cluster.watches) == 2, "the renewed watch")
        assert p.stats["watches"] == 2 and cluster.lists == 1
        sub.close()

    run(go())


def test_a_deleted_request_makes_the_poller_list_again(cluster: Cluster) -> None:
    async def go() -> None:
        sub = await watched(cluster)
        del cluster.states["r1"]
        cluster.events.put_nowait(("r1", None))
        with pytest.raises(errors.RequestNotFoundError):
            await sub.next(30)  # the list missed it, the read said it is gone
        assert cluster.lists == 2
        sub.close()

    run(go())


def test_gone_lists_again_and_watches_from_the_new_list(cluster: Cluster) -> None:
    async def go() -> None:
        sub = await watched(cluster)
        assert cluster.watches == ["1"]
        cluster.events.put_nowait(errors.TransientApiError("too old resource version", code=410))
        await until(lambda: cluster.watches == ["1", "2"], "a watch from the second list")
        assert cluster.lists == 2 and sub.poller.watch.holding
        sub.close()

    run(go())


def test_a_refused_watch_falls_back_to_polling_at_the_interval(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        sub = await watched(cluster, 0.05)
        cluster.events.put_nowait(errors.PermissionDeniedApiError("watch is forbidden", code=403))
        await until(lambda: not sub.poller.watch.holding, "the watch to fail")
        listed = cluster.lists
        cluster.states["r1"] = "Provisioned"
        got = await sub.next(30)  # heard from a list, at the interval
        assert got is not None and got.state == "Provisioned" and cluster.lists > listed
        assert sub.poller.watch.delay(0.05) == 0.05
        # Tried again after LIST_RETRY_CYCLES cycles.
        await until(lambda: len(cluster.watches) == 2, "the watch tried again")
        sub.close()

    with caplog.at_level("WARNING"):
        run(go())
    assert "Watching" in caplog.text and "watch is forbidden" in caplog.text


def test_a_list_older_than_a_watched_change_does_not_undo_it(cluster: Cluster) -> None:
    async def go() -> None:
        sub = await watched(cluster)
        p = sub.poller
        gate = asyncio.Event()

        async def slow_list() -> None:
            # The list took its snapshot (Accepted); the change arrives by the watch meanwhile.
            cluster.events.put_nowait(("r1", st("r1", "Provisioned", Phase.SUCCEEDED)))
            await gate.wait()

        cluster.list_hook = slow_list
        p._wake.set()
        got = await sub.next(30)
        assert got is not None and got.state == "Provisioned"
        gate.set()
        await until(lambda: p.stats["cycles"] >= 2, "the slow list's cycle")
        assert await sub.next(0.2) is None  # the older list handed nothing over
        sub.close()

    run(go())
