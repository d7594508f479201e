"""Credentials and clients for Google Cloud APIs, with the local emulator switch.

Credentials come from the standard ``google_cloud_default`` connection through
apache-airflow-providers-google's :class:`GoogleBaseHook` (key file, ADC, impersonation chain),
which :class:`DwsBaseHook` composes, lazily, only when it talks to Google Cloud.

Emulator switch, following Google's ``*_EMULATOR_HOST`` convention: when the environment variable
``DWS_EMULATOR_HOST`` (``host:port``) or the connection extra ``dws_emulator_host`` is set, clients
talk to that address over an insecure local channel with anonymous credentials. It is never
implied: it has to be set explicitly, and every hook that uses it says so loudly in the task log.
The decision is made before anything Google is built, and one factory,
:func:`emulator_client`, makes the emulator's clients for every API, over gRPC or REST.

One address serves both: ``DWS_EMULATOR_HOST=host:P`` is the emulator's gRPC port, and its REST
front (Compute Engine, which speaks only JSON over HTTP/1.1) listens on the next port,
``http://host:P+1`` (:func:`emulator_rest_host`).

Nothing here imports a Google library or ``airflow.providers.google`` at module level.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from airflow_provider_dws.compat import BaseHook

if TYPE_CHECKING:
    from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

EMULATOR_HOST_ENV = "DWS_EMULATOR_HOST"
EMULATOR_HOST_EXTRA = "dws_emulator_host"
#: How a client library speaks to its API: gRPC (Vertex AI, Cloud TPU, Batch) or REST (Compute).
Transport = Literal["grpc", "rest"]
_ClientT = TypeVar("_ClientT")


def check_emulator_host(value: str) -> str:
    """Validate a ``host:port`` emulator address; only loopback hosts are accepted."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"emulator host must look like 127.0.0.1:PORT, got {value!r}")
    bare = host.strip("[]")
    loopback = bare == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(bare).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(
            f"emulator host {value!r} is not a loopback address; the DWS emulator is a local tool "
            "and credentials are never sent to it, so only 127.0.0.0/8, ::1 or localhost are allowed"
        )
    return value.strip()


def emulator_rest_host(host: str) -> str:
    """The emulator's REST front for the gRPC address ``host`` (``127.0.0.1:8470`` ->
    ``127.0.0.1:8471``): the same host, the next port. The emulator binds both."""
    name, _, port = check_emulator_host(host).rpartition(":")
    if int(port) >= 65535:
        raise ValueError(f"emulator host {host!r} leaves no port for the REST front (port + 1)")
    return f"{name}:{int(port) + 1}"


def emulator_client(
    client_class: type[_ClientT], host: str, *, transport: Transport = "grpc", asynchronous: bool = False
) -> _ClientT:
    """A generated Google client (``JobServiceClient``, ``TpuAsyncClient``, ...) that talks to the
    emulator at ``host``: an insecure channel (gRPC) or plain HTTP (REST), anonymous credentials.

    ``host`` is the address as given; a REST client of the emulator's REST front takes
    :func:`emulator_rest_host` of it (as :meth:`DwsBaseHook.client` does)."""
    transport_class: Any = client_class.get_transport_class(  # type: ignore[attr-defined]
        "grpc_asyncio" if asynchronous and transport == "grpc" else transport
    )
    if transport == "grpc":
        import grpc

        channel = grpc.aio.insecure_channel(host) if asynchronous else grpc.insecure_channel(host)
        return client_class(transport=transport_class(channel=channel))  # type: ignore[call-arg]
    from google.auth.credentials import AnonymousCredentials

    rest = transport_class(host=host, credentials=AnonymousCredentials(), url_scheme="http")
    return client_class(transport=rest)  # type: ignore[call-arg]


class DwsBaseHook(BaseHook):
    """Google Cloud credentials for DWS clients, or the local emulator when it is switched on.

    With the environment variable set, no connection is needed at all (a missing one is fine).

    :param gcp_conn_id: the Airflow connection with Google Cloud credentials.
    :param impersonation_chain: a service account (or chain) to impersonate.
    """

    hook_name = "Google Cloud Dynamic Workload Scheduler"

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._google: GoogleBaseHook | None = None
        self._extras: dict[str, Any] | None = None
        self._cached_clients: dict[tuple[type, str], Any] = {}
        env_host = os.environ.get(EMULATOR_HOST_ENV, "").strip()
        if env_host:
            self.emulator_host: str | None = check_emulator_host(env_host)
            source = f"environment variable {EMULATOR_HOST_ENV}"
        else:
            extra = self._extra(EMULATOR_HOST_EXTRA)
            self.emulator_host = check_emulator_host(str(extra)) if extra else None
            source = f"extra {EMULATOR_HOST_EXTRA!r} of connection {gcp_conn_id!r}"
        if self.emulator_host:
            self.log.warning(
                "DWS EMULATOR MODE: talking to the local dws-emulator at %s over an insecure channel "
                "with anonymous credentials (set by %s). No request reaches Google Cloud.",
                self.emulator_host,
                source,
            )

    def _extra(self, name: str) -> Any:
        """A connection extra, plain or with the Google provider's ``extra__google_cloud_platform__`` prefix."""
        if self._extras is None:
            self._extras = dict(self.get_connection(self.gcp_conn_id).extra_dejson)
        value = self._extras.get(name)
        return value if value not in (None, "") else self._extras.get(f"extra__google_cloud_platform__{name}")

    @property
    def google_hook(self) -> GoogleBaseHook:
        """The providers-google hook behind the credentials (real Google Cloud only), built once."""
        if self.emulator_host:
            raise RuntimeError("the DWS emulator needs no Google credentials")
        if self._google is None:
            from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

            self._google = GoogleBaseHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._google

    @property
    def project_id(self) -> str | None:
        """The connection's project (emulator mode: its ``project`` extra, if there is a connection)."""
        if not self.emulator_host:
            return self.google_hook.project_id
        try:
            return self._extra("project") or None
        except Exception:  # no connection: fine in emulator mode, the operator names the project
            return None

    def get_credentials(self) -> Any:
        """Google credentials for a client (may block: call it in a thread from an event loop)."""
        return self.google_hook.get_credentials()

    def client(
        self,
        client_class: type[_ClientT],
        *,
        api_endpoint: str | None = None,
        credentials: Any = None,
        transport: Transport = "grpc",
        asynchronous: bool = False,
    ) -> _ClientT:
        """A client of ``client_class`` for Google Cloud (``api_endpoint``: a regional endpoint) or,
        in emulator mode, for the emulator. ``credentials`` default to :meth:`get_credentials`."""
        if self.emulator_host:
            host = emulator_rest_host(self.emulator_host) if transport == "rest" else self.emulator_host
            return emulator_client(client_class, host, transport=transport, asynchronous=asynchronous)
        from airflow.providers.google.common.consts import CLIENT_INFO

        return client_class(  # type: ignore[call-arg]
            credentials=credentials if credentials is not None else self.get_credentials(),
            client_info=CLIENT_INFO,
            client_options=self.google_hook.get_client_options(api_endpoint_override=api_endpoint),
        )

    def cached_client(self, client_class: type[_ClientT], key: str = "global", **kwargs: Any) -> _ClientT:
        """:meth:`client` built once per class and ``key`` (a region, or ``"global"``) on this hook:
        building one resolves credentials, which can cost a network round trip."""
        client = self._cached_clients.get((client_class, key))
        if client is None:
            client = self._cached_clients[client_class, key] = self.client(client_class, **kwargs)
        return cast("_ClientT", client)


SyncHookT = TypeVar("SyncHookT", bound=DwsBaseHook)
ClientT = TypeVar("ClientT")


class DwsAsyncHookBase(Generic[SyncHookT, ClientT]):
    """Async client factory for triggers: one cached client per key (region or zone).

    Everything that may block (reading the connection, resolving credentials) runs in a worker
    thread, so the triggerer's event loop never stalls on it; gRPC aio channels are created in the
    loop that will use them.
    """

    sync_hook_class: type[SyncHookT]
    #: The async client, ``"module:Class"`` (imported when the first client is built).
    async_client_class: str = ""

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._sync_hook: SyncHookT | None = None
        self._clients: dict[str, ClientT] = {}
        self._lock = asyncio.Lock()

    async def get_sync_hook(self) -> SyncHookT:
        """The sync hook (connection and emulator switch), built in a thread."""
        if self._sync_hook is None:
            self._sync_hook = await asyncio.to_thread(
                self.sync_hook_class,
                gcp_conn_id=self.gcp_conn_id,
                impersonation_chain=self.impersonation_chain,
            )
        return self._sync_hook

    async def get_client(self, key: str) -> ClientT:
        """The async client for ``key``, built once."""
        async with self._lock:
            client = self._clients.get(key)
            if client is None:
                hook = await self.get_sync_hook()
                credentials = None if hook.emulator_host else await asyncio.to_thread(hook.get_credentials)
                client = self._build(hook, key, credentials)
                self._clients[key] = client
            return client

    def api_endpoint(self, key: str) -> str | None:
        """The endpoint of ``key``'s client (default: the global one)."""
        return None

    def _build(self, hook: SyncHookT, key: str, credentials: Any) -> ClientT:
        module, _, name = self.async_client_class.partition(":")
        client_class = getattr(importlib.import_module(module), name)
        return hook.client(
            client_class, api_endpoint=self.api_endpoint(key), credentials=credentials, asynchronous=True
        )
