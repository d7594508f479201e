"""Ring 3: Airflow itself sees the provider and imports every example DAG."""

from __future__ import annotations

import json

import pytest

from tests.airflow.conftest import ROOT, AirflowHome

pytestmark = pytest.mark.airflow


def test_airflow_providers_list_shows_the_provider(airflow_home: AirflowHome) -> None:
    result = airflow_home.command("providers", "list", "-o", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    providers = {p["package_name"]: p for p in json.loads(result.stdout)}
    assert "airflow-provider-dws" in providers
    assert providers["airflow-provider-dws"]["version"] == "0.1.0"


#: What Airflow's provider registry says of the provider, read in one fresh process in the test's
#: Airflow home (one interpreter start instead of one per ``airflow providers ...`` command; the
#: ``hooks`` command also imported every installed provider's hooks, a minute on a loaded machine).
REGISTRY_PROBE = """
import importlib, json
from airflow.providers_manager import ProvidersManager

pm = ProvidersManager()
ours = pm.providers["airflow-provider-dws"].data
hook_modules = [m for h in ours.get("hooks", []) for m in h["python-modules"]]
for module in hook_modules:  # what `airflow providers hooks` imports of ours
    importlib.import_module(module)
print(json.dumps({
    "triggers": sorted(t.trigger_class_name for t in pm.trigger if t.package_name == "airflow-provider-dws"),
    "hook_modules": hook_modules,
    "links": pm.extra_links_class_names,
}))
"""


def test_airflow_sees_the_trigger_hooks_and_extra_link(airflow_home: AirflowHome) -> None:
    result = airflow_home.python(REGISTRY_PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["triggers"] == [
        "airflow_provider_dws.triggers.capacity_request",
        "airflow_provider_dws.triggers.resume_at",
    ]
    assert "airflow_provider_dws.hooks.batch" in seen["hook_modules"]
    assert {
        "airflow_provider_dws.links.VertexAIFlexStartJobLink",
        "airflow_provider_dws.links.TPUQueuedResourceLink",
        "airflow_provider_dws.links.BatchFlexStartJobLink",
        "airflow_provider_dws.links.BatchJobLogsLink",
    } <= set(seen["links"])


def test_every_example_dag_imports_without_error(airflow_home: AirflowHome) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "example_dags"))
    assert bag.import_errors == {}
    files = sorted(p.name for p in (ROOT / "example_dags").glob("*.py"))
    assert files, "no example DAGs"
    assert "dws_vertex_flex_start" in bag.dag_ids
    assert len({bag.dags[d].fileloc for d in bag.dag_ids}) == len(files)


#: What Airflow's plugin manager sees of the ``dws`` plugin, in one fresh process: every installed
#: distribution that offers it (Airflow walks them all, one per ``sys.path`` entry that holds the
#: project's metadata, and registers each), the plugins loaded and the plugin import errors.
PLUGIN_PROBE = """
import json
from importlib import metadata
from airflow import plugins_manager

offers = [
    str(dist.locate_file(""))
    for dist in metadata.distributions()
    for ep in dist.entry_points
    if ep.group == "airflow.plugins" and ep.name == "dws"
]
plugins_manager.ensure_plugins_loaded()
print(json.dumps({
    "offers": offers,
    "loaded": [p["name"] for p in plugins_manager.get_plugin_info()],
    "errors": plugins_manager.get_import_errors(),
}))
"""


def test_the_dws_plugin_is_registered_once(airflow_home: AirflowHome) -> None:
    """A development install (``make venv``: editable, the repository root on ``sys.path``) left
    setuptools' ``airflow_provider_dws.egg-info`` in the root beside the installed ``.dist-info``:
    Airflow saw the plugin's entry point twice and the home page said "1 Plugin Import Error:
    Plugin 'dws' already registered"."""
    result = airflow_home.python(PLUGIN_PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(seen["offers"]) == 1, f"the dws plugin's entry point is offered by {seen['offers']}"
    assert "dws" in seen["loaded"]
    assert seen["errors"] == {}
