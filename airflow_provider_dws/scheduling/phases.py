"""The shared life cycle of a capacity request and the classification of how it ended.

Every DWS surface (Vertex AI custom jobs, Cloud TPU queued resources, ...) is the same life cycle
seen through a different API::

    submit -> WAITING -> PROVISIONING -> RUNNING -> SUCCEEDED
                 |            |             `----> FAILED (the workload)
                 `------------`--> NOT_OBTAINED (max wait passed, stock-out, refused)
                 `--> CANCELLED

Each API contributes one table from its own state names to :class:`Phase`, a :class:`StateTable`.
The table lives beside the backend that alone reads it (``VERTEX_JOB_STATES`` in
``backends/vertex_ai.py``, ...), so a new API adds its table there and never edits this module,
which keeps what every table shares: the phases, the outcome, the reservation-ended words, the wait
targets and the timings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_dws.patterns import LazyPattern


class Phase(str, enum.Enum):
    """Where a capacity request is in its life cycle, independent of the API behind it."""

    WAITING = "waiting"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_OBTAINED = "not_obtained"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True once the request can no longer change (and holds no capacity)."""
        return self in _TERMINAL

    @property
    def live(self) -> bool:
        """True while the request waits for, or holds, capacity."""
        return not self.terminal


_TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.NOT_OBTAINED, Phase.CANCELLED})


class FailureKind(str, enum.Enum):
    """Why a request did not succeed; decides what a user (or a retry policy) should do next."""

    CAPACITY_NOT_OBTAINED = "capacity_not_obtained"
    WORKLOAD_FAILED = "workload_failed"
    BAD_REQUEST = "bad_request"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    #: The task's ``execution_timeout`` passed while the request was still waiting or running.
    TIMED_OUT = "timed_out"


@dataclass(frozen=True)
class Outcome:
    """The classified end (or current state) of a request."""

    phase: Phase
    failure: FailureKind | None = None
    message: str = ""

    @property
    def succeeded(self) -> bool:
        """True when the workload ran and finished successfully."""
        return self.phase is Phase.SUCCEEDED


# A workload on a calendar-mode reservation is ended by the service when the reservation ends (the
# block's end time, or the reservation deleted): its capacity is revoked, the workload did not
# fail. The APIs have no state for it, so it is told by the error (Vertex AI ``error.message``, a
# TPU ``failed_data.error``, a Batch status event, a resize request's error): the words below are
# the dws-emulator's, modelled on Compute Engine's own ("The reservation ... ended at ...; it was
# deleted"). NOT VERIFIED against the real services' wording: a message that does not match is
# classified as before (after a start, a workload failure).
RESERVATION_ENDED = LazyPattern(
    r"\breservations?\b[^;]*?\b(ended|expired|was deleted|has been deleted|is being deleted|no longer exists)\b",
    re.IGNORECASE,
)
#: A reservation whose future reservation was cancelled, declined or failed: never delivered.
RESERVATION_NOT_DELIVERED = LazyPattern(r"\breservations?\b[^;]*?\bwill not be delivered\b", re.IGNORECASE)


def reservation_outcome(message: str, phase: Phase = Phase.FAILED) -> Outcome | None:
    """The outcome of a workload whose error says its reservation ended (capacity revoked:
    PREEMPTED) or will never be delivered (capacity not obtained); ``None`` for any other error."""
    if RESERVATION_NOT_DELIVERED.search(message):
        return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, message)
    if RESERVATION_ENDED.search(message):
        return Outcome(phase, FailureKind.PREEMPTED, message)
    return None


#: What a wait on a request may end on besides the request's end, and the live phases that end it:
#: the capacity is held (``running``: a TPU slice ACTIVE), or promised (``provisioning``: a calendar
#: block approved, its start perhaps weeks ahead) or held.
_REACHED: dict[str, frozenset[Phase]] = {
    "end": frozenset(),
    "running": frozenset({Phase.RUNNING}),
    "provisioning": frozenset({Phase.PROVISIONING, Phase.RUNNING}),
}
WAIT_TARGETS = frozenset(_REACHED)


def reached(target: str, phase: Phase) -> bool:
    """Whether a request in ``phase`` ends a wait for ``target`` (an ended request always does)."""
    return phase.terminal or phase in _REACHED[target]


def succeeded_for(target: str, phase: Phase) -> bool:
    """Whether a request in ``phase`` gave what a wait for ``target`` needs: its workload
    succeeded (``"end"``), its capacity is held (``"running"``), or, for ``"provisioning"``, held
    or promised."""
    if target == "end":
        return phase is Phase.SUCCEEDED
    return phase is Phase.RUNNING or (target == "provisioning" and phase is Phase.PROVISIONING)


@dataclass(frozen=True)
class StateTable:
    """One API's states: their phases, and how a state (with what else is known) is classified.

    Everything a backend needs about states comes from here: which states are live (listed and
    followed by the shared poller), and the :class:`Outcome` of a state. A state missing from
    :attr:`phases` (added to the API after this release) is :attr:`unknown`, WAITING by default, so
    the request keeps being watched rather than abandoned while it may hold capacity.
    """

    api: str
    phases: Mapping[str, Phase]
    classifier: Callable[..., Outcome]
    unknown: Phase = Phase.WAITING

    def phase(self, state: str) -> Phase:
        """The phase of ``state`` alone (before refinement by :meth:`classify`)."""
        return self.phases.get(state, self.unknown)

    def live_states(self) -> tuple[str, ...]:
        """Every state in which a request waits for, or may hold, capacity (table order)."""
        return tuple(state for state, phase in self.phases.items() if phase.live)

    def ended_states(self) -> tuple[str, ...]:
        """Every state in which a request has ended (table order): all but :meth:`live_states`."""
        return tuple(state for state, phase in self.phases.items() if not phase.live)

    def classify(self, state: str, **facts: Any) -> Outcome:
        """The outcome of ``state``; ``facts`` are the API's own (started, error code and message)."""
        return self.classifier(state, **facts)


@dataclass(frozen=True)
class RequestTimings:
    """When a request was submitted, obtained its capacity and finished (UTC, any may be unknown)."""

    submitted: datetime | None = None
    started: datetime | None = None
    finished: datetime | None = None

    @property
    def wait_seconds(self) -> float | None:
        """Seconds spent waiting for capacity (until start, or until the end if it never started)."""
        if self.submitted is None:
            return None
        end = self.started or self.finished
        if end is None:
            return None
        return max(0.0, (end - self.submitted).total_seconds())

    @property
    def run_seconds(self) -> float | None:
        """Seconds the workload held capacity (0 when it never started)."""
        if self.started is None:
            return 0.0 if self.finished is not None else None
        if self.finished is None:
            return None
        return max(0.0, (self.finished - self.started).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (ISO-8601 strings) for trigger events and XCom."""
        return {
            "submitted": self.submitted.isoformat() if self.submitted else None,
            "started": self.started.isoformat() if self.started else None,
            "finished": self.finished.isoformat() if self.finished else None,
            "wait_seconds": self.wait_seconds,
            "run_seconds": self.run_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestTimings:
        """Inverse of :meth:`to_dict`."""

        def parse(value: Any) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return cls(parse(data.get("submitted")), parse(data.get("started")), parse(data.get("finished")))


__all__ = [
    "RESERVATION_ENDED",
    "RESERVATION_NOT_DELIVERED",
    "WAIT_TARGETS",
    "FailureKind",
    "Outcome",
    "Phase",
    "RequestTimings",
    "StateTable",
    "reached",
    "reservation_outcome",
    "succeeded_for",
]
