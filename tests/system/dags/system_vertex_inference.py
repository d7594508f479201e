"""System test: Vertex AI inference on flex-start (Preview). A batch prediction job on 1 x L4,
waited for in the triggerer; and a model deployed on 1 x L4 to an endpoint of the task's own,
handed to a check task, then undeployed (and its endpoint deleted) by the teardown ``undeploy``.

Against a real project it needs a model in the region, ``SYSTEM_TESTS_VERTEX_MODEL``
(``projects/P/locations/us-central1/models/M``), that serves JSON Lines, and a bucket for the
batch job's inputs and outputs, ``SYSTEM_TESTS_VERTEX_BUCKET`` (docs/system-tests.md). The sweep
gives up what is still queued or deployed if a task failed; the watcher fails the run if any task
failed.
"""

from __future__ import annotations

import os

from airflow.sdk import task
from system_common import LABELS, MAX_WAIT, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_endpoint_release import UndeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator

REGION = "us-central1"
MODEL = os.environ.get("SYSTEM_TESTS_VERTEX_MODEL") or f"projects/{PROJECT_ID}/locations/{REGION}/models/1"
BUCKET = os.environ.get("SYSTEM_TESTS_VERTEX_BUCKET") or "dws-system-tests"
#: The emulator's convention for how long a batch job built from a model runs.
EMULATOR_LABELS = {"dws-emulator-run-seconds": "2"}

with system_dag("dws_system_vertex_inference") as dag:
    score = CreateVertexAIFlexStartBatchPredictionOperator(
        task_id="score",
        project_id=PROJECT_ID,
        region=REGION,
        model=MODEL,
        machine_type="g2-standard-4",
        gcs_source=f"gs://{BUCKET}/inputs/*.jsonl",
        gcs_destination_prefix=f"gs://{BUCKET}/scores/{{{{ run_id | replace(':', '-') }}}}",
        max_wait=MAX_WAIT,
        max_run=MAX_WAIT * 5,
        labels={**LABELS, **EMULATOR_LABELS},
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )
    serve = DeployVertexAIFlexStartModelOperator(
        task_id="serve",
        project_id=PROJECT_ID,
        region=REGION,
        model=MODEL,
        machine_type="g2-standard-4",
        max_wait=MAX_WAIT,
        max_run=MAX_WAIT * 5,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )
    undeploy = UndeployVertexAIFlexStartModelOperator(task_id="undeploy", setup_task_id="serve")

    @task
    def check_scores(job: dict) -> None:
        """The batch job ran to its end and says where its predictions are."""
        assert job["state"] == "JOB_STATE_SUCCEEDED", job
        assert job["output_info"]["gcs_output_directory"].startswith(f"gs://{BUCKET}/scores/"), job
        print(f"DWS SYSTEM TEST: batch prediction job {job['name']} {job['state']}")

    @task
    def check_endpoint(deployment: dict) -> None:
        """The model is deployed on the task's endpoint, with the id the task returned."""
        from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIBetaHook

        client = DwsVertexAIBetaHook().get_endpoint_service_client(REGION)
        endpoint = client.get_endpoint(name=deployment["endpoint"])
        ids = [model.id for model in endpoint.deployed_models]
        assert ids == [deployment["deployed_model_id"]], (ids, deployment)
        print(f"DWS SYSTEM TEST: model deployed on {endpoint.name} as {ids[0]}")

    scored = check_scores(score.output)
    checked = check_endpoint(serve.output)
    serve >> checked >> undeploy.as_teardown(setups=serve)
    [score, scored, undeploy] >> sweep(["score", "serve"])
    watch(dag)
