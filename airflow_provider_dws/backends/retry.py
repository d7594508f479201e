"""Retries of transient API errors, shared by every backend call.

Backends first translate their client's exceptions into :mod:`airflow_provider_dws.errors`, so
this policy knows only those: a transient error (unavailable, timed out, internal, aborted) is
retried with exponential backoff and full jitter; a quota error (:class:`QuotaExceededError`)
backs off harder, because retrying it quickly only burns more of the quota that is already
exhausted. They never fail a task by themselves while the provider is waiting. Capacity retries
(resubmitting after capacity was not obtained) are a different, user-facing policy and live in
``scheduling/``.

The policy is tenacity's own ``Retrying``/``AsyncRetrying``, called as objects:
``retrying("get x")(fn, *args)``.
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta
from typing import Any

import tenacity

from airflow_provider_dws.errors import QuotaExceededError, TransientApiError
from airflow_provider_dws.scheduling.backoff import backoff

log = logging.getLogger(__name__)

#: How long a call keeps being retried before its last error is raised.
GIVE_UP_AFTER = timedelta(minutes=10)


def is_transient(exc: BaseException) -> bool:
    """True for errors that say nothing about the request itself and may pass if retried."""
    return isinstance(exc, TransientApiError)


class TransientWait(tenacity.wait.wait_base):
    """Exponential backoff with jitter (:func:`~airflow_provider_dws.scheduling.backoff.backoff`);
    a longer base after quota errors.

    Ordinary transient errors wait "full jitter", anywhere between 0 and the backoff, which spreads
    the retries of many callers. Quota errors wait "equal jitter", between half the backoff and
    all of it: never quickly, since a retry burns quota, and never in lockstep with the per-minute
    quota window, which a fixed cap (a multiple of that minute) would fall into again and again.
    """

    def __init__(
        self,
        initial: float = 1.0,
        maximum: float = 30.0,
        quota_initial: float = 5.0,
        quota_maximum: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.initial, self.maximum = initial, maximum
        self.quota_initial, self.quota_maximum = quota_initial, quota_maximum
        self.rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        n = max(1, retry_state.attempt_number)
        if isinstance(exc, QuotaExceededError):
            return backoff(n, self.quota_initial, self.quota_maximum, "equal", self.rng)
        return backoff(n, self.initial, self.maximum, "full", self.rng)


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
    give_up_after: timedelta | None = GIVE_UP_AFTER,
    wait: tenacity.wait.wait_base | None = None,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``tenacity.Retrying``/``AsyncRetrying`` around one API call.

    :param what: a short description of the call, for the log.
    :param give_up_after: stop retrying after this long (``None``: never give up).
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


def retrying(what: str, **kwargs: Any) -> tenacity.Retrying:
    """The retry policy as a callable: ``retrying("get x")(fn, *args)`` (see :func:`retry_kwargs`)."""
    return tenacity.Retrying(**retry_kwargs(what, **kwargs))


def aretrying(what: str, **kwargs: Any) -> tenacity.AsyncRetrying:
    """The same policy for coroutines: ``await aretrying("get x")(coro_fn, *args)``."""
    return tenacity.AsyncRetrying(**retry_kwargs(what, **kwargs))
