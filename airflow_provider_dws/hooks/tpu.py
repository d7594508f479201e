"""Cloud TPU v2 clients (sync and async) for queued resources."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.tpu_v2 import TpuAsyncClient, TpuClient


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
            from google.cloud.tpu_v2 import TpuClient

            self._client = self.client(TpuClient)
        return self._client


class DwsTpuAsyncHook(DwsAsyncHookBase[DwsTpuHook, "TpuAsyncClient"]):
    """Asynchronous ``TpuAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsTpuHook

    async def get_tpu_client(self) -> TpuAsyncClient:
        """A ``TpuAsyncClient`` bound to the running event loop."""
        return await self.get_client("global")

    def _build(self, hook: DwsTpuHook, key: str, credentials: Any) -> TpuAsyncClient:
        from google.cloud.tpu_v2 import TpuAsyncClient

        return hook.client(TpuAsyncClient, credentials=credentials, asynchronous=True)
