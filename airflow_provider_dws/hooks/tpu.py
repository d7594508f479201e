"""Cloud TPU v2 clients (sync and async) for queued resources."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from airflow.providers.google.common.consts import CLIENT_INFO
from google.cloud.tpu_v2 import TpuAsyncClient, TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport, TpuGrpcTransport

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook


class DwsTpuHook(DwsBaseHook):
    """Synchronous Cloud TPU ``TpuClient`` (global endpoint; resources are addressed by zone)."""

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self._client: TpuClient | None = None

    def get_tpu_client(self) -> TpuClient:
        """A ``TpuClient`` (or one for the emulator when it is switched on), built once."""
        if self._client is None:
            if self.emulator_host:
                channel = grpc.insecure_channel(self.emulator_host)
                self._client = TpuClient(transport=TpuGrpcTransport(channel=channel))
            else:
                self._client = TpuClient(
                    credentials=self.get_credentials(),
                    client_info=CLIENT_INFO,
                    client_options=self.get_client_options(),
                )
        return self._client


class DwsTpuAsyncHook(DwsAsyncHookBase[DwsTpuHook, TpuAsyncClient]):
    """Asynchronous ``TpuAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsTpuHook

    async def get_tpu_client(self) -> TpuAsyncClient:
        """A ``TpuAsyncClient`` bound to the running event loop."""
        return await self.get_client("global")

    def _build(self, hook: DwsTpuHook, key: str, credentials: Any) -> TpuAsyncClient:
        if hook.emulator_host:
            channel = grpc.aio.insecure_channel(hook.emulator_host)
            return TpuAsyncClient(transport=TpuGrpcAsyncIOTransport(channel=channel))
        return TpuAsyncClient(
            credentials=credentials, client_info=CLIENT_INFO, client_options=hook.get_client_options()
        )
