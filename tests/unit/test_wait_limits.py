"""When a wait ends without its request, decided without a trigger, a poller or a clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers.wait_limits import FIRST_READ_GRACE, WaitLimits, requeued_deadline

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)


def status(phase: Phase, requeued_at: datetime | None = None) -> RequestStatus:
    details = {"requeued_at": requeued_at.isoformat()} if requeued_at else {}
    return RequestStatus(
        "r", phase.value, Outcome(phase, None, ""), RequestTimings(submitted=T0), "", details
    )


def limits(**kw: object) -> WaitLimits:
    args: dict[str, object] = {
        "wait_deadline": T0 + HOUR,
        "grace": timedelta(minutes=2),
        "task_deadline": None,
        "started": T0,
        "heartbeat": None,
    }
    args.update(kw)
    return WaitLimits(**args)  # type: ignore[arg-type]


def test_a_waiting_request_is_given_up_after_its_max_wait_and_the_grace() -> None:
    waiting = status(Phase.WAITING)
    assert not limits().gives_up(waiting, T0 + HOUR + timedelta(minutes=1))
    assert limits().gives_up(waiting, T0 + HOUR + timedelta(minutes=2))
    assert not limits().gives_up(status(Phase.RUNNING), T0 + 10 * HOUR)  # capacity in hand
    assert not limits(wait_deadline=None).gives_up(waiting, T0 + 10 * HOUR)  # the API's max wait alone


def test_a_request_queued_again_after_it_ran_waits_its_max_wait_anew() -> None:
    again = status(Phase.WAITING, requeued_at=T0 + 3 * HOUR)
    assert requeued_deadline(T0 + HOUR, again) == T0 + 4 * HOUR
    assert requeued_deadline(T0 + HOUR, status(Phase.WAITING)) is None
    wait = limits()
    assert wait.wait_deadline_for(again) == T0 + HOUR  # it never ran in this wait: the first max wait
    wait.saw(status(Phase.RUNNING))
    assert wait.wait_deadline_for(again) == T0 + 4 * HOUR
    assert wait.new_requeue(again) == (again.details["requeued_at"], T0 + 4 * HOUR)
    assert wait.new_requeue(again) is None  # said once


def test_the_task_deadline_waits_a_minute_for_a_first_read() -> None:
    wait = limits(task_deadline=T0 + HOUR, started=T0 + 2 * HOUR)  # a triggerer restarted late
    assert wait.timeout_at(None) == T0 + 2 * HOUR + FIRST_READ_GRACE
    assert wait.timeout_at(status(Phase.WAITING)) == T0 + HOUR
    assert wait.timed_out(status(Phase.WAITING), T0 + HOUR)
    assert not wait.timed_out(None, T0 + 2 * HOUR)


def test_the_next_look_is_the_earliest_of_heartbeat_give_up_and_deadline() -> None:
    wait = limits(heartbeat=timedelta(minutes=10), task_deadline=T0 + 2 * HOUR)
    assert wait.wake_in(status(Phase.WAITING), T0, T0) == 600.0
    assert wait.wake_in(status(Phase.WAITING), T0 + HOUR, T0 + HOUR) == 120.0  # the give-up, with grace
    assert wait.wake_in(status(Phase.RUNNING), T0 + 2 * HOUR, T0 + 2 * HOUR) == 0.0  # the deadline is now
    assert limits(wait_deadline=None).wake_in(status(Phase.WAITING), T0, T0) is None


def test_the_status_line_gives_the_earlier_end_and_the_providers_max_wait() -> None:
    wait = limits(task_deadline=T0 + timedelta(minutes=30))
    assert wait.gives_up_at(status(Phase.WAITING)) == T0 + timedelta(minutes=30)
    assert wait.max_wait_seconds(status(Phase.WAITING)) == 3600.0  # no max wait of the API's own
    assert limits(wait_deadline=None).max_wait_seconds(status(Phase.WAITING)) is None
