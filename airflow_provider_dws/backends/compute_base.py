"""What every Compute Engine backend shares (resize requests, future reservations).

google-cloud-compute has no async client, so the async half of the contract runs the sync
clients off the event loop in one small bounded thread pool per process (:func:`compute_pool`,
:data:`POOL_THREADS` threads, created on first use), shared by every trigger and poller of the
triggerer: a thousand waiting tasks never mean a thousand threads.

Every mutating call uses a ``*_unary()`` method and its zone, region or global operation is polled
with a client built on the same options (:mod:`airflow_provider_dws.hooks.compute`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.google import GoogleBackend, translated
from airflow_provider_dws.errors import (
    ConflictError,
    InvalidRequestError,
    RequestNotFoundError,
)
from airflow_provider_dws.hooks.base import DwsAsyncHookBase
from airflow_provider_dws.hooks.compute import DwsComputeHook
from airflow_provider_dws.scheduling.identity import RequestIdentity

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Operation

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Threads of the process's one Compute Engine pool (see the module's docstring).
POOL_THREADS = 4
#: Bound on waiting for one operation (a template, a MIG, a cancel) to be DONE.
OPERATION_TIMEOUT = 600.0

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


def _when(stamp: str | None) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2026-12-01T10:00:00.000-08:00``) as an aware datetime."""
    if not stamp:
        return None
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


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
        return self._create_named(name, create)

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


async def _each(pages: Sequence[list[Any]]) -> Any:
    for page in pages:
        yield page
