"""How long a request may wait for capacity and how long it may then run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from airflow_provider_dws.scheduling._time import check_duration

__all__ = [
    "DEFAULT_MAX_RUN",
    "DEFAULT_MAX_WAIT",
    "MAX_RUN_LIMIT",
    "MAX_WAIT_LIMIT",
    "WaitBudget",
    "check_duration",
]

#: Vertex AI's own default for ``Scheduling.max_wait_duration``.
DEFAULT_MAX_WAIT = timedelta(hours=24)
#: Vertex AI's own default for ``Scheduling.timeout``.
DEFAULT_MAX_RUN = timedelta(days=7)
#: Flex Start workloads run at most 7 days (Dynamic Workload Scheduler requirement).
MAX_RUN_LIMIT = timedelta(days=7)
#: The provider refuses waits longer than 7 days: a request nobody is watching any more can
#: still grab capacity and bill for it. (The API itself accepts 0 = "wait forever"; we do not.)
MAX_WAIT_LIMIT = timedelta(days=7)


@dataclass(frozen=True)
class WaitBudget:
    """The time budget of one capacity request: ``max_wait`` in the queue, ``max_run`` once started.

    Both are validated on construction: positive, whole seconds, and within the documented limits
    (:data:`MAX_WAIT_LIMIT`, :data:`MAX_RUN_LIMIT`).
    """

    max_wait: timedelta = DEFAULT_MAX_WAIT
    max_run: timedelta = DEFAULT_MAX_RUN

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_wait", check_duration("max_wait", self.max_wait, MAX_WAIT_LIMIT))
        object.__setattr__(self, "max_run", check_duration("max_run", self.max_run, MAX_RUN_LIMIT))

    @property
    def total(self) -> timedelta:
        """The longest the request can live: waiting plus running."""
        return self.max_wait + self.max_run

    def __str__(self) -> str:
        return f"wait at most {self.max_wait}, run at most {self.max_run}"
