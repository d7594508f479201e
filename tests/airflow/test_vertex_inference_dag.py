"""Ring 3: the Vertex AI inference example (a flex-start batch prediction job; a model deployed on
flex-start for a campaign, then undeployed by its teardown) by `airflow dags test` against a live
dws-emulator.

After every run the emulator holds nothing of it: no batch job queued or running, no deployment
waiting or deployed, no endpoint, and the L4 pool whole.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_vertex_inference"
L4 = "us-central1/NVIDIA_L4"
#: The batch job's g2-standard-48 (4 L4s); the deployment's g2-standard-24 (2).
BATCH_GPUS, SERVE_GPUS = 4, 2
_SCORES = re.compile(r"DWS RESULT: \{'scores': '(?P<scores>[^']+)'")


def inference(emulator: Any) -> list[dict[str, Any]]:
    """The emulator's batch prediction job and deployment records of the example's runs."""
    return [
        r
        for r in emulator.control.requests()
        if r["kind"] in ("BatchPredictionJob", "ModelDeployment") and r["labels"].get("dws_dag") == DAG_ID
    ]


def endpoints(emulator: Any) -> list[str]:
    """The endpoints the emulator still holds."""
    return [endpoint["name"] for endpoint in emulator.control.vertex_deployments()]


def assert_nothing_left(emulator: Any) -> None:
    """Nothing queued, running or deployed; the L4 pool whole."""
    for record in inference(emulator):
        assert record["state"] not in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"), record
        assert record["state"] not in ("WAITING", "STARTING", "DEPLOYED"), record
    pool = emulator.control.capacity()[L4]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`, in `make test`): the batch
    job ran to its end; the model was deployed, used, and undeployed by the teardown long before its
    max runtime, its endpoint deleted."""
    match = _SCORES.search(run.log)
    assert match is not None, run.log[-4000:]
    assert "Deferring" in run.log
    [job] = [r for r in inference(run.emulator) if r["kind"] == "BatchPredictionJob"]
    [deployment] = [r for r in inference(run.emulator) if r["kind"] == "ModelDeployment"]
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert match["scores"].startswith("gs://my-gcp-bucket/scores/")
    assert (job["accelerator_type"], job["accelerator_count"]) == ("NVIDIA_L4", BATCH_GPUS)
    assert job["labels"]["dws_task"] == "score_inputs" and job["labels"]["team"] == "ml"
    assert [step["state"] for step in deployment["history"]][-2:] == ["DEPLOYED", "UNDEPLOYED"]
    assert deployment["accelerator_count"] == SERVE_GPUS
    # Undeployed by the teardown, not by its max runtime (8 h after the request).
    assert deployment["end_time"] < deployment["expire_time"]
    assert re.fullmatch(r"\d{10}", deployment["deployed_model_id"])
    assert (
        f"evaluating projects/my-gcp-project/locations/us-central1/models/llm-scorer on {deployment['endpoint']}"
        in (run.log)
    )
    assert deployment["endpoint"] not in endpoints(run.emulator)
    no_record_warnings(run.log)
    recs = records(run.home, DAG_ID)
    [score] = recs["score_inputs"]
    assert (score.request_name, score.api, score.phase, score.accelerator_count) == (
        job["name"],
        "vertex_batch_prediction",
        "succeeded",
        BATCH_GPUS,
    )
    [serve] = recs["serve_model"]
    assert (serve.request_name, serve.api, serve.accelerator_count) == (
        deployment["name"],
        "vertex_endpoint_deployment",
        SERVE_GPUS,
    )
    # The teardown's record of the release: the GPUs no longer held.
    [released] = recs["undeploy_model"]
    assert released.request_name == deployment["name"] and not released.holds


def test_no_capacity_within_max_wait_gives_both_requests_up_and_leaves_nothing(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    # No L4 free: both wait, and at the provider's max wait (the API has none) the batch job is
    # cancelled and the deploy operation cancelled, its endpoint deleted.
    emulator = dws_emulator_factory({L4: 0})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_MAX_WAIT_SECONDS": "6"}
    )
    assert result.returncode != 0
    assert result.log.count("CapacityNotObtainedError") >= 2, result.log[-6000:]
    assert "DWS RESULT" not in result.log
    states = sorted((r["kind"], r["state"]) for r in inference(emulator))
    assert states == [("BatchPredictionJob", "JOB_STATE_CANCELLED"), ("ModelDeployment", "CANCELLED")], states
    assert_nothing_left(emulator)
    assert endpoints(emulator) == []
    recs = records(airflow_home.home, DAG_ID)
    assert [r.phase for r in recs["score_inputs"]] == ["not_obtained"]
    assert [r.phase for r in recs["serve_model"]] == ["not_obtained"]
