"""Ring 2: Vertex AI inference on flex-start, the provider's backends and operators against a live
dws-emulator: a deployment found again instead of deployed twice, given up (waiting or deployed,
beside a model that carries the traffic), the endpoint an attempt made deleted after it; a batch
job given up at the provider's max wait in the worker."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends.vertex_endpoint import VertexDeploymentBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError, WorkloadFailedError
from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator
from airflow_provider_dws.runtime.vertex_endpoint import VertexDeploymentAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.scheduling.policies import Placement
from dws_emulator.testing import InProcessEmulator
from tests.emulator.test_provider_on_emulator import FakeTI

pytestmark = pytest.mark.emulator

L4 = "us-central1/NVIDIA_L4"
PROJECT = "emu-project"
MODEL = f"projects/{PROJECT}/locations/us-central1/models/scorer"


@pytest.fixture
def emulator_env(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(capacity: dict[str, int]) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        return emulator

    return start


def deploy_op(task_id: str, **kwargs: Any) -> DeployVertexAIFlexStartModelOperator:
    params: dict[str, Any] = {
        "project_id": PROJECT,
        "region": "us-central1",
        "model": MODEL,
        "machine_type": "g2-standard-48",
        "max_wait": timedelta(seconds=30),
        "max_run": timedelta(hours=1),
        "poll_interval": 0.2,
        "deferrable": False,
    }
    params.update(kwargs)
    return DeployVertexAIFlexStartModelOperator(task_id=task_id, **params)


def submit(adapter: VertexDeploymentAdapter, identity: RequestIdentity) -> Any:
    return adapter.submit(
        {"ti": FakeTI(identity.task_id)}, identity, Placement("us-central1"), timedelta(minutes=1)
    )


def waiting_and_deployed(emulator: InProcessEmulator) -> list[tuple[str, str]]:
    return [
        (record["deployed_model_id"], record["state"])
        for endpoint in emulator.control.vertex_deployments()
        for record in [*endpoint["deployed_models"], *endpoint["waiting"]]
    ]


def test_the_deploy_operator_returns_the_endpoint_and_a_retry_adopts_its_deployment(
    emulator_env: Any,
) -> None:
    emulator = emulator_env({L4: 4})
    op = deploy_op("serve")
    ti = FakeTI(op.task_id)
    result = op.execute({"ti": ti})
    assert set(result) == {"endpoint", "endpoint_id", "deployed_model_id", "model", "region"}
    assert (
        ti.xcom["endpoint"] == result["endpoint"]
        and ti.xcom["deployed_model_id"] == result["deployed_model_id"]
    )
    assert waiting_and_deployed(emulator) == [(result["deployed_model_id"], "DEPLOYED")]
    # The task run again (a retry after its worker died): the deployment is found, not made twice.
    identity = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    backend = VertexDeploymentBackend(PROJECT, "us-central1")
    decision = backend.decide(identity)
    assert decision.action == "wait" and decision.name == ti.xcom["deployment_operation"]
    again = op.execute({"ti": ti})
    assert again == result
    assert len(waiting_and_deployed(emulator)) == 1


def test_a_lost_reply_s_deployment_is_adopted_not_made_again(emulator_env: Any) -> None:
    emulator = emulator_env({L4: 0})
    adapter = VertexDeploymentAdapter(deploy_op("lost"))
    identity = RequestIdentity("inference_on_emulator", "lost", f"manual__{time.monotonic_ns()}")
    first = submit(adapter, identity)
    # The same deploy asked again (a retry whose create reply was lost): ALREADY_EXISTS on the
    # attempt's model id, and the waiting deployment is adopted.
    second = submit(VertexDeploymentAdapter(deploy_op("lost")), identity)
    assert second.name == first.name and second.phase is Phase.WAITING
    assert [state for _, state in waiting_and_deployed(emulator)] == ["WAITING"]


def test_giving_up_cancels_a_waiting_deployment_and_undeploys_one_beside_the_traffic(
    emulator_env: Any,
) -> None:
    emulator = emulator_env({L4: 4})
    adapter = VertexDeploymentAdapter(deploy_op("campaign", capacity_retry=1))
    backend = adapter.backend()
    first = RequestIdentity("inference_on_emulator", "campaign", f"manual__{time.monotonic_ns()}")
    deployed = submit(adapter, first)
    deadline = time.monotonic() + 30
    while (backend.get_status(deployed.name) or deployed).state != "DEPLOYED" and time.monotonic() < deadline:
        time.sleep(0.1)
    # A second attempt on the same endpoint takes the traffic, and waits (no L4 left).
    second = RequestIdentity(first.dag_id, first.task_id, first.run_id, attempt=2)
    waiting = submit(adapter, second)
    assert waiting.phase is Phase.WAITING
    assert backend.release(waiting.name, wait=True)
    assert backend.get_status(waiting.name).phase is Phase.CANCELLED  # type: ignore[union-attr]
    # The first, deployed beside nothing now, undeployed from the event loop.
    assert asyncio.run(backend.arelease(deployed.name))
    assert waiting_and_deployed(emulator) == []
    pool = emulator.control.capacity()[L4]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    # The attempt's clean-up deletes the endpoint it made, nothing being left on it.
    adapter.release_failed(backend.get_status(waiting.name), Placement("us-central1"))  # type: ignore[arg-type]
    assert emulator.control.vertex_deployments() == []
    adapter.release_failed(
        backend.get_status(waiting.name) or waiting, Placement("us-central1")
    )  # gone: fine


def test_the_teardown_undeploys_the_model_without_traffic_first(emulator_env: Any) -> None:
    emulator = emulator_env({L4: 8})
    adapter = VertexDeploymentAdapter(deploy_op("two"))
    backend = adapter.backend()
    identity = RequestIdentity("inference_on_emulator", "two", f"manual__{time.monotonic_ns()}")
    one = submit(adapter, identity)
    two = submit(adapter, RequestIdentity(identity.dag_id, identity.task_id, identity.run_id, attempt=2))
    deadline = time.monotonic() + 30
    while any((backend.get_status(s.name) or s).state != "DEPLOYED" for s in (one, two)):
        assert time.monotonic() < deadline, waiting_and_deployed(emulator)
        time.sleep(0.1)
    endpoint = backend.endpoint_name(identity)
    # Each undeploy hands its traffic on, so neither is refused for the traffic it carries.
    for model_id in sorted(backend.deployed_ids(endpoint) or ()):
        assert backend.undeploy(endpoint, model_id)
    assert backend.deployed_ids(endpoint) == set()
    assert backend.delete_endpoint(endpoint)


def batch_op(**kwargs: Any) -> CreateVertexAIFlexStartBatchPredictionOperator:
    params: dict[str, Any] = {
        "task_id": "score",
        "project_id": PROJECT,
        "region": "us-central1",
        "model": MODEL,
        "machine_type": "g2-standard-48",
        "gcs_source": "gs://bucket/in/*.jsonl",
        "gcs_destination_prefix": "gs://bucket/out",
        "max_wait": 30,
        "max_run": timedelta(hours=1),
        "poll_interval": 0.2,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateVertexAIFlexStartBatchPredictionOperator(**params)


def test_a_failing_batch_job_fails_its_task_as_a_workload_failure(emulator_env: Any) -> None:
    emulator = emulator_env({L4: 4})
    op = batch_op(labels={"dws-emulator-run-seconds": "1", "dws-emulator-exit-code": "3"})
    with pytest.raises(WorkloadFailedError, match="workload failed"):
        op.execute({"ti": FakeTI(op.task_id)})
    [job] = emulator.control.requests()
    assert job["state"] == "JOB_STATE_FAILED" and job["start_time"] is not None


def test_a_batch_job_still_queued_at_the_provider_s_max_wait_is_cancelled(emulator_env: Any) -> None:
    emulator = emulator_env({L4: 0})
    op = batch_op(max_wait=2)
    with pytest.raises(CapacityNotObtainedError, match="no capacity within max wait 0:00:02"):
        op.execute({"ti": FakeTI(op.task_id)})
    [job] = emulator.control.requests()
    assert job["state"] == "JOB_STATE_CANCELLED" and job["start_time"] is None
