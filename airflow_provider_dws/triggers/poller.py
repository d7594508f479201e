"""One shared poller per (API, project, location, credentials) in a triggerer's event loop (and, for
an API listed per smaller group, per group: Compute Engine's managed instance groups).

A triggerer may hold thousands of waits. Reading each request with its own GET every interval
costs one API call per wait per interval, and the quota (Vertex AI: 600 resource-management
requests per minute per region), not capacity, would then decide when work starts. Instead, every
:class:`~airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger` in one event loop
subscribes to the :class:`SharedPoller` of its backend's (kind, spec), which:

* lists the live requests of its location once per interval, in pages (Vertex: the provider's
  ``dws_managed`` label and the live job states; TPU: every queued resource of the zone);
* hands each subscriber the status of its request when it changed (the first one always);
* learns how the requests that left the list ended: many at once (capacity came for them all)
  from one more paged list of the provider's ended requests, where the backend has one
  (:class:`~airflow_provider_dws.backends.base.EndedLister`); the others, and what that list
  did not show (a deleted request), with one direct GET each, a few at a time;
* backs off as a whole on quota errors (429), instead of every trigger on its own;
* abandons a round that overruns (a black-holed connection) and tries again next interval;
* shares one backend (one set of clients) among all its subscribers;
* stops when its last subscriber leaves; a subscriber leaving never disturbs the others;
* for a backend that can watch (Kubernetes), holds one watch beside its list, so changes reach
  the waits at once and the list only resyncs (:mod:`.watching`).

It knows only the provider's API-neutral errors (:mod:`airflow_provider_dws.errors`). Its task
runs in a fresh :class:`contextvars.Context`, not the first subscriber's: what it logs concerns
every wait, and must not land in one task's log. What concerns one request is handed to that
request's subscription (:meth:`Subscription.note`) and logged by its trigger.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_dws import metrics
from airflow_provider_dws.backends.base import (
    AsyncRequestBackend,
    EndedLister,
    GroupedLister,
    RequestStatus,
    counting_pages,
)
from airflow_provider_dws.backends.retry import is_transient
from airflow_provider_dws.errors import QuotaExceededError, RequestNotFoundError
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.scheduling.backoff import backoff
from airflow_provider_dws.triggers.watching import PollerWatch

log = logging.getLogger(__name__)

#: Shortest gap between two polls started early for new subscribers (a burst of triggers starting
#: together is served by one list, not one list each).
MIN_GAP_SECONDS = 1.0
#: Whole-poller backoff after a quota error: equal jitter from 5 s, doubling, at most 60 s.
QUOTA_BACKOFF_INITIAL = 5.0
QUOTA_BACKOFF_MAX = 60.0
#: Direct reads in flight at once (requests that left the live list).
READ_CONCURRENCY = 16
#: From this many requests leaving the live list in one round, they are found with one paged list
#: of ended requests (a few calls) rather than read one by one (one call each, against the quota).
ENDED_LIST_MIN = 8
#: That list scans at most this many requests per request looked for (at least ENDED_SCAN_MIN):
#: other ended requests of the location created since share it; past that, the rest are read.
ENDED_SCAN_FACTOR = 4
ENDED_SCAN_MIN = 500
#: How many subscribed requests are handled between two yields to the event loop.
BATCH = 200
#: How many triggers are woken between two yields to the event loop.
WAKE_BATCH = 50
#: A round is abandoned after this many intervals (at least :data:`MIN_ROUND_SECONDS`): every call
#: has its own deadline, this bounds what their sum (many pages, many reads) may cost.
ROUND_BUDGET_INTERVALS = 2.0
MIN_ROUND_SECONDS = 120.0
#: After a refused list, the poller reads each request directly and lists again every this many cycles
#: (a permission may be propagating, a filter may be accepted again after a rollout).
LIST_RETRY_CYCLES = 10


class Subscription:
    """One trigger's view of the poller: the latest status of its request, when it changes."""

    def __init__(self, poller: SharedPoller, name: str, interval: float) -> None:
        self.poller = poller
        self.name = name
        self.interval = interval
        self._status: RequestStatus | None = None
        self._error: BaseException | None = None
        self._delivered: tuple[str, str] | None = None
        self._note: str | None = None
        self._changed = False
        self._waiter: asyncio.Future[None] | None = None

    def _deliver(self, status: RequestStatus) -> bool:
        """Hand over ``status`` if it changed; True when that wakes the trigger."""
        signature = (status.state, status.phase.value)
        if signature == self._delivered:
            return False
        self._delivered = signature
        self._status = status
        self._signal()
        return True

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._signal()

    def _set_note(self, note: str | None) -> None:
        if note is not None and note != self._note:
            self._signal()  # the trigger logs it now, in its own task's log
        self._note = note

    def note(self) -> str | None:
        """What the poller last had to say about this request alone (a read that failed and is
        retried), ``None`` once it has been read again; the trigger logs it when it changes."""
        return self._note

    async def next(self, timeout: float | None = None) -> RequestStatus | None:
        """The request's status once it changed (first call: its first status); ``None`` on timeout.

        Raises what the API answered that ends the wait (``RequestNotFoundError``, permission errors).
        """
        if not self._changed:
            if timeout is not None and timeout <= 0:
                return None
            # A future and a timer, not asyncio.wait_for: that costs a task per waiting trigger
            # (thousands here), and asyncio.timeout is Python 3.11+.
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _settle, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
            if not self._changed:
                return None
        self._changed = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._status

    def _signal(self) -> None:
        self._changed = True
        if self._waiter is not None:
            _settle(self._waiter)

    def close(self) -> None:
        """Leave the poller."""
        self.poller.unsubscribe(self)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class SharedPoller:
    """Polls every subscribed request of one backend (one API, project, location, credentials)."""

    def __init__(self, backend: AsyncRequestBackend, key: tuple[str, str]) -> None:
        self.backend = backend
        self.key = key
        self._subs: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._quota_strikes = 0
        #: The cycle at which the API last refused the list (``None``: it lists).
        self._list_refused_at: int | None = None
        #: The same for the list of ended requests.
        self._ended_refused_at: int | None = None
        self._overrunning = False
        self._stopped = False
        #: Counters for logs and tests: cycles, list calls (live, ended), direct reads, quota
        #: backoffs, rounds abandoned for overrunning their budget.
        self.stats = {
            "cycles": 0,
            "lists": 0,
            "ended_lists": 0,
            "list_pages": 0,
            "reads": 0,
            "backoffs": 0,
            "overruns": 0,
            "watches": 0,
            "watch_events": 0,
        }
        #: The watch beside the list, for a backend that can watch (Kubernetes): watching.py.
        self.watch = PollerWatch(self, LIST_RETRY_CYCLES)
        #: When the watch last handed over each request's status (the loop's clock).
        self.watched: dict[str, float] = {}
        #: The tags of this poller's metrics, and the API calls already counted in them.
        self._tags = metrics.tags(str(getattr(backend, "kind", key[0])), getattr(backend, "location", None))
        self._calls_sent = 0

    @property
    def closed(self) -> bool:
        """True once the last subscriber left (a new subscriber then gets a new poller)."""
        return self._stopped or (self._task is not None and self._task.done())

    def __len__(self) -> int:
        return sum(len(subs) for subs in self._subs.values())

    def subscribe(self, name: str, interval: float) -> Subscription:
        """Start following ``name``; its first status comes with the next poll (soon)."""
        sub = Subscription(self, name, interval)
        self._subs.setdefault(name, set()).add(sub)
        if self._task is None:
            # A fresh context: the task would otherwise copy the first subscriber's (its trigger's
            # log routing included), and every poller line would land in that one task's log.
            loop = asyncio.get_running_loop()
            self._task = contextvars.Context().run(
                loop.create_task, self._run(), name=f"dws-poller {self.key}"
            )
        self._wake.set()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following; the last subscriber leaving stops the poller."""
        subs = self._subs.get(sub.name)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.name]
                self.watched.pop(sub.name, None)
        if not self._subs and self._task is not None and not self._task.done():
            self._stopped = True
            self._task.cancel()
            _forget(self)
            # Or the gauge would show the last count until this location is polled again.
            metrics.gauge(metrics.REQUESTS_WAITING, 0, self._tags)

    def interval(self) -> float:
        """The shortest interval any subscriber asked for."""
        return min((s.interval for subs in self._subs.values() for s in subs), default=30.0)

    def round_budget(self) -> float:
        """Seconds one round may take before it is abandoned."""
        return max(MIN_ROUND_SECONDS, ROUND_BUDGET_INTERVALS * self.interval())

    async def _run(self) -> None:
        try:
            await self._poll()
        finally:
            self.watch.stop()

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while self._subs:
            self._wake.clear()
            started = loop.time()
            delay = self.interval()
            try:
                await asyncio.wait_for(self._cycle(), self.round_budget())
                self._quota_strikes = 0
                if self._overrunning:
                    self._overrunning = False
                    log.info("Polling %s is back to normal", self.key[1])
            except QuotaExceededError as err:
                delay = self._quota_backoff(err)
            except asyncio.TimeoutError:
                self.stats["overruns"] += 1
                if not self._overrunning:  # once, not every interval of a long outage
                    self._overrunning = True
                    log.warning(
                        "Polling %s took longer than %.0fs; abandoned, trying again every %.0fs",
                        self.key[1],
                        self.round_budget(),
                        delay,
                    )
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
            self._report()
            self.watch.ensure()
            delay = max(delay, self.watch.delay(self.interval()))  # while a watch holds: resync only
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, started + delay - loop.time()))
            except asyncio.TimeoutError:
                continue
            # Woken early by a new subscriber: serve it soon, but a burst of them with one list.
            earliest = started + min(MIN_GAP_SECONDS, delay)
            if loop.time() < earliest:
                await asyncio.sleep(earliest - loop.time())

    def _report(self) -> None:
        """Once per interval: the calls made since the last report, and the requests followed."""
        calls = self.stats["list_pages"] + self.stats["reads"] + self.stats["watches"]
        metrics.incr(metrics.POLLER_CALLS, self._tags, calls - self._calls_sent)
        self._calls_sent = calls
        metrics.gauge(metrics.REQUESTS_WAITING, len(self._subs), self._tags)

    def _quota_backoff(self, err: BaseException) -> float:
        self._quota_strikes += 1
        self.stats["backoffs"] += 1
        metrics.incr(metrics.POLLER_BACKOFF, self._tags)
        wait = backoff(self._quota_strikes, QUOTA_BACKOFF_INITIAL, QUOTA_BACKOFF_MAX, "equal")
        delay = max(self.interval(), wait)
        log.warning(
            "Quota exhausted polling %s (%s); all %d waits here back off %.0fs together",
            self.key[1],
            getattr(err, "message", err),
            len(self),
            delay,
        )
        return delay

    def _lists(self) -> bool:
        return self._may_try(self._list_refused_at)

    def _may_try(self, refused: int | None) -> bool:
        return refused is None or self.stats["cycles"] - refused >= LIST_RETRY_CYCLES

    async def _cycle(self) -> None:
        listed: dict[str, RequestStatus] = {}
        list_started = asyncio.get_running_loop().time()
        if self._lists():
            pages = [0]
            try:
                with counting_pages() as pages:
                    listed = await self.backend.alist_live(self._subs.keys())
            except Exception as err:
                if is_transient(err):
                    raise
                # A list the API refuses (a filter it does not take, a permission the caller
                # lacks) must not end every wait: read each request directly for a while.
                if self._list_refused_at is None:
                    log.warning(
                        "Listing %s was refused (%s: %s); reading each request directly, and "
                        "listing again every %d intervals",
                        self.key[1],
                        type(err).__name__,
                        getattr(err, "message", err),
                        LIST_RETRY_CYCLES,
                    )
                self._list_refused_at = self.stats["cycles"]
            else:
                if self._list_refused_at is not None:
                    log.info("Listing %s works again", self.key[1])
                self._list_refused_at = None
            finally:
                self.stats["lists"] += 1
                self.stats["list_pages"] += max(1, pages[0])  # a refused list was one call too
        missing: list[str] = []
        found: list[tuple[str, RequestStatus]] = []
        for index, name in enumerate(list(self._subs)):
            if index % BATCH == BATCH - 1:
                await asyncio.sleep(0)  # thousands of waits: never hold the loop for long
            status = listed.get(name)
            if status is None:
                missing.append(name)
            elif self.watched.get(name, list_started) <= list_started:
                # (A change the watch handed over while this list ran is newer than the list.)
                found.append((name, status))
        await self._hand_over(found)
        if len(missing) >= ENDED_LIST_MIN and self._list_refused_at is None:
            missing = await self._find_ended(missing)
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
                except RequestNotFoundError as err:
                    self._fail(name, err)
                except QuotaExceededError as err:
                    quota.append(err)
                except Exception as err:
                    if is_transient(err):
                        # This request's alone: its trigger logs it, in its task's log.
                        self._note(name, f"reading it failed ({err}); trying again next interval")
                    else:
                        self._fail(name, err)
                else:
                    self._note(name, None)
                    self._deliver(name, status)
                finally:
                    self.stats["reads"] += 1

        await asyncio.gather(*(reader() for _ in range(min(READ_CONCURRENCY, len(missing)))))
        if quota:
            raise quota[0]

    async def _hand_over(self, statuses: Iterable[tuple[str, RequestStatus]]) -> None:
        """Deliver listed statuses to their subscribers."""
        woken = 0
        for name, status in statuses:
            self._note(name, None)
            woken += self._deliver(name, status)
            if woken >= WAKE_BATCH:
                # Each woken trigger runs (and logs) in the next loop iteration: wake them a batch
                # at a time, or capacity arriving for thousands would stall the loop at once.
                woken = 0
                await asyncio.sleep(0)

    async def _find_ended(self, missing: list[str]) -> list[str]:
        """Learn from one list of ended requests how ``missing`` ended; returns those it did not show.

        The list is bounded by the oldest creation time among them (known from their last status),
        so it reads what ended recently, not the location's whole history.
        """
        if not isinstance(self.backend, EndedLister) or not self._may_try(self._ended_refused_at):
            return missing
        created: dict[str, Any] = {}
        for name in missing:
            submitted = next(
                (s._status.timings.submitted for s in self._subs.get(name, ()) if s._status is not None), None
            )
            if submitted is not None:
                created[name] = submitted
        if len(created) < ENDED_LIST_MIN:
            return missing
        pages = [0]
        try:
            with counting_pages() as pages:
                ended = await self.backend.alist_ended(
                    created.keys(),
                    min(created.values()),
                    max(ENDED_SCAN_MIN, ENDED_SCAN_FACTOR * len(created)),
                )
        except Exception as err:
            if isinstance(err, QuotaExceededError) or is_transient(err):
                raise  # as for the live list: the whole round is tried again
            if self._ended_refused_at is None:
                log.warning(
                    "Listing the ended requests of %s was refused (%s: %s); reading each one "
                    "directly, and trying again every %d intervals",
                    self.key[1],
                    type(err).__name__,
                    getattr(err, "message", err),
                    LIST_RETRY_CYCLES,
                )
            self._ended_refused_at = self.stats["cycles"]
            return missing
        finally:
            self.stats["ended_lists"] += 1
            self.stats["list_pages"] += max(1, pages[0])
        self._ended_refused_at = None
        await self._hand_over((name, status) for name, status in ended.items() if name in self._subs)
        return [name for name in missing if name not in ended]

    def _deliver(self, name: str, status: RequestStatus) -> int:
        return sum(sub._deliver(status) for sub in list(self._subs.get(name, ())))

    def _fail(self, name: str, error: BaseException) -> None:
        for sub in list(self._subs.get(name, ())):
            sub._fail(error)

    def _note(self, name: str, note: str | None) -> None:
        for sub in list(self._subs.get(name, ())):
            sub._set_note(note)


_BACKENDS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], AsyncRequestBackend]
] = weakref.WeakKeyDictionary()
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], SharedPoller]] = (
    weakref.WeakKeyDictionary()
)


def poller_key(kind: str, spec: Mapping[str, Any], group: str | None = None) -> tuple[str, str]:
    """(kind, spec as canonical JSON): the API, project, location and credentials of a backend, and
    the ``group`` within them for a :class:`~airflow_provider_dws.backends.base.GroupedLister`."""
    described = json.dumps(dict(spec), sort_keys=True, default=str)
    return kind, described if group is None else f"{described} {group}"


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


def shared_poller(kind: str, spec: Mapping[str, Any], name: str | None = None) -> SharedPoller:
    """The poller of this backend in the running event loop, created on first use; for a backend
    listed per group (:class:`~airflow_provider_dws.backends.base.GroupedLister`), the poller of
    request ``name``'s group. Every poller of one (kind, spec) shares the one backend."""
    pollers = _POLLERS.setdefault(asyncio.get_running_loop(), {})
    backend = shared_backend(kind, spec)
    group = backend.poll_group(name) if name is not None and isinstance(backend, GroupedLister) else None
    key = poller_key(kind, spec, group)
    poller = pollers.get(key)
    if poller is None or poller.closed:
        poller = pollers[key] = SharedPoller(backend, key)
    return poller


def _forget(poller: SharedPoller) -> None:
    for pollers in list(_POLLERS.values()):
        if pollers.get(poller.key) is poller:
            del pollers[poller.key]
