"""Airflow DAGs for the fault matrix: Vertex AI inference on flex-start, in the region ``params.region``
(its pool of L4s, ``<region>/NVIDIA_L4``, is the row's own, so the rows run side by side):

* ``dws_fault_vertex_batch``: ``CreateVertexAIFlexStartBatchPredictionOperator``, one
  g2-standard-48 (4 L4s), running ``params.run_seconds``;
* ``dws_fault_vertex_batch_kill_after_submit``: the same with one retry, and on try 1 the task
  process SIGKILLs itself right after the batch job was created, before it defers;
* ``dws_fault_vertex_serve``: ``DeployVertexAIFlexStartModelOperator`` (one g2-standard-48), a
  task that reads the endpoint, and the undeploy as a teardown;
* ``dws_fault_vertex_serve_kill_after_submit``: the same with one retry and the SIGKILL right after
  the deploy operation was started.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_endpoint_release import UndeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator
from airflow_provider_dws.runtime.vertex_batch import VertexBatchPredictionAdapter
from airflow_provider_dws.runtime.vertex_endpoint import VertexDeploymentAdapter

REGION = "{{ params.region }}"
MODEL = "projects/my-gcp-project/locations/{{ params.region }}/models/scorer"
PARAMS = {"region": "us-central1", "run_seconds": 3}

KillWorkerAfterBatchJob = killed_after_submit(
    CreateVertexAIFlexStartBatchPredictionOperator,
    VertexBatchPredictionAdapter,
    "KillWorkerAfterBatchJob",
    "the batch prediction job",
)
KillWorkerAfterDeploy = killed_after_submit(
    DeployVertexAIFlexStartModelOperator, VertexDeploymentAdapter, "KillWorkerAfterDeploy", "the deployment"
)


def _dag(dag_id: str, doc: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "vertex-ai", "fault-matrix"],
        params=dict(PARAMS),
    )


def _batch(dag_id: str, operator: type[CreateVertexAIFlexStartBatchPredictionOperator], retries: int) -> DAG:
    with _dag(dag_id, "A flex-start batch prediction job on 4 L4s.") as dag:
        operator(
            deferrable=True,
            task_id="score",
            project_id="my-gcp-project",
            region=REGION,
            model=MODEL,
            machine_type="g2-standard-48",
            gcs_source="gs://my-gcp-bucket/inputs/*.jsonl",
            gcs_destination_prefix="gs://my-gcp-bucket/scores",
            max_wait=MAX_WAIT,
            max_run=timedelta(hours=4),
            labels={"dws-emulator-run-seconds": "{{ params.run_seconds }}"},
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )
    return dag


def _serve(dag_id: str, operator: type[DeployVertexAIFlexStartModelOperator], retries: int) -> DAG:
    with _dag(dag_id, "A model deployed on 4 L4s, used, then undeployed by the teardown.") as dag:
        serve = operator(
            deferrable=True,
            task_id="serve",
            project_id="my-gcp-project",
            region=REGION,
            model=MODEL,
            machine_type="g2-standard-48",
            max_wait=MAX_WAIT,
            max_run=MAX_WAIT + timedelta(hours=8),
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )
        undeploy = UndeployVertexAIFlexStartModelOperator(task_id="undeploy", setup_task_id="serve")

        @task
        def use_endpoint(deployment: dict) -> str:
            print(f"DWS ENDPOINT: {deployment['endpoint']} serves {deployment['deployed_model_id']}")
            return str(deployment["endpoint"])

        serve >> use_endpoint(serve.output) >> undeploy.as_teardown(setups=serve)
    return dag


batch = _batch("dws_fault_vertex_batch", CreateVertexAIFlexStartBatchPredictionOperator, 0)
batch_killed = _batch("dws_fault_vertex_batch_kill_after_submit", KillWorkerAfterBatchJob, 1)
serve = _serve("dws_fault_vertex_serve", DeployVertexAIFlexStartModelOperator, 0)
serve_killed = _serve("dws_fault_vertex_serve_kill_after_submit", KillWorkerAfterDeploy, 1)
