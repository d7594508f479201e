"""What a Kueue Job manifest may be, and why a value is refused: what the Kueue Job operator's quick
checks refuse, explained; loaded only on a refusal (or to check a rendered value), never by a DAG
file whose parameters are right."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dws import facts


def gpu_error(accelerator: Any, gpus: Any) -> str | None:
    """What is wrong with asking for ``gpus`` GPUs per pod on ``accelerator`` (``None``: nothing)."""
    from airflow_provider_dws import catalog

    known = catalog.gke_accelerators()
    if accelerator is not None and accelerator not in facts.GKE_ACCELERATOR_MAX_GPUS:
        return f"accelerator must be a GKE GPU name, one of {known}, got {accelerator!r}"
    if gpus is not None and (type(gpus) is not int or gpus < 0):
        return f"gpus must be a whole number of GPUs per pod, got {gpus!r}"
    if accelerator is None:
        if gpus:
            return f"gpus={gpus} needs an accelerator: the node pool's GPU, one of {known}"
        return None
    if not gpus:
        most = facts.GKE_ACCELERATOR_MAX_GPUS[accelerator]
        return f"accelerator={accelerator!r} needs gpus: how many GPUs each pod uses (1 to {most})"
    return catalog.gke_gpu_error(accelerator, gpus)


def check_job(op: Any, job: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """A ``batch/v1`` Job manifest whose pods the operator can queue: say what is wrong with it."""
    from airflow_provider_dws.specs.pod_template import pod_template_error

    if is_unrendered(job):
        return
    if not isinstance(job, Mapping):
        raise op._param_error(f"job must be a batch/v1 Job manifest (a dict), got {type(job).__name__}")
    if job.get("apiVersion", "batch/v1") != "batch/v1" or job.get("kind", "Job") != "Job":
        raise op._param_error(
            f"job must be a batch/v1 Job, got apiVersion={job.get('apiVersion')!r} kind={job.get('kind')!r}"
        )
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(template, Mapping) or "spec" not in template:
        raise op._param_error("job must have spec.template.spec (the pod template of its pods)")
    meta = job.get("metadata") or {}
    if isinstance(meta, Mapping) and meta.get("namespace") not in (None, op.namespace):
        raise op._param_error(
            f"job's metadata.namespace {meta['namespace']!r} differs from namespace={op.namespace!r}: "
            "pass the namespace as the operator's parameter"
        )
    pods = spec.get("parallelism", 1)
    if not is_unrendered(pods) and (type(pods) is not int or pods < 1):
        raise op._param_error(f"job's spec.parallelism must be a whole number >= 1, got {pods!r}")
    error = pod_template_error(template, is_unrendered)
    if error:
        raise op._param_error(f"job's spec.template {error}")


def check_env_vars(op: Any, env: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """Environment variables: a dict of names to strings."""
    if is_unrendered(env):
        return
    if not isinstance(env, Mapping):
        raise op._param_error(f"env_vars must be a dict of names to strings, got {env!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not re.fullmatch(facts.KUBE_ENV_NAME_PATTERN, key):
            raise op._param_error(f"env_vars: {key!r} is not a valid environment variable name")
        if not isinstance(value, str) and not is_unrendered(value):
            raise op._param_error(f"env_vars: the value of {key!r} must be a string, got {value!r}")
