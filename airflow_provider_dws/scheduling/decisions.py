"""Decisions: pure functions of (policy, clock, history) that operators and triggers ask.

- :func:`next_submit` - may I submit now, or when? (off-peak window, deadline, backoff)
- :func:`effective_max_wait` - what max wait do I request, so that capacity can only arrive inside
  the window occurrence and before the deadline?
- :func:`next_step` - an attempt ended without capacity: retry here, fail over, wait for the next
  window, or give up (with a summary of every attempt)?

Every answer carries a ``reason`` in plain words for the task log. Nothing here raises for valid
input, reads the clock or performs I/O; randomness (backoff jitter) comes from a seedable
:class:`random.Random`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_provider_dws.scheduling._time import UTC, aware_utc, check_duration, format_duration
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import CapacityRetry, Failover, Placement
from airflow_provider_dws.scheduling.windows import OffPeakWindow, Window, WindowSet

__all__ = [
    "MIN_WAIT",
    "Attempt",
    "NextStep",
    "SubmitDecision",
    "effective_max_wait",
    "failure_of",
    "format_instant",
    "next_step",
    "next_submit",
    "placement_order",
]

#: A request is never submitted with less than this max wait left: not worth the queue slot.
MIN_WAIT = timedelta(seconds=1)
#: :func:`next_submit` moves past at most this many too-short occurrences before giving up.
_MAX_HOPS = 10_000


def _positive(value: object, name: str) -> timedelta:
    return check_duration(name, value, seconds=False, whole=False)


def _floor_seconds(delta: timedelta) -> timedelta:
    return timedelta(seconds=math.floor(delta.total_seconds()))


def _display_zone(window: Window | None, moment: datetime) -> Any:
    if isinstance(window, OffPeakWindow):
        return window.tz
    if isinstance(window, WindowSet):
        for member in window.windows:
            if member.contains(moment):
                return member.tz
        return window.windows[0].tz
    return UTC


def format_instant(moment: datetime, window: Window | None = None) -> str:
    """``2026-12-01 22:00 KST``: the instant in the window's time zone (UTC without a window)."""
    local = moment.astimezone(_display_zone(window, moment))
    pattern = "%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M"
    return f"{local.strftime(pattern)} {local.tzname()}"


def failure_of(outcome: Phase, failure: FailureKind | None) -> FailureKind | None:
    """The failure kind of an ended attempt, derived from its phase when not recorded."""
    if failure is not None:
        return failure
    return {
        Phase.NOT_OBTAINED: FailureKind.CAPACITY_NOT_OBTAINED,
        Phase.FAILED: FailureKind.WORKLOAD_FAILED,
        Phase.CANCELLED: FailureKind.CANCELLED,
    }.get(outcome)


# -- attempts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One submission of a capacity request and how it ended."""

    number: int
    placement: Placement
    submitted: datetime
    ended: datetime
    max_wait: timedelta
    outcome: Phase
    failure: FailureKind | None
    request_name: str = ""
    #: The API gave this request up before the attempt's max wait, and the loop asked again: one
    #: wait over several requests, not a retry (it spends none of ``capacity_retry``).
    continued: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 1:
            raise ValueError(f"Attempt.number must be an int >= 1, got {self.number!r}")
        if not isinstance(self.placement, Placement):
            raise TypeError(f"Attempt.placement must be a Placement, got {type(self.placement).__name__}")
        aware_utc(self.submitted, "Attempt.submitted")
        aware_utc(self.ended, "Attempt.ended")
        if not isinstance(self.max_wait, timedelta):
            raise TypeError(
                f"Attempt.max_wait must be a datetime.timedelta, got {type(self.max_wait).__name__}"
            )
        object.__setattr__(self, "outcome", Phase(self.outcome))
        if self.failure is not None:
            object.__setattr__(self, "failure", FailureKind(self.failure))

    @property
    def kind(self) -> FailureKind | None:
        """The failure kind (recorded, or derived from the outcome)."""
        return failure_of(self.outcome, self.failure)

    def what(self, where: bool = False) -> str:
        """What happened, e.g. ``no capacity within 0:45:00`` (``where``: ``... in us-central1 ...``)."""
        place = f" in {self.placement}" if where else ""
        kind = self.kind
        if self.outcome is Phase.SUCCEEDED:
            return f"succeeded{place}"
        if kind is FailureKind.CAPACITY_NOT_OBTAINED:
            return f"no capacity{place} within {self.max_wait}"
        if kind is FailureKind.PREEMPTED:
            return f"capacity preempted{place}"
        if kind is FailureKind.WORKLOAD_FAILED:
            return f"the workload failed{place}"
        if kind is FailureKind.BAD_REQUEST:
            return f"the request was refused as invalid{place}"
        if kind is FailureKind.CANCELLED:
            return f"cancelled{place}"
        if kind is FailureKind.TIMED_OUT:
            return f"stopped by the task's execution_timeout{place}"
        return f"ended {self.outcome.value}{place}"

    def describe(self) -> str:
        """One line for the log and the final summary: ``attempt 1 in us-central1: no capacity within 0:45:00``."""
        text = f"attempt {self.number} in {self.placement}: {self.what()}"
        if self.continued:
            text += ", asked again within the max wait"
        return f"{text} (request {self.request_name})" if self.request_name else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form for XCom and trigger kwargs."""
        return {
            "number": self.number,
            "placement": self.placement.to_dict(),
            "submitted": self.submitted.isoformat(),
            "ended": self.ended.isoformat(),
            "max_wait_seconds": self.max_wait.total_seconds(),
            "outcome": self.outcome.value,
            "failure": self.failure.value if self.failure is not None else None,
            "request_name": self.request_name,
            **({"continued": True} if self.continued else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        """Inverse of :meth:`to_dict`."""
        failure = data.get("failure")
        return cls(
            number=int(data["number"]),
            placement=Placement.from_dict(data["placement"]),
            submitted=datetime.fromisoformat(data["submitted"]),
            ended=datetime.fromisoformat(data["ended"]),
            max_wait=timedelta(seconds=float(data["max_wait_seconds"])),
            outcome=Phase(data["outcome"]),
            failure=FailureKind(failure) if failure else None,
            request_name=str(data.get("request_name") or ""),
            continued=bool(data.get("continued")),
        )


# -- when to submit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitDecision:
    """When to submit (``at``; None = never, the deadline passes first) and with what max wait."""

    at: datetime | None
    max_wait: timedelta | None
    reason: str

    @property
    def never(self) -> bool:
        """True when nothing can be submitted before the deadline."""
        return self.at is None


def effective_max_wait(
    submit_at: datetime,
    max_wait: timedelta,
    window: Window | None,
    deadline: datetime | None,
) -> timedelta | None:
    """The max wait to request when submitting at ``submit_at``.

    The user's ``max_wait``, cut so capacity can only arrive inside the current window occurrence
    (``close - submit_at``) and before ``deadline``; floored to whole seconds. None when
    ``submit_at`` is outside the window, or less than :data:`MIN_WAIT` would be left.
    """
    at = aware_utc(submit_at, "submit_at")
    wait = _positive(max_wait, "max_wait")
    if window is not None:
        occurrence = window.current(at)
        if occurrence is None:
            return None
        wait = min(wait, occurrence[1] - at)
    if deadline is not None:
        wait = min(wait, aware_utc(deadline, "deadline") - at)
    wait = _floor_seconds(wait)
    return wait if wait >= MIN_WAIT else None


def _cut_note(
    wait: timedelta, max_wait: timedelta, at: datetime, window: Window | None, deadline: datetime | None
) -> str:
    if wait >= _floor_seconds(max_wait):
        return f"max wait {wait}"
    limits = []
    if window is not None:
        occurrence = window.current(at)
        if occurrence is not None and occurrence[1] - at <= max_wait:
            limits.append((occurrence[1], f"the window closes at {format_instant(occurrence[1], window)}"))
    if deadline is not None and deadline - at <= max_wait:
        limits.append((deadline, f"the deadline {format_instant(deadline, window)}"))
    why = min(limits)[1] if limits else "the limits"
    return f"max wait cut from {max_wait} to {wait} so capacity can only arrive before {why}"


def next_submit(
    now: datetime,
    max_wait: timedelta,
    window: Window | None = None,
    deadline: datetime | None = None,
    not_before: datetime | None = None,
) -> SubmitDecision:
    """The earliest time at or after ``max(now, not_before)`` a request may be submitted.

    That is inside a window occurrence, with :func:`effective_max_wait` at least :data:`MIN_WAIT`,
    and before ``deadline``. ``at`` is ``now`` itself when now is fine, and None when the deadline
    passes first.
    """
    current = aware_utc(now, "now")
    _positive(max_wait, "max_wait")
    due = aware_utc(deadline, "deadline") if deadline is not None else None
    start = max(current, aware_utc(not_before, "not_before")) if not_before is not None else current
    where = f"the off-peak window {window}" if window is not None else ""

    def never(why: str) -> SubmitDecision:
        return SubmitDecision(None, None, why)

    if due is not None and due - start < MIN_WAIT:
        if due <= current:
            return never(f"the deadline {format_instant(due, window)} has passed")
        return never(f"the deadline {format_instant(due, window)} passes before a request can be submitted")
    if window is None:
        wait = effective_max_wait(start, max_wait, None, due)
        assert wait is not None
        note = _cut_note(wait, max_wait, start, None, due)
        if start == current:
            return SubmitDecision(start, wait, f"submitting now with {note}")
        return SubmitDecision(
            start,
            wait,
            f"waiting until {format_instant(start)} (in {format_duration(start - current)}), then submitting with {note}",
        )
    t = start
    for _ in range(_MAX_HOPS):
        opened, closed = window.next_open(t)
        t = max(t, opened)
        if due is not None and due - t < MIN_WAIT:
            return never(
                f"the deadline {format_instant(due, window)} passes before the next opening of {where} "
                f"(at {format_instant(opened, window)})"
            )
        wait = effective_max_wait(t, max_wait, window, due)
        if wait is not None:
            note = _cut_note(wait, max_wait, t, window, due)
            if t == current:
                return SubmitDecision(t, wait, f"inside {where}; submitting now with {note}")
            until = f"waiting until {format_instant(t, window)} (in {format_duration(t - current)})"
            if t == start:
                return SubmitDecision(t, wait, f"{until}, inside {where}, then submitting with {note}")
            if window.contains(start):
                prefix = f"{where} closes too soon after {format_instant(start, window)}"
            else:
                prefix = f"outside {where}"
            return SubmitDecision(t, wait, f"{prefix}; {until}, then submitting with {note}")
        t = closed  # less than MIN_WAIT left in this occurrence: try the next one
    return never(f"no submit time found in {where}")


# -- after an attempt -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NextStep:
    """What to do after an attempt ended without success."""

    action: Literal["submit", "give_up"]
    at: datetime | None
    placement: Placement | None
    attempt: int | None
    max_wait: timedelta | None
    reason: str
    summary: str

    @property
    def gives_up(self) -> bool:
        """True when nothing more will be tried."""
        return self.action == "give_up"


def placement_order(home: Placement, failover: Failover | None) -> tuple[Placement, ...]:
    """Where attempts go, in order: ``home``, then each failover placement (unset fields from home).

    Duplicates (a failover entry equal to home once filled in) are dropped.
    """
    order = [home]
    for placement in failover.placements if failover is not None else ():
        resolved = placement.over(home)
        if resolved not in order:
            order.append(resolved)
    return tuple(order)


def _where(placement: Placement, reference: Placement) -> str:
    """``placement`` in words, with only the details that differ from ``reference``."""
    details = [
        value
        for value, ref in (
            (placement.machine_type, reference.machine_type),
            (placement.accelerator_type, reference.accelerator_type),
            (placement.tier, reference.tier),
        )
        if value and value != ref
    ]
    return f"{placement.location} ({', '.join(details)})" if details else placement.location


def next_number(history: Sequence[Attempt]) -> int:
    """The number of the request after ``history``'s: one past the most of its count and its last
    number (each request, retry or asked again, has a number, and a name, of its own)."""
    return max(len(history), history[-1].number if history else 0) + 1


def next_step(
    history: Sequence[Attempt],
    now: datetime,
    *,
    home: Placement,
    max_wait: timedelta,
    retry: CapacityRetry | None = None,
    failover: Failover | None = None,
    window: Window | None = None,
    deadline: datetime | None = None,
    rng: random.Random | None = None,
) -> NextStep:
    """Retry, fail over, wait for the next window, or give up, after an attempt without success.

    Give up when the last failure is not one ``retry`` retries (or there is no ``retry``), when
    ``retry.attempts`` are used, or when no submit time is left before ``deadline``. Attempt ``k``
    goes to ``placement_order(home, failover)[(k - 1) % n]``. A move to a different placement goes
    at once; a retry in the same placement waits ``retry.delay(k - 1)`` after the last attempt
    ended. Outside the window the step waits for its next opening, or gives up when
    ``retry.wait_for_next_window`` is False. Without ``rng``, the jitter is seeded from the last
    attempt, so asking again (after a restart) gives the same answer.

    With an empty ``history`` this plans the first attempt in ``home``.
    """
    current = aware_utc(now, "now")
    _positive(max_wait, "max_wait")
    due = aware_utc(deadline, "deadline") if deadline is not None else None
    summary = "\n".join(a.describe() for a in history)

    def give_up(why: str) -> NextStep:
        return NextStep("give_up", None, None, None, None, why, summary)

    if not history:
        first = next_submit(current, max_wait, window, due)
        if first.at is None:
            return give_up(first.reason)
        return NextStep(
            "submit", first.at, home, 1, first.max_wait, f"attempt 1 in {home}: {first.reason}", summary
        )

    last = history[-1]
    kind = last.kind
    if last.outcome is Phase.SUCCEEDED:
        return give_up(f"attempt {last.number} succeeded; nothing to retry")
    if retry is None:
        return give_up(f"{last.what(where=True)} and no capacity retry is configured")
    if kind not in retry.on:
        name = kind.value if kind is not None else last.outcome.value
        return give_up(
            f"{last.what(where=True)}; capacity_retry does not retry {name} "
            f"(it retries on {', '.join(k.value for k in FailureKind if k in retry.on)})"
        )
    # A request the loop asked again for (``continued``) is part of its attempt's wait, not one of
    # capacity_retry's attempts; it still takes a number (each request has its own name).
    number = next_number(history)
    used = number - 1 - sum(1 for a in history if a.continued)
    if used >= retry.attempts:
        return give_up(f"{last.what(where=True)}; all {retry.attempts} attempts of capacity_retry are used")

    order = placement_order(home, failover)
    placement = order[used % len(order)]
    same_place = placement == last.placement
    if same_place:
        chooser = (
            rng
            if rng is not None
            else random.Random(f"{last.request_name}|{last.number}|{last.ended.isoformat()}")
        )
        delay = retry.delay(used, chooser)
    else:
        delay = timedelta(0)
    earliest = max(current, aware_utc(last.ended, "ended") + delay)
    head = f"attempt {number} in {_where(placement, last.placement)} after {last.what(where=True)}"

    if window is not None and not retry.wait_for_next_window and not window.contains(earliest):
        return give_up(
            f"{last.what(where=True)}; outside the off-peak window {window} and capacity_retry does not "
            "wait for the next window"
        )
    decision = next_submit(current, max_wait, window, due, earliest)
    if decision.at is None or decision.max_wait is None:
        return give_up(f"{last.what(where=True)}; {decision.reason}")
    if window is not None and not retry.wait_for_next_window and decision.at != earliest:
        return give_up(
            f"{last.what(where=True)}; the off-peak window {window} closes too soon and capacity_retry "
            "does not wait for the next window"
        )
    if decision.at > earliest:
        reason = f"{head}; {decision.reason}"
    elif delay > timedelta(0) and decision.at > current:
        reason = (
            f"{head}, after a backoff of {delay}: at {format_instant(decision.at, window)} "
            f"(in {format_duration(decision.at - current)}) with "
            f"{_cut_note(decision.max_wait, max_wait, decision.at, window, due)}"
        )
    else:
        reason = f"{head}; {decision.reason}"
    return NextStep("submit", decision.at, placement, number, decision.max_wait, reason, summary)
