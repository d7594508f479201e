"""The provider's metrics, sent through Airflow's own stats (StatsD, Datadog or OpenTelemetry, as
the deployment configures ``[metrics]``); names, tags, and the way into Cloud Monitoring are in
``docs/metrics.md``.

Every function here swallows its own failures: a metric is never worth a failed task or a
stopped poller. Airflow's ``Stats`` (wherever this Airflow keeps it:
:mod:`airflow_provider_dws.compat`) is imported on first use, so importing this
module costs nothing (the dag-processor and the web app may import it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_dws.records import RequestRecord
    from airflow_provider_dws.scheduling.phases import RequestTimings

log = logging.getLogger(__name__)

#: Timer: how long a request waited for capacity (submitted -> started, or -> ended if it never ran).
REQUEST_WAIT = "dws.request.wait"
#: Timer: how long a request ran or held its capacity (started -> ended, or held -> released).
REQUEST_RUN = "dws.request.run"
#: Gauge: requests a shared poller follows now, per poller (api, location), each interval.
REQUESTS_WAITING = "dws.requests.waiting"
#: Counter: attempts that ended without capacity within their max wait.
CAPACITY_NOT_OBTAINED = "dws.capacity_not_obtained"
#: Counter: requests that ended cancelled (by a user, the API, or the provider).
REQUEST_CANCELLED = "dws.request.cancelled"
#: Counter: API calls a shared poller made: one per page of its lists (live and ended), one per direct read.
POLLER_CALLS = "dws.poller.calls"
#: Counter: whole-poller backoffs after a quota error.
POLLER_BACKOFF = "dws.poller.backoff"

#: Gauge: a request's wait minus the p50 wait it was forecast at submit, in seconds (negative:
#: capacity came sooner); sent when it gets capacity, if it was given a forecast.
WAIT_FORECAST_ERROR = "dws.request.wait_forecast_error"
#: Counter: requests whose wait passed the p90 they were forecast at submit (a true p90 does 1 in 10).
WAIT_P90_EXCEEDED = "dws.request.wait_p90_exceeded"

#: Every name, for the docs and the tests.
NAMES = (
    REQUEST_WAIT,
    REQUEST_RUN,
    REQUESTS_WAITING,
    CAPACITY_NOT_OBTAINED,
    REQUEST_CANCELLED,
    POLLER_CALLS,
    POLLER_BACKOFF,
    WAIT_FORECAST_ERROR,
    WAIT_P90_EXCEEDED,
)

_warned = False


def tags(api: str, location: str | None, accelerator_type: str | None = None) -> dict[str, str]:
    """The tags of one metric: ``api``, ``location`` and ``accelerator_type`` where known.

    Values are kept to what every backend accepts (a tag value with ``,`` or ``=`` is dropped by
    Airflow's InfluxDB-style StatsD line, so such characters become ``_``).
    """
    out = {"api": api}
    if location:
        out["location"] = location
    if accelerator_type:
        out["accelerator_type"] = accelerator_type
    return {k: v.replace(",", "_").replace("=", "_") for k, v in out.items()}


def _stats() -> Any:
    from airflow_provider_dws.compat import Stats

    return Stats


def _guard(what: str) -> None:
    # Once per process: a broken metrics backend would otherwise flood every task log.
    global _warned
    if not _warned:
        _warned = True
        log.warning("Could not send DWS metric %s; metrics are skipped", what, exc_info=True)


def incr(name: str, tag: Mapping[str, str], count: int = 1) -> None:
    """Add ``count`` to a counter (nothing for a count of 0)."""
    if count <= 0:
        return
    try:
        _stats().incr(name, count, tags=dict(tag))
    except Exception:
        _guard(name)


def gauge(name: str, value: float, tag: Mapping[str, str]) -> None:
    """Set a gauge."""
    try:
        _stats().gauge(name, value, tags=dict(tag))
    except Exception:
        _guard(name)


def timing(name: str, seconds: float | None, tag: Mapping[str, str]) -> None:
    """Record a duration (``None`` or negative: nothing is sent)."""
    if seconds is None or seconds < 0:
        return
    try:
        _stats().timing(name, timedelta(seconds=seconds), tags=dict(tag))
    except Exception:
        _guard(name)


def end_metrics(record: RequestRecord, wait_seconds: float | None, run_seconds: float | None) -> None:
    """The metrics of an ended attempt (or of a released slice, with no wait), tagged from its
    record; sent by whatever ends it: the attempt loop, a release, or a trigger that ends its task."""
    from airflow_provider_dws.scheduling.phases import FailureKind

    tag = tags(record.api, record.location, record.accelerator_type)
    timing(REQUEST_WAIT, wait_seconds, tag)
    timing(REQUEST_RUN, run_seconds, tag)
    if record.outcome == FailureKind.CAPACITY_NOT_OBTAINED.value:
        incr(CAPACITY_NOT_OBTAINED, tag)
    if record.phase == "cancelled":
        incr(REQUEST_CANCELLED, tag)


def attempt_metrics(record: RequestRecord, timings: RequestTimings) -> None:
    """:func:`end_metrics` of an attempt that ended with ``record``: its wait, and its run unless
    it never ran or still holds its capacity (a release counts that run)."""
    ran = not record.holds and timings.started is not None
    end_metrics(record, timings.wait_seconds, timings.run_seconds if ran else None)
    # How the wait forecast given at submit held: once per attempt, never again at a release.
    from airflow_provider_dws.forecast import forecast_error, p90_exceeded

    tag = tags(record.api, record.location, record.accelerator_type)
    error = forecast_error(record)
    if error is not None:
        gauge(WAIT_FORECAST_ERROR, error, tag)
    if p90_exceeded(record):
        incr(WAIT_P90_EXCEEDED, tag)
