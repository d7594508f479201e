"""Wait until a moment, then resume the task with the state it left behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Sleep in slices so a changed system clock (or a long sleep drifting) is noticed.
_SLICE_SECONDS = 60.0


class ResumeAtTrigger(BaseTrigger):
    """Sleep in the triggerer until ``moment``, then yield ``{"moment": ..., "resume": resume}``.

    Used between capacity attempts (waiting for an off-peak window to open, or a backoff). The
    ``resume`` dict (the attempt's state) comes back in the event, so the task resumes with its attempt history whatever
    runs the trigger (the triggerer, or ``airflow dags test``, which does not pass the deferral's
    keyword arguments back).

    :param moment: ISO-8601 time with a time zone.
    :param resume: the attempt's state, JSON-serializable, handed back in the event.
    :param reason: what the task is waiting for, for the triggerer's log.
    """

    def __init__(self, moment: str, resume: dict[str, Any] | None = None, reason: str = "") -> None:
        super().__init__()
        parsed = datetime.fromisoformat(moment) if isinstance(moment, str) else None
        if parsed is None or parsed.tzinfo is None:
            raise ValueError(f"moment must be an ISO-8601 time with a time zone, got {moment!r}")
        if resume is not None and not isinstance(resume, dict):
            raise TypeError(f"resume must be a dict, got {type(resume).__name__}")
        self.moment = moment
        self.resume = resume
        self.reason = reason
        self._at = parsed.astimezone(timezone.utc)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments; round-trips through ``__init__``."""
        return (
            "airflow_provider_dws.triggers.resume_at.ResumeAtTrigger",
            {"moment": self.moment, "resume": self.resume, "reason": self.reason},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Sleep until the moment, then yield one event."""
        self.log.info("Waiting until %s%s", self._at.isoformat(), f": {self.reason}" if self.reason else "")
        while True:
            remaining = (self._at - datetime.now(timezone.utc)).total_seconds()
            if remaining <= 0:
                break
            await asyncio.sleep(min(remaining, _SLICE_SECONDS))
        yield TriggerEvent({"moment": self.moment, "resume": self.resume})
