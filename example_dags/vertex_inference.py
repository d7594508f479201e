"""Inference on flex-start GPUs (Vertex AI, Preview): score a night's inputs in a batch prediction
job, then serve the model for an evaluation campaign that holds its GPUs only while it runs.

* ``score_inputs``: a batch prediction job on 1 x g2-standard-48 (4 L4s) with flex-start. It may
  wait at most 2 hours for its machines (the provider keeps that max wait: the API has none) and
  runs at most 4 hours.
* ``serve_model`` deploys the model on flex-start (an endpoint of its own), waits in the triggerer
  until it is deployed, and hands the endpoint to ``evaluate``; the teardown ``undeploy_model``
  gives the GPUs back and deletes the endpoint as soon as the campaign ends, and Vertex AI
  undeploys the model 8 hours after the request whatever happens.

Run it locally against the bundled emulator with ``make demo``. The ``DWS_EXAMPLE_*``
environment variables and the ``dws-emulator-*`` labels exist only so the demo and the
test suite run it in seconds; a real DAG would write its values directly.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_endpoint_release import UndeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
REGION = os.environ.get("DWS_EXAMPLE_REGION", "us-central1")
MODEL = f"projects/{PROJECT_ID}/locations/{REGION}/models/llm-scorer"
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
#: The tests shorten both max waits with this; unset, the batch job waits 2 h and the deploy 1 h.
SHORT_WAIT = os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS")

with DAG(
    dag_id="dws_vertex_inference",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "vertex-ai", "inference", "example"],
    # Read by the dws-emulator only: how long the fake batch job runs and how it exits.
    params={"run_seconds": 5, "exit_code": 0},
) as dag:
    score = CreateVertexAIFlexStartBatchPredictionOperator(
        deferrable=True,
        task_id="score_inputs",
        project_id=PROJECT_ID,
        region=REGION,
        model=MODEL,
        machine_type="g2-standard-48",
        replica_count=1,
        gcs_source="gs://my-gcp-bucket/inputs/{{ dag_run.run_after | ds_nodash }}/*.jsonl",
        gcs_destination_prefix="gs://my-gcp-bucket/scores/{{ dag_run.run_after | ds_nodash }}",
        max_wait=timedelta(seconds=int(SHORT_WAIT)) if SHORT_WAIT else timedelta(hours=2),
        max_run=timedelta(hours=4),
        labels={
            "team": "ml",
            "dws-emulator-run-seconds": "{{ params.run_seconds }}",
            "dws-emulator-exit-code": "{{ params.exit_code }}",
        },
        poll_interval=POLL_INTERVAL,
    )

    serve = DeployVertexAIFlexStartModelOperator(
        deferrable=True,
        task_id="serve_model",
        project_id=PROJECT_ID,
        region=REGION,
        model=MODEL,
        machine_type="g2-standard-24",
        replica_count=1,
        max_wait=timedelta(seconds=int(SHORT_WAIT)) if SHORT_WAIT else timedelta(hours=1),
        max_run=timedelta(hours=8),
        labels={"team": "ml"},
        poll_interval=POLL_INTERVAL,
    )
    undeploy = UndeployVertexAIFlexStartModelOperator(task_id="undeploy_model", setup_task_id="serve_model")

    @task
    def evaluate(deployment: dict) -> str:
        """The work of the campaign: here, read the endpoint and see the model deployed on it."""
        from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIBetaHook

        client = DwsVertexAIBetaHook().get_endpoint_service_client(deployment["region"])
        endpoint = client.get_endpoint(name=deployment["endpoint"])
        ids = [model.id for model in endpoint.deployed_models]
        assert deployment["deployed_model_id"] in ids, ids
        print(f"DWS RESULT: evaluating {deployment['model']} on {endpoint.name} (deployed models {ids})")
        return endpoint.name

    @task
    def report(ti=None) -> dict:
        """Where the scores are, and how long each request waited for capacity."""
        job = ti.xcom_pull(task_ids="score_inputs")
        summary = {
            "scores": job["output_info"]["gcs_output_directory"],
            "batch_wait_seconds": ti.xcom_pull(task_ids="score_inputs", key="wait_seconds"),
            "serve_wait_seconds": ti.xcom_pull(task_ids="serve_model", key="wait_seconds"),
        }
        print(f"DWS RESULT: {summary}")
        return summary

    campaign = evaluate(serve.output)
    serve >> campaign >> undeploy.as_teardown(setups=serve)
    [score, campaign] >> report()
