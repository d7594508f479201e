"""What a Flex Start Cloud Batch job may be, and why a value is refused; the job dict the task's
request is built from (:func:`as_job_dict`).

Imported at parse time only when a quick test of :mod:`airflow_provider_dws.operators.batch` cannot
accept a value (or for a
whole ``job``, which always needs a closer look); the ``Job`` message itself is built only after
rendering, in the worker.
"""

from __future__ import annotations

import builtins
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.facts import IDENTITY_LABELS, MAX_LABELS
from airflow_provider_dws.specs.labels import check_labels
from airflow_provider_dws.specs.templates import has_template

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement

#: The provisioning model the operator sets, and the spellings of "not set".
_FLEX_START = ("FLEX_START", 5)
_UNSET = (None, "", 0, "PROVISIONING_MODEL_UNSPECIFIED")
#: The fields of an ``InstancePolicyOrTemplate`` a Flex Start job may use (no instance template).
_INSTANCE_FIELDS = frozenset({"policy", "install_gpu_drivers", "install_ops_agent", "block_project_ssh_keys"})


def as_job_dict(value: Any) -> dict[str, Any]:
    """A Batch ``Job`` as a plain dict (accepting dicts and ``batch_v1.Job`` messages)."""
    if isinstance(value, Mapping):
        return dict(value)
    # Not a dict: a message the DAG file built, so the client is imported already.
    from google.cloud.batch_v1 import Job

    if isinstance(value, Job):
        return dict(Job.to_dict(value, use_integers_for_enums=False))
    raise TypeError(f"job must be a dict or a google.cloud.batch_v1.Job, got {type(value).__name__}")


def job_json(value: Any) -> dict[str, Any]:
    """A Batch ``Job`` (dict or message) as protobuf's JSON takes it: durations as ``"Ns"``, enums
    by name, and proto-plus's ``type_`` (a field named like a Python builtin) under its proto name ``type``."""
    from airflow_provider_dws.specs.vertex_pools import jsonable

    return dict(_proto_names(jsonable(as_job_dict(value))))


def _proto_names(value: Any) -> Any:
    if isinstance(value, dict):
        return {_proto_name(k): _proto_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_proto_names(v) for v in value]
    return value


def _proto_name(key: str) -> str:
    """proto-plus names a field that is a Python keyword or builtin with a trailing ``_``."""
    bare = key[:-1]
    if key.endswith("_") and (keyword.iskeyword(bare) or hasattr(builtins, bare)):
        return bare
    return key


def _int(value: Any) -> Any:
    """proto-to-dict renders int64 as a string; give it back its type."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def check_batch_labels(op: Any, labels: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """The common label rules, and room for the provider's own labels (identity and max wait)."""
    check_labels(op, labels, is_unrendered)
    room = MAX_LABELS - IDENTITY_LABELS - 1
    if isinstance(labels, Mapping) and len(labels) > room:
        raise op._param_error(
            f"labels can have at most {room} entries on a Batch job ({IDENTITY_LABELS + 1} of its "
            f"{MAX_LABELS} are the provider's: identity and max wait), got {len(labels)}"
        )


def check_gpus(op: Any) -> None:
    """``machine_type`` and the GPUs must go together (g2-standard-8: 1 x nvidia-l4)."""
    error = catalog.batch_gpu_error(op.machine_type, op.accelerator_type, op.accelerator_count)
    if error:
        raise op._param_error(error)


def _check_policy(op: Any, policy: Any, where: str, skip: Callable[[Any], bool]) -> None:
    if not isinstance(policy, Mapping):
        raise op._param_error(f"{where}.policy is required (with machine_type), got {policy!r}")
    model = policy.get("provisioning_model")
    if not skip(model) and model not in _UNSET and model not in _FLEX_START:
        raise op._param_error(
            f"{where}.policy.provisioning_model is set by the operator to FLEX_START; remove it "
            f"(or set FLEX_START), got {model!r}"
        )
    machine = policy.get("machine_type")
    if skip(machine):
        return
    if not isinstance(machine, str) or not machine:
        raise op._param_error(f"{where}.policy.machine_type is required (e.g. 'g2-standard-8')")
    accelerators = policy.get("accelerators") or []
    if has_template(accelerators):
        return
    if not isinstance(accelerators, Sequence) or len(accelerators) > 1:
        raise op._param_error(
            f"{where}.policy.accelerators must list at most one GPU type, got {accelerators!r}"
        )
    gpu: Mapping[str, Any] = accelerators[0] if accelerators else {}
    if not isinstance(gpu, Mapping):
        raise op._param_error(f"{where}.policy.accelerators[0] must be a dict, got {gpu!r}")
    accelerator = gpu.get("type_", gpu.get("type"))
    count = _int(gpu.get("count")) if gpu else None
    error = catalog.batch_gpu_error(machine, accelerator or None, count or None)
    if error:
        raise op._param_error(f"{where}.policy: {error}")


def check_job(op: Any, job: Any, skip: Callable[[Any], bool]) -> None:
    """A whole ``Job``: one task group with runnables; one instance policy (no template, no other
    provisioning model) on a machine with its GPUs; no task ``max_run_duration`` if ``max_run``.

    One of each because the API takes no more (``batch_v1.Job``: "Only one TaskGroup is supported
    now"; ``AllocationPolicy.instances``: "Only instances[0] is supported now", and FLEX_START
    cannot be combined with instance flexibility): a second one would pass here and be refused
    by CreateJob when the task runs.
    """
    if skip(job):
        return
    try:
        data = as_job_dict(job)
    except TypeError as err:
        raise op._param_error(str(err)) from None
    groups = data.get("task_groups")
    if not skip(groups):
        if not isinstance(groups, Sequence) or isinstance(groups, str) or len(groups) != 1:
            raise op._param_error(
                "job.task_groups must hold exactly one task group (with task_spec.runnables; Cloud "
                f"Batch supports one), got {len(groups) if isinstance(groups, Sequence) else groups!r}"
            )
        for index, group in enumerate(groups):
            spec = group.get("task_spec") if isinstance(group, Mapping) else None
            if not skip(spec) and not (isinstance(spec, Mapping) and spec.get("runnables")):
                raise op._param_error(f"job.task_groups[{index}].task_spec.runnables is required")
            run = spec.get("max_run_duration") if isinstance(spec, Mapping) else None
            if op.max_run is not None and run not in (None, "", "0s"):
                raise op._param_error(
                    f"job.task_groups[{index}].task_spec.max_run_duration ({run!r}) and max_run are both "
                    "set; keep one"
                )
    policy = data.get("allocation_policy")
    instances = policy.get("instances") if isinstance(policy, Mapping) else None
    if skip(instances):
        return
    if not isinstance(instances, Sequence) or isinstance(instances, str) or not instances:
        raise op._param_error(
            "job.allocation_policy.instances must hold an instance policy with the machine_type (and "
            "GPUs) the job runs on; the operator sets its provisioning model to FLEX_START"
        )
    if len(instances) > 1:
        raise op._param_error(
            f"job.allocation_policy.instances must hold one instance policy, got {len(instances)}: "
            "Cloud Batch uses only instances[0], and FLEX_START cannot be combined with instance "
            "flexibility (a list of VM choices)"
        )
    for index, instance in enumerate(instances):
        where = f"job.allocation_policy.instances[{index}]"
        if not isinstance(instance, Mapping):
            raise op._param_error(f"{where} must be a dict, got {instance!r}")
        if instance.get("instance_template"):
            raise op._param_error(
                f"{where}.instance_template cannot be used: the operator must set the FLEX_START "
                "provisioning model on an instance policy; describe the VM in policy instead"
            )
        unknown = sorted(set(instance) - _INSTANCE_FIELDS - {"instance_template"})
        if unknown:
            raise op._param_error(
                f"{where} has field(s) {unknown} a Flex Start job cannot use; allowed: {sorted(_INSTANCE_FIELDS)}"
            )
        _check_policy(op, instance.get("policy"), where, skip)
    if op._rendered and not has_template(data):
        from google.cloud.batch_v1 import Job

        try:
            Job(data)
        except (TypeError, ValueError, KeyError) as err:
            raise op._param_error(f"job is not a valid google.cloud.batch_v1.Job: {err}") from None


def check_batch_placement(op: Any, placement: Placement) -> None:
    """A region, no tier, and a machine type whose GPUs Flex Start offers to Cloud Batch."""
    if not catalog.REGION_RE.fullmatch(placement.location):
        raise op._param_error(
            f"failover location {placement.location!r} is not a Cloud Batch region such as 'us-east4'"
        )
    if placement.tier is not None:
        raise op._param_error(f"failover placement {placement}: Flex Start Batch jobs have no tier")
    if placement.accelerator_type and not placement.machine_type:
        raise op._param_error(
            f"failover placement {placement}: an accelerator_type needs its machine_type too (e.g. "
            "'g2-standard-8' for 'nvidia-l4')"
        )
    if placement.machine_type:
        accelerator = placement.accelerator_type
        if accelerator is None and catalog.batch_machine_gpus(placement.machine_type) is None:
            accelerator = getattr(op, "accelerator_type", None)  # an n1 machine keeps the job's GPU
        error = catalog.batch_gpu_error(placement.machine_type, accelerator, None)
        if error:
            raise op._param_error(f"failover placement {placement}: {error}")
