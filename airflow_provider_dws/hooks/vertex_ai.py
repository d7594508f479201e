"""Vertex AI ``JobService`` clients (sync and async) on the regional endpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobServiceClient


def vertex_api_endpoint(region: str) -> str:
    """The regional Vertex AI endpoint (custom jobs live in a region, not globally)."""
    return f"{region}-aiplatform.googleapis.com"


class DwsVertexAIHook(DwsBaseHook):
    """Synchronous Vertex AI ``JobServiceClient`` factory for one connection.

    Clients are cached per region on the hook: client construction resolves credentials, which can
    cost a network round trip.
    """

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self._clients: dict[str, JobServiceClient] = {}

    def get_job_service_client(self, region: str) -> JobServiceClient:
        """A ``JobServiceClient`` for ``region`` (or for the emulator when it is switched on)."""
        client = self._clients.get(region)
        if client is None:
            from google.cloud.aiplatform_v1 import JobServiceClient

            client = self.client(JobServiceClient, api_endpoint=vertex_api_endpoint(region))
            self._clients[region] = client
        return client


class DwsVertexAIAsyncHook(DwsAsyncHookBase[DwsVertexAIHook, "JobServiceAsyncClient"]):
    """Asynchronous ``JobServiceAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsVertexAIHook

    async def get_job_service_client(self, region: str) -> JobServiceAsyncClient:
        """A ``JobServiceAsyncClient`` for ``region`` bound to the running event loop."""
        return await self.get_client(region)

    def _build(self, hook: DwsVertexAIHook, key: str, credentials: Any) -> JobServiceAsyncClient:
        from google.cloud.aiplatform_v1 import JobServiceAsyncClient

        return hook.client(
            JobServiceAsyncClient,
            api_endpoint=vertex_api_endpoint(key),
            credentials=credentials,
            asynchronous=True,
        )
