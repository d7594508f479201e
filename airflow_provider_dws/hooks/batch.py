"""Cloud Batch ``BatchService`` clients (sync and async) on the global endpoint.

In emulator mode :func:`~airflow_provider_dws.hooks.base.emulator_client` gives them an insecure
gRPC channel transport (``BatchServiceGrpcTransport(channel=grpc.insecure_channel(host))``, and the
asyncio one likewise): an ``api_endpoint`` alone would still speak TLS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.batch_v1 import BatchServiceAsyncClient, BatchServiceClient


class DwsBatchHook(DwsBaseHook):
    """Synchronous Cloud Batch ``BatchServiceClient`` (jobs are addressed by region in their name)."""

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self._client: BatchServiceClient | None = None

    def get_batch_client(self) -> BatchServiceClient:
        """A ``BatchServiceClient`` (or one for the emulator when it is switched on), built once."""
        if self._client is None:
            from google.cloud.batch_v1 import BatchServiceClient

            self._client = self.client(BatchServiceClient)
        return self._client


class DwsBatchAsyncHook(DwsAsyncHookBase[DwsBatchHook, "BatchServiceAsyncClient"]):
    """Asynchronous ``BatchServiceAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsBatchHook

    async def get_batch_client(self) -> BatchServiceAsyncClient:
        """A ``BatchServiceAsyncClient`` bound to the running event loop."""
        return await self.get_client("global")

    def _build(self, hook: DwsBatchHook, key: str, credentials: Any) -> BatchServiceAsyncClient:
        from google.cloud.batch_v1 import BatchServiceAsyncClient

        return hook.client(BatchServiceAsyncClient, credentials=credentials, asynchronous=True)
