"""Giving a waited-on request up: at its max wait, or when the task's ``execution_timeout`` ends.

What to do is decided elsewhere (:mod:`.wait_limits`); this is the doing: read the request once
more, cancel it (or leave it to its owner), and the status the trigger reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_dws.backends.base import AsyncRequestBackend, GivesUpWaiting, RequestStatus
from airflow_provider_dws.errors import RequestNotFoundError
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers.outcomes import not_obtained, timed_out


@dataclass(frozen=True)
class HeldRequest:
    """The request a trigger waits on, as far as giving it up goes.

    :param name: its full resource name.
    :param backend_of: gives its backend (the async half), built on first use.
    :param log: the trigger's logger (lines land in the task's log).
    :param releases: whether this wait may cancel it (False: another task owns it).
    :param cancel_on_kill: whether the user asked for it to be cancelled when the task is stopped.
    """

    name: str
    backend_of: Callable[[], AsyncRequestBackend]
    log: Any
    releases: bool
    cancel_on_kill: bool

    @property
    def backend(self) -> AsyncRequestBackend:
        """The request's backend."""
        return self.backend_of()

    async def read_again(self) -> RequestStatus | None:
        """The request read now, before it is given up; ``None`` when gone or unreadable (then the
        give-up goes ahead on the status in hand, as the max wait promises)."""
        try:
            return await self.backend.aget_status(self.name)
        except RequestNotFoundError:
            return None
        except Exception:
            self.log.warning(
                "Could not read %s again before giving it up; giving it up on its last status",
                self.name,
                exc_info=True,
            )
            return None

    async def give_up(
        self, status: RequestStatus, wait_deadline: str | None, grace: timedelta
    ) -> tuple[bool, RequestStatus]:
        """Give up a request still waiting at its max wait: ``(True, the status to report)``, or
        ``(False, its status now)`` when it was found no longer waiting (nothing cancelled)."""
        now = datetime.now(timezone.utc)
        if not self.releases:
            self.log.warning(
                "%s is still waiting at %s, when this wait gives up; leaving it alone (another task's "
                "to give up)",
                self.name,
                wait_deadline,
            )
            message = "the wait's deadline passed without capacity; the request was left to its owner"
            return True, not_obtained(status, message, now)
        if grace:
            self.log.warning(
                "%s is still waiting %s after its max wait ended (%s); cancelling it so it cannot "
                "take capacity nobody will use",
                self.name,
                grace,
                wait_deadline,
            )
        else:
            self.log.warning(
                "%s has waited its whole max wait (until %s) for capacity; cancelling it so it "
                "cannot take capacity nobody will use",
                self.name,
                wait_deadline,
            )
        fresh = await self._cancel_if_waiting()
        if fresh is not None:
            self.log.info(
                "%s is %s [%s] now: it no longer waits, so it is not given up",
                self.name,
                fresh.phase.value,
                fresh.state,
            )
            return False, fresh
        message = "max wait passed without capacity; the provider cancelled the request"
        return True, not_obtained(status, message, datetime.now(timezone.utc))

    async def _cancel_if_waiting(self) -> RequestStatus | None:
        """Cancel the request unless it moved on; its status when it did, else ``None``."""
        if isinstance(self.backend, GivesUpWaiting):
            return await self.backend.agive_up(self.name)
        # The status in hand may be a poll interval old: capacity that came meanwhile (a request
        # Provisioned, a job RUNNING, VMs created) is not thrown away for a stale WAITING.
        fresh = await self.read_again()
        if fresh is None or fresh.phase is Phase.WAITING:
            await self.backend.arelease(self.name)
            return None
        return fresh

    async def time_out(self, status: RequestStatus, task_deadline: str | None) -> RequestStatus:
        """The task's ``execution_timeout`` ended while waiting: cancel (``cancel_on_kill``, and only
        a request this wait owns), and the status to report."""
        if not self.releases:
            self.log.warning(
                "The task's execution_timeout ended at %s; leaving %s alone (another task's to give up)",
                task_deadline,
                self.name,
            )
            note = "the task's execution_timeout passed; the request, another task's, was left as it was"
        elif self.cancel_on_kill:
            self.log.warning(
                "The task's execution_timeout ended at %s while %s was %s; cancelling the request",
                task_deadline,
                self.name,
                status.phase.value,
            )
            await self.backend.arelease(self.name)
            note = "the task's execution_timeout passed; the provider cancelled the request"
        else:
            self.log.warning(
                "The task's execution_timeout ended at %s; leaving %s alone (cancel_on_kill=False)",
                task_deadline,
                self.name,
            )
            note = (
                "the task's execution_timeout passed; the request was left as it was (cancel_on_kill=False)"
            )
        return timed_out(status, note, datetime.now(timezone.utc))
