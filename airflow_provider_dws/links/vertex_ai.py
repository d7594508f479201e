"""Extra link from a task to its Vertex AI custom job in the Google Cloud console."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

CONSOLE = "https://console.cloud.google.com"


def custom_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one custom job."""
    return f"{CONSOLE}/vertex-ai/locations/{region}/training/{job_id}/cpu?project={project_id}"


class VertexAIFlexStartJobLink(BaseOperatorLink):
    """ "Vertex AI Flex Start Job": the job's page in the Google Cloud console.

    The URL is written to XCom (key ``dws_vertex_job_link``) before the task defers, so the link
    works while the job is still waiting in the queue.
    """

    name = "Vertex AI Flex Start Job"
    key = "dws_vertex_job_link"

    @property
    def xcom_key(self) -> str:
        """The XCom key the URL is stored under."""
        return self.key

    @classmethod
    def persist(cls, context: Any, project_id: str, region: str, job_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        url = custom_job_console_url(project_id, region, job_id)
        context["ti"].xcom_push(key=cls.key, value=url)
        return url

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the job exists."""
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""
