"""What the Kubernetes backends share: one cluster namespace, its hook, errors, calls and lists.

:class:`KubernetesBackend` is the base of the ProvisioningRequest backend
(:mod:`.kubernetes`) and the Kueue Job backend (:mod:`.kueue`), as
:class:`~airflow_provider_dws.backends.google.GoogleBackend` is of the Google Cloud ones: the
constructor and :meth:`~KubernetesBackend.spec`, the lazily built
:class:`~airflow_provider_dws.hooks.kubernetes.GKEClusterHook`, a sync call with the deadline and
the shared retry policy, an async call with the deadline (the shared poller retries), paged lists
in both halves, and one translation of either client's errors into the provider's.

Objects are handled as the API's JSON (camelCase dicts) whichever client read them. Nothing here
imports ``kubernetes`` or ``kubernetes_asyncio`` at module level.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import rpc_deadline
from airflow_provider_dws.backends.retry import retrying
from airflow_provider_dws.hooks.kubernetes import GKEClusterHook
from airflow_provider_dws.scheduling.identity import LABEL_MANAGED

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Deadline of one API call, in seconds (``_request_timeout``).
DEFAULT_RPC_TIMEOUT = 60.0
#: Objects per list page.
LIST_PAGE_SIZE = 500
#: Label holding the max wait the provider enforces (the API has none), so a reattached try keeps it.
LABEL_MAX_WAIT = "dws_max_wait"
#: The selector of every object the provider made (what the shared poller lists and watches).
MANAGED_SELECTOR = f"{LABEL_MANAGED}=true"


def translate(exc: BaseException) -> BaseException:
    """The provider error for a Kubernetes client exception, sync or async (others unchanged).

    ``ApiException``: 404 not found, 409 AlreadyExists (else a conflict), 400/415/422 invalid,
    401/403 permission, 429 quota, 410 and 5xx transient; a connection refused, reset or timed out
    is transient.
    """
    status = getattr(exc, "status", None)
    # kubernetes 36 raises subclasses (NotFoundException, ForbiddenException, ...): match the base.
    if isinstance(status, int) and any(cls.__name__ == "ApiException" for cls in type(exc).__mro__):
        reason, message = _status_body(exc)
        code: int | str = status
        if status == 404:
            return errors.RequestNotFoundError(message, code=code)
        if status == 409:
            if reason == "AlreadyExists":
                return errors.RequestAlreadyExistsError(message, code=code)
            return errors.ConflictError(message, code=code)
        if status in (400, 415, 422):
            return errors.InvalidRequestError(message, code=code)
        if status in (401, 403):
            return errors.PermissionDeniedApiError(message, code=code)
        if status == 429:
            return errors.QuotaExceededError(message, code=code)
        if status == 410 or 500 <= status < 600 or status == 0:
            return errors.TransientApiError(message, code=code)
        return errors.ApiError(message, code=code)
    if _is_transport_error(exc):
        return errors.TransientApiError(f"{type(exc).__name__}: {exc}", code="UNAVAILABLE")
    return exc


def _status_body(exc: Any) -> tuple[str, str]:
    """The ``reason`` and ``message`` of a ``kind: Status`` error body (else the exception's text)."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    with contextlib.suppress(TypeError, ValueError):
        status = json.loads(body) if isinstance(body, str) else None
        if isinstance(status, dict) and status.get("message"):
            return str(status.get("reason") or ""), str(status["message"])
    reason = str(getattr(exc, "reason", "") or "")
    return reason, f"{getattr(exc, 'status', '')} {reason}".strip()


def _is_transport_error(exc: BaseException) -> bool:
    """A connection that failed or timed out under either client (urllib3, aiohttp, asyncio)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    transient: list[type[BaseException]] = []
    # Only the libraries already loaded can have raised: nothing is imported here.
    urllib3 = sys.modules.get("urllib3.exceptions")
    if urllib3 is not None:
        transient.append(urllib3.HTTPError)
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        transient += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    return isinstance(exc, tuple(transient))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise the provider error for any Kubernetes client exception raised inside (its cause kept)."""
    try:
        yield
    except Exception as exc:
        ours = translate(exc)
        if ours is exc:
            raise
        raise ours from exc


def kube_time(stamp: Any) -> datetime | None:
    """A Kubernetes RFC 3339 timestamp (``2026-12-02T10:00:00Z``, or a datetime) as an aware datetime."""
    if isinstance(stamp, datetime):
        parsed = stamp
    elif isinstance(stamp, str) and stamp:
        try:
            parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


class KubernetesBackend:
    """Base of the backends of one namespace of one GKE cluster (or cncf-kubernetes connection).

    :param project_id: the cluster's project (``None``: the Google connection's; unused for the
        emulator and a cncf-kubernetes connection).
    :param location: the cluster's region or zone.
    :param gcp_conn_id: the Google connection (credentials for the GKE cluster).
    :param impersonation_chain: service account(s) to impersonate, as in the Google provider.
    :param cluster_name: the GKE cluster (see :class:`GKEClusterHook` for the other sources).
    :param namespace: where the backend's objects live.
    :param kubernetes_conn_id: a cncf-kubernetes connection instead of a GKE cluster.
    :param use_internal_ip: reach the cluster's private endpoint.
    :param rpc_timeout: deadline of each call in seconds (default :data:`DEFAULT_RPC_TIMEOUT`).
    """

    kind: ClassVar[str]
    location_key: ClassVar[str] = "location"

    def __init__(
        self,
        project_id: str | None,
        location: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        *,
        cluster_name: str | None = None,
        namespace: str = "default",
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool = False,
        rpc_timeout: float | None = None,
    ) -> None:
        self.project_id = project_id
        self.location = location
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        self.rpc_timeout = rpc_deadline(rpc_timeout, DEFAULT_RPC_TIMEOUT)
        self._hook: GKEClusterHook | None = None
        self._async_hook: GKEClusterHook | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        #: The sync half may run in several threads at once (a triggerer's submissions): its hook
        #: is built once, under this lock.
        self._hook_lock = threading.Lock()

    def spec(self) -> dict[str, Any]:
        """Constructor keyword arguments, JSON-serializable, to rebuild this backend in the triggerer."""
        chain = self.impersonation_chain
        spec: dict[str, Any] = {
            "project_id": self.project_id,
            "location": self.location,
            "gcp_conn_id": self.gcp_conn_id,
            "impersonation_chain": list(chain) if isinstance(chain, (list, tuple)) else chain,
            "cluster_name": self.cluster_name,
            "namespace": self.namespace,
            "kubernetes_conn_id": self.kubernetes_conn_id,
        }
        if self.use_internal_ip:
            spec["use_internal_ip"] = True
        if self.rpc_timeout != DEFAULT_RPC_TIMEOUT:
            spec["rpc_timeout"] = self.rpc_timeout
        return spec

    # -- clients -----------------------------------------------------------------------------------

    def _new_hook(self) -> GKEClusterHook:
        return GKEClusterHook(
            project_id=self.project_id,
            location=self.location,
            cluster_name=self.cluster_name,
            gcp_conn_id=self.gcp_conn_id,
            kubernetes_conn_id=self.kubernetes_conn_id,
            impersonation_chain=self.impersonation_chain,
            use_internal_ip=self.use_internal_ip,
        )

    @property
    def hook(self) -> GKEClusterHook:
        """The cluster's hook of the sync client, built on first use (thread-safe)."""
        if self._hook is None:
            with self._hook_lock:
                if self._hook is None:
                    self._hook = self._new_hook()
        return self._hook

    def where(self) -> str:
        """The namespace and cluster, in words."""
        return f"namespace {self.namespace} of {self.hook.describe()}"

    def api_client(self) -> Any:
        """The sync ``kubernetes`` ``ApiClient`` (built once by the hook)."""
        return self.hook.api_client()

    async def async_api_client(self) -> Any:
        """The ``kubernetes_asyncio`` ``ApiClient`` of the running event loop: its aiohttp session is
        bound to the loop, so another loop (a ``deferrable=False`` wait after a deferred one) gets a
        hook and client of its own."""
        loop = asyncio.get_running_loop()
        if self._async_hook is None or self._async_loop is not loop:
            self._async_hook, self._async_loop = self._new_hook(), loop
        return await self._async_hook.async_api_client()

    def _json(self, obj: Any) -> Any:
        """A client's model as the API's JSON (a custom object is a dict already)."""
        return obj if isinstance(obj, dict) else self.api_client().sanitize_for_serialization(obj)

    # -- sync (worker; the triggerer's submissions, in threads) --------------------------------------

    def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` with the deadline, its errors translated, transient ones retried."""

        def attempt() -> _T:
            with translated():
                return fn(*args, _request_timeout=self.rpc_timeout, **kwargs)

        return retrying(what, logger=log)(attempt)

    def _list_all(self, what: str, list_fn: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
        """Every item of a paged list, as JSON (each page retried on its own)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            paging: dict[str, Any] = {"limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}
            page = self._json(self._call(what, list_fn, **kwargs, **paging))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    # -- async (triggerer) -------------------------------------------------------------------------

    async def _aonce(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One async call with the deadline, translated, as JSON; not retried (the poller retries)."""
        with translated():
            reply = await method(*args, _request_timeout=self.rpc_timeout, **kwargs)
        if isinstance(reply, dict):  # a custom object
            return reply
        return (await self.async_api_client()).sanitize_for_serialization(reply)

    async def _apages(
        self, list_fn: Callable[..., Any], versions: list[str] | None = None, **kwargs: Any
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The items of a paged list, a page at a time, as JSON; the list's ``resourceVersion`` (its
        first page's: the snapshot the other pages continue) appended to ``versions``."""
        token: str | None = None
        while True:
            paging: dict[str, Any] = {"limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}
            page = await self._aonce(list_fn, **kwargs, **paging)
            if versions is not None and not token:
                versions.append(str((page.get("metadata") or {}).get("resourceVersion") or ""))
            yield list(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return

    async def _awatch_objects(
        self, list_fn: Callable[..., Any], resource_version: str, timeout: float, **kwargs: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """One watch of ``list_fn``'s objects after ``resource_version``, for at most ``timeout``
        seconds: (event type, object as JSON), bookmarks left out; errors translated."""
        from kubernetes_asyncio import watch

        stream = watch.Watch()
        try:
            with translated():
                async for event in stream.stream(
                    list_fn,
                    resource_version=resource_version,
                    timeout_seconds=max(1, int(timeout)),
                    allow_watch_bookmarks=True,
                    # The connection stays open for the whole watch: its deadline is the watch's.
                    _request_timeout=timeout + self.rpc_timeout,
                    **kwargs,
                ):
                    if event.get("type") != "BOOKMARK":
                        yield str(event.get("type")), event.get("raw_object") or {}
        finally:
            await stream.close()

    async def _alist_all(self, list_fn: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
        """Every item of a paged list, as JSON."""
        return [item async for page in self._apages(list_fn, **kwargs) for item in page]

    async def aclose(self) -> None:
        """Close the async client of the last loop (its aiohttp session)."""
        if self._async_hook is not None:
            hook, self._async_hook, self._async_loop = self._async_hook, None, None
            await hook.aclose()
