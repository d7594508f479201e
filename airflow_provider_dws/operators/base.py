"""What every DWS operator shares: parse-time checks, the task instance's identity, the project."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_dws import facts
from airflow_provider_dws.operators.checks import Check, flag, matches, non_empty_str, run_checks

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.scheduling.identity import RequestIdentity

POLL_INTERVAL_MAX = 3600.0
#: Patterns, compiled by ``re``'s cache on first use (only for the parameters a DAG gives).
PROJECT_PATTERN = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
SERVICE_ACCOUNT_PATTERN = r"[^@\s]+@[^@\s]+\.[^@\s]+"


def _check_poll_interval(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise op._param_error(f"poll_interval must be a number of seconds, got {value!r}")
    if not 0 < value <= POLL_INTERVAL_MAX:
        raise op._param_error(
            f"poll_interval must be greater than 0 and at most {POLL_INTERVAL_MAX:.0f} seconds, got {value}"
        )


def _is_chain(chain: Any) -> bool:
    if isinstance(chain, str):
        return bool(chain)
    return isinstance(chain, (list, tuple)) and bool(chain) and all(isinstance(c, str) and c for c in chain)


def _labels_ok(labels: Any) -> bool:
    """Quick: a dict of valid label strings, none of the provider's ``dws_`` keys, room for identity."""
    return (
        type(labels) is dict
        and len(labels) <= facts.MAX_LABELS - facts.IDENTITY_LABELS
        and all(
            type(key) is str
            and type(value) is str
            and not key.startswith("dws_")
            and re.fullmatch(facts.LABEL_KEY_PATTERN, key) is not None
            and re.fullmatch(facts.LABEL_VALUE_PATTERN, value) is not None
            for key, value in labels.items()
        )
    )


#: Checks of what every DWS operator has (connection, project, identity to run as).
CONNECTION_CHECKS = (
    Check("gcp_conn_id", non_empty_str, "must be a non-empty connection id"),
    Check(
        "project_id",
        matches(PROJECT_PATTERN),
        "must be a Google Cloud project id (6-30 lowercase letters, digits and hyphens, starting "
        "with a letter)",
        templated=True,
        optional=True,
    ),
    Check(
        "impersonation_chain",
        _is_chain,
        "must be a service account email or a list of them",
        templated=True,
        optional=True,
    ),
)
#: Checks of what every operator that waits on a request has.
WAIT_CHECKS = (
    Check(
        "poll_interval",
        lambda v: type(v) in (int, float) and 0 < v <= POLL_INTERVAL_MAX,
        explain=_check_poll_interval,
    ),
    flag("deferrable"),
    flag("cancel_on_kill"),
    Check(
        "service_account",
        matches(SERVICE_ACCOUNT_PATTERN),
        "must be a service account email",
        templated=True,
        optional=True,
    ),
    Check(
        "labels",
        _labels_ok,
        templated=True,
        optional=True,
        explain="airflow_provider_dws.operators.labels:check_labels",
    ),
)


class DwsBaseOperator(BaseOperator):
    """Base of the DWS operators: common parameters, their checks and the request identity.

    Subclasses set their parameters as attributes, list their checks in :attr:`CHECKS` and call
    :meth:`check_parameters` (``rendered=False`` at the end of ``__init__``, ``rendered=True`` at
    the start of ``execute``).
    """

    project_id: str | None
    labels: Mapping[str, str] | None
    service_account: str | None
    impersonation_chain: Any
    gcp_conn_id: str
    poll_interval: float
    deferrable: bool
    cancel_on_kill: bool

    #: The parameter checks of the operator (see :mod:`airflow_provider_dws.operators.checks`).
    CHECKS: tuple[Check, ...] = ()

    def _param_error(self, message: str) -> ValueError:
        """A parameter error naming the operator and the task (the caller raises it)."""
        return ValueError(f"{type(self).__name__} {self.task_id!r}: {message}")

    def check_parameters(self, *, rendered: bool) -> None:
        """Run :attr:`CHECKS`: all of them at parse time, the templated ones again after rendering."""
        run_checks(self, self.CHECKS, rendered=rendered)

    def identity(self, context: Context, task_id: str | None = None) -> RequestIdentity:
        """The identity of this task instance (or of ``task_id`` in the same run and map index)."""
        from airflow_provider_dws.runtime.loop import task_identity

        return task_identity(context, task_id)

    def resolve_project(self) -> str:
        """``project_id``, or the project of the connection when it is not set."""
        if self.project_id:
            return self.project_id
        from airflow_provider_dws.hooks.base import DwsBaseHook

        project = DwsBaseHook(gcp_conn_id=self.gcp_conn_id).project_id or None
        if not project:
            raise self._param_error(
                f"project_id is not set and connection {self.gcp_conn_id!r} names no project"
            )
        self.project_id = project
        return project
