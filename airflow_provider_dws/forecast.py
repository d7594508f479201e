"""The expected wait for capacity, from what this deployment's own requests waited.

Pure arithmetic over request records (:mod:`airflow_provider_dws.records`): every ended request
that waited for DWS capacity is one :class:`Observation` of its group (API, location, accelerator
type, size bucket). A request that got capacity is an observed wait (submit to start); one given
up, cancelled or not obtained is *censored*: it waited at least that long, and no more is known.
Dropping censored waits would make the queue look shorter than it is, and counting them as waits
would too, so the percentiles come from the Kaplan-Meier estimate of the chance of still waiting
after t, which takes both as they are. Where fewer than half (or a tenth) of the requests got
capacity within the longest wait seen, the p50 (or p90) is only known to be longer than that, and
:class:`Forecast` says "more than".

The worker reads observations from the wait history (:mod:`~airflow_provider_dws.wait_history`),
the DWS page from the records themselves; both estimate with :func:`estimate`. No Airflow import.
See ``docs/forecast.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from airflow_provider_dws.records import (
    BLOCK_API,
    BLOCK_PRICING,
    LIVE_PHASES,
    ON_BLOCK_PRICING,
    TASK_ENDED,
    RequestRecord,
    api_name,
    parse_time,
)
from airflow_provider_dws.savings import type_key

#: How far back similar requests count, unless ``[dws] forecast_window_days`` says otherwise.
DEFAULT_WINDOW = timedelta(days=30)
#: The fewest similar requests a forecast is given from; below it the log says there are too few.
MIN_REQUESTS = 5
#: Records that do not wait for DWS capacity: a calendar block waits for a start the user chose,
#: and work on a block runs on a reservation it already holds.
NOT_WAITS_APIS = frozenset({BLOCK_API})
NOT_WAITS_PRICING = frozenset({BLOCK_PRICING, ON_BLOCK_PRICING, "reserved"})
_TPU_SIZED = re.compile(r"(v[0-9]+[a-z]*)_([0-9]+)")
# Phases of a request that ended without capacity because it waited: given up, cancelled, expired.
_CENSORING_PHASES = frozenset({"not_obtained", "cancelled"})


def size_bucket(count: int) -> str:
    """The size class of a request of ``count`` accelerators: ``1``, ``2``, ``3-4``, ``5-8``, ...
    (powers of two: a request for 6 GPUs waits like one for 8 more than like one for 1)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return "?"
    if count <= 2:
        return str(count)
    top = 1 << (count - 1).bit_length()
    return f"{top // 2 + 1}-{top}"


def _type_name(accelerator_type: str | None) -> str:
    # The spelling of Vertex AI (NVIDIA_H100_80GB) and of Compute Engine (nvidia-h100-80gb) are
    # one type; a TPU type's size (v5litepod-16) is in the bucket, so its family names it.
    if not accelerator_type:
        return "?"
    name = type_key(accelerator_type)
    sized = _TPU_SIZED.fullmatch(name)
    return sized.group(1) if sized else name


def group_key(
    api: str, location: str, accelerator_type: str | None, count: int, pricing_model: str = "flex_start"
) -> str:
    """The key of similar requests: ``api|location|type|bucket``, and ``|pricing`` for any pricing
    model but flex-start (a TPU Spot slice does not wait like a flex-start one)."""
    parts = [api, location, _type_name(accelerator_type), size_bucket(count)]
    if pricing_model and pricing_model != "flex_start":
        parts.append(pricing_model)
    return "|".join(parts)


def group_of(record: RequestRecord) -> str | None:
    """The group of ``record``; ``None`` for a record that does not wait for DWS capacity."""
    if record.api in NOT_WAITS_APIS or record.pricing_model in NOT_WAITS_PRICING:
        return None
    return group_key(
        record.api, record.location, record.accelerator_type, record.accelerator_count, record.pricing_model
    )


def describe_group(key: str) -> str:
    """``vertex_custom_job|us-central1|nvidia_h100_80gb|5-8`` in words."""
    parts = key.split("|")
    if len(parts) not in (4, 5):
        return key
    api, location, accelerator, bucket = parts[:4]
    pricing = f" ({parts[4]})" if len(parts) == 5 else ""
    return f"{api_name(api)} in {location}, {accelerator} x {bucket}{pricing}"


@dataclass(frozen=True)
class Observation:
    """One request's wait: ``wait`` seconds to capacity (``obtained``), or at least that long."""

    request: str
    submitted: float
    wait: float
    obtained: bool

    def to_list(self) -> list[object]:
        """The compact form the wait history keeps."""
        return [self.request, round(self.submitted, 3), round(self.wait, 3), int(self.obtained)]

    @classmethod
    def from_list(cls, item: object) -> Observation | None:
        """Back from :meth:`to_list`; ``None`` for anything else."""
        if not isinstance(item, (list, tuple)) or len(item) != 4:
            return None
        request, submitted, wait, obtained = item
        numbers = (submitted, wait)
        if not isinstance(request, str) or not all(
            isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers
        ):
            return None
        return cls(request, float(submitted), max(0.0, float(wait)), bool(obtained))


def observation(record: RequestRecord) -> Observation | None:
    """What ``record`` says of the wait for capacity, once it is known: ``None`` while the request
    still waits, for a request refused or failed before it waited, and for what does not wait."""
    if group_of(record) is None:
        return None
    submitted = parse_time(record.submitted)
    if submitted is None:
        return None
    started = parse_time(record.started)
    if started is not None:
        wait = (started - submitted).total_seconds()
        return Observation(record.request_name, submitted.timestamp(), max(0.0, wait), True)
    ended = parse_time(record.ended)
    if record.phase in LIVE_PHASES or ended is None or record.phase not in _CENSORING_PHASES:
        return None
    if record.outcome == TASK_ENDED:
        # Ended from outside the attempt (a worker killed, a try ended by a clear or a mark): that
        # says nothing of how long capacity takes.
        return None
    return Observation(
        record.request_name, submitted.timestamp(), max(0.0, (ended - submitted).total_seconds()), False
    )


@dataclass(frozen=True)
class Forecast:
    """The wait of similar requests: percentiles of time to capacity, with censored waits counted.

    ``p50``/``p90`` are seconds; ``*_more_than`` says the figure is only a lower bound (the
    longest wait followed, ``longest``). ``curve`` is the estimate of the share still waiting
    after each observed wait: ``(seconds, share)``, stepping down.
    """

    group: str
    requests: int
    obtained: int
    window: timedelta
    p50: float | None
    p50_more_than: bool
    p90: float | None
    p90_more_than: bool
    longest: float
    curve: tuple[tuple[float, float], ...] = field(default=(), repr=False)
    #: With too few requests for percentiles, their waits as they are: ``(seconds, obtained)``.
    few: tuple[tuple[float, bool], ...] = ()

    @property
    def enough(self) -> bool:
        """Whether there are enough similar requests to say anything (:data:`MIN_REQUESTS`)."""
        return self.requests >= MIN_REQUESTS

    def still_waiting(self, seconds: float) -> tuple[float, bool]:
        """The share of similar requests without capacity after ``seconds`` of waiting, and whether
        it is known exactly (``False``: ``seconds`` is past the longest wait followed, and the share
        is only an upper bound)."""
        share = 1.0
        for at, value in self.curve:
            if at > seconds:
                break
            share = value
        return share, seconds <= self.longest


def _kaplan_meier(observations: Sequence[Observation]) -> list[tuple[float, float]]:
    """(event time, share still waiting after it), one per distinct wait that ended in capacity."""
    at_risk = len(observations)
    share = 1.0
    curve = []
    for wait, same in groupby(sorted(observations, key=lambda o: o.wait), key=lambda o: o.wait):
        tied = list(same)
        events = sum(1 for o in tied if o.obtained)
        if events:
            share *= 1.0 - events / at_risk
            curve.append((wait, share))
        # A wait censored at the moment others got capacity was still at risk then: it leaves after.
        at_risk -= len(tied)
    return curve


def _quantile(curve: Sequence[tuple[float, float]], longest: float, part: float) -> tuple[float | None, bool]:
    for wait, share in curve:
        if share <= 1.0 - part + 1e-12:
            return wait, False
    return (longest, True) if longest > 0 or curve else (None, False)


def estimate(
    group: str, observations: Iterable[Observation], now: datetime, window: timedelta = DEFAULT_WINDOW
) -> Forecast:
    """The forecast of ``group`` from the observations submitted within ``window`` before ``now``
    (one per request: a request seen twice counts once, its latest word kept)."""
    since = (now - window).timestamp()
    latest: dict[str, Observation] = {}
    for item in observations:
        if item.submitted >= since:
            latest[item.request] = item
    kept = list(latest.values())
    curve = _kaplan_meier(kept)
    longest = max((o.wait for o in kept), default=0.0)
    p50, p50_more = _quantile(curve, longest, 0.5)
    p90, p90_more = _quantile(curve, longest, 0.9)
    return Forecast(
        group=group,
        requests=len(kept),
        obtained=sum(1 for o in kept if o.obtained),
        window=window,
        p50=p50 if kept else None,
        p50_more_than=p50_more,
        p90=p90 if kept else None,
        p90_more_than=p90_more,
        longest=longest,
        curve=tuple(curve),
        few=tuple((o.wait, o.obtained) for o in sorted(kept, key=lambda o: o.submitted))
        if len(kept) < MIN_REQUESTS
        else (),
    )


def from_records(
    records: Iterable[RequestRecord], now: datetime, window: timedelta = DEFAULT_WINDOW
) -> dict[str, Forecast]:
    """One forecast per group, from ended records (the DWS page's way)."""
    groups: dict[str, list[Observation]] = {}
    for record in records:
        found = observation(record)
        group = group_of(record)
        if found is not None and group is not None:
            groups.setdefault(group, []).append(found)
    return {group: estimate(group, items, now, window) for group, items in groups.items()}


def span(seconds: float | None) -> str:
    """``2 h 10 min``, ``38 min``, ``45 s``."""
    if seconds is None:
        return "unknown"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def figure(seconds: float | None, more_than: bool) -> str:
    """A percentile in words: ``38 min`` or ``more than 2 h``."""
    return f"more than {span(seconds)}" if more_than else span(seconds)


def _days(window: timedelta) -> str:
    days = window.total_seconds() / 86400
    return f"{days:g} day" + ("" if days == 1 else "s")


def forecast_line(forecast: Forecast, max_wait: timedelta | None) -> str:
    """The task log's sentence at submit (too little history is said as such)."""
    what = describe_group(forecast.group)
    if not forecast.enough:
        line = (
            f"Expected wait: too little history for a forecast ({forecast.requests} similar "
            f"request{'s' if forecast.requests != 1 else ''} in the last {_days(forecast.window)}, "
            f"{MIN_REQUESTS} needed; {what})"
        )
        if forecast.few:
            waits = [span(w) if got else f"more than {span(w)} without capacity" for w, got in forecast.few]
            line += f"; {'it' if len(waits) == 1 else 'they'} waited " + ", ".join(waits)
        return line
    line = (
        f"Expected wait ({what}): similar requests waited p50 {figure(forecast.p50, forecast.p50_more_than)}, "
        f"p90 {figure(forecast.p90, forecast.p90_more_than)} ({forecast.requests} requests, "
        f"{forecast.obtained} got capacity, last {_days(forecast.window)})"
    )
    if max_wait is not None:
        share, exact = forecast.still_waiting(max_wait.total_seconds())
        bound = "" if exact else "at most "
        line += (
            f"; {bound}{share:.0%} were not obtained within {span(max_wait.total_seconds())} (this max wait)"
        )
    return line


def short_of_p50(forecast: Forecast, max_wait: timedelta) -> bool:
    """Whether ``max_wait`` is shorter than the p50 wait of similar requests (or than the longest
    followed, where the p50 is only known to be longer)."""
    return forecast.enough and forecast.p50 is not None and max_wait.total_seconds() < forecast.p50


@dataclass(frozen=True)
class Accuracy:
    """How the forecasts given at submit held: over requests whose wait is known against them."""

    forecasts: int
    p90_exceeded: int
    mean_error_seconds: float | None

    @property
    def p90_exceeded_share(self) -> float | None:
        """How often the wait passed the p90 given (10% is what a true p90 does)."""
        return self.p90_exceeded / self.forecasts if self.forecasts else None


def forecast_error(record: RequestRecord) -> float | None:
    """Actual wait minus the p50 the request was given at submit (seconds; ``None``: no p50 given,
    or the request has not got capacity, so its actual wait is unknown)."""
    found = observation(record)
    if found is None or not found.obtained or record.expected_wait_p50_seconds is None:
        return None
    if record.expected_wait_p50_lower_bound:  # a bound, not a figure to be wrong by
        return None
    return found.wait - record.expected_wait_p50_seconds


def p90_exceeded(record: RequestRecord) -> bool | None:
    """Whether the wait passed the p90 given at submit (``None``: no p90 given, or not yet known:
    a request given up before its p90 says nothing)."""
    found = observation(record)
    p90 = record.expected_wait_p90_seconds
    if found is None or p90 is None or record.expected_wait_p90_lower_bound:
        return None
    if found.wait > p90:
        return True
    return False if found.obtained else None


def accuracy(records: Iterable[RequestRecord]) -> Accuracy:
    """:class:`Accuracy` of the forecasts the records were given."""
    records = list(records)
    judged = [flag for flag in (p90_exceeded(r) for r in records) if flag is not None]
    errors = [e for e in (forecast_error(r) for r in records) if e is not None]
    return Accuracy(
        forecasts=len(judged),
        p90_exceeded=sum(1 for flag in judged if flag),
        mean_error_seconds=sum(errors) / len(errors) if errors else None,
    )
