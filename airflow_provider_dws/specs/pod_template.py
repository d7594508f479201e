"""What a GKE pod template asks for, read by the parse-time checks and by the request the task builds.

Pure dict walking over the pod template the DAG gives (no ``kubernetes`` import): the containers
it must have, the GPUs each pod asks for (``nvidia.com/gpu``), and the GKE accelerator its node
selector names, which must be able to give them (:func:`airflow_provider_dws.catalog.gke_gpu_error`,
loaded only for a template that asks for GPUs or names an accelerator).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dws import facts
from airflow_provider_dws.specs.templates import has_template


def pod_spec_of(template: Any) -> Mapping[str, Any] | None:
    """The pod spec of a pod template spec (``{"metadata": ..., "spec": {...}}``) or of a bare pod
    spec (``{"containers": [...]}``); ``None`` when it is neither."""
    if not isinstance(template, Mapping):
        return None
    if "containers" in template:
        return template
    spec = template.get("spec")
    return spec if isinstance(spec, Mapping) else None


def _quantity(value: Any) -> int | None:
    """A GPU count: an int or a string of digits (extended resources are whole numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def container_gpus(container: Mapping[str, Any]) -> int | None:
    """``nvidia.com/gpu`` of one container (its limit, else its request; 0 when none; ``None``
    when not a whole number)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return None
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if isinstance(values, Mapping) and facts.GPU_RESOURCE in values:
            return _quantity(values[facts.GPU_RESOURCE])
    return 0


def pod_gpus(spec: Mapping[str, Any]) -> int | None:
    """The GPUs one pod of ``spec`` needs: its containers' sum, or its largest init container
    (they run one at a time, before the others); ``None`` when a count is not a whole number."""
    total = 0
    for container in spec.get("containers") or ():
        gpus = container_gpus(container) if isinstance(container, Mapping) else None
        if gpus is None:
            return None
        total += gpus
    for container in spec.get("initContainers") or ():
        gpus = container_gpus(container) if isinstance(container, Mapping) else None
        if gpus is None:
            return None
        total = max(total, gpus)
    return total


def accelerator_of(spec: Mapping[str, Any]) -> str | None:
    """The ``cloud.google.com/gke-accelerator`` the pod spec's node selector names, if any."""
    return _selected(spec, facts.GKE_ACCELERATOR_LABEL)


def _selected(spec: Mapping[str, Any], label: str) -> str | None:
    """The value the pod spec's node selector gives ``label``, if any."""
    selector = spec.get("nodeSelector") or {}
    value = selector.get(label) if isinstance(selector, Mapping) else None
    return str(value) if value is not None else None


def _affinity_names_accelerator(spec: Mapping[str, Any]) -> bool:
    # A node affinity may choose the accelerator instead of the selector: then it is the
    # scheduler's to judge, not ours (the expression may allow several).
    return facts.GKE_ACCELERATOR_LABEL in repr(spec.get("affinity") or "")


def pod_template_error(template: Any, is_unrendered: Callable[[Any], bool] = lambda _: False) -> str | None:
    """What is wrong with a pod template for a ProvisioningRequest (``None``: nothing we can see)."""
    if is_unrendered(template):
        return None
    spec = pod_spec_of(template)
    if spec is None:
        return (
            "must be a pod template spec ({'metadata': {...}, 'spec': {'containers': [...]}}) or a pod "
            f"spec ({{'containers': [...]}}), got {type(template).__name__}"
        )
    containers = spec.get("containers")
    if not isinstance(containers, (list, tuple)) or not containers:
        return "has no containers: its pod spec needs at least one container"
    for container in containers:
        if not isinstance(container, Mapping) or not container.get("name") or not container.get("image"):
            if is_unrendered(container):
                continue
            return f"container {container!r} needs a name and an image"
    gpus = pod_gpus(spec)
    if gpus is None:
        return f"{facts.GPU_RESOURCE} must be a whole number of GPUs in every container"
    accelerator = accelerator_of(spec)
    if accelerator is None and _affinity_names_accelerator(spec):
        return None
    if accelerator is not None and is_unrendered(accelerator):
        return None
    if gpus == 0 and accelerator is None:
        return None  # a CPU pod set (queued provisioning of CPU node pools): nothing to compare
    from airflow_provider_dws import catalog

    machine = _selected(spec, facts.INSTANCE_TYPE_LABEL)
    if machine is not None and not is_unrendered(machine):
        error = catalog.gke_node_error(machine, accelerator, gpus)
        if error:
            return error
    return catalog.gke_gpu_error(accelerator, gpus)


def pod_template_ok(template: Any) -> bool:
    """The quick test of ``pod_template``: true only for a plain template whose every container has a
    name and an image and whose pods ask for 1 to the most GPUs of the accelerator its node selector
    names (``facts.GKE_ACCELERATOR_MAX_GPUS``), or for none and name none; anything else (templates,
    an instance-type selector, an affinity) goes to :func:`check_pod_template`, which loads the
    catalog only for what it must compare."""
    spec = pod_spec_of(template)
    if spec is None or has_template(template):
        return False
    selector = spec.get("nodeSelector") or {}
    if type(selector) is not dict or facts.INSTANCE_TYPE_LABEL in selector:
        return False
    containers = spec.get("containers")
    if type(containers) is not list or not containers:
        return False
    for container in containers:
        if type(container) is not dict or not container.get("name") or not container.get("image"):
            return False
    gpus = pod_gpus(spec)
    accelerator = accelerator_of(spec)
    if gpus is None or (accelerator is None and _affinity_names_accelerator(spec)):
        return False
    if accelerator is None:
        return gpus == 0
    return 0 < gpus <= facts.GKE_ACCELERATOR_MAX_GPUS.get(accelerator, 0)


def check_pod_template(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """The ``explain`` of ``pod_template``: raise with what is wrong."""
    error = pod_template_error(value, is_unrendered)
    if error:
        raise op._param_error(f"pod_template {error}")
