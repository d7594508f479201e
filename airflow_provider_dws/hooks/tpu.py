"""Cloud TPU v2 clients (sync and async) for queued resources."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.tpu_v2 import TpuAsyncClient, TpuClient


class DwsTpuHook(DwsBaseHook):
    """Synchronous Cloud TPU ``TpuClient`` (global endpoint; resources are addressed by zone)."""

    def get_tpu_client(self) -> TpuClient:
        """A ``TpuClient`` (or one for the emulator when it is switched on), built once."""
        from google.cloud.tpu_v2 import TpuClient

        return self.cached_client(TpuClient)


class DwsTpuAsyncHook(DwsAsyncHookBase[DwsTpuHook, "TpuAsyncClient"]):
    """Asynchronous ``TpuAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsTpuHook
    async_client_class = "google.cloud.tpu_v2:TpuAsyncClient"

    async def get_tpu_client(self) -> TpuAsyncClient:
        """A ``TpuAsyncClient`` bound to the running event loop."""
        return await self.get_client("global")
