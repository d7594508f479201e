"""The DWS page's web code stays out of the scheduler, triggerer, dag-processor and workers.

Every Airflow process loads the ``dws`` plugin. A fresh interpreter (an Airflow home of its own)
loads it the way those processes do: core's ``plugins_manager`` (plugins, timetables, extra links,
priority weights, macros, listeners; what the scheduler and dag-processor read through
serialization) and the Task SDK's (what a worker's task runner reads). None of that may import
``airflow_provider_dws.plugins.web`` or make our plugin import FastAPI; the timetable is still
registered. Reading ``fastapi_apps``, as the api-server does, then builds the app.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.airflow.conftest import AirflowHome

pytestmark = pytest.mark.airflow

PROBE = textwrap.dedent(
    """
    import json, sys

    def fastapi_modules():
        return {m for m in sys.modules if m == "fastapi" or m.startswith("fastapi.")}

    from airflow import plugins_manager
    from airflow.sdk import plugins_manager as sdk_plugins_manager

    before = fastapi_modules()
    plugins_manager.ensure_plugins_loaded()
    timetables = sorted(plugins_manager.get_timetables_plugins())
    plugins_manager.get_global_operator_extra_links()
    plugins_manager.get_operator_extra_links()
    plugins_manager.get_priority_weight_strategy_plugins()
    plugins_manager.get_partition_mapper_plugins()
    plugins_manager.get_windows_plugins()
    plugins_manager.get_deadline_references_plugins()
    plugins_manager.integrate_macros_plugins()
    sdk_plugins_manager.integrate_macros_plugins()
    sdk_plugins_manager.get_hook_lineage_readers_plugins()
    loaded = {
        "timetables": timetables,
        "ours": sorted(m for m in sys.modules if m.startswith("airflow_provider_dws.plugins")),
        "new_fastapi": sorted(fastapi_modules() - before),
        "names": sorted(p.name for p in plugins_manager._get_plugins()[0]),
    }
    apps, _ = plugins_manager.get_fastapi_plugins()
    loaded["apps"] = [(a["url_prefix"], type(a["app"]).__name__) for a in apps]
    loaded["after_apps"] = sorted(m for m in sys.modules if m.startswith("airflow_provider_dws.plugins.web"))
    print(json.dumps(loaded))
    """
)


def test_loading_the_plugin_like_the_scheduler_imports_no_web_code(
    airflow_home: AirflowHome, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=airflow_home.env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "dws" in loaded["names"]
    assert "airflow_provider_dws.timetables.offpeak.OffPeakTimetable" in loaded["timetables"]
    assert not any(m.startswith("airflow_provider_dws.plugins.web") for m in loaded["ours"]), loaded["ours"]
    # Only other installed plugins could have imported FastAPI here; ours is the only one in this home.
    if loaded["names"] == ["dws"]:
        assert loaded["new_fastapi"] == [], loaded["new_fastapi"]
    # What the api-server does (``init_plugins``): now the app exists.
    assert ["/dws", "FastAPI"] in loaded["apps"]
    assert "airflow_provider_dws.plugins.web.app" in loaded["after_apps"]
