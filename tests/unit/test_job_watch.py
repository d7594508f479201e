"""The paired watch of a Job backend (backends/job_watch.py): what a change to a Job or to an object
it owns gives, and the two watches run as one stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.job_watch import (
    JOBS,
    OWNED,
    PairedView,
    merged,
    pair_version,
    split_version,
)
from airflow_provider_dws.backends.kube_jobs import owned_by
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings


def job(name: str, uid: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": rv}}


def pod(name: str, owner: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": [{"uid": owner}]}}


def classify(j: dict[str, Any], owned: Sequence[dict[str, Any]]) -> RequestStatus:
    """A status whose state counts the objects the Job owns."""
    return RequestStatus(
        j["metadata"]["name"], f"owns {len(owned)}", Outcome(Phase.WAITING), RequestTimings()
    )


def view() -> PairedView:
    v = PairedView(lambda obj: list(owned_by([obj])), classify)
    v.listed([job("a", "ua"), job("b", "ub")], [pod("a-1", "ua")])
    return v


def test_a_change_to_an_owned_object_gives_its_jobs_status() -> None:
    v = view()
    [(name, status)] = v.changed(OWNED, "ADDED", pod("a-2", "ua"))
    assert name == "a" and status is not None and status.state == "owns 2"
    [(name, status)] = v.changed(OWNED, "DELETED", pod("a-1", "ua"))
    assert status is not None and status.state == "owns 1"
    assert v.changed(OWNED, "ADDED", pod("x-1", "unknown")) == []  # no Job of ours owns it


def test_a_change_to_a_job_gives_its_status_and_a_deletion_none() -> None:
    v = view()
    [(name, status)] = v.changed(JOBS, "MODIFIED", job("b", "ub", "7"))
    assert name == "b" and status is not None and status.state == "owns 0"
    assert v.changed(JOBS, "DELETED", job("a", "ua")) == [("a", None)]
    assert v.changed(OWNED, "MODIFIED", pod("a-1", "ua")) == []  # its Job is gone


def test_the_pairs_version_is_both_or_none() -> None:
    assert pair_version("10", "12") == "10,12" and split_version("10,12") == ("10", "12")
    assert pair_version("10", None) is None and pair_version("", "12") is None


async def _stream(
    events: list[tuple[str, dict[str, Any]]], end: BaseException | None = None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    for event in events:
        await asyncio.sleep(0)
        yield event
    if end is not None:
        raise end
    await asyncio.sleep(3600)  # a watch that would stay open


def test_merged_streams_end_when_one_ends() -> None:
    async def go() -> list[tuple[int, str, dict[str, Any]]]:
        jobs = _stream([("ADDED", job("a", "ua"))])
        owned = _stream([("ADDED", pod("a-1", "ua"))])

        async def ends() -> AsyncIterator[tuple[str, dict[str, Any]]]:
            async for event in owned:
                yield event
                return

        return [event async for event in merged([jobs, ends()])]

    # It ends (the other watch would stay open an hour); what came before the end is handed on.
    events = asyncio.run(asyncio.wait_for(go(), 60))
    assert (OWNED, "ADDED") in [(i, k) for i, k, _ in events] and len(events) <= 2


def test_merged_streams_raise_what_one_raises() -> None:
    class Gone(Exception):
        code = 410

    async def go() -> None:
        async for _ in merged([_stream([]), _stream([("ADDED", pod("p", "u"))], Gone())]):
            pass

    with pytest.raises(Gone):
        asyncio.run(asyncio.wait_for(go(), 60))
