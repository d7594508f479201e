"""Whether a value still holds Jinja: checked again, or rendered, once the task runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_template(value: Any) -> bool:
    """True for a string that still holds Jinja (checked again after rendering)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def has_template(value: Any) -> bool:
    """True if ``value`` or anything nested in it is a Jinja template string."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, (dict, list, tuple)) or (
        # Plain values first: an ABC test of a type the process has not seen yet is slow.
        not isinstance(value, (int, float)) and value is not None and isinstance(value, Mapping)
    ):
        return any(has_template(v) for v in (value.values() if isinstance(value, Mapping) else value))
    return False
