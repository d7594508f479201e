"""The Kubernetes API of a GKE cluster with queued provisioning, on the emulator's REST front.

Served at the root of the REST front (``/api/v1``, ``/apis/GROUP/VERSION``), for the unmodified
``kubernetes`` client, its bundled ``kubernetes.aio`` and ``kubernetes_asyncio``.
"""

from .store import KINDS

#: The REST service every Kubernetes route is counted and faulted under (``kubernetes/pods.list``).
KUBE_SERVICE = "kubernetes"

#: The verbs of every kind (``list`` also serves watches and cluster-wide lists).
OBJECT_VERBS = ("create", "list", "get", "replace", "patch", "delete")
#: The verbs of a ``/status`` subresource.
STATUS_VERBS = ("status.get", "status.replace", "status.patch")
#: Discovery: ``/version``, ``/api``, ``/apis`` and the resource lists of each group version.
DISCOVERY_METHODS = ("discovery.version", "discovery.api", "discovery.apis", "discovery.resources")


def _methods() -> tuple[str, ...]:
    names: list[str] = []
    for kind in KINDS.values():
        names += [f"{kind.plural}.{verb}" for verb in OBJECT_VERBS]
        if kind.status_subresource:
            names += [f"{kind.plural}.{verb}" for verb in STATUS_VERBS]
        if kind.key == "pods":
            names.append("pods.log")
    return (*names, *DISCOVERY_METHODS)


#: Method names, ``<plural>.<verb>`` (plurals are unique among the kinds served): the routes'
#: names, which fault rules target and call counters count.
KUBE_METHODS: tuple[str, ...] = _methods()
