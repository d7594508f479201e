"""Scheduling policies: small, frozen, validated values you can read, combine, print and test.

In the spirit of tenacity's ``stop_after_attempt | stop_after_delay``:

- :class:`Deadline` - an absolute time, or a duration after the run's data interval end.
- :class:`CapacityRetry` - how often, how soon and on which outcomes to resubmit a request.
- :class:`Placement` / :class:`Failover` - where to ask for capacity, in order.
- the windows, :class:`OffPeakWindow` and :class:`WindowSet` (``window_a | window_b``), live in
  :mod:`airflow_provider_dws.scheduling.windows` and are importable from here too.

Each policy has a ``coerce`` classmethod that accepts the short forms the operators take
(``deadline=timedelta(hours=2)``, ``capacity_retry=2``, ``failover="us-east4"``) and refuses
anything else with a message naming the parameter.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.patterns import LazyPattern
from airflow_provider_dws.scheduling._time import aware_utc, check_duration, format_duration
from airflow_provider_dws.scheduling.backoff import backoff as backoff_seconds
from airflow_provider_dws.scheduling.phases import FailureKind

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.windows import (
        MERGE_HORIZON,
        OffPeakWindow,
        Window,
        WindowSet,
        coerce_window,
        parse_window,
    )

_WINDOW_NAMES = frozenset(
    {"MERGE_HORIZON", "OffPeakWindow", "Window", "WindowSet", "coerce_window", "parse_window"}
)


def __getattr__(name: str) -> Any:
    """The window names, re-exported from ``windows`` on first use: a DAG file that gives no window
    does not load them (nor their cron parser) when it is parsed."""
    if name in _WINDOW_NAMES:
        from airflow_provider_dws.scheduling import windows

        return getattr(windows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MERGE_HORIZON",
    "Advised",
    "CapacityRetry",
    "Deadline",
    "Failover",
    "OffPeakWindow",
    "Placement",
    "ShortestWait",
    "Tier",
    "Window",
    "WindowSet",
    "coerce_window",
    "format_duration",
    "parse_window",
]


# -- deadline ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """Nothing is submitted, and no wait extends, past this instant.

    Either absolute (``at``, timezone-aware) or relative to the run's data interval end
    (``after_data_interval_end``); exactly one of the two.
    """

    at: datetime | None = None
    after_data_interval_end: timedelta | None = None

    def __post_init__(self) -> None:
        if (self.at is None) == (self.after_data_interval_end is None):
            got = "both" if self.at is not None else "neither"
            raise ValueError(f"Deadline needs exactly one of at= or after_data_interval_end=, got {got}")
        if self.at is not None:
            try:
                aware_utc(self.at, "Deadline.at")
            except ValueError as err:
                raise ValueError(f"{err} (add tzinfo, e.g. datetime(..., tzinfo=ZoneInfo('UTC')))") from None
        if self.after_data_interval_end is not None:
            check_duration(
                "Deadline.after_data_interval_end",
                self.after_data_interval_end,
                seconds=False,
                zero=True,
                whole=False,
            )

    @classmethod
    def coerce(cls, value: Deadline | datetime | timedelta | None, name: str = "deadline") -> Deadline | None:
        """A :class:`Deadline` from itself, an aware ``datetime`` (absolute) or a ``timedelta``; None stays None."""
        if value is None or isinstance(value, Deadline):
            return value
        if isinstance(value, datetime):
            return cls(at=value)
        if isinstance(value, timedelta):
            return cls(after_data_interval_end=value)
        raise TypeError(
            f"{name} must be a Deadline, a timezone-aware datetime or a timedelta (or None), "
            f"got {type(value).__name__}"
        )

    def resolve(self, data_interval_end: datetime | None, *, now: datetime | None = None) -> datetime:
        """The deadline instant (UTC) for a run whose data interval ends at ``data_interval_end``.

        With ``now``, a deadline that is not after ``now`` is refused with a ``ValueError``.
        """
        if self.at is not None:
            resolved = aware_utc(self.at, "Deadline.at")
        else:
            assert self.after_data_interval_end is not None
            if data_interval_end is None:
                raise ValueError(
                    f"Deadline {self} is relative to the data interval end, but this run has no data interval"
                )
            resolved = aware_utc(data_interval_end, "data_interval_end") + self.after_data_interval_end
        if now is not None and resolved <= aware_utc(now, "now"):
            raise ValueError(
                f"the deadline {resolved.isoformat()} ({self}) has already passed (now {aware_utc(now).isoformat()})"
            )
        return resolved

    def __str__(self) -> str:
        if self.at is not None:
            return f"by {self.at.isoformat()}"
        return f"{self.after_data_interval_end} after the data interval end"


# -- capacity retries -------------------------------------------------------------------------------

_NEVER_RETRY = {
    FailureKind.WORKLOAD_FAILED: "retrying a workload failure re-runs a job that already ran and failed "
    "(use Airflow task retries for that)",
    FailureKind.BAD_REQUEST: "retrying a bad request repeats a request the API has already refused",
    FailureKind.CANCELLED: "retrying a cancelled request undoes whoever cancelled it",
    FailureKind.TIMED_OUT: "the task's execution_timeout passed; Airflow task retries decide what follows",
}
_FAILURE_ORDER = list(FailureKind)


@dataclass(frozen=True)
class CapacityRetry:
    """Resubmit a request that came back without capacity.

    :param attempts: total submissions, the first included (``attempts=3`` is two retries; Kueue's
        ``backoffLimitCount: 3`` counts retries, so it is ``attempts=4`` here).
    :param backoff: the wait before the first retry in the same placement; doubles each retry.
    :param max_backoff: the cap of that wait.
    :param jitter: "full jitter": wait a random time between 0 and the capped backoff.
    :param on: the failure kinds that are retried (capacity not obtained, preempted).
    :param wait_for_next_window: when a retry would fall outside the off-peak window, wait for the
        next opening (True) or give up (False).
    """

    attempts: int = 3
    backoff: timedelta = timedelta(minutes=1)
    max_backoff: timedelta = timedelta(minutes=30)
    jitter: bool = True
    on: frozenset[FailureKind] = frozenset({FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.PREEMPTED})
    wait_for_next_window: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"CapacityRetry.attempts must be an int, got {type(self.attempts).__name__}")
        if self.attempts < 1:
            raise ValueError(
                f"CapacityRetry.attempts must be at least 1 (the first submission counts), got {self.attempts}"
            )
        for name in ("backoff", "max_backoff"):
            check_duration(
                f"CapacityRetry.{name}", getattr(self, name), seconds=False, zero=True, whole=False
            )
        if self.max_backoff < self.backoff:
            raise ValueError(
                f"CapacityRetry.max_backoff ({self.max_backoff}) must be at least backoff ({self.backoff})"
            )
        for name in ("jitter", "wait_for_next_window"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CapacityRetry.{name} must be a bool, got {getattr(self, name)!r}")
        on = self.on
        if isinstance(on, (str, FailureKind)):
            on = [on]  # type: ignore[assignment]
        kinds: set[FailureKind] = set()
        for item in on:
            try:
                kind = FailureKind(item)
            except ValueError:
                raise ValueError(
                    f"CapacityRetry.on: unknown failure kind {item!r} "
                    f"(choose from {', '.join(k.value for k in FailureKind)})"
                ) from None
            if kind in _NEVER_RETRY:
                raise ValueError(f"CapacityRetry.on must not include {kind.value}: {_NEVER_RETRY[kind]}")
            kinds.add(kind)
        if not kinds:
            raise ValueError("CapacityRetry.on must name at least one failure kind to retry on")
        object.__setattr__(self, "on", frozenset(kinds))

    @property
    def retries(self) -> int:
        """How many resubmissions after the first attempt."""
        return self.attempts - 1

    def delay(self, retry_number: int, rng: random.Random | None = None) -> timedelta:
        """The wait before retry ``retry_number`` (1 = the first retry), in whole seconds.

        ``backoff * 2 ** (retry_number - 1)``, capped at ``max_backoff``; with ``jitter``, a uniform
        random duration between 0 and that (full jitter), drawn from ``rng``.
        """
        if isinstance(retry_number, bool) or not isinstance(retry_number, int) or retry_number < 1:
            raise ValueError(f"retry_number must be an int >= 1, got {retry_number!r}")
        seconds = backoff_seconds(
            retry_number,
            self.backoff.total_seconds(),
            self.max_backoff.total_seconds(),
            "full" if self.jitter else "none",
            rng,
        )
        return timedelta(seconds=math.floor(seconds))

    @classmethod
    def coerce(cls, value: CapacityRetry | int | None, name: str = "capacity_retry") -> CapacityRetry | None:
        """A policy from itself or a number of retries (``2`` is ``CapacityRetry(attempts=3)``); None stays None."""
        if value is None or isinstance(value, CapacityRetry):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"{name} must be a number of retries >= 0, got {value}")
            return cls(attempts=value + 1)
        raise TypeError(
            f"{name} must be a CapacityRetry or a number of retries (or None), got {type(value).__name__}"
        )

    def __str__(self) -> str:
        noun = "attempt" if self.attempts == 1 else "attempts"
        kinds = ", ".join(k.value for k in _FAILURE_ORDER if k in self.on)
        text = (
            f"up to {self.attempts} {noun}, backoff {self.backoff}..{self.max_backoff} "
            f"{'with' if self.jitter else 'without'} jitter, on {kinds}"
        )
        if not self.wait_for_next_window:
            text += ", giving up when the window closes"
        return text


# -- placements -------------------------------------------------------------------------------------

_LOCATION_RE = LazyPattern(r"^[a-z][a-z0-9-]*[a-z0-9]$")


class Tier(str, enum.Enum):
    """Capacity tiers a placement may ask for (TPU queued resources)."""

    SPOT = "spot"
    GUARANTEED = "guaranteed"
    ON_DEMAND = "on-demand"


_TIERS = tuple(t.value for t in Tier)


@dataclass(frozen=True)
class Placement:
    """Where to ask for capacity: a region or zone, optionally another machine, accelerator or tier.

    ``None`` fields mean "the same as the operator's own"; :meth:`over` fills them in.
    """

    location: str
    machine_type: str | None = None
    accelerator_type: str | None = None
    tier: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.location, str) or not _LOCATION_RE.fullmatch(self.location):
            raise ValueError(
                f"Placement.location must be a region or zone such as 'us-central1' or 'us-west4-a', got {self.location!r}"
            )
        for name in ("machine_type", "accelerator_type"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"Placement.{name} must be a non-empty string or None, got {value!r}")
        if self.tier is not None:
            tier = self.tier.value if isinstance(self.tier, Tier) else self.tier
            if tier not in _TIERS:
                raise ValueError(
                    f"Placement.tier must be one of {', '.join(_TIERS)} or None, got {self.tier!r}"
                )
            object.__setattr__(self, "tier", tier)

    @classmethod
    def coerce(cls, value: Placement | str) -> Placement:
        """A placement from itself or a location string."""
        if isinstance(value, Placement):
            return value
        if isinstance(value, str):
            return cls(value)
        raise TypeError(f"a placement must be a Placement or a location string, got {type(value).__name__}")

    def over(self, home: Placement) -> Placement:
        """This placement with its unset fields taken from ``home``."""
        return Placement(
            self.location,
            self.machine_type if self.machine_type is not None else home.machine_type,
            self.accelerator_type if self.accelerator_type is not None else home.accelerator_type,
            self.tier if self.tier is not None else home.tier,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form; fields left unset are left out (it travels in every trigger event)."""
        fields = {
            "location": self.location,
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "tier": self.tier,
        }
        return {key: value for key, value in fields.items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Placement:
        """Inverse of :meth:`to_dict`."""
        return cls(data["location"], data.get("machine_type"), data.get("accelerator_type"), data.get("tier"))

    def __str__(self) -> str:
        details = [d for d in (self.machine_type, self.accelerator_type, self.tier) if d]
        return f"{self.location} ({', '.join(details)})" if details else self.location


@dataclass(frozen=True, init=False)
class Failover:
    """Placements tried in order after the operator's own one: ``Failover("us-east4", "us-west1")``.

    ``greener=True`` orders them (the operator's own stays first) by the grid carbon intensity of
    their regions, lowest first (:mod:`airflow_provider_dws.carbon`): the placements listed are all
    ones the DAG accepts, and the ranking is logged with its figures.
    """

    placements: tuple[Placement, ...]
    greener: bool

    def __init__(
        self,
        placements: Placement | str | Iterable[Placement | str],
        *more: Placement | str,
        greener: bool = False,
    ) -> None:
        items: list[Placement | str] = (
            [placements] if isinstance(placements, (str, Placement)) else list(placements)
        ) + list(more)
        if not items:
            raise ValueError("Failover.placements must name at least one placement, got none")
        resolved: list[Placement] = []
        for item in items:
            if not isinstance(item, (str, Placement)):
                raise TypeError(
                    f"Failover.placements must hold Placement values or location strings, got {type(item).__name__}"
                )
            placement = Placement.coerce(item)
            if placement in resolved:
                raise ValueError(f"Failover.placements lists {placement} twice")
            resolved.append(placement)
        if not isinstance(greener, bool):
            raise TypeError(f"Failover.greener must be True or False, got {greener!r}")
        object.__setattr__(self, "placements", tuple(resolved))
        object.__setattr__(self, "greener", greener)

    @classmethod
    def coerce(
        cls, value: Failover | Placement | str | Iterable[Placement | str] | None, name: str = "failover"
    ) -> Failover | None:
        """A failover from itself, one placement or location, or a list of them; None stays None."""
        if value is None or isinstance(value, Failover):
            return value
        if isinstance(value, (str, Placement)):
            return cls(value)
        if isinstance(value, Iterable):
            return cls(tuple(value))
        raise TypeError(
            f"{name} must be a Failover, a Placement, a location string or a list of them (or None), "
            f"got {type(value).__name__}"
        )

    #: How the placements (the operator's own among them) are ordered before each attempt:
    #: ``written``, ``advice`` or ``expected_wait`` (:mod:`~.ranking`).
    order = "written"

    @property
    def advised(self) -> bool:
        """Whether the placements are ordered by Compute Engine's capacity advice (:class:`Advised`),
        which only the operators that declare ``ADVISED`` can ask."""
        return self.order == "advice"

    @property
    def ranked(self) -> bool:
        """Whether the placements are ranked before every attempt, the first included, rather than
        tried in the written order one capacity retry after another."""
        return self.order != "written" or self.greener

    def _greener(self) -> str:
        return " (greener: lower carbon intensity first among equals)" if self.greener else ""

    def __str__(self) -> str:
        return "fail over to " + ", then ".join(str(p) for p in self.placements) + self._greener()

    def __len__(self) -> int:
        return len(self.placements)

    def __iter__(self) -> Iterator[Placement]:
        return iter(self.placements)


class Advised(Failover):
    """Placements ordered before each attempt by Compute Engine's capacity advice, most obtainable
    first: ``Advised("us-east4-b", "us-central1-a")``.

    With the operator's own placement they are the candidates: before each attempt the provider asks
    ``regions.advice.capacity`` for them (one call per region) and makes the request where the advice
    scores highest among those not tried yet, and logs the scores. An advice that fails, or a
    surface without advice, leaves the written order (the operator's own first). Needs no
    ``capacity_retry`` (the first attempt is advised too); with one, each retry asks again. Offered
    on the Compute Engine operators (standalone VMs and MIG resize requests) and Cloud Batch jobs
    (each region scored by its best zone).
    """

    order = "advice"

    def __str__(self) -> str:
        return (
            "fail over by capacity advice among "
            + ", ".join(str(p) for p in self.placements)
            + self._greener()
        )


class ShortestWait(Failover):
    """Placements ordered before each attempt by the expected wait of similar requests, shortest
    first: ``ShortestWait("us-east4", "us-central1")``.

    With the operator's own placement they are the candidates: before each attempt the provider
    reads this deployment's wait history (:mod:`airflow_provider_dws.forecast`) for each and makes the
    request where the p50 wait of similar requests is shortest among those not tried yet; where
    Compute Engine's capacity advice also scores them (the Compute Engine and Cloud Batch
    operators), a placement's rank by wait and its rank by obtainability are added. A placement
    with too little history ranks after those with a forecast, in the written order. Needs no
    ``capacity_retry``; with one, each retry ranks again. Offered on every operator that fails over.
    """

    order = "expected_wait"

    def __str__(self) -> str:
        return (
            "fail over by expected wait among " + ", ".join(str(p) for p in self.placements) + self._greener()
        )
