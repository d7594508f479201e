"""What every backend (one per DWS API) offers to the generic trigger and the operators."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Collection,
    Container,
    Iterable,
    Iterator,
    Sequence,
)
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from airflow_provider_dws.scheduling.identity import LABEL_MANAGED, RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings

if TYPE_CHECKING:
    from airflow_provider_dws.records import RequestRecord

log = logging.getLogger(__name__)

#: Longest failure message an event carries; the API's messages are a sentence or two, and the
#: whole one stays readable with the request itself.
EVENT_MESSAGE_LIMIT = 500
#: The event key of an error that ended a trigger's wait before the request ended (its type and
#: text): the request may still be queued or held, and the task decides what becomes of it.
WAIT_ERROR = "wait_error"
#: The event key (and trigger keyword) under which a trigger hands the attempt's state back, so the
#: task resumes from it (``runtime.state.AttemptState``).
RESUME = "resume"
#: The ``details`` and event key of what the task returns, where the backend read it with the
#: request's final status (a succeeded Vertex AI job, as a dict): the resumed task needs no call.
RESULT = "result"
#: Key of the ``resume`` state: ``{"push_return": bool, "result_keys": [...]}`` when the trigger may
#: end a successful task itself (``triggers.finish``; absent: the task resumes in a worker).
FINISH = "finish"


@dataclass(frozen=True)
class RequestStatus:
    """A point-in-time view of one capacity request in the shared vocabulary."""

    name: str
    state: str
    outcome: Outcome
    timings: RequestTimings
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def phase(self) -> Phase:
        """The request's phase."""
        return self.outcome.phase

    def end_line(self) -> str:
        """The task log's line for the end of an attempt: name, phase, API state, wait, run."""
        timings = self.timings
        waited = timedelta(seconds=round(timings.wait_seconds or 0))
        ran = f", ran {timedelta(seconds=round(timings.run_seconds))}" if timings.run_seconds else ""
        return (
            f"{self.name} ended {self.phase.value.upper()} [{self.state}]: waited {waited} for capacity{ran}"
        )

    def ended_record(self, record: RequestRecord, *, success: bool, target: str) -> RequestRecord:
        """``record`` at the end of this attempt (:func:`~airflow_provider_dws.records.attempt_end`
        with this status's phase, times, failure and message)."""
        from airflow_provider_dws.records import attempt_end

        failure = self.outcome.failure
        return attempt_end(
            record,
            phase=self.phase.value,
            success=success,
            target=target,
            started=self.timings.started,
            finished=self.timings.finished,
            failure=failure.value if failure else None,
            message=self.outcome.message,
            now=datetime.now(timezone.utc),
        )

    def to_event(self) -> dict[str, Any]:
        """The JSON-friendly payload a trigger yields when the request ends: a few hundred bytes.

        Airflow logs every event whole and stores it with the task instance, and a triggerer
        sends hundreds at once when capacity arrives for many requests (``docs/scale.md``), so the
        event carries only what the resumed task cannot cheaply get: the name, state, phase,
        failure kind, message (cut at :data:`EVENT_MESSAGE_LIMIT`), what was asked for
        (``description``) and the timings. ``details`` stay behind (the task knows its own
        region, display name and max wait), except :data:`RESULT`: what the task returns, where
        the backend read it with the final status (a succeeded Vertex AI job, about 1 kB, as
        providers-google's own job triggers carry it), so the resumed task makes no call for it.
        """
        message = self.outcome.message
        if len(message) > EVENT_MESSAGE_LIMIT:
            message = message[: EVENT_MESSAGE_LIMIT - 3] + "..."
        return {
            "name": self.name,
            "state": self.state,
            "phase": self.outcome.phase.value,
            "failure": self.outcome.failure.value if self.outcome.failure else None,
            "message": message,
            "description": self.description,
            "timings": self.timings.to_dict(),
            **({RESULT: self.details[RESULT]} if RESULT in self.details else {}),
        }

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> RequestStatus:
        """The status an event describes (:meth:`to_event`; ``details`` come back empty)."""
        failure = event.get("failure")
        return cls(
            name=event["name"],
            state=event.get("state", ""),
            outcome=Outcome(
                Phase(event["phase"]), FailureKind(failure) if failure else None, event.get("message") or ""
            ),
            timings=RequestTimings.from_dict(event.get("timings") or {}),
            description=event.get("description") or "",
            details={RESULT: event[RESULT]} if RESULT in event else {},
        )


#: Listed requests classified between two yields to the triggerer's event loop.
YIELD_EVERY = 50


#: The pages fetched by the lists of the task that asked to count them (:func:`counting_pages`).
_PAGES: ContextVar[list[int] | None] = ContextVar("dws_list_pages", default=None)


@contextlib.contextmanager
def counting_pages() -> Iterator[list[int]]:
    """Count the list pages fetched in this task (an API call each) in the yielded one-item list.

    Every paged list goes through :func:`classify_listed` or :func:`find_listed`, which count
    each page; the shared poller reports the total as ``dws.poller.calls``.
    """
    cell = [0]
    token = _PAGES.set(cell)
    try:
        yield cell
    finally:
        _PAGES.reset(token)


def _count_page() -> None:
    cell = _PAGES.get()
    if cell is not None:
        cell[0] += 1


class _Named(Protocol):
    name: str


_Item = TypeVar("_Item", bound=_Named)


async def classify_listed(
    pages: AsyncIterable[Iterable[_Item]],
    only: Container[str] | None,
    classify: Callable[[_Item], RequestStatus],
    memo: ListMemo | None = None,
) -> dict[str, RequestStatus]:
    """Every listed request named in ``only`` (all when ``None``) by name, classified.

    Classifying a page of hundreds is real work, so this yields to the event loop every
    :data:`YIELD_EVERY` requests: the other triggers of the triggerer keep running. With a
    ``memo`` (one per backend, kept between lists), a request whose version is the one seen in
    the last list keeps its status unclassified: a waiting cycle then costs a version read per
    request, not a classification, since almost nothing changes while requests wait.
    """
    found: dict[str, RequestStatus] = {}
    seen: dict[str, tuple[Any, RequestStatus]] = {}
    async for items in pages:
        _count_page()
        for index, item in enumerate(items):
            if only is None or item.name in only:
                if memo is None:
                    found[item.name] = classify(item)
                else:
                    version = memo.version(item)
                    known = memo.statuses.get(item.name)
                    status = known[1] if known is not None and known[0] == version else classify(item)
                    found[item.name] = status
                    seen[item.name] = (version, status)
            if index % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
    if memo is not None:
        memo.statuses = seen  # what left the list (ended, mostly) is forgotten
    return found


async def find_listed(
    pages: AsyncIterable[Iterable[_Item]],
    wanted: Collection[str],
    classify: Callable[[_Item], RequestStatus],
    scan_limit: int,
) -> dict[str, RequestStatus]:
    """The ``wanted`` requests among the listed ones, classified; stops fetching pages once all
    are found or ``scan_limit`` requests were scanned (the rest are for the caller to read)."""
    found: dict[str, RequestStatus] = {}
    scanned = 0
    async for items in pages:
        _count_page()
        for item in items:
            scanned += 1
            if item.name in wanted:
                found[item.name] = classify(item)
            if scanned % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        if len(found) == len(wanted) or scanned >= scan_limit:
            break
    return found


def rpc_deadline(rpc_timeout: float | None, default: float) -> float:
    """A backend's ``rpc_timeout`` (seconds per API call) checked: ``None`` gives ``default``."""
    if rpc_timeout is None:
        return default
    if isinstance(rpc_timeout, bool) or not isinstance(rpc_timeout, (int, float)) or not rpc_timeout > 0:
        raise ValueError(f"rpc_timeout must be a positive number of seconds, got {rpc_timeout!r}")
    return float(rpc_timeout)


def rfc3339(when: datetime) -> str:
    """``2026-12-01T18:00:00Z``: a list filter's timestamp, in UTC, cut to the second below."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def ended_since_filter(state_field: str, ended_states: Iterable[str], created_after: datetime) -> str:
    """The list filter of :meth:`EndedLister.alist_ended`: the provider's requests (``dws_managed``)
    in one of ``ended_states`` (spelled ``state_field="..."``) created at or after ``created_after``."""
    states = " OR ".join(f'{state_field}="{state}"' for state in ended_states)
    return f'labels.{LABEL_MANAGED}="true" AND create_time>="{rfc3339(created_after)}" AND ({states})'


class ListMemo:
    """The statuses of the last list of one backend, by request name, with the version each was
    classified at. ``version(item)`` must change whenever anything the classification reads
    changes (the API's update time and state, read from the raw message: cheap)."""

    def __init__(self, version: Callable[[Any], Any]) -> None:
        self.version = version
        self.statuses: dict[str, tuple[Any, RequestStatus]] = {}


@runtime_checkable
class AsyncRequestBackend(Protocol):
    """The async half of the backend contract, what a trigger and the shared poller need.

    Errors are the provider's own (:mod:`airflow_provider_dws.errors`), never a client library's:
    :class:`~airflow_provider_dws.errors.RequestNotFoundError`,
    :class:`~airflow_provider_dws.errors.QuotaExceededError`,
    :class:`~airflow_provider_dws.errors.TransientApiError`, ...
    """

    kind: str

    def spec(self) -> dict[str, Any]:
        """Constructor keyword arguments, JSON-serializable, to rebuild this backend elsewhere."""
        ...

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one request with one call (``RequestNotFoundError`` when gone); errors propagate."""
        ...

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The live requests of this backend's location by name (``only``: just these), with one
        paged list; errors propagate."""
        ...

    async def arelease(self, name: str) -> bool:
        """Cancel or delete one request so it holds no capacity; idempotent: one already ended,
        gone, or being released is success. False when there was nothing left to release."""
        ...


@runtime_checkable
class EndedLister(Protocol):
    """A backend whose live list leaves out the requests that ended, and that can list those too.

    When capacity comes for thousands of waits at once, they all leave the live list in one round;
    one paged list of the ended ones tells how each ended in a few calls, where reading each
    would take thousands (and the API's read quota with them).
    """

    async def alist_ended(
        self, wanted: Collection[str], created_after: datetime, scan_limit: int
    ) -> dict[str, RequestStatus]:
        """The ended requests among ``wanted`` (the provider's, created at or after
        ``created_after``), classified, scanning at most about ``scan_limit`` listed requests;
        errors propagate."""
        ...


@runtime_checkable
class Watcher(Protocol):
    """A backend whose API streams changes (a Kubernetes watch): the shared poller holds one watch
    per backend (cluster, namespace and kind) beside its list, so every wait there hears a change
    at once and the list only resyncs (see :mod:`airflow_provider_dws.triggers.watching`)."""

    def list_version(self) -> str | None:
        """The ``resourceVersion`` of the last live list (a watch starts after it); None before one."""
        ...

    def awatch(
        self, resource_version: str, timeout: float
    ) -> AsyncIterator[tuple[str, RequestStatus | None]]:
        """The changes after ``resource_version`` for at most ``timeout`` seconds, as (request name,
        its status; None when it was deleted); ends when the server ends the watch. Errors are the
        provider's (a version too old to resume from: ``TransientApiError`` with code 410)."""
        ...

    def watch_version(self) -> str | None:
        """The ``resourceVersion`` of the last change the watch showed (where to resume it)."""
        ...


@runtime_checkable
class GroupedLister(Protocol):
    """A backend whose requests are listed per group smaller than its location (Compute Engine: the
    resize requests of one managed instance group). The shared poller then keeps one poller per
    group, and :meth:`AsyncRequestBackend.alist_live` gets only names of one group: one paged list
    of that group per interval serves every wait in it."""

    def poll_group(self, name: str) -> str:
        """The group of request ``name`` (e.g. its MIG's path)."""
        ...


@runtime_checkable
class GivesUpWaiting(Protocol):
    """A backend whose requests may leave waiting for a state that is not yet the wait's target and
    must not be cancelled then (a calendar block approved: booked for its task). The trigger gives a
    request up at its max wait through :meth:`agive_up`; other backends' requests are released
    (:meth:`AsyncRequestBackend.arelease`)."""

    async def agive_up(self, name: str) -> RequestStatus | None:
        """Cancel ``name`` if it still waits (read again now); ``None`` when it was given up or is
        gone, else its status now (it moved on meanwhile: nothing was cancelled). Errors propagate."""
        ...


@runtime_checkable
class RequestBackend(AsyncRequestBackend, Protocol):
    """The whole backend contract: the sync half (operators, in a worker) and the async half.

    Each call retries transient errors itself and raises only provider errors.
    """

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every request (any attempt, any state) of this task instance in this location."""
        ...

    def submit(
        self, request: Any, identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Create ``request`` (``request_id``: its id, for APIs where the caller names it), or
        adopt the one an earlier, unanswered create made; returns it and whether this call created it."""
        ...

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one request, classified; ``None`` when it does not exist."""
        ...

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Sync :meth:`arelease`; ``wait``: until it no longer holds capacity."""
        ...


_B = TypeVar("_B")


class BackendCache:
    """The backends of one task, by class and constructor arguments: each (with its hook, its
    connection lookup and its clients) is built once per task, not once per call."""

    def __init__(self) -> None:
        self._backends: dict[tuple[Any, ...], Any] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> BackendCache:
        # Airflow copies operators (partial DAGs, mapped tasks): a copy starts with no clients,
        # which hold channels that cannot be copied.
        return BackendCache()

    def get(self, cls: type[_B], *args: Any, **kwargs: Any) -> _B:
        """``cls(*args, **kwargs)``, built on first use."""
        key = (cls, repr(args), repr(sorted(kwargs.items())))  # impersonation chains may be lists
        try:
            backend: _B = self._backends[key]
        except KeyError:
            backend = self._backends[key] = cls(*args, **kwargs)
        return backend


def clear_ended(found: Sequence[RequestStatus], delete: Callable[[str], Any]) -> None:
    """``delete`` each request of ``found`` (a lookup's) that ended without success: it holds
    nothing, but the API keeps it listed until it is deleted (Cloud TPU, Compute Engine resize
    requests). A delete that fails is logged, not raised: the release deletes it later."""
    for status in found:
        if not status.phase.terminal or status.phase is Phase.SUCCEEDED:
            continue
        log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
        try:
            delete(status.name)
        except Exception as err:
            log.warning("Could not delete %s (%s); it holds nothing", status.name, err)
