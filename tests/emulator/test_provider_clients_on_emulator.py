"""The provider's own client plumbing against the emulator: its REST client factory reaches the REST
front, and its Vertex AI backend rides out injected UNAVAILABLE errors (moved here from the
emulator's tests, which import nothing of the provider)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from google.cloud.aiplatform_v1 import types

from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
from airflow_provider_dws.hooks.base import emulator_client
from airflow_provider_dws.scheduling.identity import RequestIdentity

pytestmark = pytest.mark.emulator

JOBS = "google.cloud.aiplatform.v1.JobService"


def cpu_job(labels: dict[str, str]) -> types.CustomJob:
    """A job without accelerators: it runs at once and needs no capacity."""
    return types.CustomJob(
        display_name="faulty",
        labels=labels,
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(machine_type="n1-standard-4"),
                    container_spec=types.ContainerSpec(
                        image_uri="us-docker.pkg.dev/p/r/train:1",
                        env=[types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value="30")],
                    ),
                )
            ]
        ),
    )


def test_the_providers_emulator_client_reaches_the_rest_front(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory()
    client = emulator_client(
        compute_v1.InstanceTemplatesClient, emulator.server.rest_address, transport="rest"
    )
    with pytest.raises(exceptions.NotFound):
        client.get(project="compute-test", instance_template="nope")


def test_provider_backend_survives_unavailable(
    dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The seed fixes which calls fail: here the first create (so submit looks up and retries)
    # and one get.
    emulator = dws_emulator_server_factory(seed=1, faults=[f"{JOBS}/*=UNAVAILABLE@0.3"])
    monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
    backend = VertexCustomJobBackend("faults-project", "us-central1")
    identity = RequestIdentity("dag", "task", f"run-{time.monotonic_ns()}")
    job, _ = backend.submit(cpu_job(identity.labels()), identity)
    for _ in range(3):
        assert backend.get_status(job.name).phase.name in {"WAITING", "RUNNING"}
    jobs = [r for r in emulator.control.requests() if r["project"] == "faults-project"]
    assert [r["name"] for r in jobs] == [job.name]
    report = emulator.control.faults()
    assert report["injected"] == {
        f"{JOBS}/CreateCustomJob": {"UNAVAILABLE": 1},
        f"{JOBS}/GetCustomJob": {"UNAVAILABLE": 1},
    }
