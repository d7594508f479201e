"""When a wait on a capacity request ends without the request: pure time decisions.

A wait has two limits: the request's max wait (``wait_deadline``, plus a grace for an API that
expires its requests itself) and the task's ``execution_timeout`` (``task_deadline``). Given the
clock and the request's last status, :class:`WaitLimits` says whether either has passed, when to
look again, and when the status line should say the wait gives up. No I/O, no logging.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import Phase

#: How long past the task deadline a trigger that has not read its request yet waits for that read.
FIRST_READ_GRACE = timedelta(minutes=1)


def aware(name: str, value: str | None) -> datetime | None:
    """``value`` (ISO-8601 with a time zone) in UTC; ``None`` stays ``None``."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"{name} must carry a time zone, got {value!r}")
    return parsed.astimezone(timezone.utc)


def requeued_deadline(deadline: datetime, status: RequestStatus) -> datetime | None:
    """The later deadline of a request queued again since it was submitted (a Kueue Job evicted
    and requeued, its ``requeued_at``): its new wait may last its max wait anew. ``None`` when it
    was not queued again."""
    requeued = status.details.get("requeued_at") if status.details else None
    submitted = status.timings.submitted
    if not isinstance(requeued, str) or submitted is None:
        return None
    again = aware("requeued_at", requeued)
    if again is None or again <= submitted:
        return None
    return max(deadline, again + (deadline - submitted))


@dataclass
class WaitLimits:
    """The two limits of one wait, and the heartbeat of its log lines.

    :param wait_deadline: when a still-waiting request is given up (``None``: the API's alone).
    :param grace: how long past ``wait_deadline`` it may still wait before it is given up.
    :param task_deadline: when the task's ``execution_timeout`` ends (``None``: never).
    :param started: when the wait started (the first read's grace counts from it).
    :param heartbeat: how often an unchanged wait is logged again (``None``: never).
    """

    wait_deadline: datetime | None
    grace: timedelta
    task_deadline: datetime | None
    started: datetime
    heartbeat: timedelta | None
    #: Whether this wait saw its request get capacity (see :meth:`wait_deadline_for`).
    ran: bool = False
    #: The last requeue said (:meth:`new_requeue`).
    requeue_noted: str | None = None

    def saw(self, status: RequestStatus) -> None:
        """Note a status read: a request with capacity in hand has run in this wait."""
        if status.phase in (Phase.PROVISIONING, Phase.RUNNING):
            self.ran = True

    def wait_deadline_for(self, status: RequestStatus | None) -> datetime | None:
        """When a still-waiting ``status`` is given up: ``wait_deadline``, except for a request that
        got capacity in this wait and was queued again since (:func:`requeued_deadline`): deleting
        it would throw its place in the queue away."""
        deadline = self.wait_deadline
        if deadline is None or status is None or not self.ran:
            return deadline
        return requeued_deadline(deadline, status) or deadline

    def new_requeue(self, status: RequestStatus) -> tuple[str, datetime] | None:
        """``(requeued_at, the new deadline)`` the first time ``status`` shows a requeue after it got
        capacity in this wait (to be said once), else ``None``."""
        if self.wait_deadline is None or not self.ran:
            return None
        later = requeued_deadline(self.wait_deadline, status)
        requeued_at = str(status.details.get("requeued_at"))
        if later is None or requeued_at == self.requeue_noted:
            return None
        self.requeue_noted = requeued_at
        return requeued_at, later

    def gives_up(self, status: RequestStatus, now: datetime) -> bool:
        """Whether ``status`` is still waiting past its max wait and the grace."""
        deadline = self.wait_deadline_for(status)
        return status.phase is Phase.WAITING and deadline is not None and now >= deadline + self.grace

    def timeout_at(self, status: RequestStatus | None) -> datetime | None:
        """When the task deadline ends the wait. Before the first read, not blind at once: a
        request read after its deadline (a triggerer restarted late) may have succeeded."""
        if self.task_deadline is None or status is not None:
            return self.task_deadline
        return max(self.task_deadline, self.started) + FIRST_READ_GRACE

    def timed_out(self, status: RequestStatus | None, now: datetime) -> bool:
        """Whether the task's ``execution_timeout`` has ended the wait."""
        at = self.timeout_at(status)
        return at is not None and now >= at

    def heartbeat_due(self, now: datetime, last_log: datetime) -> bool:
        """Whether an unchanged wait is due another line (never without a heartbeat)."""
        return self.heartbeat is not None and now - last_log >= self.heartbeat

    def wake_in(self, status: RequestStatus | None, last_log: datetime, now: datetime) -> float | None:
        """Seconds until the trigger must look again even if nothing changed: the next heartbeat
        line, the max wait's give-up, or the task's deadline, whichever comes first; ``None`` when
        there is none of them (no heartbeat, no deadline): only a change wakes it."""
        moments = [last_log + self.heartbeat] if self.heartbeat is not None else []
        deadline = self.wait_deadline_for(status)
        if deadline is not None and status is not None and status.phase is Phase.WAITING:
            moments.append(deadline + self.grace)
        timeout = self.timeout_at(status)
        if timeout is not None:
            moments.append(timeout)
        return max(0.0, (min(moments) - now).total_seconds()) if moments else None

    def max_wait_seconds(self, status: RequestStatus) -> float | None:
        """The max wait the status line shows: the API's, else the provider's deadline's."""
        budget = status.details.get("max_wait_seconds") if status.details else None
        deadline = self.wait_deadline_for(status)
        if not budget and deadline is not None and status.timings.submitted is not None:
            budget = (deadline - status.timings.submitted).total_seconds()  # an API with no max wait
        return budget if isinstance(budget, (int, float)) else None

    def gives_up_at(self, status: RequestStatus) -> datetime | None:
        """When the wait ends at the latest: its max wait (the API's, or the provider's cancel for
        an API without one) or the task's ``execution_timeout``, whichever comes first."""
        ends = [t for t in (self.wait_deadline_for(status), self.task_deadline) if t is not None]
        return min(ends) if ends else None
