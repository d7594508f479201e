"""Admission of client writes: validation and defaulting, worded as the API server words it.

What is checked (422 Invalid through :func:`~.store.invalid`, with the field paths a real server
gives): ProvisioningRequest create (the CRD's schema: ``provisioningClassName``, ``podSets``
1..32 of ``{podTemplateRef: {name}, count >= 1}``, ``parameters`` a string map; and GKE's
``maxRunDurationSeconds``, an integer string of at most 604800 seconds); Pods and PodTemplates
(containers required, DNS-1123 names, the ``DWS_EMULATOR_*`` workload variables); Jobs
(the pod template as above, ``restartPolicy`` Never or OnFailure, and Kubernetes' defaults).

Limits: only what these flows touch is validated; a provisioning class other than the two below
is refused here, where the real CRD would store it and leave it to a controller that ignores it.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import EmulatorError
from ..core.workload import EXIT_CODE_ENV, RUN_SECONDS_ENV, parse_workload
from .store import KINDS, Kind, invalid

QUEUED_CLASS = "queued-provisioning.gke.io"
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
PROVISIONING_CLASSES = (QUEUED_CLASS, ATOMIC_CLASS)
MAX_POD_SETS = 32
MAX_RUN_SECONDS = 604800  # GKE: at most 7 days
MAX_RUN_PARAMETER = "maxRunDurationSeconds"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)

Causes = list[tuple[str, str]]


def _quote(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def check_subdomain(value: Any, field: str, causes: Causes) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _SUBDOMAIN.match(value):
        causes.append((field, f"Invalid value: {_quote(value)}: {_SUBDOMAIN_MSG}"))


def admit(
    operation: str, kind: Kind, namespace: str, obj: dict[str, Any], old: dict[str, Any] | None
) -> None:
    """The cluster's admission step for every client write (see :data:`~.cluster.Admit`)."""
    check = _CHECKS.get(kind.key)
    if check is None:
        return
    if operation == "UPDATE" and (
        not isinstance(obj.get("spec"), dict) or obj["spec"] == (old or {}).get("spec")
    ):
        if kind.key != "podtemplates":
            return  # a status write, or the spec untouched: nothing of the client's to check
    check(operation, kind, obj)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


def _metadata_name(obj: dict[str, Any], causes: Causes) -> None:
    meta = obj.get("metadata") or {}
    if meta.get("name"):
        check_subdomain(meta["name"], "metadata.name", causes)


# -- ProvisioningRequest ------------------------------------------------------------------------


def _provisioning_request(operation: str, kind: Kind, obj: dict[str, Any]) -> None:
    if operation != "CREATE":
        return  # the spec is immutable: the store refuses a change
    causes: Causes = []
    _metadata_name(obj, causes)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise invalid(kind, _name(obj), [("spec", "Required value")])
    cls = spec.get("provisioningClassName")
    if not cls:
        causes.append(("spec.provisioningClassName", "Required value"))
    elif cls not in PROVISIONING_CLASSES:
        supported = ", ".join(f'"{c}"' for c in PROVISIONING_CLASSES)
        causes.append(
            ("spec.provisioningClassName", f"Unsupported value: {_quote(cls)}: supported values: {supported}")
        )
    pod_sets = spec.get("podSets")
    if pod_sets is None:
        causes.append(("spec.podSets", "Required value"))
    elif not isinstance(pod_sets, list):
        causes.append(
            (
                "spec.podSets",
                f'Invalid value: "{type(pod_sets).__name__}": spec.podSets in body must be of type array',
            )
        )
    elif not pod_sets:
        causes.append(("spec.podSets", "Invalid value: 0: spec.podSets in body should have at least 1 items"))
    elif len(pod_sets) > MAX_POD_SETS:
        causes.append(("spec.podSets", f"Too many: {len(pod_sets)}: must have at most {MAX_POD_SETS} items"))
    else:
        for i, pod_set in enumerate(pod_sets):
            _pod_set(i, pod_set, causes)
    _parameters(spec.get("parameters"), causes)
    if causes:
        raise invalid(kind, _name(obj), causes)


def _pod_set(i: int, pod_set: Any, causes: Causes) -> None:
    field = f"spec.podSets[{i}]"
    if not isinstance(pod_set, dict):
        causes.append((field, f"Invalid value: {_quote(pod_set)}: {field} in body must be of type object"))
        return
    ref = pod_set.get("podTemplateRef")
    if not isinstance(ref, dict):
        causes.append((f"{field}.podTemplateRef", "Required value"))
    elif not ref.get("name"):
        causes.append((f"{field}.podTemplateRef.name", "Required value"))
    else:
        name = ref["name"]
        if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
            pattern = _SUBDOMAIN.pattern
            causes.append(
                (
                    f"{field}.podTemplateRef.name",
                    f"Invalid value: {_quote(name)}: {field}.podTemplateRef.name in body should match '{pattern}'",
                )
            )
    count = pod_set.get("count")
    if count is None:
        causes.append((f"{field}.count", "Required value"))
    elif not isinstance(count, int) or isinstance(count, bool):
        causes.append(
            (
                f"{field}.count",
                f"Invalid value: {_quote(count)}: {field}.count in body must be of type integer",
            )
        )
    elif count < 1:
        causes.append(
            (
                f"{field}.count",
                f"Invalid value: {count}: {field}.count in body should be greater than or equal to 1",
            )
        )


def _parameters(parameters: Any, causes: Causes) -> None:
    if parameters is None:
        return
    if not isinstance(parameters, dict):
        causes.append(
            ("spec.parameters", 'Invalid value: "array": spec.parameters in body must be of type object')
        )
        return
    for key, value in parameters.items():
        field = f"spec.parameters.{key}"
        if not isinstance(value, str):
            causes.append((field, f"Invalid value: {_quote(value)}: {field} in body must be of type string"))
        elif len(value) > 255:
            causes.append((field, "Too long: may not be longer than 255"))
    value = parameters.get(MAX_RUN_PARAMETER)
    if isinstance(value, str):
        if not value.isdigit():
            causes.append(
                (
                    f"spec.parameters.{MAX_RUN_PARAMETER}",
                    f"Invalid value: {_quote(value)}: must be an integer number of seconds",
                )
            )
        elif int(value) > MAX_RUN_SECONDS:
            causes.append(
                (
                    f"spec.parameters.{MAX_RUN_PARAMETER}",
                    f"Invalid value: {_quote(value)}: must be at most {MAX_RUN_SECONDS} (7 days)",
                )
            )


def max_run_seconds(spec: dict[str, Any]) -> int | None:
    """The request's ``maxRunDurationSeconds`` (admission checked it), or None (no limit)."""
    value = (spec.get("parameters") or {}).get(MAX_RUN_PARAMETER)
    return int(value) if isinstance(value, str) and value.isdigit() and int(value) > 0 else None


# -- pods, pod templates, jobs ------------------------------------------------------------------


def _env(container: dict[str, Any], name: str) -> str | None:
    for var in container.get("env") or []:
        if isinstance(var, dict) and var.get("name") == name and "value" in var:
            return str(var["value"])
    return None


def workload(spec: dict[str, Any]) -> tuple[float, int]:
    """``(run_seconds, exit_code)`` from the pod spec's first container (admission checked it)."""
    containers = spec.get("containers") or [{}]
    return parse_workload(
        _env(containers[0], RUN_SECONDS_ENV), _env(containers[0], EXIT_CODE_ENV), "", _WorkloadError
    )


class _WorkloadError(EmulatorError):
    def __init__(self, field: str, message: str) -> None:
        import grpc

        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message)
        self.field = field


def check_pod_spec(spec: Any, path: str, causes: Causes) -> None:
    """Containers required, DNS-1123 label names, the workload variables parse."""
    if not isinstance(spec, dict):
        causes.append((path, "Required value"))
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append((f"{path}.containers", "Required value"))
        return
    seen: set[str] = set()
    for i, container in enumerate(containers):
        field = f"{path}.containers[{i}]"
        if not isinstance(container, dict):
            causes.append((field, "Invalid value: must be an object"))
            continue
        name = container.get("name")
        if not name:
            causes.append((f"{field}.name", "Required value"))
        elif not isinstance(name, str) or len(name) > 63 or not _LABEL.match(name):
            causes.append((f"{field}.name", f"Invalid value: {_quote(name)}: {_LABEL_MSG}"))
        elif name in seen:
            causes.append((f"{field}.name", f"Duplicate value: {_quote(name)}"))
        else:
            seen.add(name)
        if not container.get("image"):
            causes.append((f"{field}.image", "Required value"))
    first = containers[0] if isinstance(containers[0], dict) else {}
    try:
        parse_workload(_env(first, RUN_SECONDS_ENV), _env(first, EXIT_CODE_ENV), "", _WorkloadError)
    except _WorkloadError as exc:
        causes.append((f"{path}.containers[0].env", f"Invalid value: {exc.message}"))


def _pod(operation: str, kind: Kind, obj: dict[str, Any]) -> None:
    if operation != "CREATE":
        return
    causes: Causes = []
    _metadata_name(obj, causes)
    spec = obj.get("spec")
    check_pod_spec(spec, "spec", causes)
    if causes or not isinstance(spec, dict):
        raise invalid(kind, _name(obj), causes)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")


def _pod_template(operation: str, kind: Kind, obj: dict[str, Any]) -> None:
    causes: Causes = []
    _metadata_name(obj, causes)
    template = obj.get("template")
    if not isinstance(template, dict):
        causes.append(("template.spec.containers", "Required value"))
    else:
        check_pod_spec(template.get("spec"), "template.spec", causes)
    if causes:
        raise invalid(kind, _name(obj), causes)


def _job(operation: str, kind: Kind, obj: dict[str, Any]) -> None:
    causes: Causes = []
    _metadata_name(obj, causes)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise invalid(kind, _name(obj), [("spec.template", "Required value")])
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(("spec.template.spec.containers", "Required value"))
    else:
        pod_spec = template.get("spec")
        check_pod_spec(pod_spec, "spec.template.spec", causes)
        policy = pod_spec.get("restartPolicy") if isinstance(pod_spec, dict) else None
        if isinstance(pod_spec, dict) and policy not in ("Never", "OnFailure"):
            causes.append(
                (
                    "spec.template.spec.restartPolicy",
                    f'Unsupported value: {_quote(policy or "Always")}: supported values: "OnFailure", "Never"',
                )
            )
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            causes.append(
                (f"spec.{field}", f"Invalid value: {_quote(value)}: must be greater than or equal to 0")
            )
    if causes:
        raise invalid(kind, _name(obj), causes)
    if operation == "CREATE":
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("manualSelector", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    elif spec.get("suspend") is None:
        spec["suspend"] = False


def job_labels(name: str, uid: str) -> dict[str, str]:
    """The labels the API server puts on a Job's pod template (and its pods)."""
    return {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }


def default_job_at_create(kind: Kind, obj: dict[str, Any]) -> None:
    """Defaults that need the server-set uid: the selector and the template's labels (a store hook)."""
    if kind.key != KINDS["jobs.batch"].key:
        return
    meta = obj["metadata"]
    spec = obj.setdefault("spec", {})
    labels = job_labels(meta["name"], meta["uid"])
    template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}
    if not meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])


_CHECKS = {
    "provisioningrequests.autoscaling.x-k8s.io": _provisioning_request,
    "pods": _pod,
    "podtemplates": _pod_template,
    "jobs.batch": _job,
}
