"""TPUQueuedResourceLink: the console URL is pushed to XCom before the task defers."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_provider_dws import links as link_base
from airflow_provider_dws.console import push_url
from airflow_provider_dws.links import TPUQueuedResourceLink
from airflow_provider_dws.runtime.tpu import queued_resource_console_url


class FakeTI:
    def __init__(self) -> None:
        self.pushed: list[tuple[str, Any]] = []

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed.append((key, value))


def test_name_and_xcom_key() -> None:
    link = TPUQueuedResourceLink()
    assert link.name == "TPU Queued Resource"
    assert link.xcom_key == "dws_tpu_queued_resource_link"
    assert link.xcom_key == TPUQueuedResourceLink.key


def test_push_url_pushes_the_url_under_the_link_key() -> None:
    ti = FakeTI()
    url = push_url(
        {"ti": ti},
        TPUQueuedResourceLink.key,
        queued_resource_console_url("my-project", "us-west4-a", "dws-fit-0123456789abcdef"),
    )
    assert ti.pushed == [(TPUQueuedResourceLink().xcom_key, url)]
    parts = urlsplit(url)
    assert parts.scheme == "https"
    assert parts.netloc == "console.cloud.google.com"
    assert parts.path == "/compute/tpus"
    assert parse_qs(parts.query) == {
        "project": ["my-project"],
        "zone": ["us-west4-a"],
        "queuedResource": ["dws-fit-0123456789abcdef"],
    }


def test_url_helper_matches_what_is_pushed() -> None:
    ti = FakeTI()
    url = push_url(
        {"ti": ti}, TPUQueuedResourceLink.key, queued_resource_console_url("p-123456", "europe-west4-b", "q1")
    )
    assert ti.pushed == [(TPUQueuedResourceLink.key, url)]
    assert url == queued_resource_console_url("p-123456", "europe-west4-b", "q1")
    for part in ("p-123456", "europe-west4-b", "q1"):
        assert part in url


@pytest.mark.parametrize(("stored", "expected"), [("https://x/y", "https://x/y"), (None, ""), (3, "")])
def test_get_link_reads_the_stored_url(monkeypatch: pytest.MonkeyPatch, stored: Any, expected: str) -> None:
    calls: list[dict[str, Any]] = []

    def get_value(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return stored

    monkeypatch.setattr(link_base.XCom, "get_value", staticmethod(get_value))
    ti_key = object()
    assert TPUQueuedResourceLink().get_link(None, ti_key=ti_key) == expected  # type: ignore[arg-type]
    assert calls == [{"key": "dws_tpu_queued_resource_link", "ti_key": ti_key}]
