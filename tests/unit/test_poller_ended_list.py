"""The shared poller learns how many requests that left the live list together ended from one
list of ended requests (a few calls), not one read each; what that list cannot tell (a deleted
request, a refused filter, an unknown creation time) is still read directly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Container
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import EndedLister, RequestStatus
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import poller

SPEC = {"project_id": "p", "region": "us-central1", "gcp_conn_id": "gc", "impersonation_chain": None}
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
INTERVAL = 0.05


def name(i: int) -> str:
    return f"projects/p/locations/us-central1/customJobs/{i}"


class EndedWorld:
    """A fake backend whose requests have creation times and that lists the ended ones."""

    kind = "vertex_custom_job"

    def __init__(self) -> None:
        self.states: dict[str, Phase] = {}
        self.created: dict[str, datetime] = {}
        self.reads: list[str] = []
        self.ended_calls: list[tuple[set[str], datetime, int]] = []
        self.ended_errors: list[Exception] = []

    def spec(self) -> dict[str, Any]:
        return SPEC

    def add(self, request: str, minutes_ago: int) -> None:
        self.states[request] = Phase.WAITING
        self.created[request] = T0 - timedelta(minutes=minutes_ago)

    def status(self, request: str) -> RequestStatus:
        phase = self.states[request]
        return RequestStatus(
            request,
            phase.value.upper(),
            Outcome(phase, None, ""),
            RequestTimings(submitted=self.created[request]),
        )

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        return {n: self.status(n) for n, phase in self.states.items() if phase.live}

    async def alist_ended(
        self, wanted: Collection[str], created_after: datetime, scan_limit: int
    ) -> dict[str, RequestStatus]:
        self.ended_calls.append((set(wanted), created_after, scan_limit))
        if self.ended_errors:
            raise self.ended_errors.pop(0)
        return {
            n: self.status(n)
            for n in wanted
            if n in self.states and not self.states[n].live and self.created[n] >= created_after
        }

    async def aget_status(self, request: str) -> RequestStatus:
        self.reads.append(request)
        if request not in self.states:
            raise errors.RequestNotFoundError(f"{request} not found")
        return self.status(request)

    async def arelease(self, request: str) -> bool:
        return True


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> EndedWorld:
    w = EndedWorld()
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: w)
    monkeypatch.setattr(poller, "MIN_GAP_SECONDS", 0.01)
    return w


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def follow(names: list[str]) -> tuple[poller.SharedPoller, list[poller.Subscription]]:
    """Subscribe to ``names`` and wait for their first (waiting) statuses."""
    p = poller.shared_poller("vertex_custom_job", SPEC)
    subs = [p.subscribe(n, INTERVAL) for n in names]
    for sub in subs:
        status = await sub.next()
        assert status is not None and status.phase is Phase.WAITING
    return p, subs


async def outcome(sub: poller.Subscription) -> Phase | BaseException:
    """The request's next status (or error), then leave, as a trigger does once its request ended."""
    try:
        status = await sub.next()
    except errors.ApiError as err:
        return err
    finally:
        sub.close()
    assert status is not None
    return status.phase


def end_all(world: EndedWorld, names: list[str]) -> None:
    for n in names:
        world.states[n] = Phase.SUCCEEDED


def test_requests_ending_together_are_found_with_one_list_not_one_read_each(world: EndedWorld) -> None:
    assert isinstance(world, EndedLister)
    names = [name(i) for i in range(40)]
    for i, n in enumerate(names):
        world.add(n, minutes_ago=i)

    async def scenario() -> list[Phase | BaseException]:
        _, subs = await follow(names)
        end_all(world, names)
        got = [await outcome(sub) for sub in subs]
        return got

    assert run(scenario()) == [Phase.SUCCEEDED] * 40
    assert world.reads == []
    assert len(world.ended_calls) == 1
    wanted, created_after, scan_limit = world.ended_calls[0]
    assert wanted == set(names)
    assert created_after == T0 - timedelta(minutes=39)  # the oldest of them bounds the list
    assert scan_limit == max(poller.ENDED_SCAN_MIN, poller.ENDED_SCAN_FACTOR * 40)


def test_what_the_ended_list_does_not_show_is_read_directly(world: EndedWorld) -> None:
    names = [name(i) for i in range(20)]
    for n in names:
        world.add(n, minutes_ago=5)

    async def scenario() -> list[Phase | BaseException]:
        _, subs = await follow(names)
        end_all(world, names)
        del world.states[names[7]]  # deleted outside: neither list shows it
        got = [await outcome(sub) for sub in subs]
        return got

    got = run(scenario())
    assert isinstance(got[7], errors.RequestNotFoundError)
    assert got[:7] + got[8:] == [Phase.SUCCEEDED] * 19
    assert world.reads == [names[7]]


def test_a_few_ended_requests_are_read_without_the_list(world: EndedWorld) -> None:
    names = [name(i) for i in range(poller.ENDED_LIST_MIN + 2)]
    for n in names:
        world.add(n, minutes_ago=1)

    async def scenario() -> list[Phase | BaseException]:
        _, subs = await follow(names)
        few = names[: poller.ENDED_LIST_MIN - 1]
        end_all(world, few)
        got = [await outcome(sub) for sub in subs[: len(few)]]
        for sub in subs[len(few) :]:
            sub.close()
        return got

    assert run(scenario()) == [Phase.SUCCEEDED] * (poller.ENDED_LIST_MIN - 1)
    assert world.ended_calls == []
    assert sorted(world.reads) == sorted(names[: poller.ENDED_LIST_MIN - 1])


def test_a_refused_ended_list_falls_back_to_reads_and_warns_once(
    world: EndedWorld, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=poller.__name__)
    names = [name(i) for i in range(30)]
    for n in names:
        world.add(n, minutes_ago=2)
    world.ended_errors = [errors.InvalidRequestError("create_time is not a filter field")]

    async def scenario() -> tuple[list[Phase | BaseException], int]:
        p, subs = await follow(names)
        end_all(world, names[:10])
        got = [await outcome(sub) for sub in subs[:10]]
        end_all(world, names[10:])  # the next cycles: still refused-for-a-while, read directly
        got += [await outcome(sub) for sub in subs[10:]]
        return got, p.stats["ended_lists"]

    got, ended_lists = run(scenario())
    assert got == [Phase.SUCCEEDED] * 30
    assert ended_lists == 1  # not tried again for LIST_RETRY_CYCLES
    assert sorted(world.reads) == sorted(names)
    warnings = [r for r in caplog.records if "ended requests" in r.getMessage()]
    assert len(warnings) == 1 and "create_time is not a filter field" in warnings[0].getMessage()


def test_a_transient_error_on_the_ended_list_tries_the_round_again(world: EndedWorld) -> None:
    names = [name(i) for i in range(12)]
    for n in names:
        world.add(n, minutes_ago=3)
    world.ended_errors = [errors.TransientApiError("unavailable")]

    async def scenario() -> list[Phase | BaseException]:
        _, subs = await follow(names)
        end_all(world, names)
        got = [await outcome(sub) for sub in subs]
        return got

    assert run(scenario()) == [Phase.SUCCEEDED] * 12
    assert world.reads == []  # the next round's list told them all
    assert len(world.ended_calls) == 2


def test_requests_with_no_known_creation_time_are_read(world: EndedWorld) -> None:
    """A request that ended before its first status was ever listed has no creation time yet."""
    names = [name(i) for i in range(10)]
    for n in names:
        world.add(n, minutes_ago=1)
        world.states[n] = Phase.SUCCEEDED

    async def scenario() -> list[Phase | BaseException]:
        p = poller.shared_poller("vertex_custom_job", SPEC)
        subs = [p.subscribe(n, INTERVAL) for n in names]
        got = [await outcome(sub) for sub in subs]
        return got

    assert run(scenario()) == [Phase.SUCCEEDED] * 10
    assert world.ended_calls == []
    assert sorted(world.reads) == sorted(names)
