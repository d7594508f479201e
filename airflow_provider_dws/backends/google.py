"""What every backend over a Google Cloud client library shares, written once.

* :func:`translate`: the one place where ``google.api_core`` exceptions become the provider's
  API-neutral errors (:mod:`airflow_provider_dws.errors`); the trigger, the shared poller and
  the retry policy know only those.
* :class:`GoogleBackend`: constructor, :meth:`~GoogleBackend.spec`, lazy sync and async hooks,
  and every client call made through :meth:`~GoogleBackend._rpc` (one deadline, ``timeout=``,
  on every call; transient errors retried by the one policy of :mod:`.retry`).

Nothing here imports a Google library at module level: operators import backends at DAG-parse
time, and the client libraries cost hundreds of milliseconds per parse.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RequestStatus, rpc_deadline
from airflow_provider_dws.backends.retry import aretrying, retrying
from airflow_provider_dws.hooks.base import DwsAsyncHookBase, DwsBaseHook

log = logging.getLogger(__name__)

#: Deadline of one unary API call, in seconds. The generated clients have none by default, so a
#: black-holed connection would stall a call until the kernel gives up on the TCP connection.
DEFAULT_RPC_TIMEOUT = 60.0
#: Bound on waiting for a long-running operation (a TPU create or delete) to finish.
OPERATION_TIMEOUT = 600.0
# google.rpc.Code values of a request's own error (stable numbers from google/rpc/code.proto): the
# Vertex AI and Cloud TPU state tables read them to tell a bad request from capacity not obtained.
RPC_INVALID_ARGUMENT = 3
RPC_PERMISSION_DENIED = 7
RPC_FAILED_PRECONDITION = 9

_T = TypeVar("_T")
SyncHookT = TypeVar("SyncHookT", bound=DwsBaseHook)
AsyncHookT = TypeVar("AsyncHookT", bound=DwsAsyncHookBase[Any, Any])


def translate(exc: BaseException) -> BaseException:
    """The provider error for a ``google.api_core`` exception (others are returned unchanged).

    Order matters: ``AlreadyExists`` and ``Aborted`` are both ``Conflict`` (HTTP 409),
    ``ResourceExhausted`` is ``TooManyRequests``, ``DeadlineExceeded`` is ``GatewayTimeout``.
    A client-side deadline (``timeout=``) also arrives as ``DeadlineExceeded``.
    """
    from google.api_core import exceptions as gexc

    if not isinstance(exc, gexc.GoogleAPICallError):
        return _transport_error(exc) or exc
    status = getattr(exc, "grpc_status_code", None)
    code = getattr(status, "name", None) or exc.code
    message = str(exc.message or exc)
    if isinstance(exc, (gexc.Unknown, gexc.DataLoss, gexc.MethodNotImplemented)):
        return errors.ApiError(message, code=code)  # server errors that will not pass by themselves
    kinds: tuple[tuple[tuple[type[BaseException], ...], type[errors.ApiError]], ...] = (
        ((gexc.TooManyRequests,), errors.QuotaExceededError),
        ((gexc.AlreadyExists,), errors.RequestAlreadyExistsError),
        # Cancelled: the call was cut (a channel closed under it), not refused.
        ((gexc.ServerError, gexc.Aborted, gexc.Cancelled), errors.TransientApiError),
        ((gexc.NotFound,), errors.RequestNotFoundError),
        ((gexc.FailedPrecondition,), errors.ConflictError),
        ((gexc.BadRequest, gexc.Conflict, gexc.PreconditionFailed), errors.InvalidRequestError),
        ((gexc.Forbidden, gexc.Unauthorized), errors.PermissionDeniedApiError),
    )
    for google_types, ours in kinds:
        if isinstance(exc, google_types):
            return ours(message, code=code)
    return errors.ApiError(message, code=code)


def _transport_error(exc: BaseException) -> errors.TransientApiError | None:
    """A REST client's connection failure (refused, reset, timed out) as a transient error.

    The REST transports (Compute Engine) raise ``requests``' own exceptions for these, not a
    ``google.api_core`` one as gRPC does (UNAVAILABLE): left as they are, an outage of a few
    seconds ended a wait in the triggerer (the fault matrix's Compute outage row found it).
    """
    requests_exceptions = sys.modules.get("requests.exceptions")  # loaded by any REST client
    if requests_exceptions is None:
        return None
    transient = (
        requests_exceptions.ConnectionError,
        requests_exceptions.Timeout,
        requests_exceptions.ChunkedEncodingError,
    )
    if isinstance(exc, transient):
        return errors.TransientApiError(f"{type(exc).__name__}: {exc}", code="UNAVAILABLE")
    return None


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise the provider error for any ``google.api_core`` exception raised inside (sync or async code)."""
    try:
        yield
    except Exception as exc:
        ours = translate(exc)
        if ours is exc:
            raise
        raise ours from exc


class GoogleBackend(Generic[SyncHookT, AsyncHookT]):
    """Base of the backends over Google Cloud client libraries (Vertex AI, Cloud TPU, ...).

    A subclass sets :attr:`kind`, :attr:`location_key` (the spec's name for the location:
    ``region``, ``zone``) and its hook classes, and writes only its API's calls.

    :param rpc_timeout: deadline of each API call in seconds (default :data:`DEFAULT_RPC_TIMEOUT`).
    """

    kind: ClassVar[str]
    location_key: ClassVar[str]
    sync_hook_class: ClassVar[type[DwsBaseHook]]
    async_hook_class: ClassVar[type[DwsAsyncHookBase[Any, Any]]]

    def __init__(
        self,
        project_id: str,
        location: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        rpc_timeout: float | None = None,
    ) -> None:
        self.project_id = project_id
        self.location = location
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.rpc_timeout = rpc_deadline(rpc_timeout, DEFAULT_RPC_TIMEOUT)
        self._hook: SyncHookT | None = None
        self._async_hook: AsyncHookT | None = None

    @property
    def parent(self) -> str:
        """``projects/P/locations/L``."""
        return f"projects/{self.project_id}/locations/{self.location}"

    def spec(self) -> dict[str, Any]:
        """Constructor keyword arguments, JSON-serializable, to rebuild this backend in the triggerer."""
        chain = self.impersonation_chain
        spec: dict[str, Any] = {
            "project_id": self.project_id,
            self.location_key: self.location,
            "gcp_conn_id": self.gcp_conn_id,
            "impersonation_chain": list(chain) if isinstance(chain, (list, tuple)) else chain,
        }
        if self.rpc_timeout != DEFAULT_RPC_TIMEOUT:
            spec["rpc_timeout"] = self.rpc_timeout
        return spec

    @property
    def hook(self) -> SyncHookT:
        """The sync hook (worker side), built on first use and kept: its clients are cached on it."""
        if self._hook is None:
            self._hook = self.sync_hook_class(  # type: ignore[assignment]
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        assert self._hook is not None
        return self._hook

    @property
    def async_hook(self) -> AsyncHookT:
        """The async hook (triggerer side), built on first use."""
        if self._async_hook is None:
            self._async_hook = self.async_hook_class(  # type: ignore[assignment]
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        assert self._async_hook is not None
        return self._async_hook

    # -- calls -----------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` with its errors translated, transient ones retried."""

        def attempt() -> _T:
            with translated():
                return fn(*args, **kwargs)

        return retrying(what, logger=log)(attempt)

    def _create(
        self, what: str, create: Callable[[], RequestStatus], adopt: Callable[[], RequestStatus | None]
    ) -> tuple[RequestStatus, bool]:
        """``create()`` under the retry policy, as ``(status, True)``. Before every retry ``adopt()``
        looks the request up again: a create whose reply was lost may have made it, and then it is
        returned as ``(status, False)`` instead of a second request being made."""
        tries = 0

        def attempt() -> tuple[RequestStatus, bool]:
            nonlocal tries
            tries += 1
            if tries > 1:
                existing = adopt()
                if existing is not None:
                    log.warning("An earlier create call did succeed: adopting %s", existing.name)
                    return existing, False
            return create(), True

        return self._call(what, attempt)

    def _create_named(self, name: str, create: Callable[[], RequestStatus]) -> tuple[RequestStatus, bool]:
        """:meth:`_create` of the request ``name``, adopting it where a lost reply made it (read again
        before a retry) or another caller did (ALREADY_EXISTS): never a second request."""
        get_status: Callable[[str], RequestStatus | None] = self.get_status  # type: ignore[attr-defined]
        try:
            return self._create(f"create {name}", create, lambda: get_status(name))
        except errors.RequestAlreadyExistsError:
            existing = get_status(name)
            if existing is None:
                raise
            return existing, False

    def _rpc(self, what: str, method: Callable[..., _T], **request: Any) -> _T:
        """One client call with this backend's deadline (``timeout=``), translated and retried."""
        return self._call(what, method, timeout=self.rpc_timeout, **request)

    async def _acall(self, what: str, fn: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any) -> _T:
        """Async :meth:`_call`."""

        async def attempt() -> _T:
            with translated():
                return await fn(*args, **kwargs)

        return await aretrying(what, logger=log)(attempt)

    async def _arpc_once(self, method: Callable[..., Awaitable[_T]], **request: Any) -> _T:
        """One async client call with the deadline, translated, not retried (the poller retries)."""
        with translated():
            return await method(timeout=self.rpc_timeout, **request)

    def _operation_result(self, operation: Any, what: str, timeout: float = OPERATION_TIMEOUT) -> Any:
        """Wait for a long-running operation, retrying transient errors of its status reads.

        ``Operation.result()`` polls ``GetOperation``; one UNAVAILABLE there would otherwise surface
        as a failure of a call that has in fact gone through. A failed read leaves the future as it
        was, so calling ``result()`` again simply resumes polling, within the same overall bound.
        """
        started = time.monotonic()

        def result() -> Any:
            remaining = max(1.0, timeout - (time.monotonic() - started))
            return operation.result(timeout=remaining)

        return self._call(f"wait for {what}", result)
