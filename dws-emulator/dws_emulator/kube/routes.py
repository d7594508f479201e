"""The Kubernetes API's REST routes: every kind of :data:`~.store.KINDS`, generically from the table.

Scope (what the unmodified ``kubernetes``, ``kubernetes.aio`` and ``kubernetes_asyncio`` clients
need for queued provisioning and Kueue):

* Paths: ``/api/v1/[namespaces/NS/]PLURAL[/NAME[/status|/log]]`` and
  ``/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]`` for every served version (a
  ProvisioningRequest under ``v1`` and ``v1beta1``: one object, answered in the version asked),
  cluster-wide lists of namespaced kinds, and minimal discovery (``/version``, ``/api``,
  ``/apis``, each group version's resource list).
* Verbs: create (201; ``generateName``; 409 AlreadyExists), get, list (selectors, paging, list
  ``resourceVersion``; items of built-in kinds carry no ``apiVersion``/``kind``, of custom
  resources they do, as the API server sends them), watch (``watch=true|True|1``), replace
  (PUT; a custom resource needs ``metadata.resourceVersion``; 409 Conflict on a stale one),
  patch (merge, JSON, strategic for built-in kinds: :mod:`.wire`), delete (a custom resource,
  Pod or PodTemplate answers the object, a Namespace, Job or Event a ``Status`` of Success, as the
  clients' declared types expect; propagation per :mod:`.wire`), the ``/status`` subresource
  (object writes keep ``status``, status writes keep the rest) and the pod log (text/plain,
  ``follow``, ``tailLines``, ``container``).
* Every client write (create, replace, patch, status writes too) goes through
  ``api.cluster.admit`` before it is stored; every handler takes the core's lock and ticks first.
* Errors are ``kind: Status`` bodies, injected faults too (503 ServiceUnavailable, 429
  TooManyRequests with ``Retry-After``, 500 InternalError, 504 Timeout), unknown paths 404 and
  wrong methods 405.

What the clients send and need (kubernetes 36.0.3, kubernetes_asyncio 36.1.0):

* A dict patch of a built-in kind travels as a strategic merge patch from all three clients. Of
  a custom resource: the sync client sends a merge patch (a list too: pass ``_content_type``
  for a JSON patch); ``kubernetes_asyncio`` and ``kubernetes.aio`` send a JSON patch (a dict is
  then refused, 400: pass ``_content_type="application/merge-patch+json"``).
* ``read_namespaced_pod_log`` of the sync client returns the repr of the bytes (``"b'...'"``)
  whatever the content type: it skips decoding for a ``str`` response and parses JSON only. Use
  ``_preload_content=False`` and ``.data.decode()``, or ``watch.Watch().stream`` to follow. The
  async clients decode text/plain to ``str`` (a log that is valid JSON comes back parsed).
* urllib3 under the sync client retries a 429 on its own (it carries ``Retry-After``; up to 3
  times); aiohttp does not.

Limits: no authentication, admission webhooks, finalizers or graceful deletion (objects go at
once), field managers or server-side apply (415), ``dryRun``, protobuf/CBOR/YAML, ``deletecollection``,
the ``/api/v1/watch/...`` legacy paths, or BOOKMARK events (``allowWatchBookmarks`` is ignored).
Namespaces need not exist for objects to be created in them. A list reads the current state
(``resourceVersion`` and ``resourceVersionMatch`` on a list are ignored; a ``continue`` token
resumes after the last name served, not from a snapshot). Each open watch or followed log holds
one of the REST front's worker threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import EmulatorError
from ..core.rest import HTTP_OF_GRPC, RestCall, RestError, RestReply, RestRoute
from . import kueue_versions, wire
from .store import KINDS, Kind, KubeError, invalid
from .watch import KubeApi, log_stream, tail, watch_stream

#: HTTP status -> the Status ``reason`` the API server gives it.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
#: Seconds a 429 asks the client to wait (``Retry-After`` and ``details.retryAfterSeconds``).
RETRY_AFTER = 1
#: Kinds whose delete answers a ``Status`` (the clients declare ``V1Status``); others the object.
DELETE_ANSWERS_STATUS = frozenset({"namespaces", "jobs.batch", "events"})
#: Go's ``strconv.ParseBool`` true spellings (``watch=True`` from Python clients).
TRUE = frozenset({"1", "t", "T", "true", "True", "TRUE"})
VERSION_INFO = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-gke.dws-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def kube_errors(exc: EmulatorError) -> tuple[int, Any, dict[str, str]]:
    """Every error as the API server answers it: a ``kind: Status`` body (the routes' renderer)."""
    if isinstance(exc, KubeError):
        return exc.status, exc.body(), {}
    status = exc.status if isinstance(exc, RestError) else HTTP_OF_GRPC.get(exc.code, (500, ""))[0]
    message = exc.message
    if status == 404 and isinstance(exc, RestError):
        message = "the server could not find the requested resource"
    elif status == 405:
        message = "the server does not allow this method on the requested resource"
    details: dict[str, Any] = {}
    headers: dict[str, str] = {}
    if status == 429:
        details["retryAfterSeconds"] = RETRY_AFTER
        headers["Retry-After"] = str(RETRY_AFTER)
    error = KubeError(status, REASONS.get(status, "InternalError"), message, details)
    return status, error.body(), headers


def _true(value: str | None) -> bool:
    return value is not None and value in TRUE


def _status_success(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": meta["name"], "group": kind.group, "kind": kind.plural, "uid": meta["uid"]},
    }


class _Routes:
    """The handlers of one kind in one version (``namespace`` path parameter when namespaced)."""

    def __init__(self, api: KubeApi, kind: Kind, version: str) -> None:
        self.api = api
        self.kind = kind
        self.version = version
        self.api_version = kind.api_version(version)

    # -- helpers ---------------------------------------------------------------------------------
    def _ns(self, call: RestCall) -> str:
        return call.params.get("namespace", "") if self.kind.namespaced else ""

    def _out(self, obj: dict[str, Any]) -> dict[str, Any]:
        return kueue_versions.shown(self.kind, obj, self.version)

    def _in(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A body sent at this route's version, as the store keeps it (Kueue's v1beta1 converted)."""
        return kueue_versions.stored(self.kind, obj, self.version)

    def _locked(self, work: Callable[[], Any]) -> Any:
        with self.api.core.lock:
            self.api.core.tick()
            return work()

    def _object_body(self, call: RestCall) -> dict[str, Any]:
        if not isinstance(call.body, dict):
            raise wire.bad_request(f"the body of the request must be a {self.kind.kind} object")
        return call.body

    def _placed(self, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        """A copy of a sent object with the request's namespace set, as admission sees it."""
        obj = {**obj, "metadata": dict(obj.get("metadata") or {})}
        if self.kind.namespaced:
            obj["metadata"]["namespace"] = namespace
        return obj

    @staticmethod
    def _seconds(call: RestCall) -> float | None:
        text = call.query.get("timeoutSeconds")
        try:
            return float(text) if text else None
        except ValueError:
            raise wire.bad_request(f"invalid timeoutSeconds {text!r}") from None

    def _if_served(self, handler: Callable[[RestCall], Any]) -> Callable[[RestCall], Any]:
        """``handler``, or a 404 while the cluster does not serve this version (an older Kueue)."""

        def serve(call: RestCall) -> Any:
            if not self.api.cluster.serves(self.kind, self.version):
                raise KubeError(404, "NotFound", "the server could not find the requested resource")
            return handler(call)

        return serve

    # -- verbs -----------------------------------------------------------------------------------
    def create(self, call: RestCall) -> RestReply:
        obj = self._object_body(call)
        namespace = self._ns(call)
        sent_ns = obj.get("metadata", {}).get("namespace")
        if self.kind.namespaced and sent_ns and sent_ns != namespace:
            raise wire.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )

        obj = self._placed(self._in(obj), namespace)

        def work() -> dict[str, Any]:
            self.api.cluster.admit("CREATE", self.kind, namespace, obj, None)
            return self.api.store.create(self.kind, namespace, obj)

        return RestReply(self._out(self._locked(work)), status=201)

    def get(self, call: RestCall) -> dict[str, Any]:
        return self._out(
            self._locked(lambda: self.api.store.get(self.kind, self._ns(call), call.params["name"]))
        )

    def collection(self, call: RestCall) -> Any:
        namespace = call.params.get("namespace") if self.kind.namespaced else None
        match = wire.selector(call.query)
        if _true(call.query.get("watch")):
            return RestReply(
                stream=watch_stream(
                    self.api,
                    self.kind,
                    self.version,
                    namespace,
                    match,
                    call.query.get("resourceVersion", ""),
                    self._seconds(call),
                    call.stopping,
                )
            )

        def work() -> tuple[list[dict[str, Any]], int]:
            return self.api.store.select(self.kind, namespace, match), self.api.store.revision

        items, revision = self._locked(work)
        items, meta = wire.page(items, call.query, revision)
        if self.kind.custom:
            items = [self._out(item) for item in items]
        else:  # built-in kinds' list items carry no type meta on the wire
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {
            "apiVersion": self.api_version,
            "kind": f"{self.kind.kind}List",
            "metadata": meta,
            "items": items,
        }

    def replace(self, call: RestCall, status: bool = False) -> dict[str, Any]:
        obj = self._object_body(call)
        namespace, name = self._ns(call), call.params["name"]
        sent = obj.get("metadata", {}).get("name")
        if sent and sent != name:
            raise wire.bad_request(
                f"the name of the object ({sent}) does not match the name on the URL ({name})"
            )

        obj = self._placed(self._in(obj), namespace)

        def work() -> dict[str, Any]:
            old = self.api.store.get(self.kind, namespace, name)
            if self.kind.custom and not obj.get("metadata", {}).get("resourceVersion"):
                raise invalid(
                    self.kind,
                    name,
                    [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
                )
            self.api.cluster.admit("UPDATE", self.kind, namespace, obj, old)
            return self.api.store.replace(self.kind, namespace, name, obj, status=status)

        return self._out(self._locked(work))

    def patch(self, call: RestCall, status: bool = False) -> dict[str, Any]:
        namespace, name = self._ns(call), call.params["name"]
        content_type = call.headers.get("content-type", "")

        def work() -> dict[str, Any]:
            old = self.api.store.get(self.kind, namespace, name)
            # A patch applies to the object as this version shows it.
            shown = kueue_versions.shown(self.kind, old, self.version)
            new = self._in(wire.apply_patch(self.kind, shown, content_type, call.body))
            self.api.cluster.admit("UPDATE", self.kind, namespace, new, old)
            return self.api.store.replace(self.kind, namespace, name, new, status=status)

        return self._out(self._locked(work))

    def delete(self, call: RestCall) -> dict[str, Any]:
        namespace, name = self._ns(call), call.params["name"]

        def work() -> dict[str, Any]:
            policy = wire.propagation(self.kind, call.query, call.body)
            current = self.api.store.get(self.kind, namespace, name)
            wire.check_preconditions(self.kind, current, call.body)
            return wire.delete_with_dependents(self.api.store, self.kind, namespace, name, policy)

        deleted = self._locked(work)
        if self.kind.key in DELETE_ANSWERS_STATUS:
            return _status_success(self.kind, deleted)
        return self._out(deleted)

    def log(self, call: RestCall) -> RestReply:
        namespace, name = self._ns(call), call.params["name"]
        container = call.query.get("container") or None
        lines_text = call.query.get("tailLines")
        try:
            lines = int(lines_text) if lines_text else None
        except ValueError:
            raise wire.bad_request(f"invalid tailLines {lines_text!r}") from None

        def work() -> str:
            self.api.store.get(self.kind, namespace, name)  # 404 for an unknown pod
            return self.api.cluster.pod_log(namespace, name, container)

        text = self._locked(work)
        first = tail(text, lines)
        if _true(call.query.get("follow")):
            stream = log_stream(self.api, namespace, name, container, first, len(text), call.stopping)
            return RestReply(stream=stream, media_type="text/plain")
        return RestReply(first, media_type="text/plain")

    # -- the routes ------------------------------------------------------------------------------
    def routes(self) -> list[RestRoute]:
        kind = self.kind
        root = f"/apis/{kind.group}/{self.version}" if kind.group else f"/api/{self.version}"
        base = (
            f"{root}/namespaces/{{namespace}}/{kind.plural}" if kind.namespaced else f"{root}/{kind.plural}"
        )
        one = f"{base}/{{name}}"
        p = kind.plural

        def route(method: str, path: str, verb: str, handler: Callable[[RestCall], Any]) -> RestRoute:
            return RestRoute(method, path, f"{p}.{verb}", self._if_served(handler), errors=kube_errors)

        routes = [
            route("POST", base, "create", self.create),
            route("GET", base, "list", self.collection),
            route("GET", one, "get", self.get),
            route("PUT", one, "replace", self.replace),
            route("PATCH", one, "patch", self.patch),
            route("DELETE", one, "delete", self.delete),
        ]
        if kind.namespaced:
            routes.append(route("GET", f"{root}/{kind.plural}", "list", self.collection))
        if kind.status_subresource:
            status = f"{one}/status"
            routes += [
                route("GET", status, "status.get", self.get),
                route("PUT", status, "status.replace", lambda c: self.replace(c, status=True)),
                route("PATCH", status, "status.patch", lambda c: self.patch(c, status=True)),
            ]
        if kind.key == "pods":
            routes.append(route("GET", f"{one}/log", "log", self.log))
        return routes


def _resource_list(group_version: str, kinds: list[Kind]) -> dict[str, Any]:
    resources = []
    for kind in kinds:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        resources.append(
            {
                "name": kind.plural,
                "singularName": kind.kind.lower(),
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": verbs,
            }
        )
        if kind.status_subresource:
            resources.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if kind.key == "pods":
            resources.append(
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _discovery(api: KubeApi) -> list[RestRoute]:
    """``/version``, ``/api``, ``/apis`` and each group version's resources, of what is served now
    (the cluster may serve fewer Kueue versions: :meth:`~.cluster.Cluster.serves`)."""
    by_version: dict[str, tuple[str, list[Kind]]] = {}
    for kind in KINDS.values():
        for version in kind.versions:
            by_version.setdefault(kind.api_version(version), (version, []))[1].append(kind)

    def locked(answer: Callable[[], Any]) -> Callable[[RestCall], Any]:
        def serve(call: RestCall) -> Any:
            with api.core.lock:
                api.core.tick()
                return answer()

        return serve

    def group_list() -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for kind in KINDS.values():
            for version in kind.versions:
                if kind.group and api.cluster.serves(kind, version):
                    if version not in groups.setdefault(kind.group, []):
                        groups[kind.group].append(version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
                }
                for group, versions in groups.items()
            ],
        }

    def resources(group_version: str, version: str, kinds: list[Kind]) -> Callable[[], Any]:
        def answer() -> Any:
            served = [kind for kind in kinds if api.cluster.serves(kind, version)]
            if not served:
                raise KubeError(404, "NotFound", "the server could not find the requested resource")
            return _resource_list(group_version, served)

        return answer

    core_versions = {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }
    routes = [
        RestRoute("GET", "/version", "discovery.version", locked(lambda: VERSION_INFO), errors=kube_errors),
        RestRoute("GET", "/api", "discovery.api", locked(lambda: core_versions), errors=kube_errors),
        RestRoute("GET", "/apis", "discovery.apis", locked(group_list), errors=kube_errors),
    ]
    for group_version, (version, kinds) in by_version.items():
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        answer = resources(group_version, version, kinds)
        routes.append(RestRoute("GET", path, "discovery.resources", locked(answer), errors=kube_errors))
    return routes


def kube_routes(api: KubeApi) -> list[RestRoute]:
    """Every route of the Kubernetes API on ``api`` (its store and cluster)."""
    routes = _discovery(api)
    for kind in KINDS.values():
        for version in kind.versions:
            routes += _Routes(api, kind, version).routes()
    return routes
