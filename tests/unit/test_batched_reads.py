"""Reads asked for together (backends/batched_reads.py): one list for many, a GET for a few, the
list reused by the next bursts, and a failure kept to the read it concerns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider_dws import errors
from airflow_provider_dws.backends import batched_reads
from airflow_provider_dws.backends.batched_reads import BatchedReads


class Objects:
    """A namespace of objects, counting the calls made on it."""

    def __init__(self, names: list[str]) -> None:
        self.objects = {name: {"metadata": {"name": name}} for name in names}
        self.calls: list[str] = []
        self.list_fails = False

    async def list_all(self) -> dict[str, dict[str, Any]]:
        self.calls.append("list")
        if self.list_fails:
            raise errors.PermissionDeniedApiError("list is forbidden")
        return dict(self.objects)

    async def get_one(self, name: str) -> dict[str, Any]:
        self.calls.append(f"get {name}")
        if name not in self.objects:
            raise errors.RequestNotFoundError(f"{name} not found")
        return self.objects[name]


def reads_of(objects: Objects) -> BatchedReads:
    return BatchedReads(objects.list_all, objects.get_one)


def test_many_reads_at_once_are_one_list() -> None:
    objects = Objects([f"t{i}" for i in range(100)])
    reads = reads_of(objects)

    async def go() -> list[dict[str, Any]]:
        return await asyncio.gather(*(reads.read(f"t{i}") for i in range(100)))

    got = asyncio.run(go())
    assert [o["metadata"]["name"] for o in got] == [f"t{i}" for i in range(100)]
    assert objects.calls == ["list"]


def test_a_few_reads_are_a_get_each() -> None:
    objects = Objects(["a", "b"])
    reads = reads_of(objects)

    async def go() -> list[dict[str, Any]]:
        return await asyncio.gather(reads.read("a"), reads.read("b"))

    asyncio.run(go())
    assert sorted(objects.calls) == ["get a", "get b"]


def test_reads_asked_for_during_a_burst_are_served_by_its_list_or_the_next() -> None:
    objects = Objects([f"t{i}" for i in range(20)])
    reads = reads_of(objects)

    async def go() -> int:
        first = [asyncio.ensure_future(reads.read(f"t{i}")) for i in range(10)]
        await asyncio.sleep(batched_reads.GATHER_SECONDS * 1.5)  # the first burst is being served
        later = [asyncio.ensure_future(reads.read(f"t{i}")) for i in range(10, 20)]
        return len(await asyncio.gather(*first, *later))

    assert asyncio.run(go()) == 20
    assert objects.calls == ["list"]  # the later burst came within REUSE_SECONDS of the list


def test_a_refused_list_falls_back_to_gets_and_a_missing_object_fails_only_its_read() -> None:
    objects = Objects([f"t{i}" for i in range(9)])
    objects.list_fails = True
    reads = reads_of(objects)

    async def go() -> list[Any]:
        return await asyncio.gather(*(reads.read(f"t{i}") for i in range(10)), return_exceptions=True)

    got = asyncio.run(go())
    assert isinstance(got[9], errors.RequestNotFoundError)
    assert all(isinstance(o, dict) for o in got[:9])
    assert objects.calls.count("list") == 1 and len(objects.calls) == 11


def test_an_object_made_after_the_list_is_read_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = Objects([f"t{i}" for i in range(8)])
    reads = reads_of(objects)

    async def go() -> None:
        await asyncio.gather(*(reads.read(f"t{i}") for i in range(8)))
        objects.objects["new"] = {"metadata": {"name": "new"}}
        assert (await reads.read("new"))["metadata"]["name"] == "new"

    asyncio.run(go())
    assert objects.calls == ["list", "get new"]
