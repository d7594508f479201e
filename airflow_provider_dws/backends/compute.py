"""Compute Engine flex-start VMs as DWS capacity requests: resize requests of a managed instance group.

google-cloud-compute has no async client, so the async half of the contract runs the sync
clients off the event loop in one small bounded thread pool per process (:func:`compute_pool`,
:data:`POOL_THREADS` threads, created on first use), shared by every trigger and poller of the
triggerer: a thousand waiting tasks never mean a thousand threads. The shared poller lists the
resize requests of each managed instance group (MIG) once per interval, one list serving every
waiting request of that MIG (:meth:`ComputeResizeRequestBackend.poll_group`).

Every mutating call uses a ``*_unary()`` method and its zone, region or global operation is polled
with a client built on the same options (:mod:`airflow_provider_dws.hooks.compute`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Container, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from airflow_provider_dws.backends.base import RequestStatus, classify_listed
from airflow_provider_dws.backends.google import GoogleBackend, translated
from airflow_provider_dws.errors import (
    ConflictError,
    InvalidRequestError,
    RequestAlreadyExistsError,
    RequestNotFoundError,
)
from airflow_provider_dws.facts import REGION_PATTERN
from airflow_provider_dws.hooks.base import DwsAsyncHookBase
from airflow_provider_dws.hooks.compute import DwsComputeHook
from airflow_provider_dws.scheduling.identity import RequestIdentity, is_attempt_of, parse_attempt_name
from airflow_provider_dws.scheduling.phases import COMPUTE_RESIZE_REQUEST_STATES, RequestTimings

if TYPE_CHECKING:
    from google.cloud.compute_v1 import InstanceGroupManagerResizeRequest, Operation

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Threads of the process's one Compute Engine pool (see the module's docstring).
POOL_THREADS = 4
#: Resize requests per list page.
LIST_PAGE_SIZE = 250
#: Bound on waiting for one operation (a template, a MIG, a cancel) to be DONE.
OPERATION_TIMEOUT = 600.0
#: The states in which a request may still be cancelled (the API refuses elsewhere).
CANCELLABLE = ("CREATING", "ACCEPTED")
#: The states in which a request may be deleted.
DELETABLE = ("SUCCEEDED", "FAILED", "CANCELLED")
#: ``max_wait=<seconds>s`` in a request's description: the max wait the provider enforces (the API
#: has none and resize requests have no labels), so a reattached try keeps the request's own.
MAX_WAIT_RE = re.compile(r"\bmax_wait=(?P<seconds>[0-9]+)s\b")
#: Namespace of the cancel and delete calls' request ids (one per request and verb).
_CALL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws/compute")
_NAME_RE = re.compile(
    r"^projects/(?P<project>[^/]+)/(?P<scope>zones|regions)/(?P<location>[^/]+)"
    r"/instanceGroupManagers/(?P<mig>[^/]+)/resizeRequests/(?P<request>[^/]+)$"
)

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None
_pool_lock = threading.Lock()


def compute_pool() -> ThreadPoolExecutor:
    """The process's one thread pool for Compute Engine calls, created on first use (and again in a
    forked child, which inherits no running threads)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="dws-compute")
            _pool_pid = os.getpid()
        return _pool


async def in_pool(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in :func:`compute_pool`, awaited from the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(compute_pool(), functools.partial(fn, *args, **kwargs))


class ResizeRequestName(NamedTuple):
    """The parts of ``projects/P/zones/Z/instanceGroupManagers/M/resizeRequests/R`` (or ``regions/R``)."""

    project: str
    scope: str
    location: str
    instance_group_manager: str
    resize_request: str

    @property
    def regional(self) -> bool:
        """True for a regional MIG's request."""
        return self.scope == "regions"

    @property
    def mig_path(self) -> str:
        """``projects/P/zones/Z/instanceGroupManagers/M``: the poller's group."""
        return f"projects/{self.project}/{self.scope}/{self.location}/instanceGroupManagers/{self.instance_group_manager}"


def parse_resize_request_name(name: str) -> ResizeRequestName:
    """Split a resize request's full name (the provider's, or its ``selfLink`` path) into its parts."""
    match = _NAME_RE.fullmatch(name.split("/compute/v1/", 1)[-1])
    if match is None:
        raise ValueError(f"not a Compute Engine resize request name: {name!r}")
    return ResizeRequestName(*match.groups())


def is_region(location: str) -> bool:
    """``us-central1`` is a region, ``us-central1-a`` a zone."""
    return re.fullmatch(REGION_PATTERN, location) is not None


def _when(stamp: str | None) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2026-12-01T10:00:00.000-08:00``) as an aware datetime."""
    if not stamp:
        return None
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def error_reasons(rr: InstanceGroupManagerResizeRequest) -> tuple[list[str], str]:
    """The error reasons and message of a request (its ``status.error``, else its last attempt's)."""
    for error in (rr.status.error, rr.status.last_attempt.error):
        if error.errors:
            reasons = [e.code for e in error.errors if e.code]
            return reasons, "; ".join(f"{e.code}: {e.message}" if e.code else e.message for e in error.errors)
    return [], ""


def describe_resize_request(rr: InstanceGroupManagerResizeRequest, where: ResizeRequestName) -> str:
    """``4 VMs for 6:00:00 in MIG train-pool (us-central1-a)``: what the request asks for."""
    count = rr.resize_by or len(rr.instances)
    run = rr.requested_run_duration.seconds if "requested_run_duration" in rr else 0
    duration = f" for {run // 3600}:{run % 3600 // 60:02d}:{run % 60:02d}" if run else ""
    vms = f"{count} VM{'s' if count != 1 else ''}"
    return f"{vms}{duration} in MIG {where.instance_group_manager} ({where.location})"


def resize_request_status(
    rr: InstanceGroupManagerResizeRequest, name: str, *, now: datetime | None = None
) -> RequestStatus:
    """Classify a resize request into the shared vocabulary (no API call). ``name`` is its full name
    (the message carries only a ``selfLink`` URL, which the emulator and Google spell alike).

    SUCCEEDED is timed ``now`` (default: the clock): the request records no time for it; the task's
    result reads when its VMs were created.
    """
    where = parse_resize_request_name(name)
    state = rr.state or "STATE_UNSPECIFIED"
    reasons, message = error_reasons(rr)
    outcome = COMPUTE_RESIZE_REQUEST_STATES.classify(state, reasons=reasons, message=message)
    now = now or datetime.now(timezone.utc)
    max_wait = MAX_WAIT_RE.search(rr.description or "")
    parsed = parse_attempt_name(where.resize_request)
    return RequestStatus(
        name=name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=_when(rr.creation_timestamp),
            started=now if state == "SUCCEEDED" else None,
            finished=now if outcome.phase.terminal else None,
        ),
        description=describe_resize_request(rr, where),
        details={
            "location": where.location,
            "instance_group_manager": where.instance_group_manager,
            "resize_by": int(rr.resize_by or len(rr.instances)),
            "run_seconds": int(rr.requested_run_duration.seconds) if "requested_run_duration" in rr else None,
            "max_wait_seconds": int(max_wait["seconds"]) if max_wait else None,
            "attempt": parsed[2] if parsed else 1,
            "reasons": reasons,
        },
    )


@dataclass(frozen=True)
class ResizeAsk:
    """What :meth:`ComputeResizeRequestBackend.submit` creates: a resize request in a MIG."""

    instance_group_manager: str
    resize_request: InstanceGroupManagerResizeRequest


class _NoAsyncHook(DwsAsyncHookBase[DwsComputeHook, Any]):
    """Compute Engine has no async client: the backend's async half uses the sync hook in its pool."""

    sync_hook_class = DwsComputeHook


class ComputeBackend(GoogleBackend[DwsComputeHook, _NoAsyncHook]):
    """Base of the Compute Engine backends (resize requests, future reservations): the sync hook,
    whose clients the async half runs in :func:`compute_pool`, the polling of the operations their
    ``*_unary()`` calls return, and the calls both make the same way (get, create with a request id
    and adopt, cancel, delete, and their async halves), driven by a few hooks:

    :meth:`_api` (the resource's client), :meth:`_key` (a full name as call fields), :meth:`_message`
    (a verb's request message), :meth:`_insert` (a create's full name and message),
    :meth:`_state` and :meth:`_classify` (a resource's state, and its status), with
    :attr:`call_namespace` and :attr:`cancellable`.
    """

    sync_hook_class = DwsComputeHook
    async_hook_class = _NoAsyncHook
    #: Namespace of the cancel and delete calls' request ids (one per resource and verb).
    call_namespace: ClassVar[uuid.UUID]
    #: The states in which the API takes a cancel (it refuses elsewhere).
    cancellable: ClassVar[tuple[str, ...]] = ()
    #: The states :meth:`arelease` (a task killed while deferred) cancels; ``None``: :attr:`cancellable`.
    kill_cancellable: ClassVar[tuple[str, ...] | None] = None

    # -- hooks -------------------------------------------------------------------------------------

    def _api(self) -> Any:
        """The client of this backend's resource."""
        raise NotImplementedError

    def _key(self, name: str) -> dict[str, Any]:
        """The call fields naming the resource ``name`` (its full name)."""
        raise NotImplementedError

    def _message(self, verb: str, **fields: Any) -> Any:
        """The request message of ``verb`` (``Insert``, ``Cancel``, ``Delete``): ``request_id``
        travels only on a message (the flattened arguments lack it)."""
        raise NotImplementedError

    def _insert(self, request: Any, token: str) -> tuple[str, Any]:
        """The full name ``request`` creates and its insert message (``request_id=token``)."""
        raise NotImplementedError

    def _state(self, resource: Any) -> str:
        """A resource's state as the API spells it."""
        raise NotImplementedError

    def _classify(self, resource: Any, name: str) -> RequestStatus:
        """A resource in the shared vocabulary (no API call)."""
        raise NotImplementedError

    # -- operations --------------------------------------------------------------------------------

    def wait_operation(
        self, operation: Operation, what: str, timeout: float = OPERATION_TIMEOUT
    ) -> Operation:
        """Poll ``operation`` (zonal, regional or global, as it says) until DONE, on this hook's own
        clients; raise the provider error of an operation that failed."""
        from google.api_core import exceptions as gexc
        from google.cloud.compute_v1 import Operation

        hook = self.hook
        client: Any
        if operation.zone:
            client, where = hook.get_zone_operations_client(), {"zone": operation.zone.rsplit("/", 1)[-1]}
        elif operation.region:
            client, where = (
                hook.get_region_operations_client(),
                {"region": operation.region.rsplit("/", 1)[-1]},
            )
        else:
            client, where = hook.get_global_operations_client(), {}
        deadline = time.monotonic() + timeout
        while operation.status != Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: operation {operation.name} not done after {timeout:.0f}s")
            operation = self._rpc(
                f"wait for {what}", client.wait, project=self.project_id, operation=operation.name, **where
            )
        if operation.error.errors:
            message = "; ".join(f"{e.code}: {e.message}" for e in operation.error.errors)
            with translated():
                raise gexc.from_http_status(operation.http_error_status_code or 400, f"{what}: {message}")
        return operation

    # -- sync (worker) -----------------------------------------------------------------------------

    def get(self, name: str) -> Any | None:
        """Read one resource; ``None`` when it (or what holds it) does not exist."""
        try:
            return self._rpc(f"get {name}", self._api().get, **self._key(name))
        except RequestNotFoundError:
            return None

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one resource, classified; ``None`` when gone."""
        resource = self.get(name)
        return None if resource is None else self._classify(resource, name)

    def submit(
        self,
        request: Any,
        identity: RequestIdentity,
        request_id: str | None = None,
        *,
        before_create: Callable[[], None] | None = None,
    ) -> tuple[RequestStatus, bool]:
        """Create the resource (its name is the identity's), with ``request_id`` (default
        :meth:`RequestIdentity.request_uuid`) so a repeated insert is answered once; one of that name
        already there (looked up first, or ALREADY_EXISTS) is adopted. ``before_create`` runs only
        when nothing of that name exists (a check that applies to a new request, not an adopted one).
        Returns it and whether this call created it."""
        token = request_id or identity.request_uuid()
        name, message = self._insert(request, token)

        def create() -> RequestStatus:
            operation = self._api().insert_unary(request=message, timeout=self.rpc_timeout)
            self.wait_operation(operation, f"create {name}")
            created = self.get_status(name)
            if created is None:
                raise RequestNotFoundError(f"{name} vanished right after it was created")
            return created

        existing = self.get_status(name)  # a try that made it before: adopt, without an insert
        if existing is not None:
            return existing, False
        if before_create is not None:
            before_create()
        try:
            return self._create(f"create {name}", create, lambda: self.get_status(name))
        except RequestAlreadyExistsError:
            existing = self.get_status(name)
            if existing is None:
                raise
            return existing, False

    def _token(self, verb: str, name: str) -> str:
        return str(uuid.uuid5(self.call_namespace, f"{verb}:{name}"))

    def _verb(self, verb: str, name: str) -> bool:
        """``cancel`` or ``delete`` one resource and wait for its operation; False when it is gone."""
        method = getattr(self._api(), f"{verb}_unary")
        try:
            message = self._message(verb.capitalize(), request_id=self._token(verb, name), **self._key(name))
            operation = self._rpc(f"{verb} {name}", method, request=message)
            self.wait_operation(operation, f"{verb} {name}")
        except RequestNotFoundError:
            return False
        return True

    def cancel(self, name: str) -> bool:
        """Cancel a resource in a :attr:`cancellable` state; one that left those states meanwhile is
        fine (the API refuses it there). False when there was nothing to cancel."""
        try:
            return self._verb("cancel", name)
        except (ConflictError, InvalidRequestError):
            current = self.get(name)
            if current is None or self._state(current) not in self.cancellable:
                log.info("%s is %s: nothing to cancel", name, self._state(current) if current else "gone")
                return False
            raise

    def delete(self, name: str) -> bool:
        """Delete the resource; False when it was gone (looked up first: a repeated delete's
        ``request_id`` is answered again)."""
        if self.get(name) is None:
            return False
        return self._verb("delete", name)

    # -- async (triggerer), in the shared pool -----------------------------------------------------

    def _get_once(self, name: str) -> Any:
        with translated():
            return self._api().get(timeout=self.rpc_timeout, **self._key(name))

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one resource, classified: one call in the pool; errors propagate (the poller retries)."""
        return self._classify(await in_pool(self._get_once, name), name)

    def _pages(self, message: Any) -> list[list[Any]]:
        """Every page of the list ``message`` asks for, one call each, not retried (the poller retries)."""
        with translated():
            pager = self._api().list(request=message, timeout=self.rpc_timeout)
            return [list(page.items) for page in pager.pages]

    def _cancel_once(self, name: str) -> None:
        with translated():
            message = self._message("Cancel", request_id=self._token("cancel", name), **self._key(name))
            operation = self._api().cancel_unary(request=message, timeout=self.rpc_timeout)
        self.wait_operation(operation, f"cancel {name}")

    async def arelease(self, name: str) -> bool:
        """Cancel a resource in a :attr:`kill_cancellable` state from the event loop: each call in the
        pool, transient errors retried with async backoff (no pool thread sleeps). One in another
        state, or gone, is left (False)."""
        states = self.cancellable if self.kill_cancellable is None else self.kill_cancellable
        try:
            current = await self._acall(f"get {name}", in_pool, self._get_once, name)
            if self._state(current) not in states:
                log.info("%s is %s: nothing to cancel", name, self._state(current))
                return False
            await self._acall(f"cancel {name}", in_pool, self._cancel_once, name)
        except RequestNotFoundError:
            log.info("%s is already gone", name)
            return False
        except (ConflictError, InvalidRequestError):
            try:
                current = await self._acall(f"get {name}", in_pool, self._get_once, name)
            except RequestNotFoundError:
                return False
            if self._state(current) in states:
                raise
            return False
        return True


class ComputeResizeRequestBackend(ComputeBackend):
    """Create, read, list, cancel and delete the resize requests of the MIGs of one zone or region.

    ``location`` is a zone (zonal MIGs) or a region (regional MIGs). A request is known by its full
    name; its MIG is part of it. Releasing a request that waits cancels it; one that ended without
    VMs is deleted (:meth:`discard`); the VMs of a SUCCEEDED one are deleted by the release operator,
    or by the API at the end of the run duration.
    """

    kind = "compute_resize_request"
    location_key = "location"
    call_namespace = _CALL_NAMESPACE
    cancellable = CANCELLABLE

    @property
    def regional(self) -> bool:
        """True when :attr:`location` is a region."""
        return is_region(self.location)

    @property
    def scope(self) -> dict[str, str]:
        """The location keyword of every call: ``{"zone": ...}`` or ``{"region": ...}``."""
        return {"region": self.location} if self.regional else {"zone": self.location}

    def mig_path(self, mig: str) -> str:
        """``projects/P/zones/Z/instanceGroupManagers/M`` (or ``regions/R``)."""
        scope = "regions" if self.regional else "zones"
        return f"projects/{self.project_id}/{scope}/{self.location}/instanceGroupManagers/{mig}"

    def name_of(self, mig: str, request: str) -> str:
        """The full name of resize request ``request`` of ``mig`` here."""
        return f"{self.mig_path(mig)}/resizeRequests/{request}"

    def poll_group(self, name: str) -> str:
        """The shared poller's group of a request: its MIG (one list per MIG serves its waits)."""
        return parse_resize_request_name(name).mig_path

    def _requests(self) -> Any:
        hook = self.hook
        return (
            hook.get_region_resize_requests_client() if self.regional else hook.get_resize_requests_client()
        )

    def _message(self, verb: str, **fields: Any) -> Any:
        """The request message of ``verb`` (``Insert``, ``Cancel``, ``Delete``) for this location's
        kind of MIG: ``request_id`` travels only on a message (the flattened arguments lack it)."""
        from google.cloud import compute_v1

        region = "Region" if self.regional else ""
        return getattr(compute_v1, f"{verb}{region}InstanceGroupManagerResizeRequestRequest")(**fields)

    def _list_message(self, mig: str) -> Any:
        from google.cloud import compute_v1

        region = "Region" if self.regional else ""
        return getattr(compute_v1, f"List{region}InstanceGroupManagerResizeRequestsRequest")(
            project=self.project_id, **self.scope, instance_group_manager=mig, max_results=LIST_PAGE_SIZE
        )

    def _key(self, name: str) -> dict[str, Any]:
        where = parse_resize_request_name(name)
        return {
            "project": where.project,
            **self.scope,
            "instance_group_manager": where.instance_group_manager,
            "resize_request": where.resize_request,
        }

    def _api(self) -> Any:
        return self._requests()

    def _insert(self, request: ResizeAsk, token: str) -> tuple[str, Any]:
        resource = request.resize_request
        message = self._message(
            "Insert",
            project=self.project_id,
            **self.scope,
            instance_group_manager=request.instance_group_manager,
            instance_group_manager_resize_request_resource=resource,
            request_id=token,
        )
        return self.name_of(request.instance_group_manager, resource.name), message

    def _state(self, resource: InstanceGroupManagerResizeRequest) -> str:
        return str(resource.state)

    def _classify(self, resource: InstanceGroupManagerResizeRequest, name: str) -> RequestStatus:
        return resize_request_status(resource, name)

    # -- sync (worker) -----------------------------------------------------------------------------

    def list_mig(self, mig: str) -> list[RequestStatus]:
        """Every resize request of ``mig`` (all pages), classified; a MIG that does not exist has none."""
        requests = self._requests()

        def list_all() -> list[Any]:
            pager = requests.list(request=self._list_message(mig), timeout=self.rpc_timeout)
            return list(pager)

        try:
            items = self._call(f"list resize requests of {self.mig_path(mig)}", list_all)
        except RequestNotFoundError:
            return []
        return [resize_request_status(rr, self.name_of(mig, rr.name)) for rr in items]

    def find(self, identity: RequestIdentity, mig: str | None = None) -> list[RequestStatus]:
        """Every resize request of this task instance in ``mig`` (default: the one made for it): the
        names that are submissions of its base (any try and attempt), with one paged list."""
        base = identity.queued_resource_base()
        return [
            status
            for status in self.list_mig(mig or identity.group_name())
            if is_attempt_of(parse_resize_request_name(status.name).resize_request, base)
        ]

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give the capacity back: cancel a waiting request (and, with ``wait``, delete it once
        cancelled). A SUCCEEDED one is left: its VMs are the release operator's (or the run
        duration's) to delete. False when there was nothing to release."""
        current = self.get(name)
        if current is None:
            return False
        if current.state in DELETABLE:
            log.info("%s is %s: nothing to cancel", name, current.state)
            return False
        cancelled = self.cancel(name)
        if wait:
            self.discard(name)
        return cancelled

    def discard(self, name: str, timeout: float = OPERATION_TIMEOUT) -> bool:
        """Leave nothing of a request that holds no VMs: cancel it if it still waits, then delete it
        (a SUCCEEDED one is kept: deleting it would only hide its VMs). False when it was gone."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.get(name)
            if current is None:
                return False
            if current.state == "SUCCEEDED":
                log.warning("%s SUCCEEDED meanwhile: kept, its VMs are released by the teardown", name)
                return False
            if current.state in DELETABLE:
                return self.delete(name)
            if current.state in CANCELLABLE:
                self.cancel(name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} still {current.state} {timeout:.0f}s after its cancel")
            time.sleep(1.0)

    # -- async (triggerer), in the shared pool -----------------------------------------------------

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The requests of every MIG named in ``only`` (the shared poller's group: one MIG),
        classified, with one paged list per MIG in the pool. Resize requests are listed per MIG, not
        per location, so with ``only=None`` nothing is listed. Ended requests stay listed until
        deleted, classified as such. Errors propagate: the shared poller backs off as a whole."""
        if not isinstance(only, Iterable):
            return {}
        wanted: dict[str, set[str]] = {}
        for name in only:
            where = parse_resize_request_name(name)
            wanted.setdefault(where.instance_group_manager, set()).add(where.resize_request)
        found: dict[str, RequestStatus] = {}
        for mig, names in wanted.items():
            pages = await in_pool(self._pages, self._list_message(mig))
            listed = await classify_listed(
                _each(pages), names, lambda rr, mig=mig: resize_request_status(rr, self.name_of(mig, rr.name))
            )
            found.update({status.name: status for status in listed.values()})
        return found


async def _each(pages: Sequence[list[Any]]) -> Any:
    for page in pages:
        yield page
