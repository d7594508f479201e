"""How long a request may wait for capacity and how long it may then run.

The generic part is :class:`WaitBudget`; what an API accepts is its :class:`BudgetLimits`. The
defaults are Flex Start's (:data:`FLEX_START_LIMITS`, 7 days each); a surface with other limits (or
none) passes its own, e.g. ``WaitBudget(max_wait, max_run, limits=BudgetLimits(max_run=None))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from airflow_provider_dws.facts import (
    DEFAULT_MAX_RUN,
    DEFAULT_MAX_WAIT,
    MAX_RUN_LIMIT,
    MAX_WAIT_LIMIT,
)
from airflow_provider_dws.scheduling._time import check_duration

__all__ = [
    "DEFAULT_MAX_RUN",
    "DEFAULT_MAX_WAIT",
    "FLEX_START_LIMITS",
    "MAX_RUN_LIMIT",
    "MAX_WAIT_LIMIT",
    "BudgetLimits",
    "WaitBudget",
    "check_duration",
]


@dataclass(frozen=True)
class BudgetLimits:
    """The longest ``max_wait`` and ``max_run`` one API accepts; None means no upper bound."""

    max_wait: timedelta | None = MAX_WAIT_LIMIT
    max_run: timedelta | None = MAX_RUN_LIMIT

    def __post_init__(self) -> None:
        for name in ("max_wait", "max_run"):
            value = getattr(self, name)
            if value is not None:
                check_duration(f"BudgetLimits.{name}", value, seconds=False)


#: Vertex AI Flex Start (and the provider's cap on TPU waits): 7 days of wait, 7 days of run.
FLEX_START_LIMITS = BudgetLimits()


@dataclass(frozen=True)
class WaitBudget:
    """The time budget of one capacity request: ``max_wait`` in the queue, ``max_run`` once started.

    Both are validated on construction: positive, whole seconds (a ``timedelta`` or seconds), and
    within ``limits``, the API's :class:`BudgetLimits` (Flex Start's unless given).
    """

    max_wait: timedelta = DEFAULT_MAX_WAIT
    max_run: timedelta = DEFAULT_MAX_RUN
    limits: BudgetLimits = field(default=FLEX_START_LIMITS, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.limits, BudgetLimits):
            raise TypeError(f"WaitBudget.limits must be a BudgetLimits, got {type(self.limits).__name__}")
        object.__setattr__(self, "max_wait", check_duration("max_wait", self.max_wait, self.limits.max_wait))
        object.__setattr__(self, "max_run", check_duration("max_run", self.max_run, self.limits.max_run))

    def __str__(self) -> str:
        return f"wait at most {self.max_wait}, run at most {self.max_run}"
