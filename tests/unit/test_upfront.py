"""Cost up front: the most a request can cost, a calendar block's whole and used cost, the log line.

Every test uses a fixed ``NOW``; every expected number is worked out by hand in its comment. The
price tables here are test data, not prices.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.records import RequestRecord, iso
from airflow_provider_dws.savings import (
    CONFIG_SOURCE,
    NO_TABLE_SOURCE,
    VARIABLE_SOURCE,
    PriceTable,
    parse_prices,
)
from airflow_provider_dws.upfront import (
    COST_FORMULA,
    BlockCost,
    UpfrontCost,
    block_cost,
    cost_json,
    cost_line,
    max_cost,
)
from tests.probe import Probe
from tests.unit.test_savings import rec as savings_record

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
H100 = "NVIDIA_H100_80GB"
TABLE = parse_prices(
    {
        "_as_of": "2026-11-01",
        H100: {"flex_start": 2.5, "on_demand": 5.0, "standard": 4.0, "spot": 1.5, "calendar": 3.0},
        "v5litepod": {"flex_start": 1.0, "standard": 2.0},
    },
    VARIABLE_SOURCE,
)
WHERE = "(prices: Airflow Variable dws_prices, as of 2026-11-01)"
SET_PRICES = "set prices in the Airflow Variable dws_prices or the config section [dws_prices]"


def at(hours: float) -> str | None:
    """The ISO time ``hours`` after NOW (before it when negative)."""
    return iso(NOW + timedelta(hours=hours))


def rec(**kwargs: Any) -> RequestRecord:
    """The savings tests' waiting H100 request, with an 8 h ``max_run``."""
    return savings_record(**{"max_run_seconds": 8 * 3600.0, **kwargs})


def block(**kwargs: Any) -> RequestRecord:
    """A 96-hour calendar block of 8 GPUs that started 24 hours before NOW."""
    base: dict[str, Any] = {
        "api": "compute_future_reservation",
        "kind": "Compute Engine calendar block",
        "pricing_model": "calendar",
        "max_run_seconds": None,
        "phase": "running",
        "started": at(-24),
        "held_until": at(72),
    }
    base.update(kwargs)
    return rec(**base)


# --- the most a request can cost -------------------------------------------------------------


def test_the_most_is_accelerators_x_max_run_x_price_beside_on_demand_and_spot() -> None:
    # 8 GPUs x 8 h = 64 accelerator-hours: x 2.50 = 160, on demand x 5.00 = 320, Spot x 1.50 = 96.
    assert max_cost(rec(), TABLE) == UpfrontCost(
        accelerator_hours=64.0,
        most=160.0,
        on_demand=320.0,
        spot=96.0,
        price_source=VARIABLE_SOURCE,
        price_date="2026-11-01",
        hours_basis="max_run",
        price=2.5,
        on_demand_price=5.0,
        spot_price=1.5,
    )
    assert cost_line(rec(), TABLE) == (
        "At most $160.00 for this request: 8 accelerators x 8 h (max_run) x $2.50 (flex_start); "
        f"on demand $320.00, Spot $96.00 {WHERE}"
    )


def test_a_fractional_max_run_and_a_single_accelerator() -> None:
    # 1 GPU x 1.5 h = 1.5 accelerator-hours: x 2.50 = 3.75, x 5.00 = 7.50, x 1.50 = 2.25.
    record = rec(accelerator_count=1, max_run_seconds=90 * 60)
    cost = max_cost(record, TABLE)
    assert (cost.accelerator_hours, cost.most, cost.on_demand, cost.spot) == (1.5, 3.75, 7.5, 2.25)
    assert cost_line(record, TABLE) == (
        "At most $3.75 for this request: 1 accelerator x 1.5 h (max_run) x $2.50 (flex_start); "
        f"on demand $7.50, Spot $2.25 {WHERE}"
    )


def test_on_demand_falls_back_to_the_standard_price() -> None:
    table = PriceTable({(H100, "flex_start"): 2.5, (H100, "standard"): 4.0}, CONFIG_SOURCE)
    cost = max_cost(rec(), table)
    assert (cost.most, cost.on_demand, cost.spot) == (160.0, 256.0, None)  # 64 x 4.00; no Spot price
    assert cost_line(rec(), table) == (
        "At most $160.00 for this request: 8 accelerators x 8 h (max_run) x $2.50 (flex_start); "
        "on demand $256.00, no Spot price (prices: config section [dws_prices], no date given)"
    )


def test_without_max_run_the_cost_has_no_upper_bound_and_the_line_gives_the_hourly_price() -> None:
    for odd in (None, 0, -60.0, float("inf"), True, "8h"):
        record = rec(max_run_seconds=odd)
        cost = max_cost(record, TABLE)
        assert (cost.accelerator_hours, cost.hours_basis, cost.most, cost.on_demand, cost.spot) == (
            None,
            None,
            None,
            None,
            None,
        )
        assert cost.price == 2.5
        # 8 x 2.50 = 20.00 an hour; on demand 8 x 5.00 = 40.00, Spot 8 x 1.50 = 12.00.
        assert cost_line(record, TABLE) == (
            "No upper bound on this request's cost because no max_run is set: 8 accelerators x $2.50 "
            f"(flex_start) = $20.00 an hour; on demand $40.00 an hour, Spot $12.00 an hour {WHERE}"
        )


def test_an_unpriced_type_says_so_once_and_where_to_set_prices() -> None:
    record = rec(accelerator_type="NVIDIA_L4")
    cost = max_cost(record, TABLE)
    assert (cost.accelerator_hours, cost.most, cost.on_demand, cost.spot) == (64.0, None, None, None)
    line = cost_line(record, TABLE)
    assert line == (
        f"No cost estimate for this request: the price table has no flex_start price for NVIDIA_L4; "
        f"{SET_PRICES}, see docs/savings.md {WHERE}"
    )
    assert (line.count("no flex_start price"), line.count("set prices")) == (1, 1)  # said once
    # Priced on demand but not at its own model: the same hours on demand and Spot are still given.
    spot_only = rec(pricing_model="spot", accelerator_type="v5litepod-4", accelerator_count=4)
    assert cost_line(spot_only, TABLE) == (
        "No cost estimate for this request: the price table has no spot price for v5litepod-4; "
        f"{SET_PRICES}, see docs/savings.md; its 32 accelerator-hours: on demand $64.00, no Spot price {WHERE}"
    )


def test_no_table_and_a_refused_table() -> None:
    assert cost_line(rec(), PriceTable({}, NO_TABLE_SOURCE)) == (
        f"No cost estimate for this request: no price table is set; {SET_PRICES}, see docs/savings.md"
    )
    refused = PriceTable({}, VARIABLE_SOURCE, error="Airflow Variable dws_prices: not valid JSON (x)")
    assert cost_line(rec(), refused) == (
        "No cost estimate for this request: the price table was refused "
        "(Airflow Variable dws_prices: not valid JSON (x))"
    )
    assert max_cost(rec(), refused).most is None


def test_a_tpu_slice_is_priced_per_chip_by_family() -> None:
    # v5litepod-16: 16 chips x 2 h = 32 chip-hours at the v5litepod prices: x 1.00 = 32, x 2.00 = 64.
    record = rec(accelerator_type="v5litepod-16", accelerator_count=16, max_run_seconds=7200)
    cost = max_cost(record, TABLE)
    assert (cost.accelerator_hours, cost.most, cost.on_demand, cost.spot) == (32.0, 32.0, 64.0, None)
    assert cost_line(record, TABLE) == (
        "At most $32.00 for this request: 16 accelerators x 2 h (max_run) x $1.00 (flex_start); "
        f"on demand $64.00, no Spot price {WHERE}"
    )


def test_a_request_without_accelerators_has_no_line() -> None:
    for count in (0, -1, None, True, "8"):
        assert cost_line(rec(accelerator_count=count), TABLE) is None
    assert max_cost(rec(accelerator_count=0), TABLE).accelerator_hours is None


def test_an_unrecorded_type_is_named_as_such() -> None:
    line = cost_line(rec(accelerator_type=None), TABLE)
    assert line is not None
    assert "no flex_start price for its accelerator type (not recorded)" in line


def test_work_on_a_block_has_no_cost_of_its_own() -> None:
    line = cost_line(rec(pricing_model="reservation", reservation="r"), TABLE)
    assert line == (
        "No cost of its own for this request: it runs on a calendar block's reservation, billed "
        f"with the block; its 64 accelerator-hours: on demand $320.00, Spot $96.00 {WHERE}"
    )


def test_the_source_note_and_date_are_in_the_line_and_the_json() -> None:
    table = parse_prices(
        {"_source": "Google Cloud pricing page, us-central1", H100: {"flex_start": 2.5}}, VARIABLE_SOURCE
    )
    assert cost_line(rec(), table) == (
        "At most $160.00 for this request: 8 accelerators x 8 h (max_run) x $2.50 (flex_start); no "
        "on-demand or Spot price in the table (prices: Airflow Variable dws_prices (Google Cloud "
        "pricing page, us-central1), no date given)"
    )
    figures = cost_json(rec(), table, NOW)
    assert figures["price_source"] == "Airflow Variable dws_prices (Google Cloud pricing page, us-central1)"
    assert figures["price_date"] is None


# --- a calendar block ------------------------------------------------------------------------


def test_a_block_costs_its_whole_length_and_has_used_the_part_gone_by() -> None:
    # 8 GPUs x 96 h = 768 accelerator-hours: x 3.00 = 2304, x 5.00 = 3840, x 1.50 = 1152.
    # 24 of the 96 hours are gone by at NOW: 8 x 24 = 192 accelerator-hours, x 3.00 = 576.
    assert block_cost(block(), TABLE, NOW) == BlockCost(
        block_hours=768.0,
        used_hours=192.0,
        used_share=0.25,
        whole=2304.0,
        used=576.0,
        on_demand=3840.0,
        spot=1152.0,
        price_source=VARIABLE_SOURCE,
        price_date="2026-11-01",
    )
    cost = max_cost(block(), TABLE)
    assert (cost.accelerator_hours, cost.hours_basis, cost.most) == (768.0, "block", 2304.0)
    assert cost_line(block(), TABLE) == (
        "This calendar block costs $2,304.00 in all: 8 accelerators x 96 h (the block) x $3.00 "
        f"(calendar); on demand $3,840.00, Spot $1,152.00 {WHERE}"
    )


def test_a_block_starts_when_held_and_stops_being_used_at_its_release_or_end() -> None:
    # Held since 48 h before NOW (its started is later): 8 x 120 h = 960 accelerator-hours.
    held = block_cost(block(held_since=at(-48)), TABLE, NOW)
    assert held is not None
    assert (held.block_hours, held.used_hours, held.whole, held.used) == (960.0, 384.0, 2880.0, 1152.0)
    # Released 12 h before NOW: 8 x 12 h used of 8 x 96, the whole block still its cost.
    released = block_cost(block(released=at(-12), phase="succeeded"), TABLE, NOW)
    assert released is not None
    assert (released.used_hours, released.used, released.used_share, released.whole) == (
        96.0,
        288.0,
        0.125,
        2304.0,
    )
    # After its end, all of it is used, however late the page looks.
    ended = block_cost(block(), TABLE, NOW + timedelta(days=30))
    assert ended is not None
    assert (ended.used_hours, ended.used, ended.used_share) == (768.0, 2304.0, 1.0)
    # Before its start, none.
    early = block_cost(block(), TABLE, NOW - timedelta(days=2))
    assert early is not None
    assert (early.used_hours, early.used) == (0.0, 0.0)


def test_a_block_is_known_by_its_api_or_its_pricing_model() -> None:
    by_model = block_cost(rec(pricing_model="calendar", started=at(-1), held_until=at(1)), TABLE, NOW)
    assert by_model is not None and by_model.block_hours == 16.0
    by_api = block_cost(block(pricing_model="reservation"), TABLE, NOW)
    assert by_api is not None
    assert (by_api.block_hours, by_api.whole, by_api.on_demand) == (
        768.0,
        None,
        3840.0,
    )  # no reservation price


def test_no_block_cost_for_other_records_or_a_block_without_its_times() -> None:
    assert block_cost(rec(started=at(-1), held_until=at(1)), TABLE, NOW) is None
    assert block_cost(block(started=None), TABLE, NOW) is None
    assert block_cost(block(held_until=None), TABLE, NOW) is None
    with pytest.raises(ValueError, match="time zone"):
        block_cost(block(), TABLE, NOW.replace(tzinfo=None))


def test_a_block_not_yet_delivered_gives_its_hourly_price() -> None:
    # Not delivered: no start yet, so no whole cost; 8 x 3.00 = 24.00 an hour.
    record = block(started=None, phase="waiting")
    assert max_cost(record, TABLE).accelerator_hours is None
    assert cost_line(record, TABLE) == (
        "This calendar block costs 8 accelerators x $3.00 (calendar) = $24.00 an hour until its end "
        "(its whole cost shows once its start and end are known); on demand $40.00 an hour, Spot "
        f"$12.00 an hour {WHERE}"
    )


# --- the page's JSON and words ---------------------------------------------------------------


def test_cost_json_gives_every_figure_rounded_to_cents() -> None:
    assert cost_json(block(released=at(-12)), TABLE, NOW) == {
        "upfront": {
            "accelerator_hours": 768.0,
            "hours_basis": "block",
            "pricing_model": "calendar",
            "price": 3.0,
            "most": 2304.0,
            "on_demand": 3840.0,
            "spot": 1152.0,
        },
        "block": {
            "block_hours": 768.0,
            "used_hours": 96.0,
            "used_share": 0.12,  # 0.125 to cents
            "whole": 2304.0,
            "used": 288.0,
            "on_demand": 3840.0,
            "spot": 1152.0,
        },
        "price_source": VARIABLE_SOURCE,
        "price_date": "2026-11-01",
        "price_error": None,
    }
    # 1 GPU x 20 min = 0.333... accelerator-hours, x 2.50 = 0.8333... -> 0.33 h, $0.83.
    odd = cost_json(rec(accelerator_count=1, max_run_seconds=1200), TABLE, NOW)
    assert odd["block"] is None
    assert odd["upfront"] == {
        "accelerator_hours": 0.33,
        "hours_basis": "max_run",
        "pricing_model": "flex_start",
        "price": 2.5,
        "most": 0.83,
        "on_demand": 1.67,
        "spot": 0.5,
    }
    bare = cost_json(rec(max_run_seconds=None), PriceTable({}, NO_TABLE_SOURCE), NOW)
    assert bare["upfront"]["most"] is None and bare["price_source"] == NO_TABLE_SOURCE


def test_the_formula_on_the_page_says_what_the_figure_is_not() -> None:
    for words in (
        "accelerators x max run",
        "not the bill",
        "ends early",
        "flex-start bills only while it runs",
    ):
        assert words in COST_FORMULA
    for words in ("your table", "not Google's live price list", "host machine, disk or network", "Spot"):
        assert words in COST_FORMULA


def test_a_record_read_back_with_odd_values_does_not_fail() -> None:
    odd = replace(rec(), accelerator_count="many", max_run_seconds="long", pricing_model="flex_start")  # type: ignore[arg-type]
    assert cost_line(odd, TABLE) is None
    assert max_cost(odd, TABLE).accelerator_hours is None
    assert cost_json(odd, TABLE, NOW)["upfront"]["most"] is None


def test_the_module_imports_no_airflow(probe: Probe) -> None:
    code = (
        "import sys, airflow_provider_dws.upfront; "
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    )
    assert probe.run(code, cwd=ROOT, env=env).check().stdout.strip() == "[]"
