"""What waiting saved: accelerator-hours waited, run and held idle, priced from the user's table.

Pure arithmetic over :class:`~airflow_provider_dws.records.RequestRecord` and a
:class:`PriceTable`; the only Airflow access is :func:`load_prices`, which imports Airflow inside
the call (the api-server calls it for the DWS page; nothing here is paid at DAG parse). No price is
built in: a request whose prices the table lacks is counted as ``unpriced``, never guessed.
See ``docs/savings.md`` for the arithmetic in words and the table's format.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

from airflow_provider_dws.records import LIVE_PHASES, RequestRecord, parse_time

#: The Airflow Variable holding the table as JSON: ``{"NVIDIA_H100_80GB": {"flex_start": 2.5}}``.
VARIABLE_KEY = "dws_prices"
#: The Airflow config section holding the table as ``<accelerator type>.<pricing model> = price``.
CONFIG_SECTION = "dws_prices"
VARIABLE_SOURCE = f"Airflow Variable {VARIABLE_KEY}"
CONFIG_SOURCE = f"config section [{CONFIG_SECTION}]"
NO_TABLE_SOURCE = "no price table set"
#: Pricing models whose price stands for holding the same machines the whole time, best first.
HOLD_MODELS = ("reserved", "standard")
#: Pricing models of on-demand capacity, best first, and of Spot capacity.
ON_DEMAND_MODELS = ("on_demand", "standard")
SPOT_MODEL = "spot"
#: The table's optional metadata entries: where its prices come from (text), and their date.
NOTE_KEY = "_source"
AS_OF_KEY = "_as_of"
#: The group key :func:`summarize` callers use for every request together.
TOTAL_KEY = "total"
#: The day key of a record without a submit time.
UNKNOWN_DAY = "unknown"

_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_MODEL_NAME = re.compile(r"[a-z][a-z0-9_]*")
# A TPU accelerator type is ``<family>-<size>`` (``v5litepod-16``) and is priced per chip by family.
_SIZED = re.compile(r"(.+)_[0-9]+")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# Separators of a flat key: the dot of a config file, or the double underscore an environment
# variable can carry (a POSIX shell cannot export a name with a dot).
_SEPARATORS = (".", "__")


def type_key(accelerator_type: str) -> str:
    """Accelerator types match ignoring case and ``-`` vs ``_``: Vertex AI spells a GPU
    ``NVIDIA_H100_80GB`` where Compute Engine and Cloud Batch spell it ``nvidia-h100-80gb``."""
    return accelerator_type.strip().lower().replace("-", "_")


def type_keys(accelerator_type: str) -> tuple[str, ...]:
    """The keys a table looks ``accelerator_type`` up by, best first: its own :func:`type_key`,
    then, for a TPU type ``v5litepod-16``, its family ``v5litepod``."""
    key = type_key(accelerator_type)
    sized = _SIZED.fullmatch(key)
    return (key, sized.group(1)) if sized else (key,)


@dataclass(frozen=True)
class PriceTable:
    """USD per accelerator-hour by (accelerator_type, pricing_model), e.g. ("NVIDIA_H100_80GB", "flex_start").

    ``note`` says where the prices come from and ``as_of`` (``YYYY-MM-DD``) their date: the
    table's ``_source`` and ``_as_of`` entries, when it has them.
    """

    prices: Mapping[tuple[str, str], float]
    source: str
    error: str | None = None
    note: str | None = None
    as_of: str | None = None
    _index: dict[tuple[str, str], float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {(type_key(t), m.strip().lower()): float(p) for (t, m), p in self.prices.items()}
        object.__setattr__(self, "_index", index)

    def price(self, accelerator_type: str | None, pricing_model: str) -> float | None:
        """The price of ``pricing_model`` for this type (a TPU ``v5litepod-16`` falls back to its
        family ``v5litepod``); ``None`` when the table has none."""
        if (
            not isinstance(accelerator_type, str)
            or not accelerator_type
            or not isinstance(pricing_model, str)
        ):
            return None
        model = pricing_model.strip().lower()
        return next(
            (self._index[key, model] for key in type_keys(accelerator_type) if (key, model) in self._index),
            None,
        )

    def first_price(self, accelerator_type: str | None, models: Iterable[str]) -> float | None:
        """The price of the first of ``models`` the table prices for this type (``None``: none)."""
        return next((p for p in (self.price(accelerator_type, m) for m in models) if p is not None), None)

    def hold_price(self, accelerator_type: str | None) -> float | None:
        """Price of holding the same accelerators (the table's "reserved" entry, else "standard", else None)."""
        return self.first_price(accelerator_type, HOLD_MODELS)

    def on_demand_price(self, accelerator_type: str | None) -> float | None:
        """The on-demand price (the table's "on_demand" entry, else "standard", else None)."""
        return self.first_price(accelerator_type, ON_DEMAND_MODELS)

    def spot_price(self, accelerator_type: str | None) -> float | None:
        """The Spot price (the table's "spot" entry, else None)."""
        return self.price(accelerator_type, SPOT_MODEL)


def _split_flat(key: str) -> tuple[str, str] | None:
    """``"NVIDIA_H100_80GB.flex_start"`` or ``"nvidia_h100_80gb__flex_start"`` -> (type, model)."""
    for separator in _SEPARATORS:
        accelerator_type, found, model = key.rpartition(separator)
        if found and accelerator_type and model:
            return accelerator_type, model
    return None


def table_number(value: Any) -> float | None:
    """A table entry's finite number (``None``: not one). Config values arrive as text (or as
    numbers Airflow already converted), JSON ones as numbers; a boolean is not a number here."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _price_of(value: Any, entry: str, source: str) -> float:
    number = table_number(value)
    if number is None:
        raise ValueError(
            f"{source}: entry {entry!r}: a price is a number of USD per accelerator-hour, got {value!r}"
        )
    if number < 0:
        raise ValueError(f"{source}: entry {entry!r}: a price cannot be negative, got {value!r}")
    return number


def _names(accelerator_type: Any, model: Any, entry: str, source: str) -> tuple[str, str]:
    if not isinstance(accelerator_type, str) or not _TYPE_NAME.fullmatch(accelerator_type.strip()):
        raise ValueError(
            f"{source}: entry {entry!r}: the accelerator type must be a name such as "
            f"NVIDIA_H100_80GB or v5litepod, got {accelerator_type!r}"
        )
    normal = model.strip().lower() if isinstance(model, str) else None
    if normal is None or not _MODEL_NAME.fullmatch(normal):
        raise ValueError(
            f"{source}: entry {entry!r}: the pricing model must be a name such as flex_start, "
            f"standard or reserved, got {model!r}"
        )
    return accelerator_type.strip(), normal


def _metadata(key: str, value: Any, source: str) -> str:
    """The text of a metadata entry: ``_source`` any non-empty text, ``_as_of`` a date YYYY-MM-DD."""
    text = value.strip() if isinstance(value, str) else ""
    if key == NOTE_KEY and not text:
        raise ValueError(f"{source}: entry {key!r}: where the prices come from is text, got {value!r}")
    if key == AS_OF_KEY:
        try:
            date.fromisoformat(text if _DATE.fullmatch(text) else "")
        except ValueError:
            raise ValueError(
                f"{source}: entry {key!r}: the prices' date is a date YYYY-MM-DD, got {value!r}"
            ) from None
    return text


def parse_prices(value: Mapping[str, Any] | str, source: str) -> PriceTable:
    """The table from JSON text or a mapping; raises ``ValueError`` naming the bad entry.

    Two shapes, mixable: nested ``{type: {model: price}}`` (the Variable's JSON) and flat
    ``{"type.model": price}`` or ``{"type__model": price}`` (the config section's keys). Prices
    are non-negative finite numbers (text that reads as one, as config values are); the same
    (type, model) given twice with different prices is refused. Two optional entries describe the
    table: ``_source`` (text) and ``_as_of`` (a date ``YYYY-MM-DD``).
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{source}: the table must be a JSON object of accelerator types, got {type(value).__name__}"
        )
    prices: dict[tuple[str, str], float] = {}
    seen: dict[tuple[str, str], tuple[str, float]] = {}  # normalized (type, model) -> (entry, price)
    metadata: dict[str, str] = {}

    def add(accelerator_type: Any, model: Any, price: Any, entry: str) -> None:
        names = _names(accelerator_type, model, entry, source)
        number = _price_of(price, entry, source)
        normal = (type_key(names[0]), names[1])
        if normal in seen:
            if seen[normal][1] != number:
                raise ValueError(
                    f"{source}: entry {entry!r} gives another price for the same accelerator and "
                    f"pricing model as entry {seen[normal][0]!r}"
                )
            return
        seen[normal] = (entry, number)
        prices[names] = number

    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{source}: entry {key!r}: keys are accelerator types, got {key!r}")
        if key.strip().lower() in (NOTE_KEY, AS_OF_KEY):
            name = key.strip().lower()
            metadata[name] = _metadata(name, item, source)
        elif isinstance(item, Mapping):
            for model, price in item.items():
                entry = f"{key}.{model}"
                if isinstance(price, (Mapping, list)):
                    raise ValueError(
                        f"{source}: entry {entry!r}: expected a price, got a nested {type(price).__name__}"
                    )
                add(key, model, price, entry)
        elif isinstance(item, list):
            raise ValueError(
                f"{source}: entry {key!r}: expected an object of pricing model -> price, got a list"
            )
        else:
            split = _split_flat(key)
            if split is None:
                raise ValueError(
                    f"{source}: entry {key!r}: expected an object of pricing model -> price, or a "
                    f"key <accelerator type>.<pricing model>"
                )
            add(split[0], split[1], item, key)
    return PriceTable(
        prices=prices, source=source, note=metadata.get(NOTE_KEY), as_of=metadata.get(AS_OF_KEY)
    )


def in_task() -> bool:
    """Whether this process is a task's or a trigger's, with the Task SDK's channel to the API
    server (not the api-server, a test or a script)."""
    task_runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


def read_variable(key: str) -> str | None:
    """The Variable's raw text, ``None`` when unset.

    In the api-server (where the DWS page calls this) ``airflow.models.Variable`` reads the server
    chain (secrets backends, ``AIRFLOW_VAR_*``, the metadata database) whatever the process: the
    Task SDK's ``Variable`` picks its chain from ``_AIRFLOW_PROCESS_CONTEXT``, which only
    ``airflow.api_fastapi.main`` sets, and without it leaves the database out, so an app built any
    other way would miss a Variable set in the UI. In a task (the supervisor channel is up) the
    models class only forwards to the SDK with a deprecation warning, so the SDK is asked directly.
    """
    if in_task():
        from airflow_provider_dws.compat import MISSING_VARIABLE_LOGS_ERROR

        if MISSING_VARIABLE_LOGS_ERROR:
            # Airflow 3.1 logs an absent Variable as an error in the task's log: a task there
            # reads only the environment's AIRFLOW_VAR_* (no call) and then the config section;
            # the DWS page, in the api-server, reads every place.
            return os.environ.get(f"AIRFLOW_VAR_{key.upper()}")
        from airflow.sdk import Variable as SdkVariable

        found = SdkVariable.get(key, default=None)
    else:
        from airflow.models import Variable

        found = Variable.get(key, default_var=None)
    if found is None or isinstance(found, str):
        return found
    return json.dumps(found)


def read_config_section(section: str, normal: Callable[[str], Hashable]) -> dict[str, Any] | None:
    """A table's config section (``None`` when it is set nowhere): the config file's entries, and
    the ``AIRFLOW__<SECTION>__<KEY>`` environment variables', which win for the same entry (two
    keys are the same entry when ``normal`` says so).

    ``conf.getsection`` sees the environment only when the file has the section, so the
    environment is read here too (through ``conf.get``, as Airflow expands it).
    """
    from airflow.configuration import conf

    from_file: dict[str, Any] = {}
    if conf.has_section(section):
        from_file = dict(conf.getsection(section) or {})
    prefix = f"AIRFLOW__{section.upper()}__"
    from_env: dict[str, Any] = {}
    for name in sorted(os.environ):
        if name.startswith(prefix) and len(name) > len(prefix) and not name.endswith(("_CMD", "_SECRET")):
            key = name[len(prefix) :].lower()
            from_env[key] = conf.get(section, key, fallback=os.environ[name])
    if not from_file and not from_env and not conf.has_section(section):
        return None
    overridden = {normal(k) for k in from_env}
    merged = {k: v for k, v in from_file.items() if normal(k) not in overridden}
    merged.update(from_env)
    return merged


def _normal_price_key(key: str) -> Hashable:
    split = _split_flat(key)
    return (type_key(split[0]), split[1].lower()) if split else key.lower()


def _read_config() -> dict[str, Any] | None:
    return read_config_section(CONFIG_SECTION, _normal_price_key)


_Table = TypeVar("_Table")


def load_table(
    *,
    read_variable: Callable[[], str | None],
    read_config: Callable[[], dict[str, Any] | None],
    parse: Callable[[Any, str], _Table],
    refused: Callable[[str, str], _Table],
    absent: _Table,
    sources: tuple[str, str],
) -> _Table:
    """A user's table (the prices, the carbon figures): its Variable if set, else its config section.

    ``sources`` names the two places (Variable, config) for ``parse`` and the errors. Never raises:
    a place that cannot be read, or a table ``parse`` refuses, gives ``refused(source, why)`` (the
    page shows why); no table in either place gives ``absent``.
    """
    variable, config = sources
    try:
        raw = read_variable()
    except Exception as exc:
        return refused(variable, f"{variable}: could not be read ({exc})")
    if raw is not None:
        try:
            return parse(raw, variable)
        except ValueError as exc:
            return refused(variable, str(exc))
    try:
        entries = read_config()
    except Exception as exc:
        return refused(config, f"{config}: could not be read ({exc})")
    if entries is None:
        return absent
    try:
        return parse(entries, config)
    except ValueError as exc:
        return refused(config, str(exc))


def load_prices() -> PriceTable:
    """The Variable ``dws_prices`` (JSON) if set, else the config section ``[dws_prices]``.

    Never raises: a table that cannot be read or is malformed gives an empty table with ``error``
    saying why (the page shows it); no table at all gives ``source == "no price table set"``.
    """
    return load_table(
        read_variable=lambda: read_variable(VARIABLE_KEY),
        read_config=_read_config,
        parse=parse_prices,
        refused=lambda source, why: PriceTable({}, source, error=why),
        absent=PriceTable({}, NO_TABLE_SOURCE),
        sources=(VARIABLE_SOURCE, CONFIG_SOURCE),
    )


@dataclass(frozen=True)
class RequestCost:
    """One request's hours and, where the table prices it, their cost (see docs/savings.md).

    ``idle_cost`` (an addition to the page's API) prices ``idle_hours`` at the request's own price:
    held slices are billed, but holding reserved machines would bill them too, so it is not in
    ``saved``.
    """

    waited_hours: float
    run_hours: float
    idle_hours: float
    run_cost: float | None
    hold_cost: float | None
    saved: float | None
    idle_cost: float | None = None

    @property
    def priced(self) -> bool:
        """Both the request's own price and a hold price were known."""
        return self.saved is not None


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds())


def _overlap(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> float:
    return _seconds(max(a[0], b[0]), min(a[1], b[1]))


def _check_now(now: datetime) -> None:
    if now.tzinfo is None:
        raise ValueError(f"now must carry a time zone (records are UTC), got {now!r}")


#: The page's words for what "saved by waiting" is (docs/savings.md says the same at length).
SAVED_FORMULA = (
    "Saved by waiting = hold cost - run cost, over the requests that got capacity. Hold cost = "
    "(accelerator-hours waited + accelerator-hours run) x the hold price (the table's reserved price, "
    "else standard): what holding the same accelerators from the submit to the end would have cost. "
    "Run cost = accelerator-hours run x the request's own price (flex_start, calendar, ...). Waited: "
    "submit to start; run: start to end. A request that never got capacity saved nothing. No hour "
    "counts past its task's end (a killed, failed or superseded task) or its block's end."
)


def request_cost(record: RequestRecord, prices: PriceTable, now: datetime) -> RequestCost:
    """The record's accelerator-hours waited, run and held idle at ``now``, priced from ``prices``."""
    _check_now(now)
    # A record read back tolerantly may carry an odd count; such a request has no hours.
    count = record.accelerator_count
    if not isinstance(count, (int, float)) or isinstance(count, bool) or count < 0:
        count = 0
    # Capacity that ends by itself (a calendar block) is counted to its end at most.
    until = parse_time(record.held_until)
    if until is not None:
        now = min(now, until)
    submitted = parse_time(record.submitted)
    started = parse_time(record.started)
    ended = parse_time(record.ended)
    waited = _seconds(submitted, started or ended or now)
    run_end = ended or now
    run = _seconds(started, run_end) if started else 0.0
    idle = 0.0
    held_since = parse_time(record.held_since)
    if held_since is not None:
        held_end = parse_time(record.released) or now
        held = _seconds(held_since, held_end)
        used = _overlap((held_since, held_end), (started, run_end)) if started else 0.0
        idle = max(0.0, held - used)
    waited_hours, run_hours, idle_hours = (count * s / 3600.0 for s in (waited, run, idle))
    price = prices.price(record.accelerator_type, record.pricing_model)
    hold = prices.hold_price(record.accelerator_type)
    run_cost = None if price is None else run_hours * price
    idle_cost = None if price is None else idle_hours * price
    # Only work that ran can be compared with holding machines for it: a request that never got
    # capacity (not obtained, cancelled, its task gone) saved nothing, whatever it waited.
    hold_cost = None if hold is None else ((waited_hours + run_hours) * hold if started else 0.0)
    saved = None if run_cost is None or hold_cost is None else hold_cost - run_cost
    return RequestCost(waited_hours, run_hours, idle_hours, run_cost, hold_cost, saved, idle_cost)


@dataclass(frozen=True)
class Summary:
    """One group's requests (a DAG, a day, or the total): counts, waits, hours and costs.

    The cost sums cover only the group's priced requests (``unpriced`` counts the others), so
    ``saved == hold_cost - run_cost`` over the same requests; ``None`` when none is priced.
    """

    key: str
    requests: int
    not_obtained: int
    not_obtained_rate: float | None
    wait_p50_seconds: float | None
    wait_p95_seconds: float | None
    run_hours: float
    waited_hours: float
    idle_hours: float
    run_cost: float | None
    hold_cost: float | None
    saved: float | None
    unpriced: int
    idle_cost: float | None = None


def percentile(values: Iterable[float], percent: int) -> float | None:
    """Nearest-rank percentile: the smallest value with at least ``percent``% of them at or below it."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], got {percent}")
    rank = -(-percent * len(ordered) // 100)  # ceil without floating point
    return ordered[rank - 1]


def day_key(record: RequestRecord) -> str:
    """The UTC day (``2026-12-01``) the request was submitted, the key of a per-day summary."""
    submitted = parse_time(record.submitted)
    return submitted.date().isoformat() if submitted else UNKNOWN_DAY


def _summary(key: str, records: list[RequestRecord], prices: PriceTable, now: datetime) -> Summary:
    costs = [request_cost(r, prices, now) for r in records]
    ended = sum(1 for r in records if r.phase not in LIVE_PHASES)
    not_obtained = sum(1 for r in records if r.phase == "not_obtained")
    waits = []
    for r in records:
        submitted, started = parse_time(r.submitted), parse_time(r.started)
        if submitted is not None and started is not None:
            waits.append(max(timedelta(0), started - submitted).total_seconds())
    priced = [c for c in costs if c.priced]

    def total(values: Iterable[float | None]) -> float | None:
        return sum(v for v in values if v is not None) if priced else None

    return Summary(
        key=key,
        requests=len(records),
        not_obtained=not_obtained,
        not_obtained_rate=not_obtained / ended if ended else None,
        wait_p50_seconds=percentile(waits, 50),
        wait_p95_seconds=percentile(waits, 95),
        run_hours=sum(c.run_hours for c in costs),
        waited_hours=sum(c.waited_hours for c in costs),
        idle_hours=sum(c.idle_hours for c in costs),
        run_cost=total(c.run_cost for c in priced),
        hold_cost=total(c.hold_cost for c in priced),
        saved=total(c.saved for c in priced),
        unpriced=len(costs) - len(priced),
        idle_cost=total(c.idle_cost for c in priced),
    )


def summarize(items: Iterable[tuple[str, RequestRecord]], prices: PriceTable, now: datetime) -> list[Summary]:
    """One :class:`Summary` per group key of ``items`` ((key, record) pairs), sorted by key.

    The caller chooses the keys: a dag_id, :func:`day_key`, or :data:`TOTAL_KEY` for everything.
    """
    _check_now(now)
    groups: dict[str, list[RequestRecord]] = {}
    for key, record in items:
        groups.setdefault(key, []).append(record)
    return [_summary(key, groups[key], prices, now) for key in sorted(groups)]
