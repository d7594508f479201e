"""What every DWS operator shares: parse-time checks, the task instance's identity, the project."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.scheduling.identity import (
    RESERVED_LABEL_KEYS,
    RequestIdentity,
    is_valid_label_key,
    is_valid_label_value,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

MAX_LABELS = 64
POLL_INTERVAL_MAX = 3600.0
PROJECT_RE = re.compile(r"^(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
SERVICE_ACCOUNT_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


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


#: What a backend raises when the API refuses a request (invalid, not allowed, wrong state).
API_REFUSED = (InvalidRequestError, PermissionDeniedApiError)


class DwsBaseOperator(BaseOperator):
    """Base of the DWS operators: common parameters, their checks and the request identity.

    Subclasses set the attributes ``project_id``, ``labels``, ``service_account``,
    ``impersonation_chain``, ``gcp_conn_id``, ``poll_interval``, ``deferrable`` and
    ``cancel_on_kill`` before calling :meth:`check_common`.
    """

    project_id: str | None
    labels: Mapping[str, str] | None
    service_account: str | None
    impersonation_chain: Any
    gcp_conn_id: str
    poll_interval: float
    deferrable: bool
    cancel_on_kill: bool

    def fail(self, message: str) -> ValueError:
        """A parse-time error naming the operator and the task."""
        return ValueError(f"{type(self).__name__} {self.task_id!r}: {message}")

    @staticmethod
    def skipper(rendered: bool) -> Any:
        """Before rendering, values that hold a template are not checked yet."""

        def skip(value: Any) -> bool:
            return not rendered and has_template(value)

        return skip

    def check_common(self, *, rendered: bool, static: bool = True) -> None:
        """Checks of the parameters every DWS operator has."""
        skip = self.skipper(rendered)
        if static:
            if not isinstance(self.gcp_conn_id, str) or not self.gcp_conn_id:
                raise self.fail(f"gcp_conn_id must be a non-empty connection id, got {self.gcp_conn_id!r}")
            if isinstance(self.poll_interval, bool) or not isinstance(self.poll_interval, (int, float)):
                raise self.fail(f"poll_interval must be a number of seconds, got {self.poll_interval!r}")
            if not 0 < self.poll_interval <= POLL_INTERVAL_MAX:
                raise self.fail(
                    f"poll_interval must be greater than 0 and at most {POLL_INTERVAL_MAX:.0f} seconds, "
                    f"got {self.poll_interval}"
                )
            if not isinstance(self.deferrable, bool):
                raise self.fail(f"deferrable must be True or False, got {self.deferrable!r}")
            if not isinstance(self.cancel_on_kill, bool):
                raise self.fail(f"cancel_on_kill must be True or False, got {self.cancel_on_kill!r}")
        if self.project_id is not None and not skip(self.project_id):
            if not isinstance(self.project_id, str) or not PROJECT_RE.fullmatch(self.project_id):
                raise self.fail(
                    "project_id must be a Google Cloud project id (6-30 lowercase letters, digits and "
                    f"hyphens, starting with a letter), got {self.project_id!r}"
                )
        if self.service_account is not None and not skip(self.service_account):
            if not isinstance(self.service_account, str) or not SERVICE_ACCOUNT_RE.fullmatch(
                self.service_account
            ):
                raise self.fail(
                    f"service_account must be a service account email, got {self.service_account!r}"
                )
        if self.impersonation_chain is not None and not skip(self.impersonation_chain):
            chain = self.impersonation_chain
            ok = (isinstance(chain, str) and chain) or (
                isinstance(chain, (list, tuple)) and chain and all(isinstance(c, str) and c for c in chain)
            )
            if not ok:
                raise self.fail(
                    f"impersonation_chain must be a service account email or a list of them, got {chain!r}"
                )
        self._check_labels(skip)

    def _check_labels(self, skip: Any) -> None:
        labels = self.labels
        if labels is None or skip(labels):
            return
        if not isinstance(labels, Mapping):
            raise self.fail(f"labels must be a dict of strings, got {type(labels).__name__}")
        reserved = sorted(set(labels) & RESERVED_LABEL_KEYS)
        if reserved:
            raise self.fail(
                f"labels {reserved} are reserved: the provider writes the task's identity under the "
                "'dws_' keys to find its requests again"
            )
        if len(labels) + len(RESERVED_LABEL_KEYS) > MAX_LABELS:
            raise self.fail(
                f"labels can have at most {MAX_LABELS - len(RESERVED_LABEL_KEYS)} entries "
                f"({len(RESERVED_LABEL_KEYS)} of the API's {MAX_LABELS} are used for identity), "
                f"got {len(labels)}"
            )
        for key, value in labels.items():
            if skip(key) or skip(value):
                continue
            if not isinstance(key, str) or not is_valid_label_key(key):
                raise self.fail(
                    f"label key {key!r} is invalid: it must start with a lowercase letter and use only "
                    "lowercase letters, digits, '_' and '-', at most 63 characters"
                )
            if not isinstance(value, str) or not is_valid_label_value(value):
                raise self.fail(
                    f"label value {value!r} (key {key!r}) is invalid: only lowercase letters, digits, '_' "
                    "and '-', at most 63 characters"
                )

    def identity(self, context: Context, task_id: str | None = None) -> RequestIdentity:
        """The identity of this task instance (or of ``task_id`` in the same run and map index)."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        try_number = getattr(ti, "try_number", 1)
        return RequestIdentity(
            dag_id=ti.dag_id,
            task_id=task_id or ti.task_id,
            run_id=ti.run_id,
            map_index=map_index if isinstance(map_index, int) and map_index >= 0 else -1,
            try_number=try_number
            if isinstance(try_number, int) and not isinstance(try_number, bool) and try_number >= 1
            else 1,
        )

    def resolve_project(self) -> str:
        """``project_id``, or the project of the connection when it is not set."""
        if self.project_id:
            return self.project_id
        from airflow_provider_dws.hooks.base import DwsBaseHook

        project = DwsBaseHook(gcp_conn_id=self.gcp_conn_id).project_id or None
        if not project:
            raise self.fail(f"project_id is not set and connection {self.gcp_conn_id!r} names no project")
        self.project_id = project
        return project
