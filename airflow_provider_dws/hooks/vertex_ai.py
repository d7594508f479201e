"""Vertex AI ``JobService`` clients (sync and async) on the regional endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobServiceClient


def vertex_api_endpoint(region: str) -> str:
    """The regional Vertex AI endpoint (custom jobs live in a region, not globally)."""
    return f"{region}-aiplatform.googleapis.com"


class DwsVertexAIHook(DwsBaseHook):
    """Synchronous Vertex AI ``JobServiceClient`` factory for one connection, a client per region."""

    def get_job_service_client(self, region: str) -> JobServiceClient:
        """A ``JobServiceClient`` for ``region`` (or for the emulator when it is switched on)."""
        from google.cloud.aiplatform_v1 import JobServiceClient

        return self.cached_client(JobServiceClient, region, api_endpoint=vertex_api_endpoint(region))


class DwsVertexAIAsyncHook(DwsAsyncHookBase[DwsVertexAIHook, "JobServiceAsyncClient"]):
    """Asynchronous ``JobServiceAsyncClient`` factory for triggers (see :class:`DwsAsyncHookBase`)."""

    sync_hook_class = DwsVertexAIHook
    async_client_class = "google.cloud.aiplatform_v1:JobServiceAsyncClient"

    async def get_job_service_client(self, region: str) -> JobServiceAsyncClient:
        """A ``JobServiceAsyncClient`` for ``region`` bound to the running event loop."""
        return await self.get_client(region)

    def api_endpoint(self, key: str) -> str | None:
        """The regional endpoint (the key is the region)."""
        return vertex_api_endpoint(key)
