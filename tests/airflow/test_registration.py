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


def test_airflow_sees_the_trigger_hooks_and_extra_link(airflow_home: AirflowHome) -> None:
    triggers = json.loads(airflow_home.command("providers", "triggers", "-o", "json").stdout)
    ours = {t["class"] for t in triggers if t["package_name"] == "airflow-provider-dws"}
    assert ours == {
        "airflow_provider_dws.triggers.capacity_request",
        "airflow_provider_dws.triggers.resume_at",
    }
    hooks = airflow_home.command("providers", "hooks", "-o", "json")
    assert hooks.returncode == 0, hooks.stderr[-2000:]
    links = json.loads(airflow_home.command("providers", "links", "-o", "json").stdout)
    assert {"extra_link_class_name": "airflow_provider_dws.links.VertexAIFlexStartJobLink"} in [
        {k: v for k, v in link.items() if k == "extra_link_class_name"} for link in links
    ]


def test_every_example_dag_imports_without_error(airflow_home: AirflowHome) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "example_dags"))
    assert bag.import_errors == {}
    files = sorted(p.name for p in (ROOT / "example_dags").glob("*.py"))
    assert files, "no example DAGs"
    assert "dws_vertex_flex_start" in bag.dag_ids
    assert len({bag.dags[d].fileloc for d in bag.dag_ids}) == len(files)
