"""The trigger's status lines in the task log, and how often an unchanged wait is mentioned.

A line says first what a user looks for: the request's phase and its API state, how long it has
waited and its max wait, and, while it waits, when the wait is given up (UTC); the request's name
comes last. Airflow's log viewer cuts a long line, and a resource name with what it asks for runs to
90 characters and more: what follows it is what a reader would not see.

The trigger writes one line on every change of the request's state, and while nothing changes a
heartbeat line every ``[dws] log_heartbeat`` seconds (:func:`log_heartbeat`).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta, timezone

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import Phase

log = logging.getLogger(__name__)

#: The provider's Airflow config section, and its option: seconds between two lines about a wait
#: whose state did not change (``AIRFLOW__DWS__LOG_HEARTBEAT``); 0 writes a line on changes only.
CONFIG_SECTION = "dws"
HEARTBEAT_OPTION = "log_heartbeat"
#: The heartbeat when the option is not set (or cannot be read).
DEFAULT_HEARTBEAT = timedelta(minutes=10)

#: What each phase is called at the start of a line.
_PHASE_WORDS = {
    Phase.WAITING: "Waiting for capacity",
    Phase.PROVISIONING: "Capacity promised, not usable yet",
    Phase.RUNNING: "Running",
    Phase.SUCCEEDED: "Succeeded",
    Phase.FAILED: "Failed",
    Phase.NOT_OBTAINED: "Capacity not obtained",
    Phase.CANCELLED: "Cancelled",
}


def log_heartbeat() -> timedelta | None:
    """How often a wait whose state has not changed is mentioned in the task log: the
    ``[dws] log_heartbeat`` config option in seconds (:data:`DEFAULT_HEARTBEAT` when not set);
    ``None`` for 0, which logs changes only. A value that is not a number of seconds >= 0 gives the
    default, with a warning: a log setting never fails a wait."""
    try:
        from airflow.configuration import conf

        raw = conf.get(CONFIG_SECTION, HEARTBEAT_OPTION, fallback=None)
    except Exception:
        log.warning("Could not read [%s] %s; using %s", CONFIG_SECTION, HEARTBEAT_OPTION, DEFAULT_HEARTBEAT)
        return DEFAULT_HEARTBEAT
    if raw is None or str(raw).strip() == "":
        return DEFAULT_HEARTBEAT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        log.warning(
            "[%s] %s must be a number of seconds >= 0 (0: no heartbeat), got %r; using %s",
            CONFIG_SECTION,
            HEARTBEAT_OPTION,
            raw,
            DEFAULT_HEARTBEAT,
        )
        return DEFAULT_HEARTBEAT
    return timedelta(seconds=seconds) if seconds > 0 else None


def duration(seconds: float | None) -> str:
    """``H:MM:SS`` to the second, ``?`` when unknown."""
    if seconds is None:
        return "?"
    return str(timedelta(seconds=round(seconds)))


def utc(moment: datetime) -> str:
    """``2026-05-01 14:03:00 UTC``: an absolute time a reader compares with the log's own."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def status_line(
    status: RequestStatus,
    request_name: str,
    *,
    now: datetime,
    max_wait_seconds: float | None = None,
    gives_up_at: datetime | None = None,
) -> str:
    """One line about ``status``: phase and API state, the wait (and, while waiting, the max wait and
    when the wait is given up), then the request's name and what it asks for.

    Examples::

        Waiting for capacity [JOB_STATE_PENDING], waited 0:12:30 of max 2:00:00, gives up at
        2026-05-01 14:03:00 UTC: projects/p/locations/us-central1/customJobs/123 (16 x NVIDIA_H100_80GB)
        Running [JOB_STATE_RUNNING], waited 0:40:02 for capacity: projects/p/.../customJobs/123 (...)
        Failed [JOB_STATE_FAILED], waited 0:40:02, ran 0:03:10: exit code 3: projects/p/.../123 (...)

    An ended request's message (why it ended) comes before its name: it is what the reader wants.
    """
    timings = status.timings
    waited = timings.wait_seconds
    if waited is None and timings.submitted is not None:
        waited = (now - timings.submitted).total_seconds()
    what = f"{request_name} ({status.description})" if status.description else request_name
    head = f"{_PHASE_WORDS.get(status.phase, status.phase.value)} [{status.state}]"
    if status.phase is Phase.WAITING:
        wait = f"waited {duration(waited)}"
        if max_wait_seconds:
            wait += f" of max {duration(max_wait_seconds)}"
        if gives_up_at is not None:
            wait += f", gives up at {utc(gives_up_at)}"
        return f"{head}, {wait}: {what}"
    if status.phase is Phase.PROVISIONING:
        return f"{head}, waited {duration(waited)}: {what}"
    if status.phase is Phase.RUNNING:
        return f"{head}, waited {duration(waited)} for capacity: {what}"
    ran = f", ran {duration(timings.run_seconds)}" if timings.started is not None else ""
    why = f"{status.outcome.message}: " if status.outcome.message else ""
    return f"{head}, waited {duration(waited)}{ran}: {why}{what}"
