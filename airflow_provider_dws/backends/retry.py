"""Retries of transient Google API errors, shared by every backend call.

Transient errors (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED/429, ABORTED) are
retried with exponential backoff and full jitter; quota errors back off harder, because retrying
them quickly only burns more of the quota that is already exhausted. They never fail a task by
themselves while the provider is waiting. Capacity retries (resubmitting after capacity was not
obtained) are a different, user-facing policy and live in ``scheduling/``.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta
from typing import Any

import tenacity
from google.api_core import exceptions as gexc

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.TooManyRequests,
    gexc.Aborted,
    gexc.GatewayTimeout,
    gexc.BadGateway,
)
QUOTA_ERRORS: tuple[type[BaseException], ...] = (gexc.ResourceExhausted, gexc.TooManyRequests)

log = logging.getLogger(__name__)


def is_transient(exc: BaseException) -> bool:
    """True for errors that say nothing about the request itself and may pass if retried."""
    return isinstance(exc, TRANSIENT_ERRORS)


class TransientWait(tenacity.wait.wait_base):
    """Exponential backoff with jitter; a longer base after quota errors.

    The n-th retry's backoff is ``initial * 2**(n-1)``, capped. Ordinary transient errors wait
    "full jitter", anywhere between 0 and the backoff, which spreads the retries of many callers.
    Quota errors (429/RESOURCE_EXHAUSTED) wait "equal jitter", between half the backoff and all of
    it: never quickly, since a retry burns quota, and never in lockstep with the per-minute quota
    window, which a fixed cap (a multiple of that minute) would fall into again and again.
    """

    def __init__(
        self,
        initial: float = 1.0,
        maximum: float = 30.0,
        quota_initial: float = 5.0,
        quota_maximum: float = 60.0,
    ) -> None:
        self.initial, self.maximum = initial, maximum
        self.quota_initial, self.quota_maximum = quota_initial, quota_maximum

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        exponent = max(0, retry_state.attempt_number - 1)
        if exc is not None and isinstance(exc, QUOTA_ERRORS):
            backoff = min(self.quota_maximum, self.quota_initial * 2.0**exponent)
            return backoff / 2 + random.uniform(0.0, backoff / 2)
        return random.uniform(0.0, min(self.maximum, self.initial * 2.0**exponent))


def _log_before_sleep(what: str, logger: logging.Logger) -> Any:
    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        delay = retry_state.next_action.sleep if retry_state.next_action else 0.0
        logger.warning(
            "%s: transient error (%s: %s); retrying in %.1fs (attempt %d)",
            what,
            type(exc).__name__,
            getattr(exc, "message", exc),
            delay,
            retry_state.attempt_number + 1,
        )

    return before_sleep


def retry_kwargs(
    what: str,
    *,
    give_up_after: timedelta | None = timedelta(minutes=10),
    wait: tenacity.wait.wait_base | None = None,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``tenacity.Retrying``/``AsyncRetrying`` around one API call.

    :param what: a short description of the call, for the log.
    :param give_up_after: stop retrying after this long (``None``: never give up, used while
        waiting on a request that may sit in the queue for days).
    """
    stop: tenacity.stop.stop_base = (
        tenacity.stop_never if give_up_after is None else tenacity.stop_after_delay(give_up_after)
    )
    return {
        "retry": tenacity.retry_if_exception(is_transient),
        "wait": wait or TransientWait(),
        "stop": stop,
        "reraise": True,
        "before_sleep": _log_before_sleep(what, logger or log),
    }


def operation_result(operation: Any, what: str, timeout: float, logger: logging.Logger | None = None) -> Any:
    """Wait for a long-running operation, retrying transient errors of its status reads.

    ``Operation.result()`` polls ``GetOperation``; one UNAVAILABLE there would otherwise surface as
    a failure of a call that has in fact gone through. A failed read leaves the future as it was,
    so calling ``result()`` again simply resumes polling, within the same overall ``timeout``.
    """
    started = time.monotonic()
    for attempt in tenacity.Retrying(**retry_kwargs(f"wait for {what}", logger=logger)):
        with attempt:
            remaining = max(1.0, timeout - (time.monotonic() - started))
            return operation.result(timeout=remaining)
    raise AssertionError("unreachable")  # pragma: no cover
