"""Cloud TPU ``v2alpha1`` for flex-start queued resources (Preview), through google-api-python-client.

Flex-start (``QueuedResource.provisioningModel = FLEX_START`` with ``runDuration``) exists only in
the ``v2alpha1`` API, and google-cloud-tpu's ``tpu_v2alpha1`` types lack both fields (1.28.0).
google-api-python-client's discovery client for ``tpu.v2alpha1`` (its static document, no
discovery call) has them. :class:`FlexTpuClient` wraps it in the methods of google-cloud-tpu's
``TpuClient`` the backend calls, with the ``v2`` messages in and out (``v2alpha1`` JSON is ``v2``'s
plus the flex-start fields, and ``multiNodeParams`` for ``multisliceParams``), and Google API
errors as ``google.api_core`` exceptions: the backend, its retries and its classification stay the
ones of :class:`~airflow_provider_dws.backends.tpu.TpuQueuedResourceBackend`.

The discovery client is synchronous and its HTTP object is not thread-safe: calls are serialized
per client, and the async twin runs them in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.hooks.base import DwsBaseHook, emulator_rest_host

if TYPE_CHECKING:
    from google.cloud.tpu_v2 import Node, QueuedResource

#: How long one HTTP call may take (seconds) when the backend gives no deadline.
HTTP_TIMEOUT = 60.0
_ALPHA_ONLY = ("provisioningModel", "runDuration", "bestEffort")


def _renamed(body: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    for spec in (body.get("tpu") or {}).get("nodeSpec") or ():
        if isinstance(spec, dict) and old in spec:
            spec[new] = spec.pop(old)
    return body


def queued_resource_of(body: dict[str, Any]) -> QueuedResource:
    """The ``v2`` message of a ``v2alpha1`` queued resource (its flex-start fields dropped)."""
    from google.cloud.tpu_v2 import QueuedResource

    v2 = _renamed(
        {k: v for k, v in body.items() if k not in _ALPHA_ONLY}, "multiNodeParams", "multisliceParams"
    )
    return QueuedResource.from_json(json.dumps(v2), ignore_unknown_fields=True)


def alpha_body(request: QueuedResource, run: dict[str, str]) -> dict[str, Any]:
    """The ``v2alpha1`` create body of a ``v2`` request and its ``runDuration``: flex-start."""
    from google.cloud.tpu_v2 import QueuedResource

    body: dict[str, Any] = json.loads(QueuedResource.to_json(request, including_default_value_fields=False))
    return {
        **_renamed(body, "multisliceParams", "multiNodeParams"),
        "provisioningModel": "FLEX_START",
        "runDuration": run,
    }


class _Operation:
    """A ``v2alpha1`` long-running operation with ``result(timeout)``, as google.api_core's has."""

    def __init__(self, client: FlexTpuClient, reply: dict[str, Any]) -> None:
        self._client = client
        self.reply = reply

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Poll until done; raise the operation's error as a ``google.api_core`` exception."""
        from google.api_core import exceptions

        deadline = time.monotonic() + (timeout or HTTP_TIMEOUT)
        while not self.reply.get("done"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"operation {self.reply.get('name')} not done after {timeout}s")
            time.sleep(1.0)
            self.reply = self._client.get_operation(self.reply["name"])
        error = self.reply.get("error")
        if error:
            # An operation's error is a google.rpc.Status: its code is the gRPC code's number.
            raise exceptions.from_grpc_status(int(error.get("code", 2)), error.get("message", ""))
        return dict(self.reply.get("response") or {})


def api_error(err: Any) -> Exception:
    """A discovery client's ``HttpError`` as the ``google.api_core`` exception the gRPC client would
    raise: by the error body's ``status`` (ALREADY_EXISTS and ABORTED are both HTTP 409, and
    FAILED_PRECONDITION is a 400), else by the HTTP status."""
    import grpc
    from google.api_core import exceptions

    try:
        error = json.loads(err.content).get("error") or {}
    except (ValueError, TypeError, AttributeError):
        error = {}
    message = str(error.get("message") or err.reason or err)
    name = str(error.get("status") or "")
    if name in grpc.StatusCode.__members__:
        return exceptions.from_grpc_status(grpc.StatusCode[name], message)
    return exceptions.from_http_status(err.status_code, message)


class FlexTpuClient:
    """The ``TpuClient`` methods the TPU backend calls, over ``tpu.v2alpha1`` REST."""

    def __init__(self, resource: Any) -> None:
        self._api = resource.projects().locations()
        self._lock = threading.Lock()

    def _execute(self, request: Any) -> Any:
        from googleapiclient.errors import HttpError

        with self._lock:
            try:
                return request.execute(num_retries=0)
            except HttpError as err:
                raise api_error(err) from None

    def get_queued_resource(self, name: str, timeout: float | None = None, **_: Any) -> QueuedResource:
        """One queued resource."""
        return queued_resource_of(self._execute(self._api.queuedResources().get(name=name)))

    def list_queued_resources(
        self, request: Any, timeout: float | None = None, **_: Any
    ) -> list[QueuedResource]:
        """Every queued resource of ``request.parent``, all pages."""
        return [qr for page in self.pages(request.parent, request.page_size) for qr in page]

    def pages(self, parent: str, page_size: int) -> Iterator[list[QueuedResource]]:
        """The list, a page at a time."""
        token = None
        while True:
            reply = self._execute(
                self._api.queuedResources().list(parent=parent, pageSize=page_size, pageToken=token)
            )
            yield [queued_resource_of(qr) for qr in reply.get("queuedResources", [])]
            token = reply.get("nextPageToken")
            if not token:
                return

    def create_flex_start(
        self, parent: str, queued_resource_id: str, request: QueuedResource, run: dict[str, str]
    ) -> _Operation:
        """Create a flex-start queued resource (``run``: its ``runDuration``)."""
        body = alpha_body(request, run)
        create = self._api.queuedResources().create(
            parent=parent, queuedResourceId=queued_resource_id, body=body
        )
        return _Operation(self, self._execute(create))

    def delete_queued_resource(self, request: Any, timeout: float | None = None, **_: Any) -> _Operation:
        """Delete (``request.force``: with its nodes)."""
        delete = self._api.queuedResources().delete(name=request.name, force=bool(request.force))
        return _Operation(self, self._execute(delete))

    def get_operation(self, name: str) -> dict[str, Any]:
        """A long-running operation's JSON."""
        reply: dict[str, Any] = self._execute(self._api.operations().get(name=name))
        return reply

    def get_node(self, name: str, timeout: float | None = None, **_: Any) -> Node:
        """One TPU VM (``v2alpha1`` fields the ``v2`` message lacks are dropped)."""
        from google.cloud.tpu_v2 import Node

        return Node.from_json(
            json.dumps(self._execute(self._api.nodes().get(name=name))), ignore_unknown_fields=True
        )


class _Pager:
    """What ``TpuAsyncClient.list_queued_resources`` returns, as far as the backend reads it."""

    def __init__(self, client: FlexTpuClient, request: Any) -> None:
        self._client, self._request = client, request

    @property
    async def pages(self) -> AsyncIterator[Any]:  # type: ignore[misc]
        pages = self._client.pages(self._request.parent, self._request.page_size)
        while True:
            page = await asyncio.to_thread(next, pages, None)
            if page is None:
                return
            yield _Page(page)


class _Page:
    def __init__(self, queued_resources: list[Any]) -> None:
        self.queued_resources = queued_resources


class FlexTpuAsyncClient:
    """The ``TpuAsyncClient`` methods the TPU backend awaits: :class:`FlexTpuClient`'s, in a thread."""

    def __init__(self, client: FlexTpuClient) -> None:
        self._client = client

    async def get_queued_resource(self, **kwargs: Any) -> QueuedResource:
        """One queued resource."""
        return await asyncio.to_thread(self._client.get_queued_resource, **kwargs)

    async def list_queued_resources(self, request: Any, **_: Any) -> _Pager:
        """The zone's queued resources, read a page at a time as ``pages`` is iterated."""
        return _Pager(self._client, request)

    async def delete_queued_resource(self, **kwargs: Any) -> _Operation:
        """Delete (not waited for)."""
        return await asyncio.to_thread(self._client.delete_queued_resource, **kwargs)

    async def get_node(self, **kwargs: Any) -> Node:
        """One TPU VM."""
        return await asyncio.to_thread(self._client.get_node, **kwargs)


class DwsTpuFlexHook(DwsBaseHook):
    """Cloud TPU ``v2alpha1`` (flex-start) through google-api-python-client, or the emulator's REST front."""

    def get_tpu_client(self) -> FlexTpuClient:
        """The client, built once (credentials resolved then)."""
        client = self._cached_clients.get((FlexTpuClient, "global"))
        if client is None:
            client = self._cached_clients[FlexTpuClient, "global"] = FlexTpuClient(self._resource())
        return client  # type: ignore[return-value]

    def _resource(self) -> Any:
        import httplib2
        from googleapiclient.discovery import build

        http = httplib2.Http(timeout=HTTP_TIMEOUT)
        options: dict[str, str] = {}
        if self.emulator_host:
            options["api_endpoint"] = f"http://{emulator_rest_host(self.emulator_host)}"
        else:
            import google_auth_httplib2

            http = google_auth_httplib2.AuthorizedHttp(self.get_credentials(), http=http)
        return build(
            "tpu", "v2alpha1", http=http, static_discovery=True, cache_discovery=False, client_options=options
        )


class DwsTpuFlexAsyncHook:
    """:class:`FlexTpuAsyncClient` for triggers: the sync hook and its client built in a thread."""

    def __init__(self, gcp_conn_id: str = "google_cloud_default", impersonation_chain: Any = None) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._client: FlexTpuAsyncClient | None = None

    async def get_tpu_client(self) -> FlexTpuAsyncClient:
        """The async client, built once."""
        if self._client is None:

            def build() -> FlexTpuClient:
                hook = DwsTpuFlexHook(
                    gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
                )
                return hook.get_tpu_client()

            self._client = FlexTpuAsyncClient(await asyncio.to_thread(build))
        return self._client
