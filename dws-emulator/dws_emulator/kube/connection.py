"""How Kubernetes clients outside the provider reach the emulated cluster: a kubeconfig, an Airflow connection.

The provider's own operators find the emulator through ``DWS_EMULATOR_HOST``. A DAG's workload
task runs cncf-kubernetes' own operators (``KubernetesJobOperator``, ``KubernetesPodOperator``),
which know nothing of it: they take a Kubernetes connection. :func:`airflow_connection` is that
connection for an emulator at ``host:port`` (gRPC; the Kubernetes API is on the REST front at the
next port), for ``AIRFLOW_CONN_<ID>``: ``make demo``, the end-to-end tests and the fault matrix
set it. Loopback only, plain HTTP, no credentials: nothing here is ever sent to a real cluster.
"""

from __future__ import annotations

import json
from typing import Any

#: The context, cluster and user name in the kubeconfig.
CONTEXT = "dws-emulator"


def rest_url(address: str) -> str:
    """``http://HOST:PORT+1`` for the emulator's gRPC address ``HOST:PORT``."""
    host, _, port = address.strip().rpartition(":")
    return f"http://{host}:{int(port) + 1}"


def kubeconfig(address: str) -> dict[str, Any]:
    """A kubeconfig whose one context is the emulated cluster of the emulator at ``address``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": rest_url(address)}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}
        ],
        "current-context": CONTEXT,
    }


def airflow_connection(address: str) -> str:
    """The JSON of a cncf-kubernetes connection (``kube_config`` extra) to that cluster."""
    return json.dumps(
        {
            "conn_type": "kubernetes",
            "extra": {"kube_config": json.dumps(kubeconfig(address)), "in_cluster": False},
        }
    )
