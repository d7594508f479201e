"""What the emulated GKE cluster holds, read through the unmodified ``kubernetes`` client.

The end-to-end tests and the fault matrix check that a run left nothing behind: no PodTemplate,
ProvisioningRequest, Job, Workload or live pod of the provider's in the namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from airflow_provider_dws.facts import GKE_QUEUED_PROVISIONING_CLASS, QUEUED_TOLERATION
from dws_emulator.kube.connection import rest_url

#: The provider's identity label: what it made carries it.
MANAGED = "dws_managed=true"


@contextlib.contextmanager
def _api(address: str) -> Iterator[Any]:
    """A sync ``kubernetes`` ``ApiClient`` of the emulated cluster, closed after use."""
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host=rest_url(address)))
    try:
        yield api
    finally:
        api.close()


def cluster_objects(address: str, namespace: str = "default") -> dict[str, list[dict[str, Any]]]:
    """Every object of the kinds these flows make, in ``namespace`` of the emulator at ``address``
    (its gRPC ``host:port``), as the API's JSON."""
    from kubernetes import client

    with _api(address) as api:
        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)

        def items(reply: Any) -> list[dict[str, Any]]:
            return list(api.sanitize_for_serialization(reply).get("items") or [])

        return {
            "podtemplates": items(core.list_namespaced_pod_template(namespace)),
            "pods": items(core.list_namespaced_pod(namespace)),
            "jobs": items(batch.list_namespaced_job(namespace)),
            "provisioningrequests": custom.list_namespaced_custom_object(
                "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests"
            )["items"],
            "workloads": custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta1", namespace, "workloads"
            )["items"],
        }


def live_pods(objects: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The pods not yet ended (Succeeded or Failed)."""
    return [
        p["metadata"]["name"]
        for p in objects["pods"]
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def names(objects: list[dict[str, Any]]) -> list[str]:
    """The names of ``objects``."""
    return sorted(o["metadata"]["name"] for o in objects)


def unfinished_workloads(objects: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The Kueue Workloads not Finished (a finished Job keeps its Workload until it is deleted)."""
    return [
        w["metadata"]["name"]
        for w in objects["workloads"]
        if not any(
            c.get("type") == "Finished" and c.get("status") == "True"
            for c in (w.get("status") or {}).get("conditions") or []
        )
    ]


#: GPUs per node of the H100 node pools (a3-highgpu-8g).
H100_PER_NODE = 8


def hold_capacity(address: str, node_pool: str, gpus: int, name: str, namespace: str = "default") -> None:
    """Take ``gpus`` H100s of ``node_pool`` with a ProvisioningRequest of no DAG's (``name``), so
    the next request there waits (a stock-out); :func:`free_capacity` gives them back."""
    from kubernetes import client

    with _api(address) as api:
        spec = {
            "nodeSelector": {"cloud.google.com/gke-nodepool": node_pool},
            "tolerations": [dict(QUEUED_TOLERATION)],
            "containers": [
                {
                    "name": "hold",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": str(H100_PER_NODE)}},
                }
            ],
        }
        client.CoreV1Api(api).create_namespaced_pod_template(
            namespace, {"metadata": {"name": name}, "template": {"spec": spec}}
        )
        body = {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": GKE_QUEUED_PROVISIONING_CLASS,
                "podSets": [{"podTemplateRef": {"name": name}, "count": gpus // H100_PER_NODE}],
            },
        }
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests", body
        )


def free_capacity(address: str, name: str, namespace: str = "default") -> None:
    """Delete what :func:`hold_capacity` made: its nodes go back to the pool."""
    from kubernetes import client

    with _api(address) as api:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests", name
        )
        client.CoreV1Api(api).delete_namespaced_pod_template(name, namespace)


def jobs_of(address: str, labels: dict[str, str], namespace: str = "default") -> list[dict[str, Any]]:
    """The Jobs carrying every one of ``labels`` (the provider's identity labels of a task)."""
    from kubernetes import client

    with _api(address) as api:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        reply = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector)
        return list(api.sanitize_for_serialization(reply).get("items") or [])
