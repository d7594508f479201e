"""The emulator's RPC error and the checks every API shares (GCP labels)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import grpc

_LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")
MAX_LABELS = 64


class EmulatorError(Exception):
    """An RPC error: the server aborts the call with ``code`` and ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_labels(
    labels: Mapping[str, str], field: str, make_error: Callable[[str, str], EmulatorError]
) -> None:
    """GCP label rules: lowercase keys starting with a letter, [a-z0-9_-], at most 63 chars."""
    if len(labels) > MAX_LABELS:
        raise make_error(field, f"At most {MAX_LABELS} labels are allowed, got {len(labels)}.")
    for key, value in labels.items():
        if not _LABEL_KEY_RE.fullmatch(key):
            raise make_error(
                field,
                f"Label key {key!r} is invalid: keys must start with a lowercase letter and contain "
                "only lowercase letters, digits, '_' and '-', at most 63 characters.",
            )
        if not _LABEL_VALUE_RE.fullmatch(value):
            raise make_error(
                field,
                f"Label value {value!r} for key {key!r} is invalid: values may contain only lowercase "
                "letters, digits, '_' and '-', at most 63 characters.",
            )
