"""The shared poller, against a scripted fake backend: one list serves many waits, a request that
leaves the list gets one direct read, errors and quota back off the poller as a whole, and one
subscriber leaving never disturbs the others."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Container
from typing import Any

import pytest

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import capacity_request, poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

SPEC = {"project_id": "p", "region": "us-central1", "gcp_conn_id": "gc", "impersonation_chain": None}
PARENT = "projects/p/locations/us-central1/customJobs"


def name(i: int) -> str:
    return f"{PARENT}/{i}"


def st(request: str, state: str, phase: Phase, failure: FailureKind | None = None) -> RequestStatus:
    return RequestStatus(request, state, Outcome(phase, failure, ""), RequestTimings())


WAITING = "JOB_STATE_PENDING"


class World:
    """A fake backend over a dict of request states; records every call."""

    kind = "vertex_custom_job"

    def __init__(self) -> None:
        self.states: dict[str, tuple[str, Phase, FailureKind | None]] = {}
        self.lists = 0
        self.reads: list[str] = []
        self.cancelled: list[str] = []
        self.list_errors: list[Exception] = []
        self.read_errors: dict[str, Exception] = {}

    def spec(self) -> dict[str, Any]:
        return SPEC

    def set(self, request: str, state: str, phase: Phase, failure: FailureKind | None = None) -> None:
        self.states[request] = (state, phase, failure)

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Live requests only: ended ones must be read directly."""
        self.lists += 1
        if self.list_errors:
            raise self.list_errors.pop(0)
        return {n: st(n, *v) for n, v in self.states.items() if v[1].live and (only is None or n in only)}

    async def aget_status(self, request: str) -> RequestStatus:
        self.reads.append(request)
        if request in self.read_errors:
            raise self.read_errors.pop(request)
        if request not in self.states:
            raise errors.RequestNotFoundError(f"{request} not found")
        return st(request, *self.states[request])

    async def arelease(self, request: str) -> None:
        self.cancelled.append(request)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: w)
    monkeypatch.setattr(poller, "MIN_GAP_SECONDS", 0.01)
    return w


def trigger(request: str, **kwargs: Any) -> CapacityRequestTrigger:
    return CapacityRequestTrigger("vertex_custom_job", SPEC, request, poll_interval=0.05, **kwargs)


async def first(t: CapacityRequestTrigger) -> dict[str, Any]:
    return await capacity_request.first_event(t)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def current() -> poller.SharedPoller:
    """The running loop's poller of SPEC (without creating one)."""
    return poller._POLLERS[asyncio.get_running_loop()][poller.poller_key("vertex_custom_job", SPEC)]


async def until(condition: Any, what: str = "condition") -> None:
    """Wait (generously: a loaded machine is slow, never wrong) until ``condition()`` holds."""
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def cycles(n: int) -> poller.SharedPoller:
    """Wait until the poller of SPEC has run ``n`` cycles in all; return it.

    Counting from the start, not from the call: a poller that started before this looks would
    otherwise be waited on for one cycle too many. The check runs on a 5 ms timer, which asyncio
    fires before the poller's next interval (timers run in deadline order).
    """
    await until(
        lambda: (
            poller.poller_key("vertex_custom_job", SPEC)
            in poller._POLLERS.get(asyncio.get_running_loop(), {})
        )
    )
    p = current()
    await until(lambda: p.stats["cycles"] >= n, f"{n} poll cycles")
    return p


# -- one list for many waits ------------------------------------------------------------------------


def test_many_waits_share_one_list_per_interval(world: World) -> None:
    n = 300
    for i in range(n):
        world.set(name(i), WAITING, Phase.WAITING)

    async def scenario() -> list[dict[str, Any]]:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(n)]
        p = await cycles(10)  # ten intervals of waiting, however long they take here
        lists_while_waiting, cycles_while_waiting = world.lists, p.stats["cycles"]
        for i in range(n):  # capacity arrives for everyone; half succeed, a third fail, the rest cancel
            outcome = (
                ("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, None)
                if i % 2 == 0
                else ("JOB_STATE_FAILED", Phase.FAILED, FailureKind.WORKLOAD_FAILED)
                if i % 3
                else ("JOB_STATE_CANCELLED", Phase.CANCELLED, FailureKind.CANCELLED)
            )
            world.set(name(i), *outcome)
        events = await asyncio.gather(*tasks)
        # One list per cycle for all 300 waits (not one per wait, not one per wait per cycle); the
        # next cycle's list may have started before this look (a stall on a loaded machine).
        assert 10 <= cycles_while_waiting <= lists_while_waiting <= cycles_while_waiting + 1
        return events

    events = run(scenario())
    assert [e["name"] for e in events] == [name(i) for i in range(n)]
    for i, event in enumerate(events):
        expected = "succeeded" if i % 2 == 0 else "failed" if i % 3 else "cancelled"
        assert event["phase"] == expected
    # While waiting nobody was read directly; each ended request was read once, when it left the list.
    assert sorted(world.reads) == sorted(name(i) for i in range(n))


def test_one_poller_per_backend_and_it_stops_with_its_last_wait(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)
    world.set(name(2), WAITING, Phase.WAITING)

    async def scenario() -> None:
        a = asyncio.ensure_future(first(trigger(name(1))))
        b = asyncio.ensure_future(first(trigger(name(2))))
        await asyncio.sleep(0.2)
        p = poller.shared_poller("vertex_custom_job", SPEC)
        assert len(p) == 2
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await a
        assert len(p) == 1 and not p.closed
        world.set(name(2), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await b
        await asyncio.sleep(0)
        assert p.closed
        lists = world.lists
        await asyncio.sleep(0.2)
        assert world.lists == lists  # stopped: no more calls
        assert poller.shared_poller("vertex_custom_job", SPEC) is not p  # a new wait gets a new one

    run(scenario())


def test_other_credentials_get_their_own_poller(world: World) -> None:
    async def scenario() -> None:
        a = poller.shared_poller("vertex_custom_job", SPEC)
        b = poller.shared_poller("vertex_custom_job", {**SPEC, "impersonation_chain": "sa@p.iam"})
        c = poller.shared_poller("vertex_custom_job", {**SPEC, "region": "us-east4"})
        assert len({id(a), id(b), id(c)}) == 3
        assert poller.shared_poller("vertex_custom_job", dict(reversed(list(SPEC.items())))) is a
        assert poller.shared_backend("vertex_custom_job", SPEC) is a.backend

    run(scenario())


def test_two_triggers_on_one_request_both_get_the_event(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)

    async def scenario() -> list[dict[str, Any]]:
        tasks = [asyncio.ensure_future(first(trigger(name(1)))) for _ in range(2)]
        await asyncio.sleep(0.1)
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await asyncio.gather(*tasks)

    assert [e["phase"] for e in run(scenario())] == ["succeeded", "succeeded"]


# -- leaving -----------------------------------------------------------------------------------------


def test_cancelling_one_wait_leaves_the_others_alone(world: World) -> None:
    for i in range(3):
        world.set(name(i), WAITING, Phase.WAITING)

    async def scenario() -> list[dict[str, Any]]:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(3)]
        await asyncio.sleep(0.2)
        tasks[1].cancel("__airflow_user_action__")
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        p = poller.shared_poller("vertex_custom_job", SPEC)
        assert len(p) == 2
        await asyncio.sleep(0.2)
        world.set(name(0), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        world.set(name(2), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await asyncio.gather(tasks[0], tasks[2])

    assert [e["phase"] for e in run(scenario())] == ["succeeded", "succeeded"]
    assert world.cancelled == []  # a cancelled trigger is not a cancelled request (no on_kill here)


def test_a_wait_ending_on_its_own_deadline_leaves_the_others(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import datetime, timedelta, timezone

    for i in range(2):
        world.set(name(i), WAITING, Phase.WAITING)

    async def scenario() -> list[dict[str, Any]]:
        soon = (datetime.now(timezone.utc) + timedelta(seconds=0.2)).isoformat()
        timed = asyncio.ensure_future(first(trigger(name(0), task_deadline=soon)))
        other = asyncio.ensure_future(first(trigger(name(1))))
        event = await timed
        await asyncio.sleep(0.2)
        assert not other.done()
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return [event, await other]

    timed, other = run(scenario())
    assert timed["failure"] == "timed_out"
    assert other["phase"] == "succeeded"
    assert world.cancelled == [name(0)]


# -- errors ----------------------------------------------------------------------------------------


def test_transient_list_errors_do_not_end_any_wait(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)
    world.list_errors = [errors.TransientApiError("down")] * 3

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first(trigger(name(1))))
        await cycles(4)
        assert not task.done()
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await task

    assert run(scenario())["phase"] == "succeeded"
    assert not world.list_errors


def test_quota_errors_back_off_the_whole_poller(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poller, "QUOTA_BACKOFF_INITIAL", 0.4)
    for i in range(50):
        world.set(name(i), WAITING, Phase.WAITING)
    world.list_errors = [errors.QuotaExceededError("quota")]

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(50)]
        p = await cycles(1)
        assert p.stats["backoffs"] == 1
        # One call was made for all 50 waits: the poller backs off as a whole, where 50 triggers
        # would each have retried on their own. (A stall here may let the next cycle's list start.)
        assert world.lists <= p.stats["cycles"] + 1 and world.reads == []
        await cycles(2)
        assert p.stats["backoffs"] == 1 and world.reads == []
        assert 2 <= world.lists <= p.stats["cycles"] + 1
        for i in range(50):
            world.set(name(i), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        await asyncio.gather(*tasks)

    run(scenario())


def test_a_refused_list_falls_back_to_reading_each_request(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)
    world.list_errors = [errors.InvalidRequestError("unsupported filter")]

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first(trigger(name(1))))
        p = await cycles(4)
        assert world.lists == 1  # not listed again for LIST_RETRY_CYCLES
        assert len(world.reads) >= p.stats["cycles"] - 1  # read directly instead
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await task

    assert run(scenario())["phase"] == "succeeded"


def test_a_request_deleted_outside_ends_only_its_own_wait(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)
    world.set(name(2), WAITING, Phase.WAITING)

    async def scenario() -> list[dict[str, Any]]:
        gone = asyncio.ensure_future(first(trigger(name(1))))
        other = asyncio.ensure_future(first(trigger(name(2))))
        await asyncio.sleep(0.1)
        del world.states[name(1)]
        event = await gone
        assert not other.done()
        world.set(name(2), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return [event, await other]

    gone, other = run(scenario())
    assert gone["state"] == "NOT_FOUND" and gone["phase"] == "cancelled"
    assert other["phase"] == "succeeded"


def test_a_permission_error_on_one_read_fails_only_that_wait(world: World) -> None:
    world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)  # not listed: read directly
    world.set(name(2), WAITING, Phase.WAITING)
    world.read_errors[name(1)] = errors.PermissionDeniedApiError("no")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        denied = asyncio.ensure_future(first(trigger(name(1))))
        other = asyncio.ensure_future(first(trigger(name(2))))
        ended = await denied
        world.set(name(2), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return ended, await other

    denied, other = run(scenario())
    # The wait ends with an event that says why, for the task to decide (not a trigger that raised).
    assert denied["wait_error"] == "PermissionDeniedApiError: no"
    assert (denied["state"], denied["phase"]) == ("UNKNOWN", "waiting")
    assert other["phase"] == "succeeded"


def test_an_unexpected_error_ends_the_wait_with_the_last_status_seen(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)

    async def scenario() -> dict[str, Any]:
        waiting = asyncio.ensure_future(first(trigger(name(1))))
        await until(lambda: world.lists >= 2, "a second list (the first one's status delivered)")
        # No longer in the live list, so the poller reads it alone, and the read raises.
        world.read_errors[name(1)] = RuntimeError("a bug")
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await waiting

    event = run(scenario())
    assert event["wait_error"] == "RuntimeError: a bug"
    assert (event["state"], event["phase"]) == (WAITING, "waiting")
    assert event["message"] == "the wait failed: RuntimeError: a bug"


def test_a_transient_read_error_is_retried_next_interval(world: World) -> None:
    world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
    world.read_errors[name(1)] = errors.TransientApiError("blip")
    event = run(first(trigger(name(1))))
    assert event["phase"] == "succeeded"
    # Read, failed, read again. A loaded machine may fit one more 50 ms round in before the
    # trigger leaves, so not "exactly two".
    assert world.reads[:2] == [name(1), name(1)] and set(world.reads) == {name(1)}


def test_only_changes_wake_a_trigger(world: World) -> None:
    world.set(name(1), WAITING, Phase.WAITING)

    async def scenario() -> list[RequestStatus | None]:
        p = poller.shared_poller("vertex_custom_job", SPEC)
        sub = p.subscribe(name(1), 0.02)
        seen = [await sub.next(1.0)]
        seen.append(await sub.next(0.2))  # ten polls, no change: no wake-up
        world.set(name(1), "JOB_STATE_RUNNING", Phase.RUNNING)
        seen.append(await sub.next(1.0))
        sub.close()
        return seen

    first_status, unchanged, running = run(scenario())
    assert first_status is not None and first_status.state == WAITING
    assert unchanged is None
    assert running is not None and running.phase is Phase.RUNNING


def test_quota_on_direct_reads_stops_the_round_and_backs_off(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(poller, "QUOTA_BACKOFF_INITIAL", 0.4)
    monkeypatch.setattr(poller, "READ_CONCURRENCY", 1)
    for i in range(10):  # all ended: none listed, every one needs a direct read
        world.set(name(i), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
    world.read_errors[name(0)] = errors.QuotaExceededError("quota")

    async def scenario() -> list[dict[str, Any]]:
        tasks = [asyncio.ensure_future(first(trigger(name(i)))) for i in range(10)]
        p = await cycles(1)
        assert len(world.reads) == 1  # the first read met the quota: the other nine waited
        assert p.stats["backoffs"] == 1
        return await asyncio.gather(*tasks)

    events = run(scenario())
    assert [e["phase"] for e in events] == ["succeeded"] * 10


# -- a refused list is tried again; a round that hangs is abandoned; logs in the right place --------


def test_a_refused_list_is_tried_again_every_few_cycles(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One PermissionDenied during IAM propagation must not disable listing for the poller's life."""
    monkeypatch.setattr(poller, "LIST_RETRY_CYCLES", 3)
    world.set(name(1), WAITING, Phase.WAITING)
    world.list_errors = [errors.PermissionDeniedApiError("not yet")]

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first(trigger(name(1))))
        p = await cycles(1)
        assert world.lists == 1
        await until(lambda: world.lists == 2, "the list tried again")
        assert p.stats["cycles"] >= 3  # not before LIST_RETRY_CYCLES
        await cycles(p.stats["cycles"] + 3)
        assert world.lists >= 4  # it works again: one list per cycle from then on
        reads = len(world.reads)
        await cycles(p.stats["cycles"] + 2)
        assert len(world.reads) == reads
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        return await task

    assert run(scenario())["phase"] == "succeeded"


def test_a_round_that_hangs_is_abandoned_and_logged_once(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(poller, "MIN_ROUND_SECONDS", 0.0)  # budget: two intervals (0.1 s)
    world.set(name(1), WAITING, Phase.WAITING)
    world.set(name(2), WAITING, Phase.WAITING)
    hang = asyncio.Event()
    original = world.alist_live

    async def alist_live(only: Any = None) -> dict[str, RequestStatus]:
        if not hang.is_set():
            await asyncio.Event().wait()  # a black-holed call with no deadline of its own
        return await original(only)

    world.alist_live = alist_live  # type: ignore[method-assign]

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first(trigger(name(1))))
        other = asyncio.ensure_future(first(trigger(name(2))))  # keeps the poller on afterwards
        p = await cycles(3)
        assert p.stats["overruns"] == p.stats["cycles"] >= 3 and not task.done()
        hang.set()
        world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)
        event = await task
        await cycles(p.stats["cycles"] + 1)
        other.cancel()
        return event

    with caplog.at_level(logging.INFO, logger=poller.__name__):
        assert run(scenario())["phase"] == "succeeded"
    lines = [r.getMessage() for r in caplog.records if r.name == poller.__name__]
    assert len([m for m in lines if "abandoned" in m]) == 1, lines
    assert any("back to normal" in m for m in lines)


def test_the_poller_task_runs_in_a_fresh_context(world: World) -> None:
    """Airflow routes a trigger's log lines by its context; the poller's must not follow the first
    subscriber's into that one task's log."""
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")
    seen: list[str | None] = []
    original = world.alist_live

    async def alist_live(only: Any = None) -> dict[str, RequestStatus]:
        seen.append(marker.get(None))
        return await original(only)

    world.alist_live = alist_live  # type: ignore[method-assign]
    world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)

    async def scenario() -> dict[str, Any]:
        marker.set("first subscriber's task")
        return await first(trigger(name(1)))

    assert run(scenario())["phase"] == "succeeded"
    assert seen and seen == [None] * len(seen)


def test_a_failed_read_is_logged_by_its_own_trigger_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.set(name(1), "JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)  # not listed: read directly
    world.set(name(2), WAITING, Phase.WAITING)
    world.read_errors[name(1)] = errors.TransientApiError("blip")
    logged: dict[str, list[str]] = {name(1): [], name(2): []}

    def capture(t: CapacityRequestTrigger) -> CapacityRequestTrigger:
        class Log:
            def __getattr__(self, level: str) -> Any:
                if level.startswith("a"):  # no structlog async methods (ainfo): a stdlib-like logger
                    raise AttributeError(level)
                return lambda msg, *args, **kw: logged[t.request_name].append(f"{level}: {msg % args}")

        t._log = Log()  # type: ignore[assignment]
        return t

    async def scenario() -> dict[str, Any]:
        other = asyncio.ensure_future(first(capture(trigger(name(2)))))
        event = await first(capture(trigger(name(1))))
        other.cancel()
        return event

    assert run(scenario())["phase"] == "succeeded"
    warnings = [m for m in logged[name(1)] if m.startswith("warning") and "reading it failed" in m]
    assert len(warnings) == 1, logged[name(1)]
    assert not [m for m in logged[name(2)] if "reading it failed" in m]
