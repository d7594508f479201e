"""Vertex AI clients (sync and async) on the regional endpoint: ``v1`` ``JobService`` for custom
jobs, ``v1beta1`` ``JobService`` and ``EndpointService`` for inference on flex-start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobServiceClient
    from google.cloud.aiplatform_v1beta1 import EndpointServiceAsyncClient, EndpointServiceClient
    from google.cloud.aiplatform_v1beta1 import JobServiceAsyncClient as BetaJobServiceAsyncClient
    from google.cloud.aiplatform_v1beta1 import JobServiceClient as BetaJobServiceClient


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


class DwsVertexAIBetaHook(DwsBaseHook):
    """Synchronous Vertex AI ``v1beta1`` clients: the ``JobService`` (batch prediction jobs) and the
    ``EndpointService``. Flex-start for inference (``FlexStart``) exists only in ``v1beta1``."""

    def get_job_service_client(self, region: str) -> BetaJobServiceClient:
        """A ``v1beta1`` ``JobServiceClient`` for ``region`` (or for the emulator)."""
        from google.cloud.aiplatform_v1beta1 import JobServiceClient

        return self.cached_client(JobServiceClient, region, api_endpoint=vertex_api_endpoint(region))

    def get_endpoint_service_client(self, region: str) -> EndpointServiceClient:
        """A ``v1beta1`` ``EndpointServiceClient`` for ``region`` (or for the emulator)."""
        from google.cloud.aiplatform_v1beta1 import EndpointServiceClient

        return self.cached_client(EndpointServiceClient, region, api_endpoint=vertex_api_endpoint(region))


class DwsVertexAIBetaJobsAsyncHook(DwsAsyncHookBase[DwsVertexAIBetaHook, "BetaJobServiceAsyncClient"]):
    """Asynchronous ``v1beta1`` ``JobServiceAsyncClient`` factory for triggers."""

    sync_hook_class = DwsVertexAIBetaHook
    async_client_class = "google.cloud.aiplatform_v1beta1:JobServiceAsyncClient"

    async def get_job_service_client(self, region: str) -> BetaJobServiceAsyncClient:
        """A ``v1beta1`` ``JobServiceAsyncClient`` for ``region`` bound to the running event loop."""
        return await self.get_client(region)

    def api_endpoint(self, key: str) -> str | None:
        """The regional endpoint (the key is the region)."""
        return vertex_api_endpoint(key)


class DwsVertexAIEndpointsAsyncHook(DwsAsyncHookBase[DwsVertexAIBetaHook, "EndpointServiceAsyncClient"]):
    """Asynchronous ``v1beta1`` ``EndpointServiceAsyncClient`` factory for triggers."""

    sync_hook_class = DwsVertexAIBetaHook
    async_client_class = "google.cloud.aiplatform_v1beta1:EndpointServiceAsyncClient"

    async def get_endpoint_service_client(self, region: str) -> EndpointServiceAsyncClient:
        """A ``v1beta1`` ``EndpointServiceAsyncClient`` for ``region`` bound to the running event loop."""
        return await self.get_client(region)

    def api_endpoint(self, key: str) -> str | None:
        """The regional endpoint (the key is the region)."""
        return vertex_api_endpoint(key)
