"""Parameter checks as data: one table per operator, run by one loop at parse time and after rendering.

Each :class:`Check` names a parameter, says whether it is templated, and gives a predicate ``ok``
with the message of what the value must be. A structured value (labels, worker pools) has a quick
``ok`` that is true only for values needing no closer look, and an ``explain`` function (a
:mod:`airflow_provider_dws.registry` entry, imported only when ``ok`` is false) that finds what is wrong and raises with
a precise message, or accepts what the quick test could not judge (templates, unknown machine
types). So a DAG file whose parameters are right loads only the quick tests; a test keeps the two
in agreement. :func:`run_checks` runs a table before rendering (every parameter; a templated value
that still holds Jinja is skipped) and after rendering (only the templated ones, now rendered, and
always through ``explain``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_dws import registry
from airflow_provider_dws.specs.templates import has_template

#: ``validate(operator, value, is_unrendered)``: raise ``operator._param_error(...)`` when wrong;
#: ``is_unrendered(part)`` says whether a nested part still holds a template (skip it).
Validator = Callable[[Any, Any, Callable[[Any], bool]], None]


class Check:
    """The rule for one parameter (see the module's docstring)."""

    __slots__ = ("explain", "message", "name", "ok", "optional", "templated")

    def __init__(
        self,
        name: str,
        ok: Callable[[Any], bool] | None = None,
        message: str = "",
        templated: bool = False,
        optional: bool = False,
        explain: str | Validator | None = None,
    ) -> None:
        self.name = name
        self.ok = ok
        self.message = message  # what the value must be: "must be a Cloud TPU zone such as 'us-west4-a'"
        self.templated = templated
        self.optional = optional  # None is allowed (the parameter is not set)
        self.explain = explain

    def run(self, op: Any, *, rendered: bool) -> None:
        """Check the operator's value of this parameter (see :func:`run_checks`)."""
        value = getattr(op, self.name)
        if self.optional and value is None:
            return
        if self.ok is not None and self.ok(value) and not (rendered and self.explain):
            return
        unrendered = self.templated and not rendered

        def is_unrendered(part: Any) -> bool:
            return unrendered and has_template(part)

        explain = self.explain
        if explain is not None:
            if isinstance(explain, str):
                explain = registry.load(explain)
            explain(op, value, is_unrendered)
        elif not is_unrendered(value):
            raise op._param_error(f"{self.name} {self.message}, got {value!r}")


def run_checks(op: Any, checks: Sequence[Check], *, rendered: bool) -> None:
    """Before rendering (``rendered=False``) every check; after it, only the templated ones."""
    for check in checks:
        if check.templated or not rendered:
            check.run(op, rendered=rendered)


def duration(op: Any, name: str, value: Any, limit: timedelta) -> timedelta:
    """``value`` (a ``timedelta`` or seconds) as a whole-second duration in (0, ``limit``]."""
    if type(value) is timedelta and not value.microseconds and timedelta(0) < value <= limit:
        return value
    if type(value) in (int, float) and 0 < value <= limit.total_seconds() and value == int(value):
        return timedelta(seconds=value)
    from airflow_provider_dws.scheduling._time import check_duration

    try:
        return check_duration(name, value, limit)
    except (TypeError, ValueError, OverflowError) as err:
        raise op._param_error(str(err)) from None


# -- predicates --------------------------------------------------------------------------------


def matches(pattern: str | re.Pattern[str]) -> Callable[[Any], bool]:
    """A string matching ``pattern`` in full (``re`` compiles and caches it on first use)."""
    return lambda value: isinstance(value, str) and re.fullmatch(pattern, value) is not None


def is_bool(value: Any) -> bool:
    """True or False (not 0 and 1)."""
    return isinstance(value, bool)


def non_empty_str(value: Any) -> bool:
    """A string with something in it."""
    return isinstance(value, str) and bool(value.strip())


def int_in(low: int, high: int) -> Callable[[Any], bool]:
    """An ``int`` (not a bool) from ``low`` to ``high``."""
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def str_len_in(low: int, high: int) -> Callable[[Any], bool]:
    """A string of ``low`` to ``high`` characters."""
    return lambda value: isinstance(value, str) and low <= len(value) <= high


def flag(name: str) -> Check:
    """A True/False parameter that is not templated."""
    return Check(name, is_bool, "must be True or False")
