"""Credentials and channels for Google Cloud APIs, with the local emulator switch.

Credentials come from the standard ``google_cloud_default`` connection through
apache-airflow-providers-google's :class:`GoogleBaseHook` (key file, ADC, impersonation chain).

Emulator switch, following Google's ``*_EMULATOR_HOST`` convention: when the environment variable
``DWS_EMULATOR_HOST`` (``host:port``) or the connection extra ``dws_emulator_host`` is set, clients
talk to that address over an insecure local channel with anonymous credentials. It is never
implied: it has to be set explicitly, and every hook that uses it says so loudly in the task log.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

EMULATOR_HOST_ENV = "DWS_EMULATOR_HOST"
EMULATOR_HOST_EXTRA = "dws_emulator_host"

log = logging.getLogger(__name__)


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


class DwsBaseHook(GoogleBaseHook):
    """Google Cloud credentials for DWS clients, or the local emulator when it is switched on.

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
        env_host = os.environ.get(EMULATOR_HOST_ENV, "").strip()
        try:
            super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        except Exception:
            # With the emulator switched on by the environment, a missing connection is fine: no
            # credentials are needed. Without it, the missing connection is the user's error.
            if not env_host:
                raise
            self.gcp_conn_id = gcp_conn_id
            self.impersonation_chain = impersonation_chain
            self.quota_project_id = None
            self.extras = {}
            self._cached_credentials = None
            self._cached_project_id = None
        extra_host = self._get_field(EMULATOR_HOST_EXTRA, None)
        if env_host:
            self.emulator_host: str | None = check_emulator_host(env_host)
            self._emulator_source = f"environment variable {EMULATOR_HOST_ENV}"
        elif extra_host:
            self.emulator_host = check_emulator_host(str(extra_host))
            self._emulator_source = f"extra {EMULATOR_HOST_EXTRA!r} of connection {gcp_conn_id!r}"
        else:
            self.emulator_host = None
            self._emulator_source = ""
        if self.emulator_host:
            self.log.warning(
                "DWS EMULATOR MODE: talking to the local dws-emulator at %s over an insecure channel "
                "with anonymous credentials (set by %s). No request reaches Google Cloud.",
                self.emulator_host,
                self._emulator_source,
            )

    @property
    def uses_emulator(self) -> bool:
        """True when clients talk to the local emulator instead of Google Cloud."""
        return self.emulator_host is not None


SyncHookT = TypeVar("SyncHookT", bound=DwsBaseHook)
ClientT = TypeVar("ClientT")


class DwsAsyncHookBase(Generic[SyncHookT, ClientT]):
    """Async client factory for triggers: one cached client per key (region or zone).

    Everything that may block (reading the connection, resolving credentials) runs in a worker
    thread, so the triggerer's event loop never stalls on it; gRPC aio channels are created in the
    loop that will use them.
    """

    sync_hook_class: type[SyncHookT]

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
        """The sync hook (connection and credentials), built in a thread."""
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

    def _build(self, hook: SyncHookT, key: str, credentials: Any) -> ClientT:
        raise NotImplementedError
