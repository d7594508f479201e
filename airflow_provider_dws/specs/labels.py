"""Why a ``labels`` parameter is refused: imported only when the quick parse-time test fails."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dws.facts import MAX_LABELS
from airflow_provider_dws.scheduling.identity import (
    RESERVED_LABEL_KEYS,
    is_valid_label_key,
    is_valid_label_value,
)


def check_labels(op: Any, labels: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """Say what is wrong with ``labels`` (loaded only when the quick test in ``operators.base`` fails)."""
    if is_unrendered(labels):
        return
    if not isinstance(labels, Mapping):
        raise op._param_error(f"labels must be a dict of strings, got {type(labels).__name__}")
    reserved = sorted(set(labels) & RESERVED_LABEL_KEYS)
    if reserved:
        raise op._param_error(
            f"labels {reserved} are reserved: the provider writes the task's identity under the "
            "'dws_' keys to find its requests again"
        )
    if len(labels) + len(RESERVED_LABEL_KEYS) > MAX_LABELS:
        raise op._param_error(
            f"labels can have at most {MAX_LABELS - len(RESERVED_LABEL_KEYS)} entries "
            f"({len(RESERVED_LABEL_KEYS)} of the API's {MAX_LABELS} are used for identity), "
            f"got {len(labels)}"
        )
    for key, value in labels.items():
        if is_unrendered(key) or is_unrendered(value):
            continue
        if not isinstance(key, str) or not is_valid_label_key(key):
            raise op._param_error(
                f"label key {key!r} is invalid: it must start with a lowercase letter and use only "
                "lowercase letters, digits, '_' and '-', at most 63 characters"
            )
        if not isinstance(value, str) or not is_valid_label_value(value):
            raise op._param_error(
                f"label value {value!r} (key {key!r}) is invalid: only lowercase letters, digits, '_' "
                "and '-', at most 63 characters"
            )
