"""Scheduling decisions: when to submit, with what max wait, and what to do after an attempt."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from airflow_provider_dws.scheduling.decisions import (
    Attempt,
    effective_max_wait,
    next_step,
    next_submit,
    placement_order,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import (
    CapacityRetry,
    Failover,
    OffPeakWindow,
    Placement,
)

UTC = timezone.utc
SEOUL = ZoneInfo("Asia/Seoul")
NIGHTS = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
HOME = Placement("us-central1")
EAST = Placement("us-east4")
WEST = Placement("us-west1")
MAX_WAIT = timedelta(minutes=45)
NO_JITTER = CapacityRetry(
    attempts=4, backoff=timedelta(minutes=2), max_backoff=timedelta(minutes=10), jitter=False
)


def seoul(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=SEOUL)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def attempt(
    number: int,
    placement: Placement,
    ended: datetime,
    outcome: Phase = Phase.NOT_OBTAINED,
    failure: FailureKind | None = FailureKind.CAPACITY_NOT_OBTAINED,
    max_wait: timedelta = MAX_WAIT,
) -> Attempt:
    return Attempt(number, placement, ended - max_wait, ended, max_wait, outcome, failure, f"req-{number}")


# -- next_submit ---------------------------------------------------------------------------------------


def test_no_policies_submit_now() -> None:
    now = utc(2026, 12, 1, 9, 48)
    decision = next_submit(now, MAX_WAIT)
    assert (decision.at, decision.max_wait) == (now, MAX_WAIT)
    assert decision.reason == "submitting now with max wait 0:45:00"


def test_inside_window_submits_now() -> None:
    now = seoul(2026, 12, 1, 23, 0)  # Tuesday night
    decision = next_submit(now, MAX_WAIT, NIGHTS)
    assert decision.at == now
    assert decision.max_wait == MAX_WAIT
    assert (
        decision.reason
        == "inside the off-peak window Mon-Fri 22:00-06:00 Asia/Seoul; submitting now with max wait 0:45:00"
    )


def test_outside_window_waits_for_the_next_opening() -> None:
    now = seoul(2026, 12, 1, 18, 48)  # Tuesday evening
    decision = next_submit(now, timedelta(hours=2), NIGHTS)
    assert decision.at == seoul(2026, 12, 1, 22, 0)
    assert decision.max_wait == timedelta(hours=2)
    assert decision.reason == (
        "outside the off-peak window Mon-Fri 22:00-06:00 Asia/Seoul; waiting until 2026-12-01 22:00 KST "
        "(in 3h12m), then submitting with max wait 2:00:00"
    )


def test_weekend_waits_until_monday() -> None:
    decision = next_submit(seoul(2026, 12, 5, 12, 0), MAX_WAIT, NIGHTS)
    assert decision.at == seoul(2026, 12, 7, 22, 0)


def test_deadline_before_the_next_window_gives_none() -> None:
    now = seoul(2026, 12, 1, 18, 48)
    decision = next_submit(now, MAX_WAIT, NIGHTS, deadline=seoul(2026, 12, 1, 21, 0))
    assert decision.at is None and decision.max_wait is None and decision.never
    assert decision.reason == (
        "the deadline 2026-12-01 21:00 KST passes before the next opening of the off-peak window "
        "Mon-Fri 22:00-06:00 Asia/Seoul (at 2026-12-01 22:00 KST)"
    )
    passed = next_submit(now, MAX_WAIT, NIGHTS, deadline=seoul(2026, 12, 1, 18, 0))
    assert passed.at is None
    assert passed.reason == "the deadline 2026-12-01 18:00 KST has passed"


def test_max_wait_cut_by_window_close() -> None:
    now = seoul(2026, 12, 2, 5, 30)
    decision = next_submit(now, MAX_WAIT, NIGHTS)
    assert decision.at == now
    assert decision.max_wait == timedelta(minutes=30)
    assert decision.reason == (
        "inside the off-peak window Mon-Fri 22:00-06:00 Asia/Seoul; submitting now with max wait cut from "
        "0:45:00 to 0:30:00 so capacity can only arrive before the window closes at 2026-12-02 06:00 KST"
    )


def test_effective_max_wait() -> None:
    at = seoul(2026, 12, 2, 5, 30)
    assert effective_max_wait(at, MAX_WAIT, NIGHTS, None) == timedelta(minutes=30)
    assert effective_max_wait(at, MAX_WAIT, NIGHTS, seoul(2026, 12, 2, 5, 40)) == timedelta(minutes=10)
    assert effective_max_wait(at, MAX_WAIT, None, seoul(2026, 12, 2, 5, 40)) == timedelta(minutes=10)
    assert effective_max_wait(at, MAX_WAIT, None, None) == MAX_WAIT
    # outside the window, or nothing (less than a second) left: None
    assert effective_max_wait(seoul(2026, 12, 2, 12, 0), MAX_WAIT, NIGHTS, None) is None
    assert effective_max_wait(at, MAX_WAIT, None, at + timedelta(milliseconds=999)) is None
    assert effective_max_wait(at, MAX_WAIT, None, at - timedelta(minutes=1)) is None
    # whole seconds, floored
    assert effective_max_wait(at, MAX_WAIT, None, at + timedelta(seconds=90.7)) == timedelta(seconds=90)


def test_deadline_cut_reason() -> None:
    now = seoul(2026, 12, 1, 23, 0)
    decision = next_submit(now, MAX_WAIT, NIGHTS, deadline=seoul(2026, 12, 1, 23, 20))
    assert decision.max_wait == timedelta(minutes=20)
    assert "so capacity can only arrive before the deadline 2026-12-01 23:20 KST" in decision.reason


def test_not_before_inside_window() -> None:
    now = seoul(2026, 12, 1, 23, 0)
    decision = next_submit(now, MAX_WAIT, NIGHTS, not_before=now + timedelta(minutes=5))
    assert decision.at == now + timedelta(minutes=5)
    assert decision.reason.startswith(
        "waiting until 2026-12-01 23:05 KST (in 5m), inside the off-peak window"
    )


def test_naive_now_is_rejected() -> None:
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        next_submit(datetime(2026, 12, 1), MAX_WAIT)


# -- Attempt ---------------------------------------------------------------------------------------------


def test_attempt_round_trip_and_describe() -> None:
    a = Attempt(
        number=1,
        placement=Placement("us-central1", "a3-highgpu-8g", "NVIDIA_H100_80GB"),
        submitted=seoul(2026, 12, 1, 22, 0),
        ended=seoul(2026, 12, 1, 22, 45),
        max_wait=MAX_WAIT,
        outcome=Phase.NOT_OBTAINED,
        failure=FailureKind.CAPACITY_NOT_OBTAINED,
        request_name="projects/p/locations/us-central1/customJobs/1",
    )
    data = a.to_dict()
    assert Attempt.from_dict(json.loads(json.dumps(data))) == a
    assert data["outcome"] == "not_obtained" and data["failure"] == "capacity_not_obtained"
    plain = attempt(1, HOME, utc(2026, 12, 1))
    assert Attempt.from_dict(plain.to_dict()) == plain
    assert plain.describe() == "attempt 1 in us-central1: no capacity within 0:45:00 (request req-1)"
    bare = Attempt(1, HOME, utc(2026, 12, 1), utc(2026, 12, 1, 0, 45), MAX_WAIT, Phase.NOT_OBTAINED, None)
    assert bare.describe() == "attempt 1 in us-central1: no capacity within 0:45:00"
    assert Attempt.from_dict(bare.to_dict()) == bare


# -- next_step -------------------------------------------------------------------------------------------


def test_retry_same_placement_with_backoff() -> None:
    ended = utc(2026, 12, 1, 10, 0)
    step = next_step([attempt(1, HOME, ended)], ended, home=HOME, max_wait=MAX_WAIT, retry=NO_JITTER)
    assert step.action == "submit" and not step.gives_up
    assert (step.attempt, step.placement, step.at, step.max_wait) == (
        2,
        HOME,
        ended + timedelta(minutes=2),
        MAX_WAIT,
    )
    assert step.reason.startswith(
        "attempt 2 in us-central1 after no capacity in us-central1 within 0:45:00, after a backoff of 0:02:00"
    )
    history = [attempt(1, HOME, ended - timedelta(hours=1)), attempt(2, HOME, ended)]
    step3 = next_step(history, ended, home=HOME, max_wait=MAX_WAIT, retry=NO_JITTER)
    assert step3.at == ended + timedelta(minutes=4)  # doubled
    # the backoff runs from the end of the attempt, not from now
    late = next_step(
        [attempt(1, HOME, ended)], ended + timedelta(hours=1), home=HOME, max_wait=MAX_WAIT, retry=NO_JITTER
    )
    assert late.at == ended + timedelta(hours=1)


def test_jitter_is_deterministic_for_a_seed() -> None:
    ended = utc(2026, 12, 1, 10, 0)
    history = [attempt(1, HOME, ended)]
    retry = CapacityRetry(backoff=timedelta(minutes=10), max_backoff=timedelta(minutes=10))
    steps = [
        next_step(history, ended, home=HOME, max_wait=MAX_WAIT, retry=retry, rng=random.Random(s))
        for s in (1, 1, 2)
    ]
    assert steps[0].at == steps[1].at
    assert all(ended <= s.at <= ended + timedelta(minutes=10) for s in steps if s.at)
    # without an rng, asking again gives the same answer
    again = [next_step(history, ended, home=HOME, max_wait=MAX_WAIT, retry=retry) for _ in range(2)]
    assert again[0] == again[1]


def test_failover_order_and_cycling() -> None:
    failover = Failover(EAST, WEST)
    assert placement_order(HOME, failover) == (HOME, EAST, WEST)
    assert placement_order(HOME, Failover(EAST, "us-central1")) == (HOME, EAST)
    t = utc(2026, 12, 1, 10, 0)
    retry = CapacityRetry(attempts=5, jitter=False)
    history: list[Attempt] = [attempt(1, HOME, t)]
    placements = []
    for number in range(2, 6):
        step = next_step(history, t, home=HOME, max_wait=MAX_WAIT, retry=retry, failover=failover)
        assert step.action == "submit" and step.attempt == number
        assert step.at == t, "a move to another placement goes at once"
        assert step.placement is not None
        placements.append(step.placement)
        history.append(attempt(number, step.placement, t))
    assert placements == [EAST, WEST, HOME, EAST]
    first = next_step(history[:1], t, home=HOME, max_wait=MAX_WAIT, retry=retry, failover=failover)
    assert (
        first.reason
        == "attempt 2 in us-east4 after no capacity in us-central1 within 0:45:00; submitting now with max wait 0:45:00"
    )


def test_failover_fills_in_the_home_machine() -> None:
    home = Placement("us-central1", "a3-highgpu-8g", "NVIDIA_H100_80GB")
    t = utc(2026, 12, 1, 10, 0)
    failover = Failover(Placement("us-east4"), Placement("europe-west4", accelerator_type="NVIDIA_A100_80GB"))
    step = next_step(
        [attempt(1, home, t)], t, home=home, max_wait=MAX_WAIT, retry=CapacityRetry(), failover=failover
    )
    assert step.placement == Placement("us-east4", "a3-highgpu-8g", "NVIDIA_H100_80GB")
    assert step.reason.startswith("attempt 2 in us-east4 after no capacity in us-central1 (a3-highgpu-8g")


def test_give_up_on_workload_failure() -> None:
    t = utc(2026, 12, 1, 10, 0)
    failed = attempt(1, HOME, t, Phase.FAILED, FailureKind.WORKLOAD_FAILED)
    step = next_step(
        [failed], t, home=HOME, max_wait=MAX_WAIT, retry=CapacityRetry(), failover=Failover(EAST)
    )
    assert step.action == "give_up" and step.gives_up
    assert (step.at, step.placement, step.attempt, step.max_wait) == (None, None, None, None)
    assert step.reason == (
        "the workload failed in us-central1; capacity_retry does not retry workload_failed "
        "(it retries on capacity_not_obtained, preempted)"
    )
    assert step.summary == "attempt 1 in us-central1: the workload failed (request req-1)"


def test_give_up_without_retry_policy() -> None:
    t = utc(2026, 12, 1, 10, 0)
    step = next_step([attempt(1, HOME, t)], t, home=HOME, max_wait=MAX_WAIT)
    assert step.action == "give_up"
    assert step.reason == "no capacity in us-central1 within 0:45:00 and no capacity retry is configured"


def test_give_up_when_attempts_are_used() -> None:
    t = utc(2026, 12, 1, 10, 0)
    history = [
        attempt(1, HOME, t),
        attempt(2, EAST, t),
        attempt(3, HOME, t, Phase.FAILED, FailureKind.PREEMPTED),
    ]
    step = next_step(
        history, t, home=HOME, max_wait=MAX_WAIT, retry=CapacityRetry(attempts=3), failover=Failover(EAST)
    )
    assert step.action == "give_up"
    assert step.reason == "capacity preempted in us-central1; all 3 attempts of capacity_retry are used"
    assert step.summary.splitlines() == [
        "attempt 1 in us-central1: no capacity within 0:45:00 (request req-1)",
        "attempt 2 in us-east4: no capacity within 0:45:00 (request req-2)",
        "attempt 3 in us-central1: capacity preempted (request req-3)",
    ]


def test_give_up_when_the_deadline_passes() -> None:
    t = seoul(2026, 12, 2, 5, 0)
    step = next_step(
        [attempt(1, HOME, t)],
        t,
        home=HOME,
        max_wait=MAX_WAIT,
        retry=NO_JITTER,
        window=NIGHTS,
        deadline=seoul(2026, 12, 2, 5, 1),
    )
    assert step.action == "give_up"
    assert step.reason == (
        "no capacity in us-central1 within 0:45:00; the deadline 2026-12-02 05:01 KST passes before a request "
        "can be submitted"
    )
    # no window: a backoff that ends after the deadline gives up too
    step = next_step(
        [attempt(1, HOME, t)],
        t,
        home=HOME,
        max_wait=MAX_WAIT,
        retry=NO_JITTER,
        deadline=t + timedelta(minutes=1),
    )
    assert step.action == "give_up"


def test_wait_for_next_window() -> None:
    t = seoul(2026, 12, 2, 5, 59, 30)  # the window closes at 06:00, backoff 2 min
    step = next_step([attempt(1, HOME, t)], t, home=HOME, max_wait=MAX_WAIT, retry=NO_JITTER, window=NIGHTS)
    assert step.action == "submit"
    assert step.at == seoul(2026, 12, 2, 22, 0)
    assert step.max_wait == MAX_WAIT
    assert step.reason == (
        "attempt 2 in us-central1 after no capacity in us-central1 within 0:45:00; outside the off-peak window "
        "Mon-Fri 22:00-06:00 Asia/Seoul; waiting until 2026-12-02 22:00 KST (in 16h0m), then submitting with "
        "max wait 0:45:00"
    )
    # a failover goes at once, inside the window, with the max wait cut to the close
    step = next_step(
        [attempt(1, HOME, t)],
        t,
        home=HOME,
        max_wait=MAX_WAIT,
        retry=NO_JITTER,
        window=NIGHTS,
        failover=Failover(EAST),
    )
    assert (step.at, step.placement, step.max_wait) == (t, EAST, timedelta(seconds=30))


def test_give_up_outside_window_when_not_waiting() -> None:
    t = seoul(2026, 12, 2, 5, 59, 30)
    retry = CapacityRetry(jitter=False, wait_for_next_window=False)
    step = next_step([attempt(1, HOME, t)], t, home=HOME, max_wait=MAX_WAIT, retry=retry, window=NIGHTS)
    assert step.action == "give_up"
    assert "capacity_retry does not wait for the next window" in step.reason


def test_empty_history_plans_the_first_attempt() -> None:
    now = seoul(2026, 12, 1, 18, 48)
    step = next_step([], now, home=HOME, max_wait=MAX_WAIT, window=NIGHTS)
    assert (step.action, step.attempt, step.placement, step.at) == (
        "submit",
        1,
        HOME,
        seoul(2026, 12, 1, 22, 0),
    )
    assert step.summary == ""


def test_requests_asked_again_within_one_wait_spend_no_retry() -> None:
    """Two requests of one attempt's wait (the API's own max wait was shorter, the loop asked
    again: ``continued``) count once: the retry is attempt 3 by name, the second of capacity_retry's
    two, in the failover's next placement; then the attempts are used."""
    t = utc(2026, 12, 1, 10, 0)
    first = replace(attempt(1, HOME, t), continued=True)
    assert Attempt.from_dict(first.to_dict()) == first
    assert "no capacity within 0:45:00, asked again within the max wait (request req-1)" in first.describe()
    history = [first, attempt(2, HOME, t)]
    retry = CapacityRetry(attempts=2, backoff=timedelta(0), jitter=False)
    step = next_step(history, t, home=HOME, max_wait=MAX_WAIT, retry=retry, failover=Failover(EAST))
    assert (step.action, step.attempt, step.placement) == ("submit", 3, EAST)
    step = next_step([*history, attempt(3, EAST, t)], t, home=HOME, max_wait=MAX_WAIT, retry=retry)
    assert step.action == "give_up" and "all 2 attempts of capacity_retry are used" in step.reason
