"""Deterministic identities for capacity requests.

A request is named from the Airflow task instance that owns it: (dag_id, task_id, run_id,
map_index). The identity is written onto the request as GCP labels, so a retry, a re-run worker
or a restarted triggerer can find the request it already made instead of submitting a second one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

LABEL_MAX_LENGTH = 63
QUEUED_RESOURCE_ID_MAX = 63
QUEUED_RESOURCE_ID_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_INVALID_CHARS = re.compile(r"[^a-z0-9_-]")
_HASH_CHARS = 8

# Label keys the provider owns. Underscores, not dashes, so they can be used unquoted in
# Vertex AI list filters (``labels.dws_key="..."``).
LABEL_MANAGED = "dws_managed"
LABEL_KEY = "dws_key"
LABEL_DAG = "dws_dag"
LABEL_TASK = "dws_task"
LABEL_RUN = "dws_run"
LABEL_MAP = "dws_map"
LABEL_ATTEMPT = "dws_attempt"
RESERVED_LABEL_KEYS = frozenset(
    {LABEL_MANAGED, LABEL_KEY, LABEL_DAG, LABEL_TASK, LABEL_RUN, LABEL_MAP, LABEL_ATTEMPT}
)


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def to_label_value(text: str) -> str:
    """Render any string as a valid GCP label value, stably and without silent collisions.

    A value that is already valid is kept as is. Otherwise it is lowercased, every character
    outside ``[a-z0-9_-]`` becomes ``-``, it is cut to fit 63 characters and a short hash of the
    original is appended, so two different originals that sanitize alike stay distinct.
    """
    if _LABEL_VALUE_RE.fullmatch(text):
        return text
    cleaned = _INVALID_CHARS.sub("-", text.lower())
    keep = LABEL_MAX_LENGTH - _HASH_CHARS - 1
    return f"{cleaned[:keep]}-{_digest(text, _HASH_CHARS)}"


def is_valid_label_key(key: str) -> bool:
    """True if ``key`` is a valid GCP label key."""
    return bool(_LABEL_KEY_RE.fullmatch(key))


def is_valid_label_value(value: str) -> bool:
    """True if ``value`` is a valid GCP label value."""
    return bool(_LABEL_VALUE_RE.fullmatch(value))


@dataclass(frozen=True)
class RequestIdentity:
    """Who owns a capacity request: one Airflow task instance (and, for capacity retries, an attempt).

    ``attempt`` counts submissions made for the same task instance after capacity was not
    obtained; it is a label but not part of :attr:`key`, so every attempt of one task instance
    can be found with one filter.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    attempt: int = 1

    def __post_init__(self) -> None:
        for name in ("dag_id", "task_id", "run_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"RequestIdentity.{name} must be a non-empty string, got {value!r}")
            if "\x1f" in value:
                # The separator of :attr:`key`; refusing it keeps distinct identities distinct.
                raise ValueError(f"RequestIdentity.{name} must not contain the unit separator \\x1f")
        if not isinstance(self.map_index, int) or self.map_index < -1:
            raise ValueError(f"RequestIdentity.map_index must be an int >= -1, got {self.map_index!r}")
        if not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"RequestIdentity.attempt must be an int >= 1, got {self.attempt!r}")

    @property
    def key(self) -> str:
        """A stable 32-hex-character digest of (dag_id, task_id, run_id, map_index)."""
        raw = "\x1f".join((self.dag_id, self.task_id, self.run_id, str(self.map_index)))
        return _digest(raw, 32)

    def labels(self) -> dict[str, str]:
        """The identity as GCP labels (all keys and values valid)."""
        return {
            LABEL_MANAGED: "true",
            LABEL_KEY: self.key,
            LABEL_DAG: to_label_value(self.dag_id),
            LABEL_TASK: to_label_value(self.task_id),
            LABEL_RUN: to_label_value(self.run_id),
            LABEL_MAP: str(self.map_index) if self.map_index >= 0 else "none",
            LABEL_ATTEMPT: str(self.attempt),
        }

    def vertex_filter(self) -> str:
        """A Vertex AI list filter matching every request of this task instance."""
        return f'labels.{LABEL_KEY}="{self.key}"'

    def display_name(self) -> str:
        """A readable default display name (Vertex allows up to 128 UTF-8 characters)."""
        name = f"{self.dag_id}.{self.task_id}"
        if self.map_index >= 0:
            name += f"[{self.map_index}]"
        return name if len(name) <= 128 else f"{name[:119]}-{self.key[:8]}"

    def queued_resource_id(self, prefix: str = "dws") -> str:
        """A Cloud TPU queued resource id for this task instance and attempt (RFC 1035, <= 63 chars).

        ``<prefix>-<task slug>-<16 hex of key>`` plus ``-a<N>`` from the second attempt on: readable
        in the console, stable across retries and restarts, distinct between task instances.
        """
        slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", self.task_id.lower())).strip("-")
        suffix = f"-{self.key[:16]}" + (f"-a{self.attempt}" if self.attempt > 1 else "")
        room = QUEUED_RESOURCE_ID_MAX - len(prefix) - 1 - len(suffix) - 1
        slug = slug[: max(room, 0)].rstrip("-") or "task"
        return f"{prefix}-{slug}{suffix}"

    def with_attempt(self, attempt: int) -> RequestIdentity:
        """The same task instance's identity for another capacity attempt."""
        return RequestIdentity(self.dag_id, self.task_id, self.run_id, self.map_index, attempt)
