"""A request made by its trigger: find this task instance's request, or create it, in the triggerer.

A task whose API supports it (its adapter's ``request_spec``) does not submit from the worker: it
builds the request as JSON, and defers at once on a
:class:`~airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger` that carries it.
The worker then needs no Google client library (importing one costs a task process about as much
CPU as the whole of a stock deferring task); the triggerer holds the clients already.

The trigger keeps every promise of the worker's path: it looks the task instance's requests up
first, in every location the task may have used, and adopts a live one (or takes a success)
instead of creating a second; a create whose reply was lost is found by the same lookup before
it is tried again (``GoogleBackend._create``). Submissions of one API, project and location go
out at most :data:`SUBMIT_RATE` a second and :data:`SUBMIT_CONCURRENCY` at a time, whatever the
number of triggers starting together, so a fan-out of hundreds of tasks stays inside the API's
quota and off the event loop (the blocking calls run in threads).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.identity import RequestIdentity

#: Create calls (with their lookups) started per second per API, project and location.
SUBMIT_RATE = 5.0
#: Create calls (with their lookups) in flight at once per API, project and location.
SUBMIT_CONCURRENCY = 4
#: The prefix of the name a request is recorded under until its trigger has made it.
PENDING_PREFIX = "submitting/"
#: Where a link of ``announce["detail_links"]`` takes a detail of the request (a Batch job's uid):
#: letters and underscores only, so URL quoting leaves it as it is.
DETAIL_TOKEN = "__DWS_DETAIL__"


def pending_name(identity: RequestIdentity) -> str:
    """The provisional name of the request ``identity`` (its try and attempt) is about to make."""
    return f"{PENDING_PREFIX}{identity.key}/t{identity.try_number}/a{identity.attempt}"


def is_pending(name: str | None) -> bool:
    """Whether ``name`` is a provisional name (:func:`pending_name`): nothing exists under it."""
    return bool(name) and str(name).startswith(PENDING_PREFIX)


@dataclass(frozen=True)
class Submission:
    """What a trigger needs to make its task's request.

    ``request``: the request as JSON (``RequestAdapter.request_spec``); ``identity``: the task
    instance, try and attempt; ``max_wait_seconds``: the attempt's max wait; ``lookup``: where the
    task instance's requests may be (``{"backend_spec": ..., "placement": ...}`` per location, and
    ``"find"``, the lookup's keyword arguments where a location holds more than one list; the
    first is where a new one is made); ``avoid``: requests never adopted (an earlier try's, given
    up); ``announce``: the XCom keys of the request's name and console link
    (``{"name_key": ..., "link_key": ..., "link": URL with {location} and {id}}``, and
    ``"location"`` where the request's name does not carry one: :func:`link_of`), and of links
    made from a detail of the request (``"detail_links"``, :func:`detail_links`).
    """

    request: dict[str, Any]
    identity: dict[str, Any]
    max_wait_seconds: float
    lookup: list[dict[str, Any]]
    avoid: list[str] = field(default_factory=list)
    announce: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The trigger keyword argument."""
        return {
            "request": self.request,
            "identity": self.identity,
            "max_wait_seconds": self.max_wait_seconds,
            "lookup": self.lookup,
            "avoid": self.avoid,
            "announce": self.announce,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Submission:
        """Read :meth:`to_dict`'s form, refusing what a trigger cannot submit."""
        if not isinstance(data, Mapping):
            raise TypeError(f"submit must be a dict, got {type(data).__name__}")
        lookup = data.get("lookup")
        if not isinstance(lookup, list) or not lookup or not all(isinstance(x, Mapping) for x in lookup):
            raise ValueError("submit['lookup'] must be a non-empty list of locations")
        if not isinstance(data.get("request"), Mapping):
            raise ValueError("submit['request'] must be the request as a dict")
        RequestIdentity(**data.get("identity") or {})  # refuses a bad identity now, not mid-wait
        return cls(
            request=dict(data["request"]),
            identity=dict(data["identity"]),
            max_wait_seconds=float(data.get("max_wait_seconds") or 0),
            lookup=[dict(x) for x in lookup],
            avoid=list(data.get("avoid") or ()),
            announce=dict(data.get("announce") or {}),
        )

    @property
    def task_identity(self) -> RequestIdentity:
        """The identity the request is made and looked up with."""
        return RequestIdentity(**self.identity)


@dataclass(frozen=True)
class Submitted:
    """What :func:`find_or_submit` did: the request's status, ``"created"``, ``"adopted"`` (a live
    one found) or ``"succeeded"`` (a success found), the placement and backend of its location,
    the lookup's decision as a log line, and a warning about what was adopted (or ``None``)."""

    status: RequestStatus
    how: str
    placement: dict[str, Any]
    line: str
    backend_spec: dict[str, Any]
    warning: str | None = None


class Pacer:
    """At most ``rate`` starts a second and ``concurrency`` in flight (one per API and location)."""

    def __init__(self, rate: float | None = None, concurrency: int | None = None) -> None:
        self.gap = 1.0 / (rate or SUBMIT_RATE)
        self.next_start = 0.0
        self.slots = asyncio.Semaphore(concurrency or SUBMIT_CONCURRENCY)

    async def __aenter__(self) -> None:
        await self.slots.acquire()
        now = time.monotonic()
        start = max(now, self.next_start)
        self.next_start = start + self.gap
        if start > now:
            await asyncio.sleep(start - now)

    async def __aexit__(self, *exc: object) -> None:
        self.slots.release()


_PACERS: dict[tuple[str, str], Pacer] = {}


def pacer_for(key: tuple[str, str]) -> Pacer:
    """The pacer of one API and location in this event loop's process."""
    pacer = _PACERS.get(key)
    if pacer is None:
        pacer = _PACERS[key] = Pacer()
    return pacer


async def find_or_submit(kind: str, submission: Submission) -> Submitted:
    """Adopt this task instance's live request (or its success), else create the request; the
    blocking calls run in a thread, paced per API and location (:class:`Pacer`)."""
    from asgiref.sync import sync_to_async

    from airflow_provider_dws.triggers.poller import poller_key, shared_backend

    home = submission.lookup[0]["backend_spec"]
    backends = [(shared_backend(kind, x["backend_spec"]), x) for x in submission.lookup]
    async with pacer_for(poller_key(kind, home)):
        # Not thread_sensitive: submissions of many triggers run side by side, and a hook reading
        # its connection from this thread still reaches the triggerer's supervisor.
        run = sync_to_async(_find_or_submit, thread_sensitive=False)
        return await run(backends, submission)  # type: ignore[no-any-return]


def _find_or_submit(backends: list[tuple[Any, dict[str, Any]]], submission: Submission) -> Submitted:
    from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing

    identity = submission.task_identity
    found: dict[str, tuple[RequestStatus, Any, dict[str, Any]]] = {}
    listed: list[tuple[Any, list[RequestStatus]]] = []
    for backend, where in backends:
        # ``find``: what else the lookup needs (a Compute Engine resize request's MIG).
        statuses = backend.find(identity, **dict(where.get("find") or {}))
        listed.append((backend, statuses))
        for status in statuses:
            if status.name not in submission.avoid:
                found[status.name] = (status, backend, where)
    decision = choose_existing([Candidate(n, s.phase, s.timings.submitted) for n, (s, _, _) in found.items()])
    line = decision.describe(identity.describe())
    for backend, statuses in listed:
        _delete_ended(backend, [s for s in statuses if s.name != decision.name])
    warning = None
    if decision.name is not None:
        status, backend, where = found[decision.name]
        how = "adopted" if decision.action == "wait" else "succeeded"
        # How what an earlier try made differs from what this try asks (a calendar block is
        # adopted as it was booked, never booked twice), where the backend can tell.
        warn = getattr(backend, "adopt_warning", None)
        warning = warn(status, submission.request) if warn is not None else None
    else:
        backend, where = backends[0]
        status, created = backend.submit_spec(submission.request, identity)
        how = "created" if created else "adopted"
    return Submitted(
        status, how, dict(where.get("placement") or {}), line, dict(where["backend_spec"]), warning
    )


def _delete_ended(backend: Any, statuses: list[RequestStatus]) -> None:
    """Let a backend whose API keeps ended requests listed (Cloud TPU, GKE ProvisioningRequests)
    delete those the lookup found (its ``delete_ended``, which picks the ones it deletes; never the
    request adopted), before any create, as the worker's lookup does; a failure leaves them to the
    release."""
    delete = getattr(backend, "delete_ended", None)
    if delete is None or not statuses:
        return
    try:
        delete(statuses)
    except Exception:
        import logging

        logging.getLogger(__name__).warning("Could not delete the ended requests found", exc_info=True)


def refused(name: str, error: BaseException) -> RequestStatus:
    """The status a refused create reports: nothing was made; the request is bad as it is, unless
    the error says otherwise (its ``failure``: a calendar block whose chosen start passed is capacity
    not obtained)."""
    from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings

    failure = getattr(error, "failure", None)
    return RequestStatus(
        name=name,
        state="REFUSED",
        outcome=Outcome(
            Phase.FAILED,
            failure if isinstance(failure, FailureKind) else FailureKind.BAD_REQUEST,
            f"the create was refused: {error}",
        ),
        timings=RequestTimings(),
    )


def is_refusal(error: BaseException) -> bool:
    """Whether a create failed for the request itself (permission, a field the API refused)."""
    from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError

    return isinstance(error, (InvalidRequestError, PermissionDeniedApiError, ValueError))


#: Key of the trigger's ``resume`` state: ``True`` once :func:`announced` told the task instance its
#: request (the resumed task then writes the name and links no second time).
ANNOUNCED = "announced"


def announced(
    ti: Any, pending: str, status: RequestStatus, announce: Mapping[str, Any], carried: Any = None
) -> bool:
    """Tell the task instance which request it now waits on (blocking: run it in a thread): its
    ``dws_requests`` record renamed from the provisional name, the request's name and console link
    in the task's XComs (what the worker's own submit pushes). ``carried``: the records the
    deferral handed over (what the XCom holds: nothing else writes it while the task is deferred),
    which spares a read; ``None``: read the XCom. Never raises."""
    import logging

    from airflow_provider_dws.records import XCOM_KEY, read_records

    try:
        from airflow.sdk.execution_time.xcom import XCom

        url = link_of(status.name, announce)
        if not isinstance(carried, list):
            carried = XCom.get_one(key=XCOM_KEY, **xcom_where(ti))
        records = [
            (renamed(record, status, url) if record.request_name == pending else record).to_dict()
            for record in read_records(carried)
        ]
        set_xcoms(ti, {XCOM_KEY: records, **announcement(status, announce)})
    except Exception:
        logging.getLogger(__name__).warning(
            "Could not tell the task it waits on %s", status.name, exc_info=True
        )
        return False
    return True


def announcement(status: RequestStatus, announce: Mapping[str, Any]) -> dict[str, Any]:
    """The XComs that tell a task its request: its name under ``announce["name_key"]``, its
    console link under ``announce["link_key"]``, and the links made from its details."""
    xcoms: dict[str, Any] = {}
    if announce.get("name_key"):
        xcoms[announce["name_key"]] = status.name
    url = link_of(status.name, announce)
    if url and announce.get("link_key"):
        xcoms[announce["link_key"]] = url
    xcoms.update(detail_links(status, announce))
    return xcoms


def xcom_where(ti: Any) -> dict[str, Any]:
    """The Task SDK XCom arguments that name the task instance ``ti``."""
    return {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}


def set_xcoms(ti: Any, xcoms: Mapping[str, Any]) -> None:
    """Write ``xcoms`` for ``ti`` through the Task SDK (blocking: run it in a thread); raises what
    the SDK raises."""
    from airflow.sdk.execution_time.xcom import XCom

    where = xcom_where(ti)
    for key, value in xcoms.items():
        XCom.set(key, value, **where)


def link_of(name: str, announce: Mapping[str, Any]) -> str | None:
    """The console link of request ``name`` (``announce["link"]`` with its location and id): a
    Google resource name (``projects/P/locations/L/.../ID``) gives both, and ``parent``, the id of
    what holds it (``.../instanceGroupManagers/M/resizeRequests/ID``: ``M``); a bare name (a Kubernetes
    object's) is the id, its location ``announce["location"]`` if the link needs one."""
    link = announce.get("link")
    if not link or not name or is_pending(name):
        return None
    parts = name.split("/")
    if len(parts) >= 6:  # ``parent``: what holds it (a resize request's MIG)
        return str(link).format(location=parts[3], id=parts[-1], parent=parts[-3])
    if len(parts) >= 4:
        return str(link).format(location=parts[3], id=parts[-1])
    if len(parts) == 1:
        return str(link).format(location=announce.get("location") or "", id=name)
    return None


def detail_links(status: RequestStatus, announce: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(XCom key, URL) of each ``announce["detail_links"]`` entry whose detail the request has:
    ``{"key": ..., "detail": "uid", "link": URL with its ``token``}``."""
    links = []
    for entry in announce.get("detail_links") or ():
        value = status.details.get(entry.get("detail"))
        if value:
            links.append(
                (
                    str(entry["key"]),
                    str(entry["link"]).replace(entry.get("token") or DETAIL_TOKEN, str(value)),
                )
            )
    return links


def renamed(record: Any, status: RequestStatus, url: str | None) -> Any:
    """``record``, written under its provisional name, now of the request ``status`` describes: its
    name, phase, submit time and console link ``url`` (where given)."""
    from dataclasses import replace

    from airflow_provider_dws.records import iso, phase_of

    return replace(
        record,
        request_name=status.name,
        phase=phase_of(status.phase.value),
        submitted=iso(status.timings.submitted) or record.submitted,
        console_url=url or record.console_url,
    )
