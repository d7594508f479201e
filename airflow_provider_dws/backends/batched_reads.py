"""Reads asked for at the same moment, served together: one list for many, a GET for a few.

When capacity comes for hundreds of waits at once, each trigger that ends reads one more object
(a ProvisioningRequest's PodTemplate, what its task returns). One GET each is hundreds of calls in
a burst, and with a watch (which hears the capacity at once) those reads were most of the time
from the grant to the last task's event (``benchmarks/gke_watch.py``: 1.4 s of 2.3 s for 1,000).
:class:`BatchedReads` gathers the reads asked for within :data:`GATHER_SECONDS` and serves them
with one paged list when there are :data:`LIST_MIN` or more (then a GET for any the list did not
show), else with a GET each, a few at a time; for a few seconds the list serves the next bursts too
(for objects that do not change once made, as a request's PodTemplate).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: How long the first read waits for others asked for in the same burst.
GATHER_SECONDS = 0.05
#: From this many reads at once, one list serves them (the shared poller's threshold for ended lists).
LIST_MIN = 8
#: GETs in flight at once.
READ_CONCURRENCY = 16
#: A list serves the next bursts too for this long (a burst of hundreds is handed over in batches,
#: so its reads come in several bursts); only for objects that do not change once made.
REUSE_SECONDS = 5.0

Obj = dict[str, Any]


class BatchedReads:
    """Reads of one kind of object, gathered per burst (one per backend, in its event loop)."""

    def __init__(
        self,
        list_all: Callable[[], Awaitable[dict[str, Obj]]],
        get_one: Callable[[str], Awaitable[Obj]],
    ) -> None:
        self._list_all = list_all
        self._get_one = get_one
        self._wanted: dict[str, list[asyncio.Future[Obj]]] = {}
        self._flush: asyncio.Task[None] | None = None
        #: The last list and when it was made (the loop's clock).
        self._listed: dict[str, Obj] = {}
        self._listed_at = float("-inf")
        #: Calls made, for tests and benchmarks: lists, GETs.
        self.stats = {"lists": 0, "gets": 0}

    async def read(self, name: str) -> Obj:
        """Object ``name``; raises what its read raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Obj] = loop.create_future()
        self._wanted.setdefault(name, []).append(future)
        if self._flush is None or self._flush.done():
            self._flush = loop.create_task(self._serve())
        return await future

    async def _serve(self) -> None:
        # Reads asked for while a burst is served are the next burst's.
        while self._wanted:
            await asyncio.sleep(GATHER_SECONDS)
            wanted, self._wanted = self._wanted, {}
            await self._serve_burst(wanted)

    async def _serve_burst(self, wanted: dict[str, list[asyncio.Future[Obj]]]) -> None:
        loop = asyncio.get_running_loop()
        rest = list(wanted)
        if loop.time() - self._listed_at <= REUSE_SECONDS:
            rest = self._from_list(wanted, rest)
        if len(rest) >= LIST_MIN:
            self.stats["lists"] += 1
            started = loop.time()
            try:
                self._listed, self._listed_at = await self._list_all(), started
            except Exception:
                self._listed = {}  # the GETs below still serve each one (and say why one fails)
            rest = self._from_list(wanted, rest)
        pending = iter(rest)

        async def reader() -> None:
            for name in pending:
                self.stats["gets"] += 1
                try:
                    obj = await self._get_one(name)
                except Exception as err:
                    _settle(wanted[name], None, err)
                else:
                    _settle(wanted[name], obj, None)

        await asyncio.gather(*(reader() for _ in range(min(READ_CONCURRENCY, len(rest)))))

    def _from_list(self, wanted: dict[str, list[asyncio.Future[Obj]]], names: list[str]) -> list[str]:
        """Serve what the last list showed; returns the names it did not show."""
        rest = []
        for name in names:
            if name in self._listed:
                _settle(wanted[name], self._listed[name], None)
            else:
                rest.append(name)
        return rest


def _settle(futures: list[asyncio.Future[Obj]], obj: Obj | None, error: BaseException | None) -> None:
    for future in futures:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            assert obj is not None
            future.set_result(obj)
