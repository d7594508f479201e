"""The watch of a Job backend: a Job's state is read from the Job and the objects it owns (Kueue's
Workload, or its pods), two kinds, so its watch is two Kubernetes watches, paired.

:class:`PairedView` keeps the last list of both kinds (what the shared poller's list saw) and
applies each watched change to it: a change to a Job, or to an object a Job owns, gives that Job's
new status at once. :func:`merged` runs the two watches as one stream, which ends when either
does (the poller's watch renews both) and fails when either fails (``410 Gone`` from either: the
poller lists both again). The watch's ``resourceVersion`` is the pair's, ``"<jobs>,<owned>"``:
opaque to the poller, which only hands it back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from airflow_provider_dws.backends.base import RequestStatus

#: Which of the two watches an event came from.
JOBS, OWNED = 0, 1


def pair_version(jobs: str | None, owned: str | None) -> str | None:
    """The pair's ``resourceVersion`` (None unless both are known)."""
    return f"{jobs},{owned}" if jobs and owned else None


def split_version(version: str) -> tuple[str, str]:
    """The two ``resourceVersion``s of :func:`pair_version`'s text."""
    jobs, _, owned = version.partition(",")
    return jobs, owned


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class PairedView:
    """The provider's Jobs of one namespace and the objects they own, as last listed and watched.

    :param owners: the uids of the Jobs that own an object (its owner references, its uid label).
    :param classify: a Job's status from it and the objects it owns.
    """

    def __init__(
        self,
        owners: Callable[[dict[str, Any]], Iterable[str]],
        classify: Callable[[dict[str, Any], Sequence[dict[str, Any]]], RequestStatus],
    ) -> None:
        self._owners = owners
        self._classify = classify
        self.jobs: dict[str, dict[str, Any]] = {}  # by uid
        self.owned: dict[str, dict[str, dict[str, Any]]] = {}  # owner uid -> object name -> object

    def listed(self, jobs: Iterable[dict[str, Any]], owned: Iterable[dict[str, Any]]) -> None:
        """Start again from a list of both kinds."""
        self.jobs = {_uid(job): job for job in jobs if _uid(job)}
        self.owned = {}
        for obj in owned:
            for uid in self._owners(obj):
                self.owned.setdefault(uid, {})[_name(obj)] = obj

    def owned_of(self, uid: str) -> list[dict[str, Any]]:
        """The objects the Job ``uid`` owns, as last listed and watched."""
        return list(self.owned.get(uid, {}).values())

    def changed(self, which: int, kind: str, obj: dict[str, Any]) -> list[tuple[str, RequestStatus | None]]:
        """Apply one watched change (``kind``: ADDED, MODIFIED or DELETED) of a Job (``which`` is
        :data:`JOBS`) or of an owned object; the statuses of the Jobs it changes (None: a Job
        deleted)."""
        if which == JOBS:
            uid = _uid(obj)
            if kind == "DELETED":
                self.jobs.pop(uid, None)
                self.owned.pop(uid, None)
                return [(_name(obj), None)]
            self.jobs[uid] = obj
            return [(_name(obj), self._status(uid))]
        changed: list[tuple[str, RequestStatus | None]] = []
        for uid in self._owners(obj):
            objects = self.owned.setdefault(uid, {})
            if kind == "DELETED":
                objects.pop(_name(obj), None)
            else:
                objects[_name(obj)] = obj
            if uid in self.jobs:
                changed.append((_name(self.jobs[uid]), self._status(uid)))
        return changed

    def _status(self, uid: str) -> RequestStatus:
        return self._classify(self.jobs[uid], self.owned_of(uid))


async def merged(
    streams: Sequence[AsyncIterator[tuple[str, dict[str, Any]]]],
) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
    """The events of ``streams`` as one stream of (stream index, event type, object), in the order
    they come; it ends when any stream ends and raises what any stream raises."""
    queue: asyncio.Queue[tuple[int, str, Any]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[tuple[str, dict[str, Any]]]) -> None:
        try:
            async for kind, obj in stream:
                await queue.put((index, kind, obj))
        except Exception as err:
            await queue.put((index, "", err))
            return
        await queue.put((index, "", None))

    tasks = [asyncio.get_running_loop().create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        while True:
            index, kind, obj = await queue.get()
            if not kind:
                if obj is not None:
                    raise obj
                return
            yield index, kind, obj
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
