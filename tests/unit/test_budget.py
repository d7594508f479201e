"""WaitBudget: how long a request may wait and run."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from airflow_provider_dws.scheduling.budget import (
    DEFAULT_MAX_RUN,
    DEFAULT_MAX_WAIT,
    FLEX_START_LIMITS,
    MAX_RUN_LIMIT,
    MAX_WAIT_LIMIT,
    BudgetLimits,
    WaitBudget,
)


def test_defaults() -> None:
    budget = WaitBudget()
    assert budget.max_wait == DEFAULT_MAX_WAIT == timedelta(hours=24)
    assert budget.max_run == DEFAULT_MAX_RUN == timedelta(days=7)
    assert str(budget) == "wait at most 1 day, 0:00:00, run at most 7 days, 0:00:00"


def test_limits_are_seven_days() -> None:
    assert timedelta(days=7) == MAX_WAIT_LIMIT
    assert timedelta(days=7) == MAX_RUN_LIMIT
    budget = WaitBudget(max_wait=timedelta(days=7), max_run=timedelta(days=7))
    assert (budget.max_wait, budget.max_run) == (MAX_WAIT_LIMIT, MAX_RUN_LIMIT)


def test_int_and_whole_float_seconds_are_accepted() -> None:
    budget = WaitBudget(max_wait=3600, max_run=7200.0)
    assert budget.max_wait == timedelta(hours=1)
    assert budget.max_run == timedelta(hours=2)
    assert isinstance(budget.max_wait, timedelta)


def test_smallest_budget() -> None:
    budget = WaitBudget(max_wait=1, max_run=1)
    assert (budget.max_wait, budget.max_run) == (timedelta(seconds=1), timedelta(seconds=1))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_wait": 0}, "max_wait must be greater than 0 and at most 7 days, 0:00:00, got 0:00:00"),
        (
            {"max_wait": timedelta(0)},
            "max_wait must be greater than 0 and at most 7 days, 0:00:00, got 0:00:00",
        ),
        (
            {"max_wait": -5},
            "max_wait must be greater than 0 and at most 7 days, 0:00:00, got -1 day, 23:59:55",
        ),
        (
            {"max_run": timedelta(days=7, seconds=1)},
            "max_run must be greater than 0 and at most 7 days, 0:00:00, got 7 days, 0:00:01",
        ),
        (
            {"max_wait": timedelta(days=8)},
            "max_wait must be greater than 0 and at most 7 days, 0:00:00, got 8 days, 0:00:00",
        ),
        ({"max_wait": 1.5}, "max_wait must be a whole number of seconds, got 0:00:01.500000"),
        (
            {"max_run": timedelta(milliseconds=10500)},
            "max_run must be a whole number of seconds, got 0:00:10.500000",
        ),
    ],
)
def test_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        WaitBudget(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_wait": True}, "max_wait must be a datetime.timedelta (or seconds), got bool"),
        ({"max_run": "3600"}, "max_run must be a datetime.timedelta (or seconds), got str"),
        ({"max_wait": None}, "max_wait must be a datetime.timedelta (or seconds), got NoneType"),
    ],
)
def test_bad_types(kwargs: dict, message: str) -> None:
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        WaitBudget(**kwargs)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e20, 10**20])
def test_non_finite_or_huge_seconds_are_refused_with_the_field_named(value: float) -> None:
    with pytest.raises(ValueError, match="max_wait must be greater than 0 and at most 7 days"):
        WaitBudget(max_wait=value)


def test_budget_is_frozen() -> None:
    budget = WaitBudget()
    with pytest.raises(AttributeError):
        budget.max_wait = timedelta(1)  # type: ignore[misc]


def test_limits_are_per_api() -> None:
    """Flex Start's 7-day limits are the default, not the only possibility."""
    assert WaitBudget().limits == FLEX_START_LIMITS == BudgetLimits(MAX_WAIT_LIMIT, MAX_RUN_LIMIT)
    longer = BudgetLimits(max_wait=timedelta(days=30), max_run=None)
    budget = WaitBudget(max_wait=timedelta(days=10), max_run=timedelta(days=90), limits=longer)
    assert (budget.max_wait, budget.max_run) == (timedelta(days=10), timedelta(days=90))
    with pytest.raises(
        ValueError, match=r"^max_wait must be greater than 0 and at most 30 days, 0:00:00, got"
    ):
        WaitBudget(max_wait=timedelta(days=31), limits=longer)
    with pytest.raises(ValueError, match=r"^max_run must be greater than 0, got 0:00:00$"):
        WaitBudget(max_run=0, limits=longer)
    with pytest.raises(ValueError, match=r"^BudgetLimits.max_run must be greater than 0, got"):
        BudgetLimits(max_run=timedelta(0))
    with pytest.raises(TypeError, match=r"^WaitBudget.limits must be a BudgetLimits, got timedelta$"):
        WaitBudget(limits=timedelta(days=1))  # type: ignore[arg-type]
