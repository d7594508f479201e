"""Airflow itself loads the ``dws`` plugin, and a DAG on OffPeakTimetable parses and (de)serializes."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pendulum
import pytest

from tests.airflow.conftest import BIN, AirflowHome

pytestmark = pytest.mark.airflow

TIMETABLE_PATH = "airflow_provider_dws.timetables.offpeak.OffPeakTimetable"

DAG_FILE = textwrap.dedent(
    """
    from datetime import datetime

    from airflow.sdk import DAG
    from airflow.providers.standard.operators.empty import EmptyOperator

    from airflow_provider_dws.timetables import OffPeakTimetable

    with DAG(
        dag_id="dws_offpeak_timetable_probe",
        schedule=OffPeakTimetable("Mon-Fri 22:00-06:00 Asia/Seoul"),
        start_date=datetime(2026, 12, 1),
        catchup=True,
    ):
        EmptyOperator(task_id="noop")
    """
)


def test_airflow_plugins_lists_the_dws_plugin_with_the_timetable(airflow_home: AirflowHome) -> None:
    result = airflow_home.command("plugins", "-o", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert "dws" in plugins, plugins
    assert plugins["dws"]["timetables"] == [TIMETABLE_PATH]
    assert "already registered" not in result.stdout + result.stderr


def test_eager_provider_discovery_loads_the_plugin_once(airflow_home: AirflowHome) -> None:
    """With ``lazy_discover_providers = False`` Airflow also loads the provider info's ``plugins``.

    The plugin then arrives twice (entry point, provider info); Airflow keeps the first and skips
    the second, so the timetable is still registered exactly once.
    """
    env = dict(airflow_home.env, AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS="False")
    result = subprocess.run(
        [str(BIN / "airflow"), "plugins", "-o", "json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ours = [p for p in json.loads(result.stdout) if p["name"] == "dws"]
    assert len(ours) == 1
    assert ours[0]["timetables"] == [TIMETABLE_PATH]


def test_dag_on_offpeak_timetable_parses_and_round_trips_serialization(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_dws.timetables import OffPeakTimetable

    dag_folder = tmp_path / "dags"
    dag_folder.mkdir()
    (dag_folder / "offpeak_probe.py").write_text(DAG_FILE)

    bag = DagBag(dag_folder=str(dag_folder))
    assert bag.import_errors == {}
    dag = bag.dags["dws_offpeak_timetable_probe"]
    assert isinstance(dag.timetable, OffPeakTimetable)
    assert dag.timetable.summary == "off-peak Mon-Fri 22:00-06:00 Asia/Seoul"

    serialized = DagSerialization.to_dict(dag)
    encoded = json.loads(json.dumps(serialized))["dag"]["timetable"]
    assert encoded["__type"] == TIMETABLE_PATH
    assert encoded["__var"]["windows"] == ["Mon-Fri 22:00-06:00 Asia/Seoul"]

    restored = DagSerialization.from_dict(json.loads(json.dumps(serialized)))
    assert isinstance(restored.timetable, OffPeakTimetable)
    assert restored.timetable == dag.timetable
    assert restored.timetable.summary == dag.timetable.summary
    assert restored.timetable.description == dag.timetable.description

    # The scheduler-side DAG schedules from the restored timetable: start_date Tue 2026-12-01 (UTC)
    # -> Tue 22:00 KST, then Wed 22:00 KST.
    first = restored.next_dagrun_info(last_automated_run_info=None)
    assert first is not None and first.data_interval is not None
    assert first.run_after == pendulum.datetime(2026, 12, 1, 13, tz="UTC")
    assert first.data_interval.end == pendulum.datetime(2026, 12, 1, 21, tz="UTC")
    second = restored.next_dagrun_info(last_automated_run_info=first)
    assert second is not None
    assert second.run_after == pendulum.datetime(2026, 12, 2, 13, tz="UTC")


def test_scheduler_side_loads_the_timetable_from_the_metadata_db(tmp_path: Path) -> None:
    """The real path: the DAG processor stores the serialized DAG; other processes rebuild it."""
    dag_folder = tmp_path / "dags"
    dag_folder.mkdir()
    (dag_folder / "offpeak_probe.py").write_text(DAG_FILE)
    home = AirflowHome(tmp_path / "home")  # own home: the probe DAG stays out of the shared DB
    home.env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dag_folder)

    reserialize = home.command("dags", "reserialize")
    assert reserialize.returncode == 0, reserialize.stderr[-3000:]
    details = home.command("dags", "details", "dws_offpeak_timetable_probe", "-o", "json")
    assert details.returncode == 0, details.stderr[-3000:]
    (dag,) = json.loads(details.stdout.strip().splitlines()[-1])  # after a graphviz warning line
    assert dag["timetable_summary"] == "off-peak Mon-Fri 22:00-06:00 Asia/Seoul"
    assert dag["timetable_description"].startswith("One run per off-peak window")
    assert dag["next_dagrun_data_interval_start"] == "2026-12-01 13:00:00+00:00"
    assert dag["next_dagrun_data_interval_end"] == "2026-12-01 21:00:00+00:00"

    upcoming = home.command("dags", "next-execution", "dws_offpeak_timetable_probe", "-n", "3")
    assert upcoming.returncode == 0, upcoming.stderr[-3000:]
    assert [line for line in upcoming.stdout.split() if line.endswith(":00+00:00")] == [
        "2026-12-01T13:00:00+00:00",
        "2026-12-02T13:00:00+00:00",
        "2026-12-03T13:00:00+00:00",
    ]
