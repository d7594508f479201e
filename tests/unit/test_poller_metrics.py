"""The shared poller's metrics: per interval, the requests it follows (gauge) and the API calls it
made (counter), and each whole-poller quota backoff; tagged by api and location, never per request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider_dws import errors, metrics
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers import poller
from tests.unit.test_poller import WAITING, World, cycles, first, name, run, st, trigger


class LocatedWorld(World):
    location = "us-central1"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = LocatedWorld()
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: w)
    monkeypatch.setattr(poller, "MIN_GAP_SECONDS", 0.01)
    return w


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any, dict[str, str]]]:
    out: list[tuple[str, str, Any, dict[str, str]]] = []

    class Stats:
        @staticmethod
        def incr(stat: str, count: int = 1, *, tags: dict[str, str]) -> None:
            out.append(("incr", stat, count, tags))

        @staticmethod
        def gauge(stat: str, value: float, *, tags: dict[str, str]) -> None:
            out.append(("gauge", stat, value, tags))

    monkeypatch.setattr(metrics, "_stats", lambda: Stats)
    return out


TAGS = {"api": "vertex_custom_job", "location": "us-central1"}


def test_each_interval_reports_the_waiting_requests_and_the_calls(world: World, sent: list[Any]) -> None:
    for i in range(30):
        world.set(name(i), WAITING, Phase.WAITING)

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(30)]
        p = await cycles(3)
        gauges = [s for s in sent if s[1] == metrics.REQUESTS_WAITING]
        assert len(gauges) == p.stats["cycles"]  # once per interval, not once per request
        assert gauges[-1] == ("gauge", metrics.REQUESTS_WAITING, 30, TAGS)
        calls = sum(s[2] for s in sent if s[1] == metrics.POLLER_CALLS)
        total = p.stats["list_pages"] + p.stats["reads"]
        # Reported once per interval: the round in progress (one list) may not be in it yet.
        assert calls in {total, total - 1} and calls >= 3
        assert all(s[3] == TAGS for s in sent)
        for i in range(30):
            world.set(name(i), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await asyncio.gather(*tasks)

    run(scenario())
    # The last wait left: the poller stops and says nothing waits here any more.
    assert [s for s in sent if s[1] == metrics.REQUESTS_WAITING][-1][2] == 0


def test_a_quota_backoff_is_counted_once_for_the_whole_poller(
    world: World, sent: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(poller, "QUOTA_BACKOFF_INITIAL", 0.2)
    for i in range(20):
        world.set(name(i), WAITING, Phase.WAITING)
    world.list_errors = [errors.QuotaExceededError("quota")]

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(20)]
        await cycles(2)
        assert [s for s in sent if s[1] == metrics.POLLER_BACKOFF] == [
            ("incr", metrics.POLLER_BACKOFF, 1, TAGS)
        ]
        for i in range(20):
            world.set(name(i), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await asyncio.gather(*tasks)

    run(scenario())


class PagedWorld(LocatedWorld):
    """Lists through the backends' own :func:`classify_listed`, ``PAGE`` requests a page."""

    PAGE = 7

    async def alist_live(self, only: Any = None) -> dict[str, Any]:
        from airflow_provider_dws.backends.base import classify_listed

        self.lists += 1
        items = [Named(n) for n, v in sorted(self.states.items()) if v[1].live]

        async def pages() -> Any:
            for start in range(0, max(len(items), 1), self.PAGE):
                yield items[start : start + self.PAGE]

        return await classify_listed(pages(), only, lambda item: st(item.name, *self.states[item.name]))


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_calls_count_every_page_of_a_list(sent: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """30 waiting requests at 7 a page: each list round is 5 API calls, and the counter says 5."""
    w = PagedWorld()
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: w)
    monkeypatch.setattr(poller, "MIN_GAP_SECONDS", 0.01)
    for i in range(30):
        w.set(name(i), WAITING, Phase.WAITING)

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(30)]
        p = await cycles(3)
        assert p.stats["list_pages"] == 5 * p.stats["lists"] and p.stats["reads"] == 0
        reported = sum(s[2] for s in sent if s[1] == metrics.POLLER_CALLS)
        # Reported once per interval: the round in progress may not be in it yet.
        assert reported in {p.stats["list_pages"], p.stats["list_pages"] - 5}
        assert reported >= 10
        for i in range(30):
            w.set(name(i), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await asyncio.gather(*tasks)

    run(scenario())
