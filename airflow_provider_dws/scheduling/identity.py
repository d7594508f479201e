"""Deterministic identities for capacity requests.

A request is named from the Airflow task instance that owns it: (dag_id, task_id, run_id,
map_index). The identity is written onto the request as GCP labels, so a retry, a re-run worker
or a restarted triggerer can find the request it already made instead of submitting a second one.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

from airflow_provider_dws.facts import (
    KUBE_LABEL_VALUE_PATTERN,
    KUBE_NAME_MAX,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    QUEUED_RESOURCE_ID_PATTERN,
)
from airflow_provider_dws.patterns import LazyPattern

LABEL_MAX_LENGTH = 63
QUEUED_RESOURCE_ID_MAX = 63
QUEUED_RESOURCE_ID_RE = LazyPattern(f"^{QUEUED_RESOURCE_ID_PATTERN}$")
_LABEL_VALUE_RE = LazyPattern(f"^{LABEL_VALUE_PATTERN}$")
_LABEL_KEY_RE = LazyPattern(f"^{LABEL_KEY_PATTERN}$")
_KUBE_LABEL_VALUE_RE = LazyPattern(f"^{KUBE_LABEL_VALUE_PATTERN}$")
_INVALID_CHARS = LazyPattern(r"[^a-z0-9_-]")
_HASH_CHARS = 8
#: The namespace of :meth:`RequestIdentity.request_uuid` (any fixed UUID; this one is uuid5 of the URL
#: namespace and the package name).
_REQUEST_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws")

# Label keys the provider owns. Underscores, not dashes, so they can be used unquoted in
# Vertex AI list filters (``labels.dws_key="..."``).
LABEL_MANAGED = "dws_managed"
LABEL_KEY = "dws_key"
LABEL_DAG = "dws_dag"
LABEL_TASK = "dws_task"
LABEL_RUN = "dws_run"
LABEL_MAP = "dws_map"
LABEL_ATTEMPT = "dws_attempt"
LABEL_TRY = "dws_try"
RESERVED_LABEL_KEYS = frozenset(
    {LABEL_MANAGED, LABEL_KEY, LABEL_DAG, LABEL_TASK, LABEL_RUN, LABEL_MAP, LABEL_ATTEMPT, LABEL_TRY}
)
#: ``<base>-t<Airflow try>-a<capacity attempt>``: the submission is always part of the name.
_ATTEMPT_NAME_RE = LazyPattern(r"^(?P<base>.+)-t(?P<try>[1-9][0-9]*)-a(?P<attempt>[1-9][0-9]*)$")


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


def to_kube_label_value(text: str) -> str:
    """Render any string as a valid Kubernetes label value (at most 63 characters, alphanumeric at
    both ends), stably: :func:`to_label_value`, then, if it still starts or ends with ``-`` or ``_``
    (a valid GCP value may), those cut off and a short hash of the original appended."""
    value = to_label_value(text)
    if _KUBE_LABEL_VALUE_RE.fullmatch(value):
        return value
    core = value.strip("-_")[: LABEL_MAX_LENGTH - _HASH_CHARS - 1].strip("-_")
    digest = _digest(text, _HASH_CHARS)
    return f"{core}-{digest}" if core else digest


def is_valid_label_key(key: str) -> bool:
    """True if ``key`` is a valid GCP label key."""
    return bool(_LABEL_KEY_RE.fullmatch(key))


def is_valid_label_value(value: str) -> bool:
    """True if ``value`` is a valid GCP label value."""
    return bool(_LABEL_VALUE_RE.fullmatch(value))


def attempt_name(base: str, try_number: int, attempt: int, max_length: int = QUEUED_RESOURCE_ID_MAX) -> str:
    """The name of one submission: ``<base>-t<try>-a<attempt>``, ``base`` cut to fit ``max_length``.

    Kueue's rule: the attempt is always in the name, so a name can be parsed back
    (:func:`parse_attempt_name`) and every submission of one base found by listing. The Airflow try
    is in it too, so a retried task never reuses the name of an earlier try's request.
    """
    suffix = f"-t{try_number}-a{attempt}"
    return base[: max(max_length - len(suffix), 1)].rstrip("-") + suffix


def parse_attempt_name(name: str) -> tuple[str, int, int] | None:
    """``nightly-t2-a3`` -> ``("nightly", 2, 3)``; ``None`` for a name without the suffix."""
    match = _ATTEMPT_NAME_RE.fullmatch(name)
    if not match:
        return None
    return match["base"], int(match["try"]), int(match["attempt"])


def is_attempt_of(name: str, base: str, max_length: int = QUEUED_RESOURCE_ID_MAX) -> bool:
    """True if ``name`` is a submission of ``base`` (as :func:`attempt_name` makes them, cut included)."""
    parsed = parse_attempt_name(name)
    return parsed is not None and name == attempt_name(base, parsed[1], parsed[2], max_length)


@dataclass(frozen=True)
class RequestIdentity:
    """Who owns a capacity request: one Airflow task instance (and, for capacity retries, an attempt).

    ``attempt`` counts submissions made within one Airflow try after capacity was not obtained,
    and ``try_number`` is that Airflow try; both are labels (and part of a queued resource id) but
    not part of :attr:`key`, so every submission of one task instance can be found with one filter,
    and no two of them share a name.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    attempt: int = 1
    try_number: int = 1

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
        for name in ("attempt", "try_number"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RequestIdentity.{name} must be an int >= 1, got {value!r}")

    @property
    def key(self) -> str:
        """A stable 32-hex-character digest of (dag_id, task_id, run_id, map_index)."""
        raw = "\x1f".join((self.dag_id, self.task_id, self.run_id, str(self.map_index)))
        return _digest(raw, 32)

    def describe(self) -> str:
        """The task instance in plain words for a log line: ``dag 'd', task 't', run 'r'`` (and
        ``map index 3`` when mapped); the try and attempt are left out (they name one submission)."""
        where = f"dag {self.dag_id!r}, task {self.task_id!r}, run {self.run_id!r}"
        return f"{where}, map index {self.map_index}" if self.map_index >= 0 else where

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
            LABEL_TRY: str(self.try_number),
        }

    def kube_labels(self) -> dict[str, str]:
        """The identity as Kubernetes labels: :meth:`labels`, each value valid for Kubernetes too
        (:func:`to_kube_label_value`); the keys are valid as they are."""
        return {key: to_kube_label_value(value) for key, value in self.labels().items()}

    def kube_selector(self) -> str:
        """The label selector of every Kubernetes object of this task instance (any try, attempt)."""
        return f"{LABEL_KEY}={self.key}"

    def provisioning_request_name(self) -> str:
        """This submission's ProvisioningRequest name (its PodTemplate's too): the queued resource
        id's rule, ``dws-<task>-<16 hex>-t<try>-a<attempt>``, lowercase DNS-1123 and at most 63
        characters (well inside Kubernetes' 253, and usable as a label value); parsed back by
        :func:`parse_attempt_name`."""
        return attempt_name(self.queued_resource_base(), self.try_number, self.attempt, KUBE_NAME_MAX)

    def vertex_filter(self) -> str:
        """A Vertex AI list filter matching every request of this task instance."""
        return f'labels.{LABEL_KEY}="{self.key}"'

    def display_name(self) -> str:
        """A readable default display name (Vertex allows up to 128 UTF-8 characters)."""
        name = f"{self.dag_id}.{self.task_id}"
        if self.map_index >= 0:
            name += f"[{self.map_index}]"
        return name if len(name) <= 128 else f"{name[:119]}-{self.key[:8]}"

    def queued_resource_base(self, prefix: str = "dws") -> str:
        """The part of the queued resource ids of this task instance every submission shares.

        ``<prefix>-<task slug>-<16 hex of key>``: readable in the console, distinct between task
        instances, short enough to leave room for the ``-t<try>-a<attempt>`` suffix.
        """
        slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", self.task_id.lower())).strip("-")
        suffix = f"-{self.key[:16]}"
        # Room for the longest suffix a submission gets (``-t999-a999``), so the base is never cut.
        room = QUEUED_RESOURCE_ID_MAX - len(prefix) - 1 - len(suffix) - len("-t999-a999")
        slug = slug[: max(room, 0)].rstrip("-") or "task"
        return f"{prefix}-{slug}{suffix}"

    def queued_resource_id(self, base: str | None = None) -> str:
        """This submission's Cloud TPU queued resource id (RFC 1035, at most 63 characters).

        ``<base>-t<try>-a<attempt>``, the base being :meth:`queued_resource_base` unless a custom
        one is given; :func:`parse_attempt_name` reads the try and attempt back.
        """
        return attempt_name(base or self.queued_resource_base(), self.try_number, self.attempt)

    def batch_job_id(self) -> str:
        """This submission's Cloud Batch job id: the same rule and pattern as a queued resource id
        (``dws-<task>-<16 hex>-t<try>-a<attempt>``, at most 63 characters, parsed back by
        :func:`parse_attempt_name`)."""
        return self.queued_resource_id()

    def resize_request_name(self) -> str:
        """This submission's Compute Engine resize request name: the same rule as a queued resource
        id (RFC 1035, at most 63 characters, ``-t<try>-a<attempt>`` parsed back by
        :func:`parse_attempt_name`). Resize requests have no labels: the name is the identity."""
        return self.queued_resource_id()

    def group_name(self, variant: str | None = None) -> str:
        """The name of the instance template and managed instance group made for this task instance
        (every try and attempt shares them): :meth:`queued_resource_base`, and for a ``variant`` (a
        failover machine type) a short hash of it, so each shape has its own template and group."""
        base = self.queued_resource_base()
        return base if not variant else f"{base}-{_digest(variant, 6)}"

    def request_uuid(self) -> str:
        """A UUID for this submission (task instance, try and attempt), the same on every call: the
        ``request_id`` an API uses to answer a repeated create once."""
        return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{self.key}:{self.try_number}:{self.attempt}"))

    def with_attempt(self, attempt: int) -> RequestIdentity:
        """The same task instance's identity for another capacity attempt (in the same try)."""
        return RequestIdentity(
            self.dag_id, self.task_id, self.run_id, self.map_index, attempt, self.try_number
        )
