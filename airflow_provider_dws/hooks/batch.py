"""Cloud Batch ``BatchService`` clients (sync and async) on the global endpoint.

In emulator mode :func:`~airflow_provider_dws.hooks.base.emulator_client` gives them an insecure
gRPC channel transport (``BatchServiceGrpcTransport(channel=grpc.insecure_channel(host))``, and the
asyncio one likewise): an ``api_endpoint`` alone would still speak TLS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.batch_v1 import BatchServiceAsyncClient, BatchServiceClient


class DwsBatchHook(DwsBaseHook):
    """Synchronous Cloud Batch ``BatchServiceClient`` (jobs are addressed by region in their name)."""

    def get_batch_client(self) -> BatchServiceClient:
        """A ``BatchServiceClient`` (or one for the emulator when it is switched on), built once."""
        from google.cloud.batch_v1 import BatchServiceClient

        return self.cached_client(BatchServiceClient)


class DwsBatchAsyncHook(DwsAsyncHookBase[DwsBatchHook, "BatchServiceAsyncClient"]):
    """Asynchronous ``BatchServiceAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsBatchHook
    async_client_class = "google.cloud.batch_v1:BatchServiceAsyncClient"

    async def get_batch_client(self) -> BatchServiceAsyncClient:
        """A ``BatchServiceAsyncClient`` bound to the running event loop."""
        return await self.get_client("global")
