"""The parse-time checks every operator that runs a ``batch/v1`` Job on a GKE cluster shares (the
Kueue Job and the flex-start Job): where the cluster is, and the Job (a manifest, or an image with
its command, arguments, environment and pod count)."""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.operators.checks import Check, flag, int_in, matches, non_empty_str

#: Most pods one Job may run at once here.
MAX_PARALLELISM = 1000
#: A GKE location: a region (regional cluster) or a zone (zonal cluster).
LOCATION_PATTERN = rf"{facts.REGION_PATTERN}(?:-[a-z])?"
#: The templated fields of a Job operator (the Kueue one adds its queue).
JOB_TEMPLATE_FIELDS = (
    "project_id",
    "location",
    "cluster_name",
    "namespace",
    "job",
    "image",
    "cmds",
    "arguments",
    "env_vars",
    "labels",
    "impersonation_chain",
)
#: How the UI renders the structured ones.
JOB_TEMPLATE_RENDERERS = {"job": "json", "env_vars": "json", "labels": "json"}
#: The parameters that describe the Job built from ``image`` (refused beside a ``job`` manifest).
IMAGE_PARAMETERS = ("cmds", "arguments", "env_vars")


def gpus_fit(accelerator: Any, gpus: Any) -> bool:
    """Quick: one node of ``accelerator`` can give a pod ``gpus`` GPUs, and a GPU count comes with an
    accelerator and an accelerator with GPUs (both ``None``: no GPU). Else
    :func:`airflow_provider_dws.specs.kueue_job.gpu_error` says what is wrong."""
    if accelerator is None and gpus is None:
        return True
    most = facts.GKE_ACCELERATOR_MAX_GPUS.get(accelerator) if isinstance(accelerator, str) else None
    return type(gpus) is int and most is not None and 0 < gpus <= most


def _str_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value)


def _env_ok(value: Any) -> bool:
    return type(value) is dict and all(
        type(k) is str and re.fullmatch(facts.KUBE_ENV_NAME_PATTERN, k) is not None and type(v) is str
        for k, v in value.items()
    )


#: The rows of the cluster and the Job (each operator adds its own).
JOB_CHECKS: tuple[Check, ...] = (
    Check(
        "location",
        matches(LOCATION_PATTERN),
        "must be a GKE cluster's region or zone, such as 'us-central1' or 'us-central1-a'",
        templated=True,
    ),
    Check(
        "cluster_name",
        matches(facts.GKE_CLUSTER_NAME_PATTERN),
        "must be a GKE cluster name (a lowercase letter first, then lowercase letters, digits and "
        "'-', at most 40 characters)",
        templated=True,
        optional=True,
    ),
    Check(
        "namespace",
        matches(facts.KUBE_NAMESPACE_PATTERN),
        "must be a Kubernetes namespace (lowercase letters, digits and '-', at most 63 characters)",
        templated=True,
    ),
    Check("kubernetes_conn_id", non_empty_str, "must be a non-empty connection id", optional=True),
    flag("use_internal_ip"),
    Check("job", templated=True, optional=True, explain=registry.CHECK_KUEUE_JOB),
    Check("image", non_empty_str, "must be a container image", templated=True, optional=True),
    Check("cmds", _str_list, "must be a list of strings", templated=True, optional=True),
    Check("arguments", _str_list, "must be a list of strings", templated=True, optional=True),
    Check("env_vars", _env_ok, templated=True, optional=True, explain=registry.CHECK_KUEUE_ENV_VARS),
    Check("parallelism", int_in(1, MAX_PARALLELISM), f"must be a whole number from 1 to {MAX_PARALLELISM}"),
)


def job_or_image_error(op: Any, described_by_image: tuple[str, ...]) -> str | None:
    """What is wrong with how the operator's Job is given: exactly one of ``job`` and ``image``;
    with ``job``, none of the parameters that describe the Job built from ``image``."""
    if (op.job is None) == (op.image is None):
        return "pass exactly one of job (a batch/v1 Job manifest) and image"
    if op.job is not None:
        given = [n for n in (*IMAGE_PARAMETERS, *described_by_image) if getattr(op, n)]
        if given or op.parallelism != 1:
            return (
                f"{', '.join(given or ['parallelism'])} describe the Job built from image: with job, "
                "put them in the manifest"
            )
    if op.cluster_name is None and op.kubernetes_conn_id is None:
        return "pass cluster_name (the GKE cluster), or a kubernetes_conn_id"
    return None
