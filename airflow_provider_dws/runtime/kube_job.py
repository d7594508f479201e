"""What the adapters whose request is a ``batch/v1`` Job share: the Job a task asks for (the user's
manifest, or one built from ``image``), named and labelled from the task instance, with what
its pods must carry added once each."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from airflow_provider_dws.backends.kube_base import LABEL_MAX_WAIT
from airflow_provider_dws.scheduling.identity import RequestIdentity

#: Server-set metadata a user's manifest (copied from a live Job) may carry: never sent.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


def job_from_parameters(op: Any) -> dict[str, Any]:
    """The Job of an operator's ``image``, ``cmds``, ``arguments``, ``env_vars`` and
    ``parallelism``: one container, ``parallelism`` pods at once and as many completions, no retry
    of a failed pod (``backoffLimit: 0``: a failure is the task's, for Airflow's retries)."""
    container: dict[str, Any] = {"name": "main", "image": op.image}
    if op.cmds:
        container["command"] = list(op.cmds)
    if op.arguments:
        container["args"] = list(op.arguments)
    if op.env_vars:
        container["env"] = [{"name": k, "value": v} for k, v in op.env_vars.items()]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {},
        "spec": {
            "parallelism": op.parallelism,
            "completions": op.parallelism,
            "backoffLimit": 0,
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        },
    }


def named_job(
    op: Any, identity: RequestIdentity, max_wait: timedelta, extra_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The operator's Job (its ``job`` manifest, else :func:`job_from_parameters`) named from
    ``identity`` in the operator's namespace, with the operator's ``labels``, the identity labels
    and the max wait label; server-set metadata and any status dropped."""
    manifest = copy.deepcopy(dict(op.job)) if op.job is not None else job_from_parameters(op)
    manifest["apiVersion"], manifest["kind"] = "batch/v1", "Job"
    meta = dict(manifest.get("metadata") or {})
    for key in (*SERVER_METADATA, "generateName"):
        meta.pop(key, None)
    meta["name"] = identity.queued_resource_id()
    meta["namespace"] = op.namespace
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **(op.labels or {}),
        **identity.kube_labels(),
        **(extra_labels or {}),
        LABEL_MAX_WAIT: str(round(max_wait.total_seconds())),
    }
    manifest["metadata"] = meta
    manifest["spec"] = dict(manifest.get("spec") or {})
    manifest.pop("status", None)
    return manifest


def pod_spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The Job's pod spec, made its own dict (to add to it)."""
    spec = manifest.setdefault("spec", {})
    template = spec["template"] = dict(spec.get("template") or {})
    pod = template["spec"] = dict(template.get("spec") or {})
    return pod


def add_tolerations(pod: dict[str, Any], wanted: Iterable[Mapping[str, str]]) -> None:
    """Add each of ``wanted`` to the pod spec's tolerations, unless one of its key is there."""
    tolerations = list(pod.get("tolerations") or [])
    for toleration in wanted:
        if not any(t.get("key") == toleration["key"] for t in tolerations if isinstance(t, Mapping)):
            tolerations.append(dict(toleration))
    pod["tolerations"] = tolerations
