"""Ring 2: ``failover=Advised(...)`` on the Compute Engine and Cloud Batch operators against a live dws-emulator:
the first attempt goes where the capacity advice ranks best (the emulator's zone factors set by the
test); an advice that fails leaves the written order; the deferrable path hands the advised
placement to its trigger. Parse-time rules too."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.policies import Advised
from airflow_provider_dws.triggers.submit import Submission
from tests.emulator.test_compute_instances_on_emulator import TI
from tests.emulator.test_provider_compute_on_emulator import operator as mig_operator

pytestmark = pytest.mark.emulator

REGION = "us-central1"
H100 = f"{REGION}/NVIDIA_H100_80GB"
FACTORS = {f"{REGION}-a": 0.2, f"{REGION}-b": 0.9, f"{REGION}-c": 0.5}


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    def start(faults: list[str] | None = None) -> Any:
        emu = dws_emulator_server_factory({H100: 32}, faults=faults)
        emu.control.set_capacity_advice(FACTORS)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        return emu

    return start


def vms(**kwargs: Any) -> CreateComputeFlexStartInstancesOperator:
    args: dict[str, Any] = {
        "task_id": "vms",
        "project_id": "emu-vms",
        "zone": f"{REGION}-a",
        "count": 1,
        "machine_type": "a3-highgpu-8g",
        "max_run": timedelta(hours=1),
        "max_wait": timedelta(minutes=10),
        "poll_interval": 0.2,
        "failover": Advised(f"{REGION}-b", f"{REGION}-c"),
        "deferrable": False,
    }
    args.update(kwargs)
    return CreateComputeFlexStartInstancesOperator(**args)


def test_the_first_attempt_goes_where_the_advice_ranks_best(
    emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    emu = emulator()
    result = vms().execute({"ti": TI("vms")})
    assert result["zone"] == f"{REGION}-b"
    assert emu.calls("compute.advice.capacity") == 1  # one region: one call for every candidate
    line = (
        "Placements by capacity advice: us-central1-b (advice 0.90), us-central1-c (advice 0.50), "
        "us-central1-a (advice 0.20); trying us-central1-b"
    )
    assert line in capsys.readouterr().out  # the task log (structlog writes it to stdout here)


def test_an_advice_that_fails_leaves_the_written_order(emulator: Any) -> None:
    emulator(faults=["compute.advice.capacity=UNAVAILABLE"])
    assert vms().execute({"ti": TI("vms")})["zone"] == f"{REGION}-a"


def test_the_mig_operator_is_advised_too(emulator: Any) -> None:
    emulator()
    task = mig_operator(
        resize_by=1, zone=f"{REGION}-a", failover=Advised(f"{REGION}-c"), deferrable=False, poll_interval=0.2
    )
    result = task.execute({"ti": TI("ask_for_vms")})
    assert result["location"] == f"{REGION}-c"


def test_a_deferrable_task_hands_the_advised_placement_to_its_trigger(emulator: Any) -> None:
    emulator()
    with pytest.raises(TaskDeferred) as deferred:
        vms(deferrable=True).execute({"ti": TI("vms")})
    submission = Submission.from_dict(deferred.value.trigger.submit)
    assert submission.lookup[0]["placement"]["location"] == f"{REGION}-b"
    assert submission.lookup[0]["backend_spec"]["location"] == f"{REGION}-b"


def test_advice_is_compute_engines_and_needs_no_retry() -> None:
    vms(failover=Advised(f"{REGION}-b"))  # no capacity_retry: the first attempt is advised
    with pytest.raises(ValueError, match="capacity advice is Compute Engine's"):
        CreateVertexAIFlexStartJobOperator(
            task_id="v",
            project_id="my-project",
            region=REGION,
            worker_pool_specs=[
                {
                    "machine_spec": {
                        "machine_type": "a3-highgpu-8g",
                        "accelerator_type": "NVIDIA_H100_80GB",
                        "accelerator_count": 8,
                    },
                    "replica_count": 1,
                    "container_spec": {"image_uri": "img:1"},
                }
            ],
            failover=Advised("us-east4"),
            capacity_retry=1,
        )


def test_a_batch_job_goes_to_the_region_the_advice_ranks_best(
    monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cloud Batch picks its zone in a region: each region scores its best zone for the 4 VMs the
    job runs at once. us-central1 has no L4 free, us-east4 has 8: the job goes to us-east4 first."""
    from tests.emulator.test_batch_policies_on_emulator import operator as batch_operator

    emu = dws_emulator_server_factory({"us-central1/NVIDIA_L4": 0, "us-east4/NVIDIA_L4": 8})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
    result = batch_operator("infer", failover=Advised("us-east4"), max_wait=timedelta(minutes=5)).execute(
        {"ti": TI("infer")}
    )
    assert "/locations/us-east4/jobs/" in result["name"]
    assert emu.calls("compute.advice.capacity") == 2  # one per region
    assert re.search(
        r"Placements by capacity advice: us-east4 \(advice 0\.[5-9]\d\), us-central1 \(advice 0\.00\); trying us-east4",
        capsys.readouterr().out,
    )
