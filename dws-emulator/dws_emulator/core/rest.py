"""The emulator's REST front: JSON over HTTP/1.1 for the APIs whose clients speak only REST.

``google-cloud-compute`` has no gRPC transport, so the emulator also serves HTTP, in the same
process and on the same state as the gRPC server:

* **Address**: the REST front listens on the gRPC port **+ 1** of the same loopback host
  (``DWS_EMULATOR_HOST=127.0.0.1:P`` means gRPC at ``127.0.0.1:P`` and REST at
  ``http://127.0.0.1:P+1``); :class:`~.server.ServerCore` finds a free adjacent pair.
* **Threading**: one asyncio event loop in a daemon thread runs uvicorn (Starlette routes); each
  request's handler runs in the loop's worker-thread pool (anyio's, bounded), so a handler may
  block (take the state's lock, ``wait`` on an operation) without stalling other requests.
* **Routes** are pluggable per API: an :class:`~.api.Api` returns :class:`RestRoute` objects from
  ``rest_routes()`` (like ``handlers()`` for gRPC), each with the method name that fault rules
  and call counters use (``compute.instanceGroupManagers.get``, registered under the API's REST
  service name with :func:`~.faults.register_methods`).
* Every matched call is counted on arrival (:class:`~.stats.RequestStats`, as
  ``SERVICE/method``) and goes through the fault injector; an injected fault, like any error,
  answers through the route's error renderer (:data:`ErrorRenderer`): by default Google's REST
  error body (``{"error": {"code", "message", "status", "errors": [{"message", "domain",
  "reason"}]}}``) and the matching HTTP status; the Kubernetes routes answer a ``kind: Status``.
  Paths no route matches answer 404 (not counted), a method a path does not serve 405, both in
  the shape of the routes under the same first path segment.
* A handler sees the request's headers and raw body (:class:`RestCall`) and may answer other
  than "200 and JSON" with a :class:`RestReply`: another status, media type or headers, or a
  stream of chunks (watches, followed logs), produced in worker threads as the client reads.
* An outage stops the listener (connections are refused) and binds the same port again after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from .errors import EmulatorError
from .faults import MESSAGES, FaultInjector
from .stats import RequestStats

log = logging.getLogger("dws_emulator")

#: gRPC status code -> (HTTP status, Google's error reason) for errors raised as ``EmulatorError``.
HTTP_OF_GRPC: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "required"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "forbidden"),
    grpc.StatusCode.NOT_FOUND: (404, "notFound"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "alreadyExists"),
    grpc.StatusCode.ABORTED: (409, "aborted"),
    grpc.StatusCode.FAILED_PRECONDITION: (412, "conditionNotMet"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rateLimitExceeded"),
    grpc.StatusCode.CANCELLED: (499, "cancelled"),
    grpc.StatusCode.INTERNAL: (500, "backendError"),
    grpc.StatusCode.UNKNOWN: (500, "backendError"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "notImplemented"),
    grpc.StatusCode.UNAVAILABLE: (503, "backendError"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "deadlineExceeded"),
}
#: The Google status name of an HTTP error status (the ``status`` field of the error body).
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_GRPC_OF_HTTP = {status: code for code, (status, _) in HTTP_OF_GRPC.items()}


class RestError(EmulatorError):
    """An error answered with HTTP ``status`` and Google's error body (``reason`` in ``errors[]``)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(_GRPC_OF_HTTP.get(status, grpc.StatusCode.UNKNOWN), message)
        self.status = status
        self.reason = reason


def not_found(resource: str) -> RestError:
    """Compute's 404: ``The resource 'projects/...' was not found``."""
    return RestError(404, "notFound", f"The resource '{resource}' was not found")


def error_body(status: int, reason: str, message: str) -> dict[str, Any]:
    """Google's REST error body for ``status`` (what ``google.api_core.exceptions`` parses)."""
    return {
        "error": {
            "code": status,
            "message": message,
            "status": STATUS_NAMES.get(status, "UNKNOWN"),
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


def _http_error(exc: EmulatorError) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, RestError):
        return exc.status, error_body(exc.status, exc.reason, exc.message)
    status, reason = HTTP_OF_GRPC.get(exc.code, (500, "backendError"))
    return status, error_body(status, reason, exc.message)


def google_errors(exc: EmulatorError) -> tuple[int, Any, dict[str, str]]:
    """The default :data:`ErrorRenderer`: Google's REST error body, no extra headers."""
    status, body = _http_error(exc)
    return status, body, {}


#: The HTTP status of each gRPC code where the API is one of Google's resource-oriented ones (Cloud
#: TPU's REST surface): google.rpc's mapping, where FAILED_PRECONDITION is 400, not Compute's 412.
HTTP_OF_CODE = {
    **{code: status for code, (status, _) in HTTP_OF_GRPC.items()},
    grpc.StatusCode.FAILED_PRECONDITION: 400,
}


def status_errors(exc: EmulatorError) -> tuple[int, Any, dict[str, str]]:
    """An :data:`ErrorRenderer` for resource-oriented APIs: ``{"error": {code, message, status}}``,
    ``status`` the gRPC code's name (``ALREADY_EXISTS``, ``FAILED_PRECONDITION``), as their clients
    read it."""
    if isinstance(exc, RestError):
        return google_errors(exc)
    status = HTTP_OF_CODE.get(exc.code, 500)
    return status, {"error": {"code": status, "message": exc.message, "status": exc.code.name}}, {}


#: Renders an error raised by a handler, a fault or the front (unknown path, bad body) as
#: ``(HTTP status, JSON body, extra response headers)``; each route has one.
ErrorRenderer = Callable[[EmulatorError], tuple[int, Any, dict[str, str]]]


@dataclass
class RestCall:
    """One decoded request: the route's path parameters, the query (last value wins), the JSON body.

    ``headers`` has lower-case names; ``raw`` is the body as sent (``body`` is None when it is
    empty or the route takes it raw); ``multi`` every value of a repeated query parameter.
    """

    params: dict[str, str]
    query: dict[str, str]
    body: Any = None
    #: Set by the front when the server stops, so a handler that blocks (``wait``) returns early.
    stopping: threading.Event = field(default_factory=threading.Event)
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""
    multi: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class RestReply:
    """A reply other than "200 and this JSON": another status, a media type, headers, a stream.

    ``body`` is JSON-encoded unless it is ``bytes`` or ``str`` (sent as is); ``stream``, when
    set, is an iterator of chunks sent as they come (the handler's lock must not be held while
    it waits: it runs in a worker thread, one ``next`` at a time).
    """

    body: Any = None
    status: int = 200
    media_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    stream: Iterator[bytes] | None = None


@dataclass(frozen=True)
class RestRoute:
    """``METHOD path`` (Starlette template, ``{name}`` matches one segment) served by ``handler``.

    ``name`` is the method name fault rules and counters use; ``handler`` returns the JSON-able
    reply (HTTP 200) or a :class:`RestReply`, or raises :class:`~.errors.EmulatorError`
    (:class:`RestError` for a chosen HTTP status and reason). ``errors`` renders every error of
    the route (and of unknown paths under the route's first path segment); ``json_body=False``
    leaves the body undecoded (``call.raw`` only).
    """

    method: str
    path: str
    name: str
    handler: Callable[[RestCall], Any]
    errors: ErrorRenderer = google_errors
    json_body: bool = True


@dataclass(frozen=True)
class Exchange:
    """One answered call, as :data:`OBSERVERS` see it: the route's method name, the JSON request
    body, the HTTP status and the JSON answer (``None`` for a stream or a body that is not JSON)."""

    service: str
    method: str
    http_method: str
    path: str
    request: Any
    status: int
    response: Any


#: Called with every answered call (in the worker thread that served it) while not empty. For
#: checks from outside, such as the conformance tests that hold each body against Google's
#: discovery documents; the emulator itself adds none. Use :func:`observe`.
OBSERVERS: list[Callable[[Exchange], None]] = []


@contextlib.contextmanager
def observe(observer: Callable[[Exchange], None]) -> Iterator[None]:
    """Call ``observer`` with every :class:`Exchange` of every REST front in this process, inside
    the ``with`` block."""
    OBSERVERS.append(observer)
    try:
        yield
    finally:
        OBSERVERS.remove(observer)


def _tell_observers(service: str, route: RestRoute, path: str, call: RestCall, response: Any) -> None:
    body = getattr(response, "body", None)  # a StreamingResponse has none
    answer = None
    if body and getattr(response, "media_type", None) == "application/json":
        with contextlib.suppress(ValueError):
            answer = json.loads(body)
    exchange = Exchange(service, route.name, route.method, path, call.body, response.status_code, answer)
    for observer in list(OBSERVERS):
        observer(exchange)


def _json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import Response

    return Response(
        json.dumps(body, separators=(",", ":")).encode(),
        status_code=status,
        media_type="application/json",
        headers=headers or None,
    )


def _response(reply: Any) -> Any:
    from starlette.responses import Response, StreamingResponse

    if not isinstance(reply, RestReply):
        return _json_response(200, reply)
    if reply.stream is not None:
        return StreamingResponse(
            reply.stream, status_code=reply.status, media_type=reply.media_type, headers=reply.headers or None
        )
    body = reply.body
    if isinstance(body, str):
        body = body.encode()
    elif not isinstance(body, bytes):
        body = json.dumps(body, separators=(",", ":")).encode()
    return Response(
        body, status_code=reply.status, media_type=reply.media_type, headers=reply.headers or None
    )


def _error_response(route_errors: ErrorRenderer, exc: EmulatorError) -> Any:
    status, body, headers = route_errors(exc)
    return _json_response(status, body, headers)


def _dispatch(route: RestRoute, full: str, call: RestCall, faults: FaultInjector) -> Any:
    """Apply the fault rules, then the route (in a worker thread); the Starlette response."""
    decision = faults.decide(full) if faults.enabled else None
    if decision is not None and decision.latency:
        time.sleep(decision.latency)
    code = decision.code if decision is not None else None
    if code is not None and code != "DEADLINE_EXCEEDED":
        log.info("fault injected: %s %s", full, code)
        return _error_response(route.errors, EmulatorError(getattr(grpc.StatusCode, code), MESSAGES[code]))
    try:
        reply = route.handler(call)
    except EmulatorError as exc:
        result = _error_response(route.errors, exc)
    except Exception as exc:  # a bug in the emulator must not look like a hang to the client
        log.exception("internal error in %s", full)
        result = _error_response(
            route.errors, EmulatorError(grpc.StatusCode.INTERNAL, f"dws-emulator internal error: {exc}")
        )
    else:
        if code != "DEADLINE_EXCEEDED":
            return _response(reply)
        if isinstance(reply, RestReply) and reply.stream is not None:
            close = getattr(reply.stream, "close", None)
            if close is not None:
                close()
    if code == "DEADLINE_EXCEEDED":
        # Applied, then the answer is lost: the client cannot tell whether it happened.
        log.info("fault injected: %s %s", full, code)
        return _error_response(route.errors, EmulatorError(grpc.StatusCode.DEADLINE_EXCEEDED, MESSAGES[code]))
    return result


def _segment(path: str) -> str:
    return path.lstrip("/").split("/", 1)[0]


def build_app(
    routes: Iterable[tuple[str, RestRoute]],
    faults: FaultInjector,
    stats: RequestStats,
    stopping: threading.Event,
) -> Any:
    """The Starlette application serving ``(REST service name, route)`` pairs."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.routing import Route

    routes = list(routes)
    # Unknown paths and methods answer in the shape of the routes under the same first segment
    # (``/api``, ``/apis``: a Kubernetes Status; ``/compute``: Google's error body).
    renderers: dict[str, ErrorRenderer] = {}
    for _, route in routes:
        renderers.setdefault(_segment(route.path), route.errors)

    def endpoint(service: str, route: RestRoute) -> Callable[[Request], Any]:
        full = f"{service}/{route.name}"

        async def serve(request: Request) -> Any:
            stats.count(full)
            raw = await request.body()
            body = None
            if route.json_body and raw.strip():
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    return _error_response(
                        route.errors, RestError(400, "parseError", f"Invalid JSON payload received. {exc}")
                    )
            multi: dict[str, list[str]] = {}
            for key, value in request.query_params.multi_items():
                multi.setdefault(key, []).append(value)
            call = RestCall(
                dict(request.path_params),
                dict(request.query_params),
                body,
                stopping,
                {k.lower(): v for k, v in request.headers.items()},
                raw,
                multi,
            )
            response = await run_in_threadpool(_dispatch, route, full, call, faults)
            if OBSERVERS:
                _tell_observers(service, route, request.url.path, call, response)
            return response

        serve.__name__ = route.name
        return serve

    async def http_error(request: Request, exc: Exception) -> Any:
        status = getattr(exc, "status_code", 500)
        reason = {404: "notFound", 405: "httpMethodNotAllowed"}.get(status, "invalid")
        message = (
            f"The requested URL {request.url.path} was not found on this server."
            if status == 404
            else f"{request.method} is not allowed on {request.url.path}."
        )
        render = renderers.get(_segment(request.url.path), google_errors)
        return _error_response(render, RestError(status, reason, message))

    return Starlette(
        routes=[
            Route(route.path, endpoint(service, route), methods=[route.method]) for service, route in routes
        ],
        exception_handlers={HTTPException: http_error},
    )


class RestFront:
    """uvicorn on one event-loop thread; :meth:`serve` binds a port, :meth:`halt` closes it.

    The loop thread lives as long as the front (an outage halts and re-serves on the same loop).
    """

    def __init__(self, host: str) -> None:
        self.host = host
        self.stopping = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dws-emulator-rest", daemon=True)
        self._thread.start()
        self._server: Any = None
        self._serving: Any = None  # concurrent future of the running ``Server.serve``

    def serve(self, port: int, app: Any, timeout: float = 10.0) -> int:
        """Bind ``host:port`` (0: any free port) and serve ``app``; the bound port, or OSError."""
        import uvicorn

        if self._server is not None:
            raise RuntimeError("REST front already serving")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host.strip("[]"), port), family=family)  # SO_REUSEADDR set
        sock.setblocking(False)
        bound = int(sock.getsockname()[1])
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=5,
        )
        server = uvicorn.Server(config)
        self.stopping.clear()
        self._serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), self._loop)
        self._server = server
        deadline = time.monotonic() + timeout
        while not server.started:
            if self._serving.done() or time.monotonic() > deadline:
                self.halt()
                sock.close()
                raise OSError(f"REST front did not start on {self.host}:{bound}")
            time.sleep(0.005)
        return bound

    def halt(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connections (requests in flight get about a second)."""
        server, serving = self._server, self._serving
        self._server = self._serving = None
        if server is None:
            return
        self.stopping.set()
        server.should_exit = True
        with contextlib.suppress(Exception):
            serving.result(timeout)

    def close(self) -> None:
        """Halt and end the loop thread."""
        self.halt()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2)
        if not self._thread.is_alive():
            self._loop.close()
