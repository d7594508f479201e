"""Extra link from a task to its Cloud TPU queued resource in the Google Cloud console."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from airflow_provider_dws.links.vertex_ai import CONSOLE

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey


def queued_resource_console_url(project_id: str, zone: str, queued_resource_id: str) -> str:
    """The console's TPU page for the project, scoped to the queued resource's zone and id."""
    return f"{CONSOLE}/compute/tpus?project={project_id}&zone={zone}&queuedResource={queued_resource_id}"


class TPUQueuedResourceLink(BaseOperatorLink):
    """ "TPU Queued Resource": the Cloud TPU page of the console for this request.

    The URL is written to XCom (key ``dws_tpu_queued_resource_link``) before the task defers.
    """

    name = "TPU Queued Resource"
    key = "dws_tpu_queued_resource_link"

    @property
    def xcom_key(self) -> str:
        """The XCom key the URL is stored under."""
        return self.key

    @classmethod
    def persist(cls, context: Any, project_id: str, zone: str, queued_resource_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        url = queued_resource_console_url(project_id, zone, queued_resource_id)
        context["ti"].xcom_push(key=cls.key, value=url)
        return url

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the request exists."""
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""
