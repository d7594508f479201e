"""gRPC plumbing every API's servicer uses: (de)serializers, error translation, fault injection.

There are no generated server stubs in the installed packages, so services are assembled with
``grpc.method_handlers_generic_handler`` from the raw protobuf classes behind the proto-plus types
(:func:`unary`). :class:`FaultInjectingHandler` wraps an emulated service's handler with the fault
rules (:mod:`.faults`); while no rule is set it serves the plain handlers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from .errors import EmulatorError
from .faults import CODES, MESSAGES, FaultInjector

log = logging.getLogger("dws_emulator")


def serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def json_dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def json_loads(data: bytes) -> Any:
    return json.loads(data.decode() or "{}") if data else {}


def guard(fn: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
    """Translate ``EmulatorError`` into a gRPC status; log unexpected failures as INTERNAL."""

    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(request, context)
        except EmulatorError as exc:
            context.abort(exc.code, exc.message)
        except Exception as exc:  # a bug in the emulator must not look like a hang to the client
            log.exception("internal error in %s", getattr(fn, "__name__", fn))
            context.abort(grpc.StatusCode.INTERNAL, f"dws-emulator internal error: {exc}")

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def unary(fn: Callable[..., Any], request_class: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        guard(fn), request_deserializer=request_class.FromString, response_serializer=serialize
    )


def _with_faults(handler: grpc.RpcMethodHandler, method: str, faults: FaultInjector) -> grpc.RpcMethodHandler:
    """``handler`` with the fault rules applied to every call of ``method`` (``SERVICE/Method``)."""
    inner = handler.unary_unary

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        decision = faults.decide(method)
        if decision.latency:
            time.sleep(decision.latency)
        if decision.code is None:
            return inner(request, context)
        if decision.code == "DEADLINE_EXCEEDED":
            # Apply the request, then lose the answer: the client cannot tell whether it happened.
            # The request's own error (an abort) is lost with the answer, as on a real timeout.
            with contextlib.suppress(Exception):
                inner(request, context)
        log.info("fault injected: %s %s", method, decision.code)
        context.abort(CODES[decision.code], MESSAGES[decision.code])

    return grpc.unary_unary_rpc_method_handler(
        call,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class FaultInjectingHandler(grpc.GenericRpcHandler):
    """Wraps a service's generic handler; while no rule is set it returns the plain handlers."""

    def __init__(self, inner: grpc.GenericRpcHandler, faults: FaultInjector) -> None:
        self._inner = inner
        self._faults = faults
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None or not self._faults.enabled or handler.unary_unary is None:
            return handler
        method = str(handler_call_details.method).lstrip("/")  # type: ignore[attr-defined]
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = _with_faults(handler, method, self._faults)
        return wrapped
