"""The DWS page's summary: per DAG, per day and in total, through :func:`airflow_provider_dws.savings.summarize`."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from airflow_provider_dws.records import parse_time

from .data import Row


def day_of(row: Row) -> str:
    """The UTC day a request was submitted (``"unknown"`` without a submit time)."""
    submitted = parse_time(row.record.submitted)
    return submitted.date().isoformat() if submitted else "unknown"


def summaries(rows: Sequence[Row], now: datetime, prices: Any = None) -> dict[str, Any]:
    """``{"by_dag", "by_day", "total", "prices"}``: lists of ``Summary`` as dicts and the price table's source.

    ``prices`` is the page request's price table (read once for the whole page); without it the
    table is read here (``savings.load_prices``: Variable ``dws_prices`` first, then the
    ``[dws_prices]`` config section). It never raises: a malformed table comes back with ``error``
    set and no prices.
    """
    # By name: the savings module is a sibling of this package (a build without it fails here,
    # and the page says so instead of the summary).
    savings = importlib.import_module("airflow_provider_dws.savings")
    if prices is None:
        prices = savings.load_prices()
    by_dag = savings.summarize(((row.ti.dag_id, row.record) for row in rows), prices, now)
    by_day = savings.summarize(((day_of(row), row.record) for row in rows), prices, now)
    total = savings.summarize((("total", row.record) for row in rows), prices, now)
    return {
        "by_dag": [asdict(s) for s in by_dag],
        "by_day": [asdict(s) for s in by_day],
        "total": asdict(total[0]) if total else None,
        "prices": {"source": prices.source, "error": prices.error, "entries": len(prices.prices)},
        "formula": getattr(savings, "SAVED_FORMULA", None),
    }
