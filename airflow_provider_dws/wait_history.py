"""The wait history a task reads its forecast from: what similar requests of this deployment waited.

The request records (:mod:`~airflow_provider_dws.records`) live in each task instance's XCom,
which a task can read only for its own DAG run. So when a request's wait is known (it got
capacity, or it ended without), its :class:`~airflow_provider_dws.forecast.Observation` is also
added to one Airflow Variable per group of similar requests, ``dws_wait_history__<group>``, which
every task of the deployment can read at submit. Each Variable keeps the group's observations of
the forecast window (newest :data:`KEEP` at most), a few kilobytes.

Variables have no compare-and-set, so two tasks of a group ending at the same moment could each
write over the other's observation: the writer reads its Variable back a moment later and writes
again (up to :data:`WRITE_TRIES` times) until its observation is there. That makes a lost
observation unlikely, not impossible. A history that cannot be read or written
costs the forecast, never the task: it is logged at warning once per process and skipped.

``[dws] wait_history`` set to ``False`` turns both off (no forecast, no Variables written; the
default on Airflow 3.1, whose task SDK logs a read of a Variable not yet written as an error);
``[dws] forecast_window_days`` sets the window (default 30). Airflow is imported inside the calls.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_dws.forecast import (
    DEFAULT_WINDOW,
    Forecast,
    Observation,
    estimate,
    group_of,
    observation,
)
from airflow_provider_dws.records import RequestRecord
from airflow_provider_dws.savings import in_task

log = logging.getLogger(__name__)

#: The Variable name prefix; the group follows, in characters a Variable key and a secrets
#: backend's secret id both take.
PREFIX = "dws_wait_history__"
#: The most observations a group keeps (the newest).
KEEP = 400
#: How many times a writer writes again when a concurrent write dropped its observation.
WRITE_TRIES = 4
CONFIG_SECTION = "dws"
#: The longest forecast window taken (days).
MAX_WINDOW_DAYS = 3650
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_warned: set[str] = set()


def variable_key(group: str) -> str:
    """The Variable of ``group`` (``api|location|type|bucket``)."""
    return PREFIX + "__".join(_UNSAFE.sub("_", part) for part in group.split("|"))


def configured_window() -> timedelta:
    """The forecast window, ``[dws] forecast_window_days`` (default 30 days; the DWS page reads it too)."""
    from airflow.configuration import conf

    days = conf.getfloat(CONFIG_SECTION, "forecast_window_days", fallback=DEFAULT_WINDOW.days)
    # Beyond ten years no request is older; a larger figure would overflow the date arithmetic.
    return timedelta(days=min(days, MAX_WINDOW_DAYS)) if days > 0 else DEFAULT_WINDOW


def _config() -> tuple[bool, timedelta]:
    """Whether the history is on here, and the forecast window."""
    if not in_task():
        return False, DEFAULT_WINDOW
    from airflow.configuration import conf

    from airflow_provider_dws.compat import MISSING_VARIABLE_LOGS_ERROR

    # Off by default where a read of a Variable not yet written logs an error (Airflow 3.1).
    enabled = conf.getboolean(CONFIG_SECTION, "wait_history", fallback=not MISSING_VARIABLE_LOGS_ERROR)
    return enabled, configured_window()


def _get(key: str) -> Any:
    from airflow.sdk import Variable
    from airflow.sdk.execution_time.cache import SecretCache

    # With [secrets] use_cache on, a cached copy would be merged and written back over newer waits.
    SecretCache.invalidate_variable(key)
    return Variable.get(key, default=None)


def _set(key: str, value: str) -> None:
    from airflow.sdk import Variable

    Variable.set(key, value, description="airflow-provider-dws wait history (docs/forecast.md)")


def _warn_once(what: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.warning("The DWS wait history could not be %s; forecasts skip it", what, exc_info=True)


def _decode(raw: Any) -> list[Observation]:
    if raw is None:
        return []
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return []
    items = value.get("waits") if isinstance(value, dict) else None
    return [o for o in (Observation.from_list(i) for i in items or ()) if o is not None]


def _encode(items: list[Observation]) -> str:
    return json.dumps({"v": 1, "waits": [o.to_list() for o in items]}, separators=(",", ":"))


def forecast(group: str, now: datetime | None = None) -> Forecast | None:
    """The group's forecast over the configured window (``None``: the history is off or unreadable)."""
    try:
        enabled, window = _config()
        if not enabled:
            return None
        raw = _get(variable_key(group))
        return estimate(group, _decode(raw), now or datetime.now(timezone.utc), window)
    except Exception:
        _warn_once("read")
        return None


def _merged(items: list[Observation], new: Observation, since: float) -> list[Observation]:
    kept = [o for o in items if o.request != new.request and o.submitted >= since]
    kept.append(new)
    kept.sort(key=lambda o: o.submitted)
    return kept[-KEEP:]


def observe(record: RequestRecord) -> bool:
    """Add ``record``'s wait to its group's history once it is known; whether it was written.

    Idempotent per request (a record written twice replaces its own observation)."""
    found = observation(record)
    group = group_of(record)
    if found is None or group is None:
        return False
    try:
        enabled, window = _config()
        if not enabled:
            return False
        key = variable_key(group)
        since = (datetime.now(timezone.utc) - window).timestamp()
        for attempt in range(WRITE_TRIES):
            _set(key, _encode(_merged(_decode(_get(key)), found, since)))
            # Read back a moment later: a writer that read before this write and writes after it
            # drops this observation (its own write lands within milliseconds of its read).
            time.sleep(random.uniform(0.05, 0.15) * (attempt + 1))
            if any(o.request == found.request for o in _decode(_get(key))):
                return True
        log.warning("The DWS wait history of %s kept losing %s to concurrent writes", group, found.request)
    except Exception:
        _warn_once("written")
    return False
