"""The carbon table and the emissions arithmetic: the shipped figures, overrides, kg CO2e per request.

The shipped figures are checked against literals read by hand from Google's
``data/yearly/2024.csv`` (GoogleCloudPlatform/region-carbon-info). Every test uses a fixed ``NOW``.
The override's readers are replaced here for the merge rules; ``load_carbon`` itself is also run in
a fresh interpreter (this file as a script with ``--load-carbon``) with its own AIRFLOW_HOME,
config file and SQLite metadata database, as ``tests/unit/test_savings.py`` runs ``load_prices``.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_dws import carbon, facts
from airflow_provider_dws.carbon import (
    CONFIG_SOURCE,
    EMISSIONS_FORMULA,
    SHIPPED,
    SOURCE,
    VARIABLE_SOURCE,
    YEAR,
    RegionCarbon,
    kg_co2e,
    load_carbon,
    order_by_intensity,
    parse_override,
    request_emissions,
    sum_emissions,
)
from airflow_provider_dws.records import RequestRecord, iso
from tests.unit.fresh_airflow import environ, scenarios_in_fresh_airflow, variable_model

if TYPE_CHECKING:
    from tests.probe import Probe

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
H100 = "NVIDIA_H100_80GB"
#: GPUs the provider knows that the shipped table leaves out on purpose (docs/carbon.md says why).
NO_POWER = {"NVIDIA_GB200", "NVIDIA_TESLA_K80"}


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
        "phase": "succeeded",
        "accelerator_type": H100,
        "accelerator_count": 8,
    }
    base.update(kwargs)
    return RequestRecord(**base)


# --- the shipped table -------------------------------------------------------------------------


def test_the_shipped_table_is_google_s_2024_file_with_its_source() -> None:
    assert YEAR == 2024 and SHIPPED.year == 2024 and SHIPPED.error is None
    assert len(SHIPPED.regions) == 44  # every row of data/yearly/2024.csv
    assert "https://github.com/GoogleCloudPlatform/region-carbon-info" in SOURCE
    assert "data/yearly/2024.csv" in SOURCE
    assert "https://cloud.google.com/sustainability/region-carbon" in SOURCE
    assert SHIPPED.source == SOURCE


@pytest.mark.parametrize(
    ("region", "cfe", "intensity"),
    [
        # Rows of data/yearly/2024.csv, typed from the file.
        ("us-central1", 0.87, 412.72),
        ("europe-north2", 1.00, 2.73),
        ("asia-south1", 0.09, 678.76),
        ("me-central1", 0.01, 366),
    ],
)
def test_shipped_figures_are_the_published_ones(region: str, cfe: float, intensity: float) -> None:
    assert SHIPPED.regions[region] == RegionCarbon(cfe, intensity)
    assert (SHIPPED.cfe(region), SHIPPED.intensity(region)) == (cfe, intensity)


def test_every_shipped_figure_is_in_range() -> None:
    for name, figures in SHIPPED.regions.items():
        assert figures.cfe is not None and 0 <= figures.cfe <= 1, name
        assert figures.intensity is not None and 0 <= figures.intensity < 1000, name


@pytest.mark.parametrize(
    ("location", "intensity"),
    [
        ("us-central1-a", 412.72),
        ("US-CENTRAL1-F", 412.72),
        (" europe-west4-b ", 208.81),
        ("northamerica-northeast1-c", 5.48),
        ("europe-west10", 275.82),
        ("mars-north1", None),
        ("mars-north1-a", None),
        ("us", None),
        ("us-a", None),
        ("global", None),
        ("", None),
        (None, None),
    ],
)
def test_a_zone_reads_its_region(location: str | None, intensity: float | None) -> None:
    assert SHIPPED.intensity(location) == intensity
    assert (SHIPPED.cfe(location) is None) == (intensity is None)


def test_board_power_matches_every_spelling_of_a_gpu() -> None:
    assert SHIPPED.power_watts(H100) == SHIPPED.power_watts("nvidia-h100-80gb") == 700
    assert SHIPPED.power_watts("nvidia-h100-mega-80gb") == 700
    assert SHIPPED.power_watts("NVIDIA_TESLA_A100") == SHIPPED.power_watts("nvidia-tesla-a100") == 400
    assert SHIPPED.power_watts(" Nvidia-L4 ") == 72
    assert SHIPPED.power_watts("nvidia-tesla-p100") == 250  # the PCIe card
    assert SHIPPED.power_watts("nvidia-b200") == 1000
    assert SHIPPED.power_watts("NVIDIA_TESLA_T4") == 70
    # Left out rather than guessed: no per-GPU or per-chip figure to cite.
    for unknown in ("nvidia-gb200", "v5litepod-16", "v6e", "TPU_V5_LITEPOD", "", None):
        assert SHIPPED.power_watts(unknown) is None


def test_every_gpu_the_provider_knows_has_a_power_or_is_left_out_on_purpose() -> None:
    vertex = {name for name in facts.VERTEX_ACCELERATOR_TYPES if name.startswith("NVIDIA_")}
    assert vertex >= set(facts.COMPUTE_GPU_NAMES.values())
    for name in vertex - NO_POWER:
        assert SHIPPED.power_watts(name) is not None, name
    for compute, name in facts.COMPUTE_GPU_NAMES.items():
        assert SHIPPED.power_watts(compute) == SHIPPED.power_watts(name), compute
    for name in NO_POWER:
        assert SHIPPED.power_watts(name) is None, name
    # Every shipped figure names its datasheet.
    assert set(SHIPPED.power_sources) == set(SHIPPED.power)
    assert all("datasheet" in source for source in SHIPPED.power_sources.values())


# --- overrides ---------------------------------------------------------------------------------


def _readers(monkeypatch: pytest.MonkeyPatch, variable: Any = None, config: Any = None) -> None:
    """Replace the two readers: a value, or an exception to raise."""

    def reader(value: Any) -> Any:
        def read() -> Any:
            if isinstance(value, Exception):
                raise value
            return value

        return read

    monkeypatch.setattr(carbon, "_read_variable", reader(variable))
    monkeypatch.setattr(carbon, "_read_config", reader(config))


def test_nothing_set_is_the_shipped_table(monkeypatch: pytest.MonkeyPatch) -> None:
    _readers(monkeypatch)
    assert load_carbon() is SHIPPED


def test_a_variable_is_merged_over_the_shipped_table(monkeypatch: pytest.MonkeyPatch) -> None:
    override = {
        "source": "My utility's 2025 report",
        "year": 2025,
        "regions": {"us-central1": {"intensity": 380}, "xx-new1": {"cfe": 0.5, "intensity": 100}},
        "power_watts": {"nvidia-h100-80gb": 650, "v5litepod": 200},
    }
    # The Variable wins: the config section is not read at all.
    _readers(monkeypatch, variable=json.dumps(override), config=AssertionError("config read"))
    table = load_carbon()
    assert table.error is None
    assert table.intensity("us-central1-b") == 380
    assert table.cfe("us-central1") == 0.87  # the figure it did not name stays
    assert table.intensity("xx-new1-a") == 100
    assert table.intensity("europe-north2") == 2.73  # regions it did not name stay
    assert table.power_watts(H100) == 650  # replaces the shipped entry whatever its spelling
    assert table.power_watts("nvidia-h100-mega-80gb") == 700
    assert table.power_watts("v5litepod-16") == 200  # a TPU type falls back to its family
    assert table.source.startswith(f"{VARIABLE_SOURCE}: My utility's 2025 report, 2025; ")
    assert table.source.endswith(SOURCE)
    assert (table.year, table.override_year) == (YEAR, 2025)
    assert table.power_sources["nvidia-h100-80gb"] == f"{VARIABLE_SOURCE}: My utility's 2025 report, 2025"
    assert H100 not in table.power and "datasheet" in table.power_sources["NVIDIA_L4"]
    assert SHIPPED.intensity("us-central1") == 412.72  # the shipped table is left alone


def test_flat_config_keys_are_merged_over_the_shipped_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the config file gives them (dots), as environment variables can (double underscores,
    # no hyphen, upper case lowered), and as Airflow may have converted them (numbers).
    entries = {
        "source": "site survey",
        "year": "2025",
        "regions.europe-west4.intensity": "250.5",
        "regions__us_east1__cfe": "0.5",
        "power_watts.nvidia_l4": 60,
        "power_watts__NVIDIA_TESLA_T4": "65",
    }
    _readers(monkeypatch, config=entries)
    table = load_carbon()
    assert table.error is None
    assert (table.intensity("europe-west4"), table.cfe("europe-west4")) == (250.5, 0.83)
    assert (table.intensity("us-east1"), table.cfe("us-east1")) == (575.77, 0.5)
    assert (table.power_watts("NVIDIA_L4"), table.power_watts("nvidia-tesla-t4")) == (60, 65)
    assert table.source.startswith(f"{CONFIG_SOURCE}: site survey, 2025; ")
    assert table.override_year == 2025


def test_an_override_without_source_says_so() -> None:
    table = parse_override({"regions": {"us-west1": {"intensity": 80}}}, "test")
    assert table.source == f"test: no source given; the rest: {SOURCE}"
    assert table.override_year is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("{", "test: not valid JSON"),
        ("[1, 2]", "test: the override must be a JSON object, got list"),
        (
            {"regions": {"us-central1": {"cfe": 93}}},
            "entry 'regions.us-central1.cfe': expected a carbon-free",
        ),
        ({"regions": {"us-central1": {"intensity": -1}}}, "entry 'regions.us-central1.intensity': expected"),
        ({"regions": {"us-central1": {"intensity": "nan"}}}, "regions.us-central1.intensity"),
        ({"regions": {"us-central1": {"intensity": True}}}, "regions.us-central1.intensity"),
        ({"regions": {"us-central1": {"carbon": 1}}}, "entry 'regions.us-central1.carbon': expected source"),
        ({"regions": {"Iowa!": {"cfe": 0.5}}}, "entry 'regions.Iowa!.cfe': expected a region"),
        ({"regions": ["us-central1"]}, "entry 'regions': expected source"),
        ({"power_watts": {"NVIDIA_L4": "lots"}}, "entry 'power_watts.NVIDIA_L4': expected watts"),
        ({"power_watts": {"NVIDIA L4": 72}}, "entry 'power_watts.NVIDIA L4': expected an accelerator type"),
        ({"power_watts": {"NVIDIA_L4": 72, "nvidia-l4": 70}}, "entry 'power_watts.nvidia-l4' gives another"),
        ({"year": "last year"}, "entry 'year': expected a year"),
        ({"source": 3}, "entry 'source': expected source (text)"),
        ({"prices": 1}, "entry 'prices': expected source"),
    ],
)
def test_a_malformed_override_is_refused_naming_the_entry(value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=r"^test: ") as raised:
        parse_override(value, "test")
    assert error in str(raised.value)


def test_a_malformed_override_gives_the_shipped_table_and_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _readers(monkeypatch, variable=json.dumps({"power_watts": {H100: -700}}))
    table = load_carbon()
    assert (
        table.error
        == f"{VARIABLE_SOURCE}: entry 'power_watts.{H100}': expected watts, a non-negative number, got -700"
    )
    assert (table.regions, table.power, table.source) == (SHIPPED.regions, SHIPPED.power, SHIPPED.source)

    _readers(monkeypatch, config={"regions.us-central1.cfe": "93%"})
    table = load_carbon()
    assert table.error is not None and table.error.startswith(
        f"{CONFIG_SOURCE}: entry 'regions.us-central1.cfe'"
    )
    assert table.cfe("us-central1") == 0.87

    for broken in ({"variable": OSError("no database")}, {"config": OSError("bad file")}):
        _readers(monkeypatch, **broken)
        table = load_carbon()
        assert table.error is not None and "could not be read" in table.error
        assert table.power == SHIPPED.power


# --- the arithmetic ----------------------------------------------------------------------------


def test_kg_co2e_is_hours_times_kilowatts_times_intensity() -> None:
    assert kg_co2e(10, 700, 400) == pytest.approx(2.8)  # 10 h x 0.7 kW = 7 kWh x 400 g = 2.8 kg
    assert kg_co2e(1, 1000, 1000) == pytest.approx(1.0)
    assert kg_co2e(0, 700, 400) == 0.0
    for bad in ((-1, 700, 400), (1, -700, 400), (1, 700, float("nan")), (float("inf"), 700, 400)):
        with pytest.raises(ValueError, match="non-negative"):
            kg_co2e(*bad)


def test_a_request_that_ran_emitted_its_run_and_avoided_its_wait() -> None:
    # 8 H100s in a zone of us-central1: waited 2 h, ran 3 h.
    record = rec(location="us-central1-a", submitted=hours(6), started=hours(4), ended=hours(1))
    emissions = request_emissions(record, SHIPPED, NOW)
    assert (emissions.run_hours, emissions.avoided_hours) == (24.0, 16.0)
    assert (emissions.intensity, emissions.cfe, emissions.power_watts) == (412.72, 0.87, 700)
    assert emissions.run_kg == pytest.approx(6.933696)  # 24 x 0.7 x 412.72 / 1000
    assert emissions.avoided_idle_kg == pytest.approx(4.622464)  # 16 x 0.7 x 412.72 / 1000
    assert emissions.known


def test_a_request_still_running_counts_until_now() -> None:
    record = rec(location="europe-north1", phase="running", submitted=hours(3), started=hours(2))
    emissions = request_emissions(record, SHIPPED, NOW)
    assert (emissions.run_hours, emissions.avoided_hours) == (16.0, 8.0)
    assert emissions.run_kg == pytest.approx(16 * 0.7 * 39.32 / 1000)


def test_a_request_that_never_got_capacity_avoided_nothing() -> None:
    record = rec(phase="not_obtained", submitted=hours(5), ended=hours(3))
    emissions = request_emissions(record, SHIPPED, NOW)
    assert (emissions.run_hours, emissions.avoided_hours) == (0.0, 0.0)
    assert (emissions.run_kg, emissions.avoided_idle_kg) == (0.0, 0.0)


def test_unknown_power_or_region_gives_no_kg() -> None:
    tpu = rec(api="tpu_queued_resource", accelerator_type="v5litepod-16", accelerator_count=16)
    for record in (
        rec(api="tpu_queued_resource", accelerator_type="v5litepod-16", submitted=hours(3), started=hours(2)),
        rec(location="mars-north1", submitted=hours(3), started=hours(2)),
        rec(accelerator_type=None, submitted=hours(3), started=hours(2)),
    ):
        emissions = request_emissions(record, SHIPPED, NOW)
        assert (emissions.run_kg, emissions.avoided_idle_kg) == (None, None)
        assert not emissions.known
        assert emissions.run_hours > 0  # the hours are still counted
    assert request_emissions(tpu, SHIPPED, NOW).intensity == 412.72


def test_the_sum_counts_unknown_requests_apart() -> None:
    ran = request_emissions(rec(submitted=hours(6), started=hours(4), ended=hours(1)), SHIPPED, NOW)
    lost = request_emissions(rec(phase="not_obtained", submitted=hours(5), ended=hours(3)), SHIPPED, NOW)
    unknown = request_emissions(
        rec(location="mars-north1", submitted=hours(3), started=hours(2)), SHIPPED, NOW
    )
    total = sum_emissions([ran, lost, unknown])
    assert total["requests"] == 3
    assert (total["known"], total["unknown"]) == (2, 1)
    assert (total["run_hours"], total["avoided_hours"]) == (24.0, 16.0)
    assert total["run_kg"] == pytest.approx(6.933696)
    assert total["avoided_idle_kg"] == pytest.approx(4.622464)
    assert sum_emissions([unknown])["run_kg"] is None
    assert sum_emissions([]) == {
        "requests": 0,
        "known": 0,
        "unknown": 0,
        "run_hours": 0,
        "avoided_hours": 0,
        "run_kg": None,
        "avoided_idle_kg": None,
    }


def test_the_formula_names_what_it_leaves_out() -> None:
    for words in ("board power (kW)", "gCO2eq/kWh", "/ 1000", "PUE", "upper bound", "location-based"):
        assert words in EMISSIONS_FORMULA


# --- the tie-breaker's order -------------------------------------------------------------------


def test_order_by_intensity_puts_unknown_last_and_keeps_ties_in_order() -> None:
    locations = ["us-east1", "zz-south9", "europe-west10", "europe-north2-a", "aa-north1", "europe-west3"]
    assert order_by_intensity(locations, SHIPPED) == [
        ("europe-north2-a", 2.73),
        ("europe-west10", 275.82),  # the same 275.82 as europe-west3: the given order stays
        ("europe-west3", 275.82),
        ("us-east1", 575.77),
        ("zz-south9", None),
        ("aa-north1", None),
    ]
    swapped = order_by_intensity(["europe-west3", "europe-west10"], SHIPPED)
    assert [location for location, _ in swapped] == ["europe-west3", "europe-west10"]
    assert order_by_intensity([], SHIPPED) == []


def test_a_calendar_block_avoids_nothing_and_work_on_it_is_counted_once() -> None:
    """A block's time before its start is a date the user chose, not a wait that avoided holding;
    the accelerators its workloads run on are the block's, counted in the block's own record."""
    from airflow_provider_dws.records import RequestRecord

    now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    common: dict[str, Any] = {
        "project": "p",
        "location": "us-central1-a",
        "accelerator_type": "nvidia-h100-80gb",
        "accelerator_count": 8,
        "submitted": "2026-11-20T00:00:00+00:00",
        "started": "2026-12-01T00:00:00+00:00",
        "ended": "2026-12-01T02:00:00+00:00",
    }
    block = RequestRecord(
        api="compute_future_reservation",
        kind="block",
        request_name="b",
        phase="succeeded",
        pricing_model="calendar",
        **common,
    )
    work = RequestRecord(
        api="vertex_custom_job",
        kind="job",
        request_name="w",
        phase="succeeded",
        pricing_model="reservation",
        **common,
    )
    on_block, worked = (carbon.request_emissions(r, carbon.SHIPPED, now) for r in (block, work))
    assert (on_block.avoided_hours, on_block.run_hours) == (0.0, 16.0)
    assert (worked.avoided_hours, worked.run_hours) == (0.0, 0.0)


# --- load_carbon, in a fresh interpreter -------------------------------------------------------

GOOD_JSON = json.dumps({"source": "test", "regions": {"us-central1": {"intensity": 100}}})
CONFIG_FILE = """
[core]
load_examples = False

[dws_carbon]
source = site survey
regions.us-central1.intensity = 200
power_watts.NVIDIA_L4 = 60
"""


def _scenarios() -> dict[str, dict[str, Any]]:
    """load_carbon under each setting, in this (fresh) process: the config file has the section
    until the env-only scenarios, which remove it."""
    from airflow.configuration import conf

    Variable = variable_model()
    out: dict[str, dict[str, Any]] = {}

    def run(name: str, env: dict[str, str]) -> None:
        with environ(env):
            table = load_carbon()
        out[name] = {
            "source": table.source.partition(";")[0],
            "error": table.error,
            "us-central1": table.intensity("us-central1"),
            "l4": table.power_watts("NVIDIA_L4"),
        }

    run("file", {})
    run("file_and_env", {"AIRFLOW__DWS_CARBON__REGIONS__US_CENTRAL1__INTENSITY": "300"})
    conf.remove_section("dws_carbon")
    run("nothing", {})
    run("env_only", {"AIRFLOW__DWS_CARBON__POWER_WATTS__NVIDIA_L4": "50"})
    run("variable_env", {"AIRFLOW_VAR_DWS_CARBON": GOOD_JSON})
    run("bad_config", {"AIRFLOW__DWS_CARBON__POWER_WATTS__NVIDIA_L4": "hot"})
    Variable.set("dws_carbon", GOOD_JSON)  # the metadata database, as the UI sets it
    run("variable_db", {"AIRFLOW__DWS_CARBON__POWER_WATTS__NVIDIA_L4": "50"})
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, probe: Probe) -> dict[str, dict[str, Any]]:
    return scenarios_in_fresh_airflow(
        tmp_path_factory, probe, config_file=CONFIG_FILE, script=__file__, flag="--load-carbon"
    )


def test_load_carbon_reads_airflow_s_config_and_variable(loaded: dict) -> None:
    config = f"{CONFIG_SOURCE}: site survey"
    assert loaded["file"] == {"source": config, "error": None, "us-central1": 200, "l4": 60}
    # The environment variable wins over the file's entry for the same figure; the rest stay.
    assert loaded["file_and_env"] == {"source": config, "error": None, "us-central1": 300, "l4": 60}
    assert loaded["nothing"] == {
        "source": SOURCE.partition(";")[0],
        "error": None,
        "us-central1": 412.72,
        "l4": 72,
    }
    assert loaded["env_only"]["l4"] == 50 and loaded["env_only"]["us-central1"] == 412.72
    variable = {"source": f"{VARIABLE_SOURCE}: test", "error": None, "us-central1": 100, "l4": 72}
    assert loaded["variable_env"] == variable
    assert loaded["variable_db"] == variable  # the Variable first, the config section not merged in
    bad = loaded["bad_config"]
    assert (bad["us-central1"], bad["l4"]) == (412.72, 72)
    assert bad["error"] == (
        f"{CONFIG_SOURCE}: entry 'power_watts.nvidia_l4': expected watts, a non-negative number, got 'hot'"
    )


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder, which the tests do not have on the path either
    if "--load-carbon" in sys.argv:
        print(json.dumps(_scenarios()))
