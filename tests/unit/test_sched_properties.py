"""Property tests: window, deadline and retry arithmetic across time zones, DST and midnight."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, time, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dws.scheduling.decisions import (
    MIN_WAIT,
    Attempt,
    effective_max_wait,
    next_step,
    next_submit,
    placement_order,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import (
    MERGE_HORIZON,
    CapacityRetry,
    Failover,
    OffPeakWindow,
    Placement,
    Window,
)

UTC = timezone.utc
ZONES = ("America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Seoul", "UTC")
START = datetime(2026, 1, 1, tzinfo=UTC)
END = datetime(2028, 12, 31, tzinfo=UTC)
PROPS = settings(max_examples=200, deadline=None)


@cache
def transitions() -> tuple[datetime, ...]:
    """Every UTC-offset change of the DST zones in 2026-2028 (found hour by hour)."""
    found = []
    for name in ZONES:
        tz = ZoneInfo(name)
        t = START
        previous = t.astimezone(tz).utcoffset()
        while t < END:
            t += timedelta(hours=1)
            offset = t.astimezone(tz).utcoffset()
            if offset != previous:
                found.append(t)
                previous = offset
    return tuple(found)


def test_the_dst_zones_have_their_transitions() -> None:
    assert len(transitions()) == 3 * 3 * 2  # New York, Berlin, Sydney: twice a year for 3 years


any_moment = st.datetimes(
    min_value=START.replace(tzinfo=None), max_value=END.replace(tzinfo=None), timezones=st.just(UTC)
)
near_transition = st.builds(
    lambda t, s: t + timedelta(seconds=s),
    st.sampled_from(transitions()),
    st.integers(-40 * 3600, 40 * 3600),
)
moments = st.one_of(any_moment, near_transition, near_transition.map(lambda t: t.replace(minute=0, second=0)))


@st.composite
def plain_windows(draw: st.DrawFn) -> OffPeakWindow:
    days = draw(st.frozensets(st.integers(0, 6), min_size=1))
    start = draw(st.integers(0, 24 * 60 - 1))
    # bias towards the DST hours and midnight crossings
    start = draw(st.sampled_from([start, 60 + start % 240, 120 + start % 60]))
    end = draw(st.integers(0, 24 * 60 - 1).filter(lambda e: e != start))
    zone = draw(st.sampled_from(ZONES))
    return OffPeakWindow(days, time(start // 60, start % 60), time(end // 60, end % 60), zone)


@st.composite
def cron_windows(draw: st.DrawFn) -> OffPeakWindow:
    minute = draw(st.sampled_from(["0", "30", "*/20", "15,45"]))
    hour = draw(st.sampled_from(["2", "1-3", "*/6", "22", "0,12"]))
    dow = draw(st.sampled_from(["*", "1-5", "SAT,SUN", "0"]))
    duration = timedelta(minutes=draw(st.integers(1, 36 * 60)))
    return OffPeakWindow.from_cron(f"{minute} {hour} * * {dow}", duration, draw(st.sampled_from(ZONES)))


windows: st.SearchStrategy[Window] = st.one_of(
    plain_windows(),
    plain_windows(),
    plain_windows(),
    cron_windows(),
    st.builds(lambda a, b: a | b, plain_windows(), st.one_of(plain_windows(), cron_windows())),
)
max_waits = st.integers(1, 7 * 86400).map(lambda s: timedelta(seconds=s))
offsets = st.integers(-3600, 10 * 86400).map(lambda s: timedelta(seconds=s))


# -- windows ---------------------------------------------------------------------------------------


@PROPS
@given(window=windows, moment=moments)
def test_next_open_and_current_agree(window: Window, moment: datetime) -> None:
    opened, closed = window.next_open(moment)
    assert opened < closed
    assert closed > moment
    assert opened.tzinfo is UTC and closed.tzinfo is UTC
    current = window.current(moment)
    assert window.contains(moment) == (current is not None)
    if closed - opened >= MERGE_HORIZON:
        # a window that never closes is followed only MERGE_HORIZON from the moment asked about
        assert current is not None and window.contains(closed - timedelta(microseconds=1))
        return
    if current is not None:
        assert current == (opened, closed)
        assert opened <= moment < closed
    else:
        assert opened > moment
        # nothing opens between the moment and the next opening
        if opened - MIN_WAIT >= moment:
            assert not window.contains(opened - MIN_WAIT)
    assert window.contains(opened)
    assert window.contains(closed - timedelta(microseconds=1))
    assert not window.contains(closed)


@PROPS
@given(window=plain_windows(), moment=moments)
def test_plain_window_opens_at_its_local_start(window: OffPeakWindow, moment: datetime) -> None:
    opened, closed = window.next_open(moment)
    tz = window.tz
    local = opened.astimezone(tz)
    wall = datetime.combine(local.date(), window.start)
    exists = wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if exists:
        assert local.replace(tzinfo=None) == wall
        assert (
            local.fold == 0
            or wall.replace(tzinfo=tz, fold=1).utcoffset() == wall.replace(tzinfo=tz).utcoffset()
        )
    else:
        # skipped by spring forward: opens at the change, the first valid instant after the start
        before = (opened - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None)
        assert before < wall < local.replace(tzinfo=None)
    assert local.weekday() in window.days
    # closes at the local end time (or the change, if that is skipped)
    close_local = closed.astimezone(tz)
    end_wall = datetime.combine(close_local.date(), window.end)
    if end_wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == end_wall:
        assert close_local.replace(tzinfo=None) == end_wall


@PROPS
@given(window=windows, start=moments, hours=st.integers(1, 24 * 15))
def test_occurrences_are_merged_and_ordered(window: Window, start: datetime, hours: int) -> None:
    end = start + timedelta(hours=hours)
    occurrences = list(window.occurrences(start, end))
    for (o1, c1), (o2, c2) in itertools.pairwise(occurrences):
        assert o1 < c1 < o2 < c2, "ordered, disjoint and not touching"
    for opened, closed in occurrences:
        assert closed > start and opened < end
        if closed - opened < MERGE_HORIZON:  # (longer: followed only MERGE_HORIZON from the range)
            assert window.current(max(opened, start)) == (opened, closed)


# -- next_submit and effective_max_wait -----------------------------------------------------------------


@PROPS
@given(
    window=st.one_of(st.none(), windows),
    now=moments,
    max_wait=max_waits,
    deadline_after=st.one_of(st.none(), offsets),
    not_before_after=st.one_of(st.none(), st.integers(-3600, 3 * 86400).map(lambda s: timedelta(seconds=s))),
)
def test_next_submit_is_inside_the_window_and_before_the_deadline(
    window: Window | None,
    now: datetime,
    max_wait: timedelta,
    deadline_after: timedelta | None,
    not_before_after: timedelta | None,
) -> None:
    deadline = now + deadline_after if deadline_after is not None else None
    not_before = now + not_before_after if not_before_after is not None else None
    decision = next_submit(now, max_wait, window, deadline, not_before)
    assert decision.reason
    if decision.at is None:
        assert decision.max_wait is None
        assert deadline is not None, "without a deadline there is always a time"
        return
    at, wait = decision.at, decision.max_wait
    assert wait is not None
    assert at >= now and (not_before is None or at >= not_before)
    assert MIN_WAIT <= wait <= max_wait
    assert wait.microseconds == 0
    if deadline is not None:
        assert at < deadline
        assert at + wait <= deadline
    if window is not None:
        current = window.current(at)
        assert current is not None, "the submit time is inside a window occurrence"
        assert at + wait <= current[1]
    assert wait == effective_max_wait(at, max_wait, window, deadline)
    # now itself is chosen whenever now is fine
    earliest = max(now, not_before) if not_before is not None else now
    if effective_max_wait(earliest, max_wait, window, deadline) is not None:
        assert at == earliest


@PROPS
@given(
    window=st.one_of(st.none(), windows),
    at=moments,
    max_wait=max_waits,
    deadline_after=st.one_of(st.none(), offsets),
)
def test_effective_max_wait_never_passes_the_close_or_the_deadline(
    window: Window | None, at: datetime, max_wait: timedelta, deadline_after: timedelta | None
) -> None:
    deadline = at + deadline_after if deadline_after is not None else None
    wait = effective_max_wait(at, max_wait, window, deadline)
    current = window.current(at) if window is not None else None
    if wait is None:
        left = [max_wait]
        if window is not None:
            if current is None:
                return
            left.append(current[1] - at)
        if deadline is not None:
            left.append(deadline - at)
        assert min(left) < MIN_WAIT
        return
    assert MIN_WAIT <= wait <= max_wait
    if window is not None:
        assert current is not None
        assert at + wait <= current[1]
    if deadline is not None:
        assert at + wait <= deadline


# -- next_step ---------------------------------------------------------------------------------------------

PLACES = (Placement("us-central1"), Placement("us-east4"), Placement("europe-west4", tier="spot"))
KINDS = (
    (Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED),
    (Phase.FAILED, FailureKind.PREEMPTED),
    (Phase.FAILED, FailureKind.WORKLOAD_FAILED),
    (Phase.FAILED, FailureKind.BAD_REQUEST),
    (Phase.CANCELLED, FailureKind.CANCELLED),
    (Phase.NOT_OBTAINED, None),
)


@st.composite
def retries(draw: st.DrawFn) -> CapacityRetry:
    backoff = draw(st.integers(0, 3600))
    return CapacityRetry(
        attempts=draw(st.integers(1, 6)),
        backoff=timedelta(seconds=backoff),
        max_backoff=timedelta(seconds=backoff + draw(st.integers(0, 7200))),
        jitter=draw(st.booleans()),
        on=draw(
            st.frozensets(
                st.sampled_from([FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.PREEMPTED]), min_size=1
            )
        ),
        wait_for_next_window=draw(st.booleans()),
    )


@st.composite
def histories(draw: st.DrawFn, now: datetime) -> list[Attempt]:
    count = draw(st.integers(1, 5))
    out = []
    ended = now - timedelta(seconds=draw(st.integers(0, 7200)))
    for number in range(count, 0, -1):
        wait = timedelta(seconds=draw(st.integers(1, 86400)))
        phase, kind = draw(st.sampled_from(KINDS))
        out.append(Attempt(number, draw(st.sampled_from(PLACES)), ended - wait, ended, wait, phase, kind))
        ended -= wait
    return out[::-1]


@PROPS
@given(data=st.data(), now=moments, max_wait=max_waits, window=st.one_of(st.none(), windows))
def test_next_step_respects_deadline_attempts_and_window(
    data: st.DataObject, now: datetime, max_wait: timedelta, window: Window | None
) -> None:
    history = data.draw(histories(now))
    retry = data.draw(st.one_of(st.none(), retries()))
    failover = data.draw(
        st.one_of(st.none(), st.sampled_from([Failover(PLACES[1]), Failover(PLACES[1], PLACES[2])]))
    )
    deadline_after = data.draw(st.one_of(st.none(), offsets))
    deadline = now + deadline_after if deadline_after is not None else None
    seed = data.draw(st.integers(0, 2**32))
    kwargs = {"home": PLACES[0], "max_wait": max_wait, "retry": retry, "failover": failover, "window": window}
    step = next_step(history, now, deadline=deadline, rng=random.Random(seed), **kwargs)  # type: ignore[arg-type]
    again = next_step(history, now, deadline=deadline, rng=random.Random(seed), **kwargs)  # type: ignore[arg-type]
    assert step == again, "deterministic for a seed"
    assert step.summary.splitlines() == [a.describe() for a in history]
    assert step.reason
    last = history[-1]
    if retry is None or last.kind not in retry.on or len(history) >= retry.attempts:
        assert step.action == "give_up"
    if step.action == "give_up":
        assert (step.at, step.placement, step.attempt, step.max_wait) == (None, None, None, None)
        return
    assert retry is not None
    assert step.at is not None and step.max_wait is not None and step.attempt is not None
    assert step.attempt == len(history) + 1 <= retry.attempts
    assert step.at >= now
    assert step.at >= last.ended
    assert MIN_WAIT <= step.max_wait <= max_wait
    order = placement_order(PLACES[0], failover)
    assert step.placement == order[(step.attempt - 1) % len(order)]
    if deadline is not None:
        assert step.at < deadline
        assert step.at + step.max_wait <= deadline
    if window is not None:
        current = window.current(step.at)
        assert current is not None
        assert step.at + step.max_wait <= current[1]
    if step.placement == last.placement:
        assert step.at >= last.ended + retry.delay(step.attempt - 1, random.Random(seed)) or retry.jitter
