"""Kubernetes API clients (sync ``kubernetes`` and async ``kubernetes_asyncio``) for a GKE cluster.

Where the cluster's address and credentials come from, decided once per hook, first match wins:

1. **The emulator switch**, exactly as :mod:`airflow_provider_dws.hooks.base` decides it: the
   environment variable ``DWS_EMULATOR_HOST`` or the ``dws_emulator_host`` extra of the Google
   connection. The emulator serves the Kubernetes API at the root of its REST front
   (``http://HOST:PORT+1``), with no authentication; loopback is kept out of any proxy.
2. **A cncf-kubernetes connection** (``kubernetes_conn_id``): in-cluster, a kubeconfig path or a
   ``kube_config`` extra, through that provider's ``KubernetesHook`` / ``AsyncKubernetesHook``.
3. **The GKE cluster** (``project_id``, ``location``, ``cluster_name``) through
   apache-airflow-providers-google: ``GKEHook.get_cluster`` gives the endpoint (the private one with
   ``use_internal_ip``) and CA certificate, the Google connection gives an OAuth token.

The async client's configuration (connections, credentials, the cluster lookup, the CA file) is
built in a worker thread, so a trigger's event loop never blocks on it; its bearer token is
refreshed, in a thread too, before it expires (a triggerer lives longer than an hour's token).

Nothing here imports ``kubernetes``, ``kubernetes_asyncio`` or a Google library at module level.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_dws.compat import BaseHook
from airflow_provider_dws.hooks.base import (
    EMULATOR_HOST_ENV,
    EMULATOR_HOST_EXTRA,
    check_emulator_host,
    emulator_rest_host,
)

if TYPE_CHECKING:
    import kubernetes.client
    import kubernetes_asyncio.client

#: Where a hook's cluster is: the emulator, a cncf-kubernetes connection, or a GKE cluster.
SourceKind = Literal["emulator", "kubernetes", "gke"]
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Refresh the bearer token this many seconds before it expires.
_TOKEN_MARGIN = 300.0
#: How often the async client loads a Kubernetes connection's configuration again through
#: cncf-kubernetes' hook: an exec credential plugin's token (``gke-gcloud-auth-plugin``, EKS's) lasts
#: about an hour, and ``kubernetes_asyncio`` sets it once and never renews it; a failed reload is
#: tried again after :data:`_RELOAD_RETRY` seconds, the current token kept meanwhile.
_KUBECONFIG_RELOAD = 300.0
_RELOAD_RETRY = 30.0


@dataclass(frozen=True)
class ClusterSource:
    """The decision: ``kind``, and for the emulator its REST front ``host`` and who set it."""

    kind: SourceKind
    host: str | None = None
    set_by: str | None = None


def ensure_no_proxy(hosts: Sequence[str] = _LOOPBACK) -> None:
    """Add ``hosts`` to ``NO_PROXY``/``no_proxy`` when a proxy is configured.

    ``kubernetes_asyncio``'s aiohttp session trusts the environment's proxies, so a machine with
    ``HTTP_PROXY`` set would otherwise send the emulator's loopback calls to the proxy."""
    if not any(os.environ.get(name) for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")):
        return
    for name in ("NO_PROXY", "no_proxy"):
        present = [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]
        missing = [host for host in hosts if host not in present]
        if missing:
            os.environ[name] = ",".join([*present, *missing])


class GKEClusterHook(BaseHook):
    """Sync and async Kubernetes API clients for one GKE cluster (or the emulator, or a
    cncf-kubernetes connection); see the module docstring for the order.

    :param project_id: the cluster's project (default: the Google connection's).
    :param location: the cluster's region or zone.
    :param cluster_name: the GKE cluster; needed unless the emulator or ``kubernetes_conn_id`` is used.
    :param gcp_conn_id: the Google connection (credentials; the emulator extra).
    :param kubernetes_conn_id: a cncf-kubernetes connection to use instead of the GKE lookup.
    :param impersonation_chain: a service account (or chain) to impersonate for GKE.
    :param use_internal_ip: talk to the cluster's private endpoint.
    """

    hook_name = "GKE cluster (Dynamic Workload Scheduler)"

    def __init__(
        self,
        *,
        project_id: str | None = None,
        location: str,
        cluster_name: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        kubernetes_conn_id: str | None = None,
        impersonation_chain: str | Sequence[str] | None = None,
        use_internal_ip: bool = False,
    ) -> None:
        super().__init__()
        self.project_id = project_id
        self.location = location
        self.cluster_name = cluster_name
        self.gcp_conn_id = gcp_conn_id
        self.kubernetes_conn_id = kubernetes_conn_id
        self.impersonation_chain = impersonation_chain
        self.use_internal_ip = use_internal_ip
        self._source: ClusterSource | None = None
        self._sync: kubernetes.client.ApiClient | None = None
        #: The sync client is built once even when threads ask for it together (a triggerer's
        #: submissions run the sync half in threads).
        self._sync_lock = threading.Lock()
        self._async: kubernetes_asyncio.client.ApiClient | None = None
        self._async_lock: asyncio.Lock | None = None
        self._closer: AsyncIterator[None] | None = None
        self._credentials: Any = None
        self._ca_file: str | None = None

    # -- the decision ------------------------------------------------------------------------

    def source(self) -> ClusterSource:
        """Where the cluster is (reads the Google connection: may block; decided once)."""
        if self._source is None:
            self._source = self._decide()
            if self._source.kind == "emulator":
                self.log.warning(
                    "DWS EMULATOR MODE: the Kubernetes API of GKE cluster %s is the local dws-emulator "
                    "at %s, over plain HTTP with no credentials (set by %s). No request reaches Google Cloud.",
                    self.cluster_name or "(any)",
                    self._source.host,
                    self._source.set_by,
                )
            else:
                self.log.info("Kubernetes API of %s from %s", self.describe(), self._source.kind)
        return self._source

    def _decide(self) -> ClusterSource:
        env_host = os.environ.get(EMULATOR_HOST_ENV, "").strip()
        if env_host:
            rest = emulator_rest_host(check_emulator_host(env_host))
            return ClusterSource("emulator", f"http://{rest}", f"environment variable {EMULATOR_HOST_ENV}")
        extra = self._google_extra(EMULATOR_HOST_EXTRA)
        if extra:
            rest = emulator_rest_host(check_emulator_host(str(extra)))
            return ClusterSource(
                "emulator",
                f"http://{rest}",
                f"extra {EMULATOR_HOST_EXTRA!r} of connection {self.gcp_conn_id!r}",
            )
        if self.kubernetes_conn_id:
            return ClusterSource("kubernetes")
        if not self.cluster_name:
            raise ValueError(
                "a GKE cluster needs cluster_name (or give kubernetes_conn_id, a cncf-kubernetes connection)"
            )
        return ClusterSource("gke")

    def _google_extra(self, name: str) -> Any:
        """An extra of the Google connection, plain or prefixed; a missing connection has none
        (a cncf-kubernetes or default-credentials setup need not define it)."""
        from airflow_provider_dws.compat import AirflowNotFoundException

        try:
            extras = dict(self.get_connection(self.gcp_conn_id).extra_dejson)
        except AirflowNotFoundException:
            return None
        value = extras.get(name)
        return value if value not in (None, "") else extras.get(f"extra__google_cloud_platform__{name}")

    def describe(self) -> str:
        """The cluster in words, for logs and errors."""
        if self.kubernetes_conn_id and not self.cluster_name:
            return f"connection {self.kubernetes_conn_id!r}"
        return (
            f"projects/{self.project_id or '-'}/locations/{self.location}/clusters/{self.cluster_name or '-'}"
        )

    # -- GKE lookups ---------------------------------------------------------------------------

    def cluster_endpoint(self) -> tuple[str, str]:
        """The GKE cluster's ``https://`` endpoint and base64 CA certificate (a Container API call)."""
        from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEHook

        hook = GKEHook(
            gcp_conn_id=self.gcp_conn_id, location=self.location, impersonation_chain=self.impersonation_chain
        )
        cluster = hook.get_cluster(name=self.cluster_name, project_id=self.project_id)  # type: ignore[arg-type]
        if self.use_internal_ip:
            address = cluster.private_cluster_config.private_endpoint
        else:
            address = cluster.endpoint
        if not address:
            which = "private endpoint" if self.use_internal_ip else "endpoint"
            raise ValueError(f"GKE cluster {self.describe()} has no {which}")
        return f"https://{address}", cluster.master_auth.cluster_ca_certificate

    def _gke_kubernetes_hook(self, cluster_url: str, ssl_ca_cert: str) -> Any:
        from airflow.providers.google.cloud.hooks.kubernetes_engine import GKEKubernetesHook

        return GKEKubernetesHook(
            cluster_url=cluster_url,
            ssl_ca_cert=ssl_ca_cert,
            gcp_conn_id=self.gcp_conn_id,
            impersonation_chain=self.impersonation_chain,
        )

    # -- sync ----------------------------------------------------------------------------------

    def api_client(self) -> kubernetes.client.ApiClient:
        """The sync ``kubernetes.client.ApiClient``, built once (thread-safe; may block: a worker's,
        or a triggerer's thread)."""
        if self._sync is None:
            with self._sync_lock:
                if self._sync is None:
                    self._sync = self._build_sync()
        return self._sync

    def _build_sync(self) -> kubernetes.client.ApiClient:
        from kubernetes import client

        source = self.source()
        if source.kind == "emulator":
            configuration = client.Configuration(host=source.host)
            # Loopback never goes through a proxy the environment names.
            configuration.proxy = None
            return client.ApiClient(configuration)
        if source.kind == "kubernetes":
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            return KubernetesHook(conn_id=self.kubernetes_conn_id).get_conn()
        url, ca = self.cluster_endpoint()
        return self._gke_kubernetes_hook(url, ca).get_conn()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the sync client (its connection pool) and remove the CA file, if any."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None
        if self._ca_file:
            with contextlib.suppress(OSError):
                os.unlink(self._ca_file)
            self._ca_file = None

    # -- async ---------------------------------------------------------------------------------

    async def async_api_client(self) -> kubernetes_asyncio.client.ApiClient:
        """The ``kubernetes_asyncio.client.ApiClient``, built once in the running loop; its
        configuration is made in a worker thread."""
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            if self._async is None:
                self._async = await self._build_async()
                self._closer = _close_at_loop_end(self, self._async)
                await anext(self._closer)
            return self._async

    async def _build_async(self) -> kubernetes_asyncio.client.ApiClient:
        from kubernetes_asyncio import client

        source = await asyncio.to_thread(self.source)
        if source.kind == "kubernetes":
            configuration = await self._cncf_async_configuration()
        else:
            configuration = await asyncio.to_thread(self._async_configuration, source)
        loop = asyncio.get_running_loop()
        # The aiohttp session binds to the running loop; its SSL context reads the system's CA
        # store from disk, so it is made in a thread that borrows this loop as its running one.
        return await asyncio.to_thread(_in_loop, loop, client.ApiClient, configuration)

    def _async_configuration(self, source: ClusterSource) -> kubernetes_asyncio.client.Configuration:
        """The emulator's or the GKE cluster's async configuration (blocking: run in a thread)."""
        from kubernetes_asyncio import client

        if source.kind == "emulator":
            ensure_no_proxy()
            configuration = client.Configuration(host=source.host)
            configuration.proxy = None
            return configuration
        url, ca = self.cluster_endpoint()
        self._credentials = self._gke_kubernetes_hook(url, ca).get_credentials()
        token = self._fresh_token()
        configuration = client.Configuration(
            host=url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.ssl_ca_cert = self._write_ca(ca)
        configuration.refresh_api_key_hook = self._refresh_token
        return configuration

    async def _cncf_async_configuration(self) -> kubernetes_asyncio.client.Configuration:
        """The connection's configuration, loaded by cncf-kubernetes' own async hook (in-cluster,
        kubeconfig path or extra), and loaded again every :data:`_KUBECONFIG_RELOAD` seconds, which
        renews exec credentials as that hook does on each of its own calls."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)
        async with hook.get_conn():  # loads hook.client_configuration; its own client is closed
            pass
        configuration = hook.client_configuration
        assert configuration is not None
        reload_at = time.monotonic() + _KUBECONFIG_RELOAD

        async def reload(current: Any) -> None:
            # ``refresh_api_key_hook``: the triggerer keeps one client for its whole life, so an
            # exec plugin's token would expire under it (401 on every call an hour later).
            nonlocal reload_at
            if time.monotonic() < reload_at:
                return
            reload_at = time.monotonic() + _KUBECONFIG_RELOAD  # before the await: one reload at a time
            try:
                async with hook.get_conn():  # reloads exec credentials; static ones stay cached
                    pass
            except Exception:
                reload_at = time.monotonic() + _RELOAD_RETRY
                self.log.warning(
                    "Could not reload Kubernetes connection %s; keeping its current credentials",
                    self.kubernetes_conn_id,
                    exc_info=True,
                )
                return
            fresh = hook.client_configuration
            if fresh is not None and fresh is not current:
                current.api_key = dict(fresh.api_key)
                current.api_key_prefix = dict(fresh.api_key_prefix)

        configuration.refresh_api_key_hook = reload
        return configuration

    def _fresh_token(self) -> str:
        """The Google credentials' token, refreshed when missing or close to expiry (blocking)."""
        from google.auth.transport import requests as google_requests

        creds = self._credentials
        if self._token_due():
            creds.refresh(google_requests.Request())
        return str(creds.token)

    def _token_due(self) -> bool:
        """Whether the Google credentials' token is missing, invalid or within the margin of expiry."""
        import datetime

        creds = self._credentials
        expiry = getattr(creds, "expiry", None)
        soon = False
        if expiry is not None:
            now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            soon = (expiry - now).total_seconds() < _TOKEN_MARGIN
        return creds.token is None or not creds.valid or soon

    async def _refresh_token(self, configuration: Any) -> None:
        """``refresh_api_key_hook`` (run before every call): a new token, in a thread, only when the
        current one is about to go."""
        if self._token_due():
            configuration.api_key = {"BearerToken": await asyncio.to_thread(self._fresh_token)}

    def _write_ca(self, ca_base64: str) -> str:
        import base64

        handle, path = tempfile.mkstemp(prefix="dws-gke-ca-", suffix=".crt")
        with os.fdopen(handle, "wb") as out:
            out.write(base64.b64decode(ca_base64))
        self._ca_file = path
        return path

    async def aclose(self) -> None:
        """Close the async client (its aiohttp session), then what :meth:`close` closes."""
        if self._async is not None:
            client, self._async = self._async, None
            await client.close()
        await asyncio.to_thread(self.close)


async def _close_at_loop_end(hook: GKEClusterHook, client: Any) -> AsyncIterator[None]:
    """Suspended for as long as the hook's async ``client`` is open; its ``finally`` closes it.

    An aiohttp session must be closed in the loop that made it, or it complains when collected. A
    wait run in a loop of its own (``deferrable=False``; ``airflow dags test`` runs a trigger to its
    first event only) has no moment to close it; but ``asyncio.run`` closes every suspended async
    generator before the loop ends (``shutdown_asyncgens``), and this one closes the client then.
    """
    try:
        yield
    finally:
        if hook._async is client:  # not closed already (and not replaced by a newer client)
            await hook.aclose()


def _in_loop(loop: asyncio.AbstractEventLoop, factory: Any, *args: Any) -> Any:
    """Call ``factory`` in this worker thread with ``loop`` as its running loop (aiohttp's
    connector and session take the running loop at construction and are only used from it)."""
    asyncio.events._set_running_loop(loop)
    try:
        return factory(*args)
    finally:
        asyncio.events._set_running_loop(None)
