"""The state one attempt of the attempt loop carries across a deferral, written and read in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESUME
from airflow_provider_dws.scheduling.policies import Placement

if TYPE_CHECKING:
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.runtime.adapter import RequestAdapter


@dataclass(frozen=True)
class AttemptState:
    """Where the loop is: the attempt number, its placement, the attempts before it, its max wait
    and, while waiting for a window or a backoff, the earliest submit time.

    It travels as one JSON-friendly dict (:meth:`to_dict`), once: as the trigger's
    ``resume``, which the trigger hands back in its event (``airflow dags test`` hands back
    the event alone, not the deferral's keyword arguments, so the event is the one place both paths
    keep).
    """

    placement: Placement
    attempt: int = 1
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    max_wait_seconds: float | None = None
    not_before: str | None = None
    #: The provisional name the request is recorded under while its trigger makes it.
    pending: str | None = None
    #: When this attempt's max wait ends, where it is longer than its API lets one request wait
    #: (:attr:`~.adapter.RequestAdapter.api_max_wait`): the loop asks again until then.
    wait_ends: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as the trigger's ``resume``."""
        return {
            "history": [dict(h) for h in self.history],
            "attempt": self.attempt,
            "placement": self.placement.to_dict(),
            "max_wait_seconds": self.max_wait_seconds,
            "not_before": self.not_before,
            "pending": self.pending,
            "wait_ends": self.wait_ends,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], home: Placement) -> AttemptState:
        """Read :meth:`to_dict`'s form back; a missing placement is ``home``."""
        placement = data.get("placement")
        attempt = data.get("attempt")
        return cls(
            placement=Placement(**placement) if isinstance(placement, Mapping) else home,
            attempt=attempt if isinstance(attempt, int) and attempt >= 1 else 1,
            history=tuple(data.get("history") or ()),
            max_wait_seconds=data.get("max_wait_seconds") or None,
            not_before=data.get("not_before") or None,
            pending=data.get("pending") or None,
            wait_ends=data.get("wait_ends") or None,
        )

    @classmethod
    def from_resume(cls, event: Any, home: Placement) -> AttemptState:
        """The state a resumed task continues from: the event's ``resume``, else the first
        attempt at ``home``."""
        state = event.get(RESUME) if isinstance(event, Mapping) else None
        return cls.from_dict(state if isinstance(state, Mapping) else {}, home)

    def max_wait(self, default: timedelta) -> timedelta:
        """This attempt's max wait (``default`` when none was decided yet)."""
        return timedelta(seconds=self.max_wait_seconds) if self.max_wait_seconds else default

    def earliest(self) -> datetime | None:
        """The earliest submit time, if the loop is waiting for one."""
        return datetime.fromisoformat(self.not_before) if self.not_before else None

    def waiting_until(self, at: datetime) -> AttemptState:
        """The same attempt, not to be submitted before ``at``."""
        return replace(self, not_before=at.isoformat())

    def submitted(self, placement: Placement, max_wait: timedelta) -> AttemptState:
        """The same attempt once submitted in ``placement`` with ``max_wait``."""
        return replace(
            self,
            placement=placement,
            max_wait_seconds=max_wait.total_seconds(),
            not_before=None,
            pending=None,
        )

    def ends_wait_at(self) -> datetime | None:
        """When this attempt's max wait ends, if it is kept over several requests."""
        return datetime.fromisoformat(self.wait_ends) if self.wait_ends else None

    def kept_until(self, ends: datetime) -> AttemptState:
        """The same attempt, its max wait kept over several requests until ``ends``."""
        return replace(self, wait_ends=ends.isoformat())

    def asked_again(self, attempt: int) -> AttemptState:
        """The next request of the same wait (``attempt`` numbers it), in the same placement."""
        return AttemptState(
            placement=self.placement, attempt=attempt, history=self.history, wait_ends=self.wait_ends
        )

    def ended(self, record: Mapping[str, Any]) -> AttemptState:
        """The state after this attempt ended, its ``record`` added to the history."""
        return replace(self, history=(*self.history, record))

    def next(self, attempt: int, placement: Placement, not_before: datetime | None) -> AttemptState:
        """The next attempt, keeping the history."""
        return AttemptState(
            placement=placement,
            attempt=attempt,
            history=self.history,
            not_before=not_before.isoformat() if not_before else None,
        )


# -- a max wait longer than one request may wait -----------------------------------------------------


def split_wait(
    adapter: RequestAdapter[Any, Any], state: AttemptState, now: datetime, max_wait: timedelta, log: Any
) -> tuple[AttemptState, timedelta]:
    """The wait of the request to make now: ``max_wait``, or the longest its API allows when that
    is shorter (:attr:`~.adapter.RequestAdapter.api_max_wait`), the attempt then keeping its max
    wait by asking again until it ends (said once)."""
    cap = adapter.api_max_wait
    if cap is None or max_wait <= cap:
        return state, max_wait
    if state.wait_ends is None:
        state = state.kept_until(now + max_wait)
        log.info(
            "The API lets one request wait at most %s; the max wait of %s is kept by asking again "
            "when it gives up, until %s",
            cap,
            max_wait,
            state.wait_ends,
        )
    return state, cap


def asks_again(
    adapter: RequestAdapter[Any, Any], status: RequestStatus, state: AttemptState, now: datetime
) -> bool:
    """Whether a request its API gave up is followed by another of the same wait: the attempt's
    max wait is longer than one request may wait, and enough of it is left."""
    from airflow_provider_dws.scheduling.phases import FailureKind

    ends = state.ends_wait_at()
    if ends is None or status.outcome.failure is not FailureKind.CAPACITY_NOT_OBTAINED:
        return False
    return ends - now >= adapter.min_wait
