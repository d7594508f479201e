"""Parameter checks as data: one table per operator, run by one loop at parse time and after rendering.

Each :class:`Check` names a parameter, says whether it is templated, and either gives a predicate
with the message of what the value must be, or a ``validate`` function for a structured value
(labels, worker pools) that raises on its own. :func:`run_checks` runs a table before rendering
(every parameter; a templated value that still holds Jinja is skipped) and after rendering (only
the templated ones, now rendered).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol


class _Checked(Protocol):
    def _param_error(self, message: str) -> ValueError: ...


def is_template(value: Any) -> bool:
    """True for a string that still holds Jinja (checked again after rendering)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def has_template(value: Any) -> bool:
    """True if ``value`` or anything nested in it is a Jinja template string."""
    if is_template(value):
        return True
    if isinstance(value, Mapping):
        return any(has_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


#: ``validate(operator, value, is_unrendered)``: raise ``operator._param_error(...)`` when wrong;
#: ``is_unrendered(part)`` says whether a nested part still holds a template (skip it).
Validator = Callable[[Any, Any, Callable[[Any], bool]], None]


class Check(NamedTuple):
    """The rule for one parameter."""

    name: str
    ok: Callable[[Any], bool] | None = None
    message: str = ""  # what the value must be: "must be a Cloud TPU zone such as 'us-west4-a'"
    templated: bool = False
    optional: bool = False  # None is allowed (the parameter is not set)
    validate: Validator | None = None

    def run(self, op: _Checked, *, rendered: bool) -> None:
        """Check the operator's value of this parameter (see :func:`run_checks`)."""
        value = getattr(op, self.name)
        if self.optional and value is None:
            return

        def is_unrendered(part: Any) -> bool:
            return self.templated and not rendered and has_template(part)

        if self.validate is not None:
            self.validate(op, value, is_unrendered)
            return
        if is_unrendered(value):
            return
        if self.ok is not None and not self.ok(value):
            raise op._param_error(f"{self.name} {self.message}, got {value!r}")


def run_checks(op: _Checked, checks: Sequence[Check], *, rendered: bool) -> None:
    """Before rendering (``rendered=False``) every check; after it, only the templated ones."""
    for check in checks:
        if rendered and not check.templated:
            continue
        check.run(op, rendered=rendered)


# -- predicates --------------------------------------------------------------------------------


def matches(pattern: re.Pattern[str] | str) -> Callable[[Any], bool]:
    """A string matching ``pattern`` in full (a string pattern is compiled on first use)."""
    return lambda value: isinstance(value, str) and bool(re.fullmatch(pattern, value))


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
