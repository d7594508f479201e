"""What the DWS page says around each request: its expected wait, the most it can cost, its emissions.

The arithmetic is the base layer's: :mod:`airflow_provider_dws.forecast` (the expected wait, and
how the forecasts given at submit held), :mod:`airflow_provider_dws.upfront` (the most a request
can cost, a calendar block's whole and used cost) and :mod:`airflow_provider_dws.carbon` (the
emissions). This module picks their inputs once per page request (:func:`build`: the records of
the rows the page read, the price table, the carbon table, the forecast window) and turns their
answers into the page's JSON. The HTML is :mod:`.render`'s. See ``docs/ui.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_dws import forecast
from airflow_provider_dws.carbon import (
    EMISSIONS_FORMULA,
    CarbonTable,
    RequestEmissions,
    load_carbon,
    request_emissions,
    sum_emissions,
)
from airflow_provider_dws.forecast import Forecast, accuracy, group_of
from airflow_provider_dws.records import RequestRecord
from airflow_provider_dws.savings import PriceTable, load_prices
from airflow_provider_dws.upfront import COST_FORMULA, cost_json, price_source

from .data import Row


@dataclass(frozen=True)
class Outlook:
    """What one page request reads once: the forecast of each group of similar requests (from the
    rows the page read, within ``window`` before ``now``), the price table and the carbon table."""

    now: datetime
    window: timedelta
    forecasts: Mapping[str, Forecast]
    prices: PriceTable
    carbon: CarbonTable

    def forecast_of(self, record: RequestRecord) -> Forecast | None:
        """The forecast of ``record``'s group (``None``: no ended request of the group was read)."""
        group = group_of(record)
        return None if group is None else self.forecasts.get(group)


def forecast_window() -> timedelta:
    """``[dws] forecast_window_days``, as the workers read it; the default if it cannot be read."""
    try:
        from airflow_provider_dws.wait_history import configured_window

        return configured_window()
    except Exception:
        return forecast.DEFAULT_WINDOW


def build(
    read: Iterable[Row],
    now: datetime,
    *,
    prices: PriceTable | None = None,
    carbon: CarbonTable | None = None,
    window: timedelta | None = None,
) -> Outlook:
    """The outlook of a page request from the rows it ``read`` (every readable row of the listing,
    not only those the API, location and phase filters keep); the tables are loaded unless given."""
    span = window if window is not None else forecast_window()
    return Outlook(
        now=now,
        window=span,
        forecasts=forecast.from_records((row.record for row in read), now, span),
        prices=prices if prices is not None else load_prices(),
        carbon=carbon if carbon is not None else load_carbon(),
    )


def given_at_submit(record: RequestRecord) -> dict[str, Any] | None:
    """The forecast the request was given when it was submitted (``None``: none was given)."""
    if record.expected_wait_p50_seconds is None and record.expected_wait_p90_seconds is None:
        return None
    return {
        "p50_seconds": record.expected_wait_p50_seconds,
        "p50_more_than": bool(record.expected_wait_p50_lower_bound),
        "p90_seconds": record.expected_wait_p90_seconds,
        "p90_more_than": bool(record.expected_wait_p90_lower_bound),
        "basis": record.expected_wait_basis,
    }


def expected_wait_json(record: RequestRecord, outlook: Outlook) -> dict[str, Any] | None:
    """The row's ``expected_wait``: its group's forecast now (a group with no request read has 0
    requests), and the forecast given at submit; ``None`` for a record that does not wait for
    DWS capacity (a calendar block, work on a block's reservation)."""
    group = group_of(record)
    if group is None:
        return None
    found = outlook.forecasts.get(group)
    return {
        "group": group,
        "requests": found.requests if found else 0,
        "obtained": found.obtained if found else 0,
        "enough": found.enough if found else False,
        "p50_seconds": found.p50 if found else None,
        "p50_more_than": found.p50_more_than if found else False,
        "p90_seconds": found.p90 if found else None,
        "p90_more_than": found.p90_more_than if found else False,
        "given_at_submit": given_at_submit(record),
    }


def emissions_json(emissions: RequestEmissions) -> dict[str, Any]:
    """A request's estimated emissions (kg CO2e ``None`` where the power or the intensity is unknown)."""
    return {
        "run_kg": emissions.run_kg,
        "avoided_idle_kg": emissions.avoided_idle_kg,
        "run_hours": emissions.run_hours,
        "avoided_hours": emissions.avoided_hours,
        "intensity": emissions.intensity,
        "cfe": emissions.cfe,
        "power_watts": emissions.power_watts,
    }


def row_json(row: Row, outlook: Outlook) -> dict[str, Any]:
    """What a row of ``/api/requests`` gains: ``expected_wait``, ``obtainability``, ``cost``, ``emissions``."""
    record = row.record
    return {
        "expected_wait": expected_wait_json(record, outlook),
        "obtainability": record.obtainability,
        "cost": cost_json(record, outlook.prices, outlook.now),
        "emissions": emissions_json(request_emissions(record, outlook.carbon, outlook.now)),
    }


def accuracy_json(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """How the forecasts given at submit held: ``forecasts`` judged, ``p90_exceeded``, its share,
    and the mean error (actual wait - p50 given), seconds; ``given`` counts the requests given one."""
    records = list(records)
    found = accuracy(records)
    return {
        "given": sum(1 for r in records if given_at_submit(r) is not None),
        "forecasts": found.forecasts,
        "p90_exceeded": found.p90_exceeded,
        "p90_exceeded_share": found.p90_exceeded_share,
        "mean_error_seconds": found.mean_error_seconds,
    }


def summary_json(rows: Sequence[Row], outlook: Outlook) -> dict[str, Any]:
    """What ``/api/summary`` gains: ``forecast_accuracy``, ``emissions`` (the sum over ``rows``
    with the table's source, year, error and the formula) and ``cost`` (the formula, the prices'
    source and date)."""
    table = outlook.carbon
    emissions = sum_emissions(request_emissions(row.record, table, outlook.now) for row in rows)
    prices = outlook.prices
    return {
        "forecast_accuracy": accuracy_json(row.record for row in rows),
        "emissions": {
            **emissions,
            "source": table.source,
            "year": table.year,
            "formula": EMISSIONS_FORMULA,
            "error": table.error,
        },
        "cost": {
            "formula": COST_FORMULA,
            "price_source": price_source(prices),
            "price_date": prices.as_of,
            "price_error": prices.error,
        },
    }
