"""A trigger stopped on Airflow 3.1 and 3.2, which call no ``on_kill``: the runner cancels ``run`` and
awaits ``cleanup`` for a user's kill, a move to another triggerer and a shutdown alike.

Each test plays the runner's part as those versions do (``triggerer_job_runner.run_trigger``:
cancel the trigger's task, then ``await trigger.cleanup()`` in its ``finally``).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws import compat
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers import on_kill
from tests.unit import test_trigger
from tests.unit.test_trigger import NAME, FakeTI, _states, status, trigger

#: The fake backend fixture, shared with the on_kill tests.
fake = test_trigger.fake


@pytest.fixture(autouse=True)
def before_3_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "TRIGGERER_CALLS_ON_KILL", False)


async def stopped_while_waiting(t: Any, backend: Any) -> None:
    """Start the trigger's run, let it wait, then stop it as a 3.1 or 3.2 triggerer does."""

    async def consume() -> None:
        async for _ in t.run():
            raise AssertionError("the request never ends in these tests")

    task = asyncio.ensure_future(consume())
    while backend.reads == 0:
        await asyncio.sleep(0.01)
    task.cancel()  # 3.1 and 3.2 cancel with no message
    with pytest.raises(asyncio.CancelledError):
        await task
    await t.cleanup()
    await asyncio.gather(*on_kill.KILL_TASKS)


def waiting_trigger(fake: Any, **kwargs: Any) -> tuple[Any, Any]:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    t = trigger(**kwargs)
    t.task_instance = FakeTI()
    return t, backend


@pytest.mark.parametrize("state", ["failed", "success", "scheduled", "up_for_retry", None])
def test_a_trigger_stopped_after_its_task_left_deferred_cancels_the_request(
    fake: Any, monkeypatch: pytest.MonkeyPatch, state: str | None
) -> None:
    t, backend = waiting_trigger(fake)
    calls = _states(monkeypatch, {"r": {"t": state}})
    asyncio.run(stopped_while_waiting(t, backend))
    assert calls  # it asked
    assert backend.cancelled == [NAME]


def test_a_trigger_stopped_while_its_task_is_still_deferred_keeps_the_request(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move to another triggerer, or a 3.1 triggerer's shutdown: the task still waits on it."""
    t, backend = waiting_trigger(fake)
    _states(monkeypatch, {"r": {"t": "deferred"}})
    asyncio.run(stopped_while_waiting(t, backend))
    assert backend.cancelled == []


def test_a_task_state_that_cannot_be_read_keeps_the_request(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlike 3.3's on_kill (a user's act for sure), a stop here may be a shutdown: unknown keeps."""
    t, backend = waiting_trigger(fake)
    _states(monkeypatch, RuntimeError("the supervisor's reader is gone"))
    asyncio.run(stopped_while_waiting(t, backend))
    assert backend.cancelled == []


def test_a_task_state_read_that_never_answers_keeps_the_request_within_its_bound(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3.2 triggerer shutting down stops its supervisor reader: the read would hang until SIGKILL."""
    from airflow.sdk.execution_time import task_runner

    release = threading.Event()

    def hangs(**kwargs: Any) -> Any:
        release.wait(30)
        return {}

    monkeypatch.setattr(task_runner.RuntimeTaskInstance, "get_task_states", staticmethod(hangs))
    monkeypatch.setattr(on_kill, "STATE_TIMEOUT_SECONDS", 0.2)
    t, backend = waiting_trigger(fake)
    try:
        asyncio.run(stopped_while_waiting(t, backend))
    finally:
        release.set()
    assert backend.cancelled == []


def test_a_trigger_that_reported_its_end_looks_for_no_kill(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = fake([status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)])
    calls = _states(monkeypatch, {"r": {"t": "failed"}})
    t = trigger()
    t.task_instance = FakeTI()

    async def scenario() -> None:
        events = [event async for event in t.run()]
        assert len(events) == 1
        await t.cleanup()

    asyncio.run(scenario())
    assert calls == []
    assert backend.cancelled == []


def test_from_3_3_cleanup_leaves_the_kill_to_on_kill(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "TRIGGERER_CALLS_ON_KILL", True)
    t, backend = waiting_trigger(fake)
    calls = _states(monkeypatch, {"r": {"t": "failed"}})
    asyncio.run(stopped_while_waiting(t, backend))
    assert calls == []
    assert backend.cancelled == []


def test_airflows_own_trigger_timeout_is_not_a_kill(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t, backend = waiting_trigger(fake)
    t.timeout_after = datetime.now(timezone.utc) - timedelta(seconds=1)
    calls = _states(monkeypatch, {"r": {"t": "failed"}})
    asyncio.run(stopped_while_waiting(t, backend))
    assert calls == []
    assert backend.cancelled == []


def test_cancel_on_kill_false_is_kept_here_too(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    t, backend = waiting_trigger(fake, cancel_on_kill=False)
    _states(monkeypatch, {"r": {"t": "failed"}})
    asyncio.run(stopped_while_waiting(t, backend))
    assert backend.cancelled == []


def test_the_cancel_survives_the_runner_cancelling_cleanup_again(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner re-sends its cancel about once a second until the trigger's task is done; on 3.1
    a supervisor call interrupted mid-way breaks the runner, so the work runs shielded."""
    t, backend = waiting_trigger(fake)
    _states(monkeypatch, {"r": {"t": "failed"}})
    answer = asyncio.Event()

    async def slow_cancel(name: str) -> None:
        await answer.wait()
        backend.cancelled.append(name)

    backend.arelease = slow_cancel

    async def scenario() -> None:
        async def consume() -> None:
            async for _ in t.run():
                pass

        task = asyncio.ensure_future(consume())
        while backend.reads == 0:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cleanup = asyncio.ensure_future(t.cleanup())
        while not on_kill.KILL_TASKS:
            await asyncio.sleep(0.01)
        cleanup.cancel()  # the next sync's cancel
        with pytest.raises(asyncio.CancelledError):
            await cleanup
        answer.set()
        await asyncio.gather(*on_kill.KILL_TASKS)

    asyncio.run(scenario())
    assert backend.cancelled == [NAME]
