"""What waiting saved: the hours and costs of one request, the per-group summary, the price table.

Every test uses a fixed ``NOW``. The price tables here are test data, not prices. ``load_prices``
is tested in a fresh interpreter (run this file as a script with ``--load-prices``) with its own
AIRFLOW_HOME, config file and SQLite metadata database, so it reads the Variable and the config
section the way the api-server does and never touches the user's Airflow.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_dws.records import RequestRecord, iso
from airflow_provider_dws.savings import (
    CONFIG_SOURCE,
    NO_TABLE_SOURCE,
    TOTAL_KEY,
    UNKNOWN_DAY,
    VARIABLE_SOURCE,
    PriceTable,
    day_key,
    parse_prices,
    percentile,
    request_cost,
    summarize,
)
from tests.unit.fresh_airflow import environ, scenarios_in_fresh_airflow, variable_model

if TYPE_CHECKING:
    from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
H100 = "NVIDIA_H100_80GB"
TABLE = PriceTable(
    {
        (H100, "flex_start"): 2.5,
        (H100, "standard"): 4.0,
        ("v5litepod", "flex_start"): 1.0,
        ("v5litepod", "standard"): 2.0,
        ("v5litepod", "reserved"): 1.5,
    },
    "test table",
)


def hours(n: float) -> str | None:
    """The ISO time ``n`` hours before NOW."""
    return iso(NOW - timedelta(hours=n))


def rec(**kwargs: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-central1",
        "request_name": "projects/p/locations/us-central1/customJobs/1",
        "phase": "waiting",
        "accelerator_type": H100,
        "accelerator_count": 8,
    }
    base.update(kwargs)
    return RequestRecord(**base)


def tpu(**kwargs: Any) -> RequestRecord:
    return rec(api="tpu_queued_resource", accelerator_type="v5litepod-16", accelerator_count=16, **kwargs)


# --- one request -----------------------------------------------------------------------------


def test_a_request_that_never_started_waited_until_it_ended() -> None:
    cost = request_cost(rec(phase="not_obtained", submitted=hours(5), ended=hours(3)), TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours, cost.idle_hours) == (16.0, 0.0, 0.0)
    # Nothing ran, so nothing was billed; and no work got done, so holding machines for it is no
    # fair comparison: it saved nothing (it once counted 8 x 2 x 4.0 = 64 "saved").
    assert (cost.run_cost, cost.hold_cost, cost.saved) == (0.0, 0.0, 0.0)
    assert cost.priced


def test_a_request_still_waiting_has_waited_until_now() -> None:
    cost = request_cost(rec(submitted=hours(2)), TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours) == (16.0, 0.0)
    assert cost.saved == 0.0  # nothing saved until it gets capacity


def test_a_block_is_counted_until_its_end_at_most() -> None:
    """A calendar block kept until its end (held, never released by a task) stops counting there."""
    block = rec(
        api="compute_future_reservation",
        pricing_model="calendar",
        phase="running",
        holds=True,
        submitted=hours(10),
        started=hours(6),
        held_since=hours(6),
        held_until=hours(4),
    )
    cost = request_cost(block, TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours) == (8 * 4.0, 8 * 2.0)
    assert request_cost(block, TABLE, NOW + timedelta(days=3)) == cost  # it no longer grows


def test_the_formula_on_the_page_names_every_term() -> None:
    from airflow_provider_dws.savings import SAVED_FORMULA

    for term in ("hold cost - run cost", "reserved price", "standard", "never got capacity", "task's end"):
        assert term in SAVED_FORMULA


def test_a_running_request_waited_until_it_started_and_runs_until_now() -> None:
    cost = request_cost(rec(phase="running", submitted=hours(3), started=hours(1)), TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours, cost.idle_hours) == (16.0, 8.0, 0.0)
    assert cost.run_cost == 8.0 * 2.5
    assert cost.hold_cost == (16.0 + 8.0) * 4.0
    assert cost.saved == 96.0 - 20.0
    assert cost.priced


def test_an_ended_request_ran_from_start_to_end() -> None:
    r = rec(phase="succeeded", submitted=hours(4), started=hours(3), ended=hours(1))
    cost = request_cost(r, TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours) == (8.0, 16.0)
    # A later `now` changes nothing for an ended request.
    assert request_cost(r, TABLE, NOW + timedelta(days=3)) == cost


def test_missing_or_backwards_times_count_as_no_time() -> None:
    assert request_cost(rec(), TABLE, NOW).waited_hours == 0.0  # no submit time
    backwards = request_cost(rec(phase="running", submitted=hours(1), started=hours(2)), TABLE, NOW)
    assert (backwards.waited_hours, backwards.run_hours) == (0.0, 16.0)  # started "before" submitted
    future = request_cost(rec(phase="running", submitted=hours(-1), started=hours(-2)), TABLE, NOW)
    assert (future.waited_hours, future.run_hours) == (8.0, 0.0)  # times after `now` (clock skew)
    zero = request_cost(rec(accelerator_count=0, submitted=hours(2)), TABLE, NOW)
    assert (zero.waited_hours, zero.saved) == (0.0, 0.0)


def test_an_odd_record_read_back_costs_nothing_rather_than_failing() -> None:
    odd = RequestRecord.from_dict(
        dict(rec(submitted=hours(1)).to_dict(), accelerator_count="8", pricing_model=None)
    )
    assert odd is not None
    cost = request_cost(odd, TABLE, NOW)
    assert (cost.waited_hours, cost.run_cost, cost.hold_cost) == (0.0, None, 0.0)


def test_a_held_tpu_slice_is_idle_while_no_task_uses_it() -> None:
    # Active from 3 h ago; its task ran the first hour; still held now: 2 h x 16 chips idle.
    held = tpu(
        phase="succeeded",
        submitted=hours(4),
        started=hours(3),
        ended=hours(2),
        holds=True,
        held_since=hours(3),
    )
    cost = request_cost(held, TABLE, NOW)
    assert (cost.waited_hours, cost.run_hours, cost.idle_hours) == (16.0, 16.0, 32.0)
    assert cost.run_cost == 16.0 * 1.0
    assert cost.hold_cost == (16.0 + 16.0) * 1.5  # "reserved" before "standard"
    assert cost.idle_cost == 32.0 * 1.0
    # Released an hour ago: idle only between the task's end and the release.
    released = request_cost(
        tpu(
            phase="succeeded",
            submitted=hours(4),
            started=hours(3),
            ended=hours(2),
            held_since=hours(3),
            released=hours(1),
        ),
        TABLE,
        NOW,
    )
    assert released.idle_hours == 16.0


def test_a_slice_held_before_its_task_started_counts_that_time_idle() -> None:
    cost = request_cost(
        tpu(phase="running", submitted=hours(4), held_since=hours(3), started=hours(1), holds=True),
        TABLE,
        NOW,
    )
    assert (cost.run_hours, cost.idle_hours) == (16.0, 32.0)


def test_without_prices_the_costs_are_none() -> None:
    for r in (
        rec(accelerator_type="NVIDIA_L4", submitted=hours(1)),
        rec(accelerator_type=None, submitted=hours(1)),
    ):
        cost = request_cost(r, TABLE, NOW)
        assert (cost.run_cost, cost.hold_cost, cost.saved, cost.idle_cost) == (None, None, None, None)
        assert not cost.priced
        assert cost.waited_hours == 8.0  # the hours are known all the same
    spot = request_cost(
        rec(pricing_model="spot", phase="running", submitted=hours(2), started=hours(1)), TABLE, NOW
    )
    assert (spot.run_cost, spot.hold_cost, spot.saved) == (None, 64.0, None)


def test_the_hold_price_is_reserved_else_standard_else_none() -> None:
    table = PriceTable(
        {("a", "flex_start"): 1.0, ("a", "reserved"): 3.0, ("a", "standard"): 5.0, ("b", "flex_start"): 1.0}
        | {("b", "standard"): 5.0, ("c", "flex_start"): 1.0},
        "t",
    )
    assert (table.hold_price("a"), table.hold_price("b"), table.hold_price("c")) == (3.0, 5.0, None)
    assert table.hold_price(None) is None
    cost = request_cost(rec(accelerator_type="c", phase="running", started=hours(1)), table, NOW)
    assert (cost.run_cost, cost.hold_cost, cost.saved) == (8.0, None, None)


def test_accelerator_types_match_by_case_and_dash_and_tpu_family() -> None:
    assert TABLE.price("nvidia-h100-80gb", "flex_start") == 2.5  # Compute Engine / Batch spelling
    assert TABLE.price("Nvidia_H100_80GB", "FLEX_START") == 2.5
    assert TABLE.price("v5litepod-256", "reserved") == 1.5  # priced per chip by family
    assert TABLE.price("v5litepod", "spot") is None
    assert TABLE.price("v6e-8", "flex_start") is None
    exact = PriceTable({("v5litepod", "flex_start"): 1.0, ("v5litepod-8", "flex_start"): 0.9}, "t")
    assert exact.price("v5litepod-8", "flex_start") == 0.9


def test_now_must_carry_a_time_zone() -> None:
    with pytest.raises(ValueError, match="time zone"):
        request_cost(rec(), TABLE, NOW.replace(tzinfo=None))
    with pytest.raises(ValueError, match="time zone"):
        summarize([], TABLE, NOW.replace(tzinfo=None))


# --- summaries -------------------------------------------------------------------------------


def test_summaries_per_dag_sum_hours_and_only_priced_costs() -> None:
    items = [
        ("train", rec(phase="running", submitted=hours(3), started=hours(1))),  # saved 76
        ("train", rec(phase="not_obtained", submitted=hours(5), ended=hours(3))),  # never ran: saved 0
        ("train", rec(accelerator_type="NVIDIA_L4", phase="succeeded", submitted=hours(2), started=hours(1))),
        ("eval", rec(accelerator_type="NVIDIA_L4", submitted=hours(1))),
    ]
    by_key = {s.key: s for s in summarize(items, TABLE, NOW)}
    assert list(by_key) == ["eval", "train"]  # sorted by key
    train = by_key["train"]
    assert (train.requests, train.not_obtained, train.unpriced) == (3, 1, 1)
    assert train.waited_hours == 16.0 + 16.0 + 8.0  # hours of every request, priced or not
    assert train.run_hours == 8.0 + 8.0
    assert (train.run_cost, train.hold_cost, train.saved) == (20.0, 96.0, 76.0)
    assert train.not_obtained_rate == 1 / 2  # of the two ended requests
    eval_ = by_key["eval"]
    assert (eval_.requests, eval_.unpriced, eval_.waited_hours) == (1, 1, 8.0)
    assert (eval_.run_cost, eval_.hold_cost, eval_.saved, eval_.idle_cost) == (None, None, None, None)


def test_a_total_and_an_empty_input() -> None:
    records = [rec(submitted=hours(1)), tpu(phase="running", submitted=hours(2), started=hours(1))]
    (total,) = summarize([(TOTAL_KEY, r) for r in records], TABLE, NOW)
    assert (total.key, total.requests, total.unpriced) == ("total", 2, 0)
    assert total.saved == 0.0 + ((16.0 + 16.0) * 1.5 - 16.0)  # the waiting one saved nothing yet
    assert summarize([], TABLE, NOW) == []


def test_summaries_per_day_use_the_utc_day_of_submission() -> None:
    late = rec(submitted=datetime(2026, 11, 30, 23, 30, tzinfo=timezone(timedelta(hours=-1))).isoformat())
    early = rec(submitted=iso(datetime(2026, 12, 1, 0, 10, tzinfo=timezone.utc)))
    before = rec(submitted=iso(datetime(2026, 11, 30, 23, 59, tzinfo=timezone.utc)))
    undated = rec()
    assert [day_key(r) for r in (late, early, before, undated)] == [
        "2026-12-01",
        "2026-12-01",
        "2026-11-30",
        UNKNOWN_DAY,
    ]
    got = summarize([(day_key(r), r) for r in (late, early, before, undated)], TABLE, NOW)
    assert [(s.key, s.requests) for s in got] == [("2026-11-30", 1), ("2026-12-01", 2), (UNKNOWN_DAY, 1)]


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([15, 20, 35, 40, 50], 30) == 20
    assert percentile([15, 20, 35, 40, 50], 40) == 20
    assert percentile([15, 20, 35, 40, 50], 50) == 35
    assert percentile([50, 15, 40, 20, 35], 100) == 50
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 0)
    # Waits of 1..20 minutes: p50 is the 10th, p95 the 19th (ceil(0.95 x 20)).
    items = [
        (
            "d",
            rec(
                phase="running",
                submitted=hours(5),
                started=iso(NOW - timedelta(hours=5) + timedelta(minutes=m)),
            ),
        )
        for m in range(20, 0, -1)
    ]
    items.append(("d", rec(submitted=hours(9))))  # never started: not a wait sample
    (s,) = summarize(items, TABLE, NOW)
    assert (s.wait_p50_seconds, s.wait_p95_seconds) == (600.0, 19 * 60.0)


def test_rates_and_percentiles_are_none_without_samples() -> None:
    (s,) = summarize([("d", rec(submitted=hours(1))), ("d", tpu(phase="running", holds=True))], TABLE, NOW)
    assert (s.not_obtained, s.not_obtained_rate) == (0, None)
    assert (s.wait_p50_seconds, s.wait_p95_seconds) == (None, None)
    mixed = [
        rec(phase=phase, submitted=hours(2), ended=hours(1))
        for phase in ("not_obtained", "succeeded", "failed", "cancelled")
    ] + [rec(phase="waiting", submitted=hours(1))]
    (m,) = summarize([("d", r) for r in mixed], TABLE, NOW)
    assert (m.requests, m.not_obtained, m.not_obtained_rate) == (5, 1, 0.25)


# --- the price table -------------------------------------------------------------------------


def test_parse_prices_reads_nested_json_and_flat_keys() -> None:
    nested = parse_prices(json.dumps({H100: {"flex_start": 2.5, "Standard": 4}}), "here")
    assert nested.prices == {(H100, "flex_start"): 2.5, (H100, "standard"): 4.0}
    assert (nested.source, nested.error) == ("here", None)
    flat = parse_prices(
        {"nvidia_h100_80gb.flex_start": "2.5", "v5litepod__reserved": 1.5, "v6e": {"flex_start": 0}},
        "cfg",
    )
    assert flat.price(H100, "flex_start") == 2.5
    assert flat.hold_price("v5litepod-16") == 1.5
    assert flat.price("v6e-8", "flex_start") == 0.0
    assert parse_prices({}, "empty").prices == {}
    # The same price twice (two spellings) is no conflict.
    assert parse_prices({H100: {"flex_start": 2.5}, "nvidia-h100-80gb.flex_start": 2.5}, "s").prices == {
        (H100, "flex_start"): 2.5
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({H100: {"flex_start": -1}}, f"entry '{H100}.flex_start': a price cannot be negative"),
        ({H100: {"flex_start": "cheap"}}, f"entry '{H100}.flex_start': a price is a number"),
        ({H100: {"flex_start": True}}, f"entry '{H100}.flex_start': a price is a number"),
        ({H100: {"flex_start": None}}, f"entry '{H100}.flex_start': a price is a number"),
        ({H100: {"flex_start": float("nan")}}, f"entry '{H100}.flex_start': a price is a number"),
        ({"a.flex_start": "inf"}, "entry 'a.flex_start': a price is a number"),
        ({H100: {"flex_start": [2.5]}}, f"entry '{H100}.flex_start': expected a price, got a nested list"),
        ({H100: {"flex_start": {"us": 1}}}, f"entry '{H100}.flex_start': expected a price"),
        ({H100: [2.5]}, f"entry '{H100}': expected an object of pricing model -> price, got a list"),
        ({H100: 2.5}, f"entry '{H100}': expected an object of pricing model -> price, or a key"),
        ({H100: {"flex start": 1}}, f"entry '{H100}.flex start': the pricing model must be a name"),
        ({"H100 80GB": {"flex_start": 1}}, "entry 'H100 80GB.flex_start': the accelerator type must be"),
        ({".flex_start": 1}, "entry '.flex_start': expected an object"),
        (
            {H100: {"flex_start": 2.5}, "nvidia-h100-80gb.flex_start": 3},
            "entry 'nvidia-h100-80gb.flex_start' gives another price for the same accelerator and "
            f"pricing model as entry '{H100}.flex_start'",
        ),
        ("[1, 2]", "the table must be a JSON object of accelerator types, got list"),
        ("{not json", "not valid JSON"),
    ],
)
def test_parse_prices_refuses_bad_entries_by_name(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_prices(value, "the source")
    assert str(raised.value).startswith("the source: ")
    assert message in str(raised.value)


def test_parse_prices_reads_the_metadata_in_json_and_flat_config_form() -> None:
    nested = parse_prices(
        json.dumps(
            {
                "_source": " Google Cloud pricing page, us-central1 ",
                "_as_of": "2026-11-01",
                H100: {"flex_start": 2.5, "on_demand": 5.0, "spot": 1.5},
            }
        ),
        "here",
    )
    assert (nested.note, nested.as_of) == ("Google Cloud pricing page, us-central1", "2026-11-01")
    assert nested.prices == {(H100, "flex_start"): 2.5, (H100, "on_demand"): 5.0, (H100, "spot"): 1.5}
    # The config section's keys (configparser and the environment reader lower-case them).
    flat = parse_prices(
        {"_source": "contract 2026", "_AS_OF": "2026-10-15", f"{H100}.flex_start": "2.5"}, "cfg"
    )
    assert (flat.note, flat.as_of, flat.prices) == (
        "contract 2026",
        "2026-10-15",
        {(H100, "flex_start"): 2.5},
    )


def test_a_table_without_metadata_is_unchanged() -> None:
    table = parse_prices({H100: {"flex_start": 2.5, "standard": 4}}, "here")
    assert (table.note, table.as_of, table.error) == (None, None, None)
    assert table == PriceTable({(H100, "flex_start"): 2.5, (H100, "standard"): 4.0}, "here")
    assert (TABLE.note, TABLE.as_of) == (None, None)


def test_on_demand_is_the_on_demand_entry_else_standard_and_spot_is_spot() -> None:
    table = PriceTable(
        {("a", "on_demand"): 6.0, ("a", "standard"): 5.0, ("a", "spot"): 2.0, ("b", "standard"): 5.0}
        | {("v5litepod", "spot"): 0.5},
        "t",
    )
    assert (table.on_demand_price("a"), table.on_demand_price("B"), table.on_demand_price("c")) == (
        6.0,
        5.0,
        None,
    )
    assert (table.spot_price("a"), table.spot_price("b"), table.spot_price("v5litepod-16")) == (
        2.0,
        None,
        0.5,
    )
    assert (table.on_demand_price(None), table.spot_price(None)) == (None, None)
    assert TABLE.hold_price("v5litepod") == 1.5  # on_demand and spot change no hold price


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"_as_of": "2026-13-01"}, "entry '_as_of': the prices' date is a date YYYY-MM-DD, got '2026-13-01'"),
        ({"_as_of": "20261101"}, "entry '_as_of': the prices' date is a date YYYY-MM-DD, got '20261101'"),
        ({"_as_of": "1 Nov 2026"}, "entry '_as_of': the prices' date is a date YYYY-MM-DD"),
        ({"_as_of": 20261101}, "entry '_as_of': the prices' date is a date YYYY-MM-DD, got 20261101"),
        ({"_as_of": None}, "entry '_as_of': the prices' date is a date YYYY-MM-DD, got None"),
        ({"_source": ""}, "entry '_source': where the prices come from is text, got ''"),
        ({"_source": {"a": 1}}, "entry '_source': where the prices come from is text"),
    ],
)
def test_parse_prices_refuses_bad_metadata_by_name(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_prices({H100: {"flex_start": 2.5}, **value}, "the source")
    assert str(raised.value).startswith("the source: ")
    assert message in str(raised.value)


def test_the_module_imports_no_airflow(probe: Probe) -> None:
    code = (
        "import sys, airflow_provider_dws.savings; "
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    )
    done = probe.run(code, cwd=ROOT, env=env).check()
    assert done.stdout.strip() == "[]"


# --- load_prices, in a fresh interpreter -----------------------------------------------------

GOOD_JSON = json.dumps({H100: {"flex_start": 2.5, "standard": 4.0}})
CONFIG_FILE = """
[core]
load_examples = False

[dws_prices]
NVIDIA_H100_80GB.flex_start = 2.5
v5litepod.reserved = 1.5
"""


def _scenarios() -> dict[str, dict[str, Any]]:
    """load_prices under each setting, in this (fresh) process: the config file has the section
    until the env-only scenarios, which remove it."""
    from airflow.configuration import conf

    from airflow_provider_dws.savings import load_prices

    Variable = variable_model()
    out: dict[str, dict[str, Any]] = {}

    def run(name: str, env: dict[str, str]) -> None:
        with environ(env):
            table = load_prices()
        out[name] = {
            "source": table.source,
            "error": table.error,
            "prices": {f"{t}|{m}": p for (t, m), p in sorted(table.prices.items())},
        }
        out[name].update({k: v for k, v in (("note", table.note), ("as_of", table.as_of)) if v})

    run("file", {})
    run("file_and_env", {"AIRFLOW__DWS_PRICES__NVIDIA_H100_80GB__FLEX_START": "3"})
    conf.set("dws_prices", "_source", "file note")
    conf.set("dws_prices", "_as_of", "2026-11-01")
    run("file_metadata", {"AIRFLOW__DWS_PRICES___AS_OF": "2026-11-02"})
    conf.remove_section("dws_prices")
    run(
        "env_metadata",
        {
            "AIRFLOW__DWS_PRICES___SOURCE": "env note",
            "AIRFLOW__DWS_PRICES___AS_OF": "2026-11-03",
            "AIRFLOW__DWS_PRICES__V5LITEPOD__RESERVED": "1.5",
        },
    )
    run(
        "bad_as_of",
        {"AIRFLOW__DWS_PRICES___AS_OF": "soon", "AIRFLOW__DWS_PRICES__V5LITEPOD__RESERVED": "1.5"},
    )
    run(
        "variable_metadata",
        {"AIRFLOW_VAR_DWS_PRICES": json.dumps({"_source": "var note", "_as_of": "2026-11-04"})},
    )
    run("nothing", {})
    run("variable_env", {"AIRFLOW_VAR_DWS_PRICES": GOOD_JSON})
    run(
        "config_env",
        {
            "AIRFLOW__DWS_PRICES__NVIDIA_H100_80GB.FLEX_START": "2.5",
            "AIRFLOW__DWS_PRICES__V5LITEPOD__RESERVED": "1.5",
        },
    )
    run(
        "variable_wins",
        {"AIRFLOW_VAR_DWS_PRICES": GOOD_JSON, "AIRFLOW__DWS_PRICES__V5LITEPOD__RESERVED": "1.5"},
    )
    run("bad_variable", {"AIRFLOW_VAR_DWS_PRICES": json.dumps({H100: {"flex_start": -1}})})
    run("bad_config", {"AIRFLOW__DWS_PRICES__NVIDIA_H100_80GB__FLEX_START": "cheap"})
    Variable.set("dws_prices", GOOD_JSON)  # the metadata database, as the UI sets it
    run("variable_db", {})
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, probe: Probe) -> dict[str, dict[str, Any]]:
    return scenarios_in_fresh_airflow(
        tmp_path_factory, probe, config_file=CONFIG_FILE, script=__file__, flag="--load-prices"
    )


def test_load_prices_reads_the_variable_from_the_environment_and_the_database(loaded: dict) -> None:
    want = {
        "source": VARIABLE_SOURCE,
        "error": None,
        "prices": {f"{H100}|flex_start": 2.5, f"{H100}|standard": 4.0},
    }
    assert loaded["variable_env"] == want
    assert loaded["variable_db"] == want
    assert loaded["variable_wins"] == want  # the Variable first, the config section not merged in


def test_load_prices_reads_the_config_file_and_environment(loaded: dict) -> None:
    assert loaded["file"] == {
        "source": CONFIG_SOURCE,
        "error": None,
        "prices": {f"{H100}|flex_start": 2.5, "v5litepod|reserved": 1.5},
    }
    # The environment variable wins over the file's entry for the same accelerator and model.
    assert loaded["file_and_env"]["prices"] == {"nvidia_h100_80gb|flex_start": 3.0, "v5litepod|reserved": 1.5}
    # Without the section in the file: dotted and double-underscore environment keys both count.
    assert loaded["config_env"] == {
        "source": CONFIG_SOURCE,
        "error": None,
        "prices": {"nvidia_h100_80gb|flex_start": 2.5, "v5litepod|reserved": 1.5},
    }


def test_load_prices_reads_the_metadata_from_each_source(loaded: dict) -> None:
    # The file's entries, the environment's winning for the same key.
    assert (loaded["file_metadata"]["note"], loaded["file_metadata"]["as_of"]) == ("file note", "2026-11-02")
    assert loaded["file_metadata"]["prices"] == {f"{H100}|flex_start": 2.5, "v5litepod|reserved": 1.5}
    # AIRFLOW__DWS_PRICES___SOURCE: the section's two underscores, then the key's own.
    assert loaded["env_metadata"] == {
        "source": CONFIG_SOURCE,
        "error": None,
        "prices": {"v5litepod|reserved": 1.5},
        "note": "env note",
        "as_of": "2026-11-03",
    }
    assert loaded["variable_metadata"] == {
        "source": VARIABLE_SOURCE,
        "error": None,
        "prices": {},
        "note": "var note",
        "as_of": "2026-11-04",
    }
    bad = loaded["bad_as_of"]
    assert (bad["source"], bad["prices"]) == (CONFIG_SOURCE, {})
    assert (
        bad["error"] == f"{CONFIG_SOURCE}: entry '_as_of': the prices' date is a date YYYY-MM-DD, got 'soon'"
    )


def test_load_prices_never_raises(loaded: dict) -> None:
    assert loaded["nothing"] == {"source": NO_TABLE_SOURCE, "error": None, "prices": {}}
    bad = loaded["bad_variable"]
    assert (bad["source"], bad["prices"]) == (VARIABLE_SOURCE, {})
    assert bad["error"] == f"{VARIABLE_SOURCE}: entry '{H100}.flex_start': a price cannot be negative, got -1"
    bad = loaded["bad_config"]
    assert (bad["source"], bad["prices"]) == (CONFIG_SOURCE, {})
    assert "entry 'nvidia_h100_80gb__flex_start': a price is a number" in bad["error"]


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder, which the tests do not have on the path either
    if "--load-prices" in sys.argv:
        print(json.dumps(_scenarios()))
