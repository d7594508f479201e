"""Extra link from a task to its Cloud TPU queued resource in the Google Cloud console."""

from __future__ import annotations

from typing import Any

from airflow_provider_dws.links.base import CONSOLE, StoredUrlLink


def queued_resource_console_url(project_id: str, zone: str, queued_resource_id: str) -> str:
    """The console's TPU page for the project, scoped to the queued resource's zone and id."""
    return f"{CONSOLE}/compute/tpus?project={project_id}&zone={zone}&queuedResource={queued_resource_id}"


class TPUQueuedResourceLink(StoredUrlLink):
    """ "TPU Queued Resource": the console's Cloud TPU page for this request (XCom key ``dws_tpu_queued_resource_link``)."""

    name = "TPU Queued Resource"
    key = "dws_tpu_queued_resource_link"

    @classmethod
    def persist(cls, context: Any, project_id: str, zone: str, queued_resource_id: str) -> str:
        """Store the console URL for this task instance; returns it."""
        return cls.push_url(context, queued_resource_console_url(project_id, zone, queued_resource_id))
