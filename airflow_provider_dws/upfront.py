"""Cost up front: the most a request can cost, and a calendar block's whole and used cost.

Pure arithmetic over a :class:`~airflow_provider_dws.records.RequestRecord` and the user's
:class:`~airflow_provider_dws.savings.PriceTable` (no Airflow, no network): the task log prints
:func:`cost_line` when a request is submitted and the DWS page shows :func:`cost_json`. Every
figure is beside what the same accelerator-hours would cost on demand and on Spot, with the
table's source and date. See ``docs/savings.md`` ("Cost up front").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_dws.records import BLOCK_API, BLOCK_PRICING, ON_BLOCK_PRICING, RequestRecord, parse_time
from airflow_provider_dws.savings import CONFIG_SECTION, NO_TABLE_SOURCE, VARIABLE_KEY, PriceTable

#: Where a user sets prices, as a log line says it.
WHERE_TO_SET = (
    f"set prices in the Airflow Variable {VARIABLE_KEY} or the config section [{CONFIG_SECTION}], "
    "see docs/savings.md"
)

_NO_OTHERS = "no on-demand or Spot price in the table"

#: The page's words for what the up-front figures are and are not (docs/savings.md says the same).
COST_FORMULA = (
    "At most = accelerators x max run (the operator's max_run) x the price of the request's own "
    "pricing model; a calendar block's whole cost = accelerators x the block's hours x its calendar "
    "price, and its used part the same to now (or its release). Beside each: the same "
    "accelerator-hours at the on-demand and at the Spot price. It is not the bill: a job that ends "
    "early costs less, and flex-start bills only while it runs, not while it waits. The prices are "
    "your table's (its source and date are shown), not Google's live price list. Only "
    "accelerators are counted: no host machine, disk or network."
)


@dataclass(frozen=True)
class UpfrontCost:
    """The most a request can cost, and the same hours on demand and on Spot, in USD.

    ``accelerator_hours`` is the request's count x its longest run (``hours_basis`` says which:
    ``"max_run"``, or ``"block"`` for a calendar block whose start and end are known); ``None``
    with no bound or no count. ``price`` is the table's price of the request's own pricing model
    per accelerator-hour; each cost is ``None`` where its price or the hours are unknown.
    """

    accelerator_hours: float | None
    most: float | None
    on_demand: float | None
    spot: float | None
    price_source: str
    price_date: str | None
    hours_basis: str | None = None
    price: float | None = None
    on_demand_price: float | None = None
    spot_price: float | None = None


@dataclass(frozen=True)
class BlockCost:
    """A calendar block's cost in USD: ``whole`` for all its hours, ``used`` for those gone by
    (to now, its release or its end, whichever is first), ``used_share`` = used / whole hours;
    ``on_demand`` and ``spot`` price the whole block's hours at those prices."""

    block_hours: float
    used_hours: float
    used_share: float | None
    whole: float | None
    used: float | None
    on_demand: float | None
    spot: float | None
    price_source: str
    price_date: str | None


def _positive(value: Any) -> float | None:
    """A positive finite number of a record (read back tolerantly), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _times(value: float | None, price: float | None) -> float | None:
    return None if value is None or price is None else value * price


def price_source(prices: PriceTable) -> str:
    """Where the table was read, with its ``_source`` note: ``Airflow Variable dws_prices (Google
    Cloud pricing page, us-central1)``."""
    return f"{prices.source} ({prices.note})" if prices.note else prices.source


def is_block(record: RequestRecord) -> bool:
    """A calendar block's record (not a workload run on one)."""
    return record.api == BLOCK_API or record.pricing_model == BLOCK_PRICING


def _block_span(record: RequestRecord) -> tuple[datetime, datetime] | None:
    start = parse_time(record.held_since) or parse_time(record.started)
    end = parse_time(record.held_until)
    return None if start is None or end is None else (start, end)


def max_cost(record: RequestRecord, prices: PriceTable) -> UpfrontCost:
    """The most ``record`` can cost: accelerators x max run x its pricing model's price.

    A calendar block whose start and end are known is bounded by them instead (it is billed for
    its whole length). No bound (no ``max_run``, not a timed block) or no count: no hours.
    """
    count = _positive(record.accelerator_count)
    span = _block_span(record) if is_block(record) else None
    bound = _positive(record.max_run_seconds)
    basis: str | None = "max_run"
    if span is not None:
        bound, basis = max(0.0, (span[1] - span[0]).total_seconds()), "block"
    hours = None if count is None or bound is None else count * bound / 3600.0
    if hours is None:
        basis = None
    own = prices.price(record.accelerator_type, record.pricing_model)
    on_demand = prices.on_demand_price(record.accelerator_type)
    spot = prices.spot_price(record.accelerator_type)
    return UpfrontCost(
        accelerator_hours=hours,
        most=_times(hours, own),
        on_demand=_times(hours, on_demand),
        spot=_times(hours, spot),
        price_source=price_source(prices),
        price_date=prices.as_of,
        hours_basis=basis,
        price=own,
        on_demand_price=on_demand,
        spot_price=spot,
    )


def block_cost(record: RequestRecord, prices: PriceTable, now: datetime) -> BlockCost | None:
    """A calendar block's whole cost and the part used by ``now``; ``None`` for a record that is
    not a block, or whose start (``held_since``, else ``started``) or end (``held_until``) is unknown."""
    if now.tzinfo is None:
        raise ValueError(f"now must carry a time zone (records are UTC), got {now!r}")
    span = _block_span(record) if is_block(record) else None
    if span is None:
        return None
    start, end = span
    count = _positive(record.accelerator_count) or 0.0
    whole_seconds = max(0.0, (end - start).total_seconds())
    stop = min(t for t in (now, parse_time(record.released), end) if t is not None)
    used_seconds = min(whole_seconds, max(0.0, (stop - start).total_seconds()))
    block_hours, used_hours = count * whole_seconds / 3600.0, count * used_seconds / 3600.0
    own = prices.price(record.accelerator_type, record.pricing_model)
    return BlockCost(
        block_hours=block_hours,
        used_hours=used_hours,
        used_share=used_hours / block_hours if block_hours else None,
        whole=_times(block_hours, own),
        used=_times(used_hours, own),
        on_demand=_times(block_hours, prices.on_demand_price(record.accelerator_type)),
        spot=_times(block_hours, prices.spot_price(record.accelerator_type)),
        price_source=price_source(prices),
        price_date=prices.as_of,
    )


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _number(value: float) -> str:
    """``8``, ``1.5``, ``0.33``: at most two decimals, no trailing zeros."""
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _others(on_demand: float | None, spot: float | None, unit: str = "") -> str | None:
    """``on demand $320.00, Spot $96.00`` (``None`` when the table has neither price)."""
    if on_demand is None and spot is None:
        return None
    return ", ".join(
        (
            "no on-demand price" if on_demand is None else f"on demand {_usd(on_demand)}{unit}",
            "no Spot price" if spot is None else f"Spot {_usd(spot)}{unit}",
        )
    )


def _where(cost: UpfrontCost) -> str:
    date = f"as of {cost.price_date}" if cost.price_date else "no date given"
    return f"(prices: {cost.price_source}, {date})"


def _unpriced(record: RequestRecord, prices: PriceTable, cost: UpfrontCost) -> str:
    """The line of a request whose own pricing model the table does not price."""
    model = record.pricing_model
    if model == ON_BLOCK_PRICING:
        head = (
            "No cost of its own for this request: it runs on a calendar block's reservation, "
            "billed with the block"
        )
    elif prices.source == NO_TABLE_SOURCE:
        return f"No cost estimate for this request: no price table is set; {WHERE_TO_SET}"
    else:
        kind = record.accelerator_type or "its accelerator type (not recorded)"
        head = (
            f"No cost estimate for this request: the price table has no {model} price for {kind}; "
            f"{WHERE_TO_SET}"
        )
    others = _others(cost.on_demand, cost.spot)
    if cost.accelerator_hours is not None and others is not None:
        head = f"{head}; its {_number(cost.accelerator_hours)} accelerator-hours: {others}"
    return f"{head} {_where(cost)}"


def cost_line(record: RequestRecord, prices: PriceTable) -> str | None:
    """The task log's line at submit: the most ``record`` can cost, with the same hours on demand
    and on Spot, the table's source and date; ``None`` only for a request without accelerators.

    ``At most $160.00 for this request: 8 accelerators x 8 h (max_run) x $2.50 (flex_start); on
    demand $320.00, Spot $96.00 (prices: Airflow Variable dws_prices, as of 2026-11-01)``
    """
    count = _positive(record.accelerator_count)
    if count is None:
        return None
    if prices.error:
        return f"No cost estimate for this request: the price table was refused ({prices.error})"
    cost = max_cost(record, prices)
    if cost.price is None:
        return _unpriced(record, prices, cost)
    what = f"{_number(count)} accelerator{'' if count == 1 else 's'} x "
    price = f"{_usd(cost.price)} ({record.pricing_model})"
    block = is_block(record)
    if cost.accelerator_hours is not None and cost.most is not None:
        length = f"{_number(cost.accelerator_hours / count)} h ({'the block' if block else 'max_run'})"
        opening = (
            f"This calendar block costs {_usd(cost.most)} in all"
            if block
            else f"At most {_usd(cost.most)} for this request"
        )
        others = _others(cost.on_demand, cost.spot) or _NO_OTHERS
        return f"{opening}: {what}{length} x {price}; {others} {_where(cost)}"
    hourly = f"{what}{price} = {_usd(count * cost.price)} an hour"
    if block:
        opening = (
            f"This calendar block costs {hourly} until its end "
            "(its whole cost shows once its start and end are known)"
        )
    else:
        opening = f"No upper bound on this request's cost because no max_run is set: {hourly}"
    hourly_others = _others(_times(count, cost.on_demand_price), _times(count, cost.spot_price), " an hour")
    return f"{opening}; {hourly_others or _NO_OTHERS} {_where(cost)}"


def _cents(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def cost_json(record: RequestRecord, prices: PriceTable, now: datetime) -> dict[str, Any]:
    """The up-front figures for the page's JSON: ``upfront`` (:func:`max_cost`), ``block``
    (:func:`block_cost`, ``None`` but for a calendar block with its times), the table's source and
    date. Money and hours are rounded to cents (2 decimals); the table's own prices are as given."""
    cost = max_cost(record, prices)
    block = block_cost(record, prices, now)
    return {
        "upfront": {
            "accelerator_hours": _cents(cost.accelerator_hours),
            "hours_basis": cost.hours_basis,
            "pricing_model": record.pricing_model,
            "price": cost.price,
            "most": _cents(cost.most),
            "on_demand": _cents(cost.on_demand),
            "spot": _cents(cost.spot),
        },
        "block": None
        if block is None
        else {
            "block_hours": _cents(block.block_hours),
            "used_hours": _cents(block.used_hours),
            "used_share": _cents(block.used_share),
            "whole": _cents(block.whole),
            "used": _cents(block.used),
            "on_demand": _cents(block.on_demand),
            "spot": _cents(block.spot),
        },
        "price_source": cost.price_source,
        "price_date": cost.price_date,
        "price_error": prices.error,
    }
