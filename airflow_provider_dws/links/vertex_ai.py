"""Extra link from a task to its Vertex AI custom job in the Google Cloud console."""

from __future__ import annotations

from typing import Any

from airflow_provider_dws.links.base import CONSOLE, StoredUrlLink

__all__ = ["CONSOLE", "VertexAIFlexStartJobLink", "custom_job_console_url"]


def custom_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one custom job."""
    return f"{CONSOLE}/vertex-ai/locations/{region}/training/{job_id}/cpu?project={project_id}"


class VertexAIFlexStartJobLink(StoredUrlLink):
    """ "Vertex AI Flex Start Job": the job's page in the Google Cloud console (XCom key ``dws_vertex_job_link``)."""

    name = "Vertex AI Flex Start Job"
    key = "dws_vertex_job_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, region: str, job_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, custom_job_console_url(project_id, region, job_id))
