"""One shared poller per (API, project, location, credentials) in a triggerer's event loop.

A triggerer may hold thousands of waits. Reading each request with its own GET every interval
costs one API call per wait per interval, and the quota (Vertex AI: 600 resource-management
requests per minute per region), not capacity, would then decide when work starts. Instead, every
:class:`~airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger` in one event loop
subscribes to the :class:`SharedPoller` of its backend's (kind, spec), which:

* lists the live requests of its location once per interval, in pages (Vertex: the provider's
  ``dws_managed`` label and the live job states; TPU: every queued resource of the zone);
* hands each subscriber the status of its request when it changed (the first one always);
* reads a request that is not in the list (it ended, or was deleted) with one direct GET, a few
  at a time, to learn how it ended;
* backs off as a whole on RESOURCE_EXHAUSTED (429), instead of every trigger on its own;
* shares one backend (one set of clients) among all its subscribers;
* stops when its last subscriber leaves; a subscriber leaving never disturbs the others.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import weakref
from collections.abc import Mapping
from typing import Any

from google.api_core import exceptions as gexc

from airflow_provider_dws.backends.base import AsyncRequestBackend, RequestStatus, backend_from_spec
from airflow_provider_dws.backends.retry import QUOTA_ERRORS, is_transient

log = logging.getLogger(__name__)

#: Shortest gap between two polls started early for new subscribers (a burst of triggers starting
#: together is served by one list, not one list each).
MIN_GAP_SECONDS = 1.0
#: Whole-poller backoff after a quota error: equal jitter from 5 s, doubling, at most 60 s.
QUOTA_BACKOFF_INITIAL = 5.0
QUOTA_BACKOFF_MAX = 60.0
#: Direct reads in flight at once (requests that left the live list).
READ_CONCURRENCY = 16
#: How many subscribed requests are handled between two yields to the event loop.
BATCH = 200
#: How many triggers are woken between two yields to the event loop.
WAKE_BATCH = 50


class Subscription:
    """One trigger's view of the poller: the latest status of its request, when it changes."""

    def __init__(self, poller: SharedPoller, name: str, interval: float) -> None:
        self.poller = poller
        self.name = name
        self.interval = interval
        self._status: RequestStatus | None = None
        self._error: BaseException | None = None
        self._delivered: tuple[str, str] | None = None
        self._changed = asyncio.Event()

    def _deliver(self, status: RequestStatus) -> bool:
        """Hand over ``status`` if it changed; True when that wakes the trigger."""
        signature = (status.state, status.phase.value)
        if signature == self._delivered:
            return False
        self._delivered = signature
        self._status = status
        self._changed.set()
        return True

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._changed.set()

    async def next(self, timeout: float | None = None) -> RequestStatus | None:
        """The request's status once it changed (first call: its first status); ``None`` on timeout.

        Raises what the API answered that ends the wait (``NotFound``, permission errors).
        """
        if not self._changed.is_set():
            if timeout is not None and timeout <= 0:
                return None
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait()
            except TimeoutError:
                return None
        self._changed.clear()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._status

    def close(self) -> None:
        """Leave the poller."""
        self.poller.unsubscribe(self)


class SharedPoller:
    """Polls every subscribed request of one backend (one API, project, location, credentials)."""

    def __init__(self, backend: AsyncRequestBackend, key: tuple[str, str]) -> None:
        self.backend = backend
        self.key = key
        self._subs: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._quota_strikes = 0
        self._list_refused = False
        #: Counters for logs and tests: cycles, list pages, direct reads, quota backoffs.
        self.stats = {"cycles": 0, "lists": 0, "reads": 0, "backoffs": 0}

    @property
    def closed(self) -> bool:
        """True once the last subscriber left (a new subscriber then gets a new poller)."""
        return self._task is not None and self._task.done()

    def __len__(self) -> int:
        return sum(len(subs) for subs in self._subs.values())

    def subscribe(self, name: str, interval: float) -> Subscription:
        """Start following ``name``; its first status comes with the next poll (soon)."""
        sub = Subscription(self, name, interval)
        self._subs.setdefault(name, set()).add(sub)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dws-poller {self.key}")
        self._wake.set()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; the last subscriber leaving stops the poller."""
        subs = self._subs.get(sub.name)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.name]
        if not self._subs and self._task is not None and not self._task.done():
            self._task.cancel()
            _forget(self)

    def interval(self) -> float:
        """The shortest interval any subscriber asked for."""
        return min((s.interval for subs in self._subs.values() for s in subs), default=30.0)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._subs:
            self._wake.clear()
            started = loop.time()
            delay = self.interval()
            try:
                await self._cycle()
                self._quota_strikes = 0
            except QUOTA_ERRORS as err:
                delay = self._quota_backoff(err)
            except Exception as err:
                if is_transient(err):
                    # Nobody learns anything this round; try again next interval.
                    log.warning("Polling %s failed (%s); trying again in %.0fs", self.key[1], err, delay)
                else:
                    # Unexpected: end every wait with the error rather than leave them hanging.
                    log.exception("Polling %s failed", self.key[1])
                    for name in list(self._subs):
                        self._fail(name, err)
            self.stats["cycles"] += 1
            try:
                async with asyncio.timeout_at(started + delay):
                    await self._wake.wait()
            except TimeoutError:
                continue
            # Woken early by a new subscriber: serve it soon, but a burst of them with one list.
            earliest = started + min(MIN_GAP_SECONDS, delay)
            if loop.time() < earliest:
                await asyncio.sleep(earliest - loop.time())

    def _quota_backoff(self, err: BaseException) -> float:
        self._quota_strikes += 1
        self.stats["backoffs"] += 1
        backoff = min(QUOTA_BACKOFF_MAX, QUOTA_BACKOFF_INITIAL * 2.0 ** (self._quota_strikes - 1))
        delay = max(self.interval(), backoff / 2 + random.uniform(0.0, backoff / 2))
        log.warning(
            "Quota exhausted polling %s (%s); all %d waits here back off %.0fs together",
            self.key[1],
            getattr(err, "message", err),
            len(self),
            delay,
        )
        return delay

    async def _cycle(self) -> None:
        listed: dict[str, RequestStatus] = {}
        if not self._list_refused:
            try:
                listed = await self.backend.alist_live(self._subs.keys())
            except Exception as err:
                if is_transient(err):
                    raise
                # A list the API refuses (a filter it does not take, a permission the caller
                # lacks) must not end every wait: read each request directly from now on.
                self._list_refused = True
                log.warning(
                    "Listing %s was refused (%s: %s); reading each request directly instead",
                    self.key[1],
                    type(err).__name__,
                    getattr(err, "message", err),
                )
            finally:
                self.stats["lists"] += 1
        missing: list[str] = []
        woken = 0
        for index, name in enumerate(list(self._subs)):
            if index % BATCH == BATCH - 1:
                await asyncio.sleep(0)  # thousands of waits: never hold the loop for long
            status = listed.get(name)
            if status is None:
                missing.append(name)
                continue
            woken += self._deliver(name, status)
            if woken >= WAKE_BATCH:
                # Each woken trigger runs (and logs) in the next loop iteration: wake them a batch
                # at a time, or capacity arriving for thousands would stall the loop at once.
                woken = 0
                await asyncio.sleep(0)
        # Requests that left the list (ended, mostly) are read directly, a few at a time: when
        # capacity arrives for many at once, reading them one by one would delay the last ones.
        # A fixed set of readers takes names from one iterator, so thousands of reads never mean
        # thousands of tasks created in one step of the loop.
        pending = iter(missing)
        quota: list[BaseException] = []

        async def reader() -> None:
            for name in pending:
                if quota:
                    return  # backing off: the rest wait for the next round
                if name not in self._subs:
                    continue  # it left while we listed
                try:
                    status = await self.backend.aget_status(name)
                except gexc.NotFound as err:
                    self._fail(name, err)
                except QUOTA_ERRORS as err:
                    quota.append(err)
                except Exception as err:
                    if is_transient(err):
                        log.warning("Reading %s failed (%s); trying again next interval", name, err)
                    else:
                        self._fail(name, err)
                else:
                    self._deliver(name, status)
                finally:
                    self.stats["reads"] += 1

        await asyncio.gather(*(reader() for _ in range(min(READ_CONCURRENCY, len(missing)))))
        if quota:
            raise quota[0]

    def _deliver(self, name: str, status: RequestStatus) -> int:
        return sum(sub._deliver(status) for sub in list(self._subs.get(name, ())))

    def _fail(self, name: str, error: BaseException) -> None:
        for sub in list(self._subs.get(name, ())):
            sub._fail(error)


_BACKENDS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], AsyncRequestBackend]
] = weakref.WeakKeyDictionary()
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], SharedPoller]] = (
    weakref.WeakKeyDictionary()
)


def poller_key(kind: str, spec: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, spec as canonical JSON): the API, project, location and credentials of a backend."""
    return kind, json.dumps(dict(spec), sort_keys=True, default=str)


def shared_backend(kind: str, spec: Mapping[str, Any]) -> AsyncRequestBackend:
    """The one backend (and so the one set of clients) of (kind, spec) in the running event loop.

    Clients are bound to the loop that made them, so each loop has its own.
    """
    backends = _BACKENDS.setdefault(asyncio.get_running_loop(), {})
    key = poller_key(kind, spec)
    backend = backends.get(key)
    if backend is None:
        backend = backends[key] = backend_from_spec(kind, dict(spec))
    return backend


def shared_poller(kind: str, spec: Mapping[str, Any]) -> SharedPoller:
    """The poller of this backend in the running event loop, created on first use."""
    pollers = _POLLERS.setdefault(asyncio.get_running_loop(), {})
    key = poller_key(kind, spec)
    poller = pollers.get(key)
    if poller is None or poller.closed:
        poller = pollers[key] = SharedPoller(shared_backend(kind, spec), key)
    return poller


def _forget(poller: SharedPoller) -> None:
    for pollers in list(_POLLERS.values()):
        if pollers.get(poller.key) is poller:
            del pollers[poller.key]
