"""The shared poller's list classifies only what changed since the last list of its backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_dws.backends.base import ListMemo, RequestStatus, classify_listed, find_listed, rfc3339
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings


@dataclass
class Item:
    name: str
    version: int
    state: str


def status_of(item: Item) -> RequestStatus:
    return RequestStatus(item.name, item.state, Outcome(Phase.WAITING, None, ""), RequestTimings())


async def pages(*batches: Iterable[Item]) -> AsyncIterator[Iterable[Item]]:
    for batch in batches:
        yield batch


def listed(memo: ListMemo, calls: list[str], *batches: Iterable[Item], only: Any = None) -> dict[str, Any]:
    def classify(item: Item) -> RequestStatus:
        calls.append(item.name)
        return status_of(item)

    return asyncio.run(classify_listed(pages(*batches), only, classify, memo))


def test_unchanged_requests_keep_their_status_and_changed_ones_are_classified_again() -> None:
    memo = ListMemo(lambda item: item.version)
    calls: list[str] = []
    first = listed(memo, calls, [Item("a", 1, "QUEUED"), Item("b", 1, "QUEUED")], [Item("c", 1, "QUEUED")])
    assert calls == ["a", "b", "c"]
    calls.clear()
    second = listed(memo, calls, [Item("a", 1, "QUEUED"), Item("b", 2, "RUNNING")], [Item("c", 1, "QUEUED")])
    assert calls == ["b"]  # only the one whose version moved
    assert second["a"] is first["a"]
    assert second["b"].state == "RUNNING"


def test_what_left_the_list_is_forgotten() -> None:
    memo = ListMemo(lambda item: item.version)
    calls: list[str] = []
    listed(memo, calls, [Item("a", 1, "QUEUED"), Item("b", 1, "QUEUED")])
    listed(memo, calls, [Item("a", 1, "QUEUED")])  # b ended: it is not listed any more
    assert set(memo.statuses) == {"a"}
    calls.clear()
    # If b is listed again (a new life under the same name), it is classified afresh.
    again = listed(memo, calls, [Item("a", 1, "QUEUED"), Item("b", 1, "SCHEDULED")])
    assert calls == ["b"]
    assert again["b"].state == "SCHEDULED"


def test_only_the_requested_names_are_classified_or_remembered() -> None:
    memo = ListMemo(lambda item: item.version)
    calls: list[str] = []
    found = listed(memo, calls, [Item("a", 1, "QUEUED"), Item("b", 1, "QUEUED")], only={"b"})
    assert calls == ["b"] and set(found) == {"b"} and set(memo.statuses) == {"b"}


def test_the_versions_read_what_the_classification_reads() -> None:
    from google.cloud.aiplatform_v1 import CustomJob, JobState
    from google.cloud.batch_v1 import Job, JobStatus, StatusEvent

    from airflow_provider_dws.backends import batch, vertex_ai

    job = CustomJob(name="projects/p/locations/us-central1/customJobs/1", state=JobState.JOB_STATE_PENDING)
    before = vertex_ai.job_version(job)
    job.state = JobState.JOB_STATE_RUNNING
    assert vertex_ai.job_version(job) != before
    before = vertex_ai.job_version(job)
    job.update_time = {"seconds": 5}
    assert vertex_ai.job_version(job) != before

    bjob = Job(name="projects/p/locations/us-central1/jobs/j", status=JobStatus(state=JobStatus.State.QUEUED))
    before = batch.job_version(bjob)
    bjob.status.status_events.append(StatusEvent(description="moved"))
    assert batch.job_version(bjob) != before


def test_find_listed_stops_fetching_pages_once_all_wanted_are_found() -> None:
    fetched: list[int] = []

    async def counted(*batches: list[Item]) -> AsyncIterator[Iterable[Item]]:
        for index, batch in enumerate(batches):
            fetched.append(index)
            yield batch

    batches = [
        [Item("a", 1, "SUCCEEDED"), Item("x", 1, "FAILED")],
        [Item("b", 1, "SUCCEEDED")],
        [Item("c", 1, "X")],
    ]
    found = asyncio.run(find_listed(counted(*batches), {"a", "b"}, status_of, scan_limit=100))
    assert set(found) == {"a", "b"} and fetched == [0, 1]  # the third page is never asked for


def test_find_listed_stops_at_its_scan_limit_leaving_the_rest_unfound() -> None:
    batches = [[Item(f"o{i}", 1, "SUCCEEDED") for i in range(3)], [Item("wanted", 1, "SUCCEEDED")]]
    found = asyncio.run(find_listed(pages(*batches), {"wanted"}, status_of, scan_limit=3))
    assert found == {}  # the caller reads it directly instead


def test_rfc3339_is_utc_to_the_second_below() -> None:
    from datetime import datetime, timedelta, timezone

    east = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 12, 1, 20, 0, 5, 999000, tzinfo=east)) == "2026-12-01T18:00:05Z"
