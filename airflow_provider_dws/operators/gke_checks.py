"""The parse-time checks of :mod:`.gke`: its ``CHECKS`` table (what a pod template asks for is read
in :mod:`airflow_provider_dws.specs.pod_template`, loaded only when a quick rule refuses)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS
from airflow_provider_dws.operators.checks import Check, flag, int_in, matches, non_empty_str
from airflow_provider_dws.specs.pod_template import pod_template_ok

#: Pods one request may ask for (the API sets no bound of its own; a large number is a typo).
MAX_COUNT = 10000
#: Parameters the operator sets from its own arguments (not through ``parameters``).
OWN_PARAMETERS = frozenset({"maxRunDurationSeconds"})


def check_parameters(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """The ``explain`` of ``parameters``: a dict of strings, none the operator sets itself."""
    if is_unrendered(value):
        return
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise op._param_error(f"parameters must be a dict of strings (the API's string map), got {value!r}")
    own = sorted(OWN_PARAMETERS & set(value))
    if own:
        raise op._param_error(f"parameters must not set {own}: use max_run, which the operator turns into it")


def _location(value: Any) -> bool:
    return isinstance(value, str) and (
        re.fullmatch(facts.REGION_PATTERN, value) is not None
        or re.fullmatch(facts.ZONE_PATTERN, value) is not None
    )


def _parameters_ok(value: Any) -> bool:
    return (
        type(value) is dict
        and all(type(k) is str and type(v) is str for k, v in value.items())
        and not OWN_PARAMETERS & set(value)
    )


CHECKS: tuple[Check, ...] = (
    *CONNECTION_CHECKS,
    *WAIT_CHECKS,
    Check(
        "location", _location, "must be the cluster's region or zone such as 'us-central1'", templated=True
    ),
    Check(
        "cluster_name",
        matches(facts.GKE_CLUSTER_NAME_PATTERN),
        "must be a GKE cluster name (a lowercase letter, then lowercase letters, digits and '-', at most "
        "40 characters)",
        templated=True,
        optional=True,
    ),
    Check("kubernetes_conn_id", non_empty_str, "must be a connection id", optional=True),
    Check(
        "namespace",
        matches(facts.KUBE_NAMESPACE_PATTERN),
        "must be a Kubernetes namespace (lowercase letters, digits and '-', alphanumeric at both ends, at "
        "most 63 characters)",
        templated=True,
    ),
    Check("count", int_in(1, MAX_COUNT), f"must be an integer from 1 to {MAX_COUNT} (the pods to provision)"),
    Check(
        "provisioning_class",
        lambda v: (
            isinstance(v, str)
            and len(v) <= facts.KUBE_NAME_MAX
            and re.fullmatch(facts.KUBE_NAME_PATTERN, v) is not None
        ),
        f"must be a provisioning class name such as {facts.GKE_QUEUED_PROVISIONING_CLASS!r}",
    ),
    Check("parameters", _parameters_ok, templated=True, optional=True, explain=check_parameters),
    Check("pod_template", pod_template_ok, templated=True, explain=registry.CHECK_POD_TEMPLATE),
    flag("use_internal_ip"),
)
