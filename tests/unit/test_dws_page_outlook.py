"""The DWS page's expected wait, cost up front and emissions, from plain rows (no Airflow).

``plugins/web/outlook.py`` picks the inputs and gives the JSON; ``plugins/web/outlook_html.py``
the cells and the summary's blocks. The arithmetic itself is tested with its modules
(``test_forecast.py``, ``test_upfront.py``, ``test_carbon.py``); here, what the page makes of it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws.carbon import EMISSIONS_FORMULA, SHIPPED
from airflow_provider_dws.plugins.web import outlook, outlook_html, render
from airflow_provider_dws.plugins.web.data import Row, TaskRef
from airflow_provider_dws.plugins.web.fmt import plural
from airflow_provider_dws.records import RequestRecord, iso
from airflow_provider_dws.savings import PriceTable
from airflow_provider_dws.upfront import COST_FORMULA

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
H100 = "NVIDIA_H100_80GB"
PRICES = PriceTable(
    {(H100, "flex_start"): 4.0, (H100, "on_demand"): 8.0, (H100, "spot"): 2.5, (H100, "calendar"): 3.0},
    "test table",
    note="example",
    as_of="2026-11-01",
)
GROUP = "vertex_custom_job|us-east4|nvidia_h100_80gb|5-8"


def _record(name: str, **kw: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-east4",
        "request_name": name,
        "phase": "waiting",
        "accelerator_type": H100,
        "accelerator_count": 8,
        "submitted": iso(NOW - timedelta(minutes=10)),
    }
    base.update(kw)
    return RequestRecord(**base)


def _ended(name: str, days: int, wait: float, obtained: bool = True, **kw: Any) -> RequestRecord:
    submitted = NOW - timedelta(days=days)
    at = submitted + timedelta(seconds=wait)
    if obtained:
        return _record(
            name,
            phase="succeeded",
            submitted=iso(submitted),
            started=iso(at),
            ended=iso(at + timedelta(hours=1)),
            **kw,
        )
    return _record(name, phase="not_obtained", submitted=iso(submitted), ended=iso(at), **kw)


def _row(record: RequestRecord) -> Row:
    return Row(record, TaskRef("dag", "run", "train", -1, "success", 1, None, None), NOW)


def _outlook(records: list[RequestRecord], window: timedelta = timedelta(days=30)) -> outlook.Outlook:
    return outlook.build([_row(r) for r in records], NOW, prices=PRICES, carbon=SHIPPED, window=window)


#: Five ended requests of GROUP: 10, 20, 40 min got capacity; 30 min and 1 h did not.
HISTORY = [
    _ended("h1", 1, 600),
    _ended("h2", 2, 1200),
    _ended("h3", 3, 1800, obtained=False),
    _ended("h4", 4, 2400),
    _ended("h5", 5, 3600, obtained=False),
]


def test_the_expected_wait_is_the_groups_forecast_over_the_rows_read() -> None:
    waiting = _record("w", obtainability=0.5)
    ahead = _outlook([*HISTORY, waiting])
    found = outlook.expected_wait_json(waiting, ahead)
    # Still waiting after 10 min 4/5, 20 min 3/5, (30 min censored) 40 min 3/5 x 1/2 = 0.3: the
    # p50; nothing reaches 0.1, so the p90 is more than the longest wait followed, 1 h.
    assert found == {
        "group": GROUP,
        "requests": 5,
        "obtained": 3,
        "enough": True,
        "p50_seconds": 2400.0,
        "p50_more_than": False,
        "p90_seconds": 3600.0,
        "p90_more_than": True,
        "given_at_submit": None,
    }
    cell = outlook_html.expected_wait_cell(waiting, ahead)
    assert "p50 40m 00s</span> · <span class='nw'>p90 more than 1h 00m</span>" in cell
    assert "(5 requests)" in cell and "advice 0.50" in cell


def test_outside_the_window_or_too_few_is_too_little_history() -> None:
    waiting = _record("w")
    assert outlook.expected_wait_json(waiting, _outlook([waiting])) == {
        "group": GROUP,
        "requests": 0,
        "obtained": 0,
        "enough": False,
        "p50_seconds": None,
        "p50_more_than": False,
        "p90_seconds": None,
        "p90_more_than": False,
        "given_at_submit": None,
    }
    # Within 2.5 days: h1 and h2 only.
    ahead = _outlook([*HISTORY, waiting], window=timedelta(days=2, hours=12))
    found = outlook.expected_wait_json(waiting, ahead)
    assert found is not None and found["requests"] == 2
    cell = outlook_html.expected_wait_cell(waiting, ahead)
    assert "too little history</span> <span class='muted nw'>(2 of 5)</span>" in cell
    assert "advice" not in cell and "given at submit" not in cell


def test_the_forecast_given_at_submit_is_shown_beside() -> None:
    waiting = _record(
        "w",
        expected_wait_p50_seconds=2280,
        expected_wait_p90_seconds=7800,
        expected_wait_p90_lower_bound=True,
        expected_wait_basis=41,
    )
    assert outlook.given_at_submit(waiting) == {
        "p50_seconds": 2280,
        "p50_more_than": False,
        "p90_seconds": 7800,
        "p90_more_than": True,
        "basis": 41,
    }
    cell = outlook_html.expected_wait_cell(waiting, _outlook([waiting]))
    assert (
        "given at submit: <span class='nw'>p50 38m 00s</span> · <span class='nw'>p90 more than 2h 10m</span>"
        in cell
    )


def test_a_calendar_block_has_no_forecast_but_its_whole_and_used_cost() -> None:
    start = NOW - timedelta(hours=24)
    block = _record(
        "b",
        api="compute_future_reservation",
        pricing_model="calendar",
        phase="running",
        holds=True,
        started=iso(start),
        held_since=iso(start),
        held_until=iso(start + timedelta(hours=96)),
    )
    ahead = _outlook([block])
    assert outlook.expected_wait_json(block, ahead) is None
    assert "does not wait for DWS capacity" in outlook_html.expected_wait_cell(block, ahead)
    cell = outlook_html.at_most_cell(block, ahead)
    # 8 x 96 h x 3.00 = 2,304.00; 24 h gone: 576.00; on demand x 8.00, Spot x 2.50.
    assert "$2,304.00 in all" in cell and "$576.00 used (25%)" in cell
    assert "on demand $6,144.00" in cell and "Spot $1,920.00" in cell
    assert outlook.row_json(_row(block), ahead)["cost"]["block"]["used"] == 576.0


@pytest.mark.parametrize(
    ("kw", "text"),
    [
        ({"max_run_seconds": 28800}, "$256.00"),
        ({}, "no max_run"),
        ({"max_run_seconds": 3600, "accelerator_type": "NVIDIA_L4"}, "unpriced"),
        ({"max_run_seconds": 3600, "pricing_model": "reservation"}, "billed with its block"),
        ({"max_run_seconds": 3600, "accelerator_count": 0}, "no accelerators"),
    ],
)
def test_the_at_most_cell(kw: dict[str, Any], text: str) -> None:
    record = _record("w", **kw)
    assert text in outlook_html.at_most_cell(record, _outlook([record]))


def test_at_most_shows_on_demand_and_spot_beneath() -> None:
    record = _record("w", max_run_seconds=28800)
    cell = outlook_html.at_most_cell(record, _outlook([record]))
    assert (
        "<br><span class='muted'><span class='nw'>on demand $512.00</span> · <span class='nw'>Spot $160.00</span>"
        in cell
    )
    assert outlook.row_json(_row(record), _outlook([record]))["cost"]["upfront"]["most"] == 256.0


def test_a_rows_json_gains_the_four_keys() -> None:
    record = _ended("h1", 1, 900, obtainability=0.7)
    found = outlook.row_json(_row(record), _outlook([record]))
    assert set(found) == {"expected_wait", "obtainability", "cost", "emissions"}
    assert found["obtainability"] == 0.7
    # 8 H100 ran 1 h after 15 min: 8 and 2 accelerator-hours at 0.7 kW and 323.05 g/kWh.
    assert found["emissions"]["run_kg"] == pytest.approx(8 * 0.7 * 323.05 / 1000)
    assert found["emissions"]["avoided_idle_kg"] == pytest.approx(2 * 0.7 * 323.05 / 1000)
    assert (found["emissions"]["power_watts"], found["emissions"]["intensity"]) == (700.0, 323.05)


def test_the_summary_gains_accuracy_emissions_and_cost() -> None:
    given: dict[str, Any] = {"expected_wait_p50_seconds": 900, "expected_wait_p90_seconds": 1800}
    records = [
        _ended("ok", 1, 600, **given),  # p90 held; error -5 min
        _ended("late", 2, 2400, **given),  # exceeded; error +25 min
        _record("waits", **given),  # not judged yet
        _record("tpu", accelerator_type="v5litepod-8"),  # no power: no emissions figure
    ]
    found = outlook.summary_json([_row(r) for r in records], _outlook(records))
    assert found["forecast_accuracy"] == {
        "given": 3,
        "forecasts": 2,
        "p90_exceeded": 1,
        "p90_exceeded_share": 0.5,
        "mean_error_seconds": 600.0,
    }
    emissions = found["emissions"]
    assert (emissions["requests"], emissions["known"], emissions["unknown"]) == (4, 3, 1)
    assert (emissions["formula"], emissions["year"], emissions["error"]) == (EMISSIONS_FORMULA, 2024, None)
    assert found["cost"] == {
        "formula": COST_FORMULA,
        "price_source": "test table (example)",
        "price_date": "2026-11-01",
        "price_error": None,
    }
    html = outlook_html.forecasts_block(found["forecast_accuracy"])
    assert "p90 exceeded by 1 of 2 requests (50%); a true p90 is exceeded by about 1 in 10." in html
    assert "Mean error (actual wait - p50 given): +10m 00s (later than the p50)." in html
    assert "1 request without a figure" in outlook_html.emissions_block(emissions)
    assert "Prices: <strong>test table (example)</strong>, as of 2026-11-01." in outlook_html.cost_block(
        found["cost"]
    )


def test_the_forecasts_block_without_forecasts() -> None:
    none = {
        "given": 0,
        "forecasts": 0,
        "p90_exceeded": 0,
        "p90_exceeded_share": None,
        "mean_error_seconds": None,
    }
    assert "No request has been given a forecast yet." in outlook_html.forecasts_block(none)
    waiting = {**none, "given": 2}
    assert "2 requests given a forecast at submit; none has a wait known" in outlook_html.forecasts_block(
        waiting
    )
    sooner = {**none, "given": 1, "forecasts": 1, "p90_exceeded_share": 0.0, "mean_error_seconds": -300.0}
    assert "-5m 00s (sooner than the p50)" in outlook_html.forecasts_block(sooner)


def test_the_emissions_block_says_the_source_and_an_override_error() -> None:
    found = {
        "requests": 1,
        "known": 0,
        "unknown": 1,
        "run_hours": 0.0,
        "avoided_hours": 0.0,
        "run_kg": None,
        "avoided_idle_kg": None,
        "source": "<the source>",
        "year": 2024,
        "formula": EMISSIONS_FORMULA,
        "error": "Airflow Variable dws_carbon: not valid JSON",
    }
    html = outlook_html.emissions_block(found)
    assert "Carbon table override not used: Airflow Variable dws_carbon: not valid JSON" in html
    assert "No request has an emissions figure." in html
    assert "&lt;the source&gt; (year 2024)" in html and "<the source>" not in html


def test_no_price_date_and_no_table() -> None:
    cost = {
        "formula": COST_FORMULA,
        "price_source": "no price table set",
        "price_date": None,
        "price_error": None,
    }
    assert "Prices: <strong>no price table set</strong>, no date given." in outlook_html.cost_block(cost)


def test_without_an_outlook_the_tables_keep_their_columns() -> None:
    html = render.request_sections([_row(_record("w"))], NOW, "/")
    assert "Expected wait" not in html and "At most" not in html
    assert plural(1, "request") == "1 request" and plural(2, "request") == "2 requests"


def test_the_window_falls_back_to_the_default_without_airflow_config(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> timedelta:
        raise RuntimeError("no config")

    monkeypatch.setattr("airflow_provider_dws.wait_history.configured_window", broken)
    assert outlook.forecast_window() == timedelta(days=30)
