"""Which existing request, if any, a task instance should adopt instead of submitting a new one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from airflow_provider_dws.scheduling.phases import Phase


@dataclass(frozen=True)
class Candidate:
    """An existing request carrying this task instance's identity."""

    name: str
    phase: Phase
    created: datetime | None = None


@dataclass(frozen=True)
class ReattachDecision:
    """``action`` is ``"wait"`` (adopt a live request), ``"done"`` (take a success) or ``"submit"``."""

    action: Literal["wait", "done", "submit"]
    name: str | None = None
    reason: str = ""
    #: How many earlier requests were found (all of them, live or ended).
    found: int = 0

    def describe(self, owner: str) -> str:
        """The decision as a task log line, in plain words; ``owner`` names the task instance
        (:meth:`~airflow_provider_dws.scheduling.identity.RequestIdentity.describe`)."""
        whose = f"of this task instance ({owner})"
        if self.action == "wait":
            others = f"; {self.found - 1} other request(s) found" if self.found > 1 else ""
            instead = "waiting on it instead of submitting a new one"
            return f"Found live request {self.name} {whose}: {instead}{others}"
        if self.action == "done":
            return f"Request {self.name} {whose} already succeeded: taking it as the result"
        if self.found:
            return (
                f"{self.found} earlier request(s) {whose} found, none live or succeeded; submitting a new one"
            )
        return f"No earlier request {whose} found; submitting a new one"


def choose_existing(candidates: Sequence[Candidate]) -> ReattachDecision:
    """Decide between reattaching, taking an earlier success, or submitting anew.

    A live request (waiting or running) always wins: a second one would double the bill and the
    place in the queue. Failing that, a request that already succeeded is the result (the worker
    that submitted it may have died after it finished). Only when every earlier request ended
    without success is a new one submitted.
    """

    def newest_first(c: Candidate) -> float:
        return c.created.timestamp() if c.created is not None else float("-inf")

    ordered = sorted(candidates, key=newest_first, reverse=True)
    live = [c for c in ordered if c.phase.live]
    found = len(ordered)
    if live:
        extra = f" ({len(live) - 1} more live, newest adopted)" if len(live) > 1 else ""
        reason = f"reattaching to live request {live[0].name}{extra}"
        return ReattachDecision("wait", live[0].name, reason, found)
    done = [c for c in ordered if c.phase is Phase.SUCCEEDED]
    if done:
        return ReattachDecision("done", done[0].name, f"request {done[0].name} already succeeded", found)
    if ordered:
        return ReattachDecision("submit", None, f"{found} earlier request(s) ended without success", found)
    return ReattachDecision("submit", None, "no earlier request")
