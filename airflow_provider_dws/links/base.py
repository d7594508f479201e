"""Console links whose URL the task stores in XCom before it defers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

CONSOLE = "https://console.cloud.google.com"


class StoredUrlLink(BaseOperatorLink):
    """An extra link whose whole URL is pushed to XCom under :attr:`key` by the task.

    Storing the URL (not its parts) before deferring makes the link work while the request still
    waits in the queue, and keeps ``get_link`` free of API calls.
    """

    key: ClassVar[str]

    @property
    def xcom_key(self) -> str:
        """The XCom key the URL is stored under."""
        return self.key

    @classmethod
    def push_url(cls, context: Any, url: str) -> str:
        """Store ``url`` for this task instance; returns it."""
        context["ti"].xcom_push(key=cls.key, value=url)
        return url

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The stored URL, or an empty string before the request exists."""
        value = XCom.get_value(key=self.key, ti_key=ti_key)
        return value if isinstance(value, str) else ""
