"""The declarative parameter checks: one table per operator, one loop before and after rendering."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from airflow_provider_dws.operators.checks import Check, run_checks
from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

OPERATORS = [
    CreateVertexAIFlexStartJobOperator,
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
]


def _parameters(operator: Any) -> set[str]:
    """The ``__init__`` parameters along the operator's classes (the shared ones are a base's)."""
    return {
        name
        for cls in operator.__mro__
        if "__init__" in vars(cls)
        for name in inspect.signature(vars(cls)["__init__"]).parameters
    }


@pytest.mark.parametrize("operator", OPERATORS, ids=lambda o: o.__name__)
def test_the_table_and_the_template_fields_agree(operator: Any) -> None:
    names = [check.name for check in operator.CHECKS]
    assert len(names) == len(set(names)), "one check per parameter"
    assert set(names) <= _parameters(operator)
    templated = {check.name for check in operator.CHECKS if check.templated}
    # Every templated parameter is checked again after rendering, and only those.
    assert templated == set(operator.template_fields)


class Op:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def _param_error(self, message: str) -> ValueError:
        return ValueError(message)


CHECKS = (
    Check("zone", lambda v: v == "ok", "must be ok", templated=True),
    Check("count", lambda v: v == 1, "must be 1"),
)


def test_before_rendering_a_template_is_skipped_and_everything_else_checked() -> None:
    run_checks(Op(zone="{{ params.zone }}", count=1), CHECKS, rendered=False)
    with pytest.raises(ValueError, match=r"^count must be 1, got 2$"):
        run_checks(Op(zone="{{ params.zone }}", count=2), CHECKS, rendered=False)


def test_after_rendering_only_templated_parameters_are_checked_again() -> None:
    run_checks(Op(zone="ok", count=2), CHECKS, rendered=True)
    with pytest.raises(ValueError, match=r"^zone must be ok, got 'nowhere'$"):
        run_checks(Op(zone="nowhere", count=1), CHECKS, rendered=True)


def test_a_non_templated_parameter_holding_braces_is_checked_as_it_is() -> None:
    with pytest.raises(ValueError, match="count must be 1"):
        run_checks(Op(zone="ok", count="{{ 1 }}"), CHECKS, rendered=False)
