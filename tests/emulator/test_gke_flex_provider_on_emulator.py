"""Ring 2: the flex-start Job backend, adapter, trigger and operator against a live dws-emulator,
through the unmodified ``kubernetes`` (sync) and ``kubernetes_asyncio`` clients; nothing of the
provider is mocked.

Each test runs a private in-process emulator whose clock is a :class:`FakeClock`: every call ticks
the model first, and time passes only when the test moves it (a run, a node's max run).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends.gke_flex import FlexStartJobBackend
from airflow_provider_dws.exceptions import CapacityPreemptedError, WorkloadFailedError
from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
from airflow_provider_dws.runtime.gke_flex import FlexStartJobAdapter
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers.capacity_request import first_event
from dws_emulator.testing import FakeClock, InProcessEmulator

pytestmark = pytest.mark.emulator

H100 = "us-central1/NVIDIA_H100_80GB"
V5E = "us-central1-a/v5litepod"
RUN_SECONDS = 600
_runs = itertools.count()


class FakeTI:
    """Just enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str) -> None:
        self.dag_id = "flex_on_emulator"
        self.task_id = task_id
        self.run_id = f"manual__{next(_runs)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def who(task_id: str = "evaluate") -> RequestIdentity:
    return RequestIdentity("flex_on_emulator", task_id, f"run{next(_runs)}_{time.monotonic_ns()}")


def operator(task_id: str = "evaluate", exit_code: int = 0, **kwargs: Any) -> CreateGKEFlexStartJobOperator:
    params: dict[str, Any] = {
        "project_id": "emu-project",
        "location": "us-central1",
        "cluster_name": "dws-cluster",
        "image": "us-docker.pkg.dev/p/r/eval:1",
        "gpus": 8,
        "accelerator": "nvidia-h100-80gb",
        "parallelism": 2,
        "env_vars": {"DWS_EMULATOR_RUN_SECONDS": str(RUN_SECONDS), "DWS_EMULATOR_EXIT_CODE": str(exit_code)},
        "max_wait": timedelta(hours=1),
        "poll_interval": 0.05,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateGKEFlexStartJobOperator(task_id=task_id, **params)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator_env(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    def start(capacity: dict[str, int] | None = None) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity or {H100: 16, V5E: 8}, clock=clock)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        return emulator

    return start


def backend() -> FlexStartJobBackend:
    return FlexStartJobBackend("emu-project", "us-central1", cluster_name="dws-cluster", namespace="default")


def nodes(emulator: InProcessEmulator, job: str) -> list[dict[str, Any]]:
    """The emulator's flex-start node records of a Job's pods."""
    return [
        r
        for r in emulator.control.requests()
        if r["kind"] == "FlexStartNode" and r["labels"].get("batch.kubernetes.io/job-name") == job
    ]


def test_a_job_waits_for_every_node_one_at_a_time_then_runs_and_completes(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env({H100: 8})  # one node's worth: the second pod waits for the first's
    b, identity = backend(), who()
    status, created = b.submit(FlexStartJobAdapter(operator()).build(identity), identity)
    assert created and status.name == identity.queued_resource_id()
    half = b.get_status(status.name)
    assert half is not None and (half.state, half.phase) == ("WaitingForNodes", Phase.WAITING), half
    assert half.outcome.message.startswith("1 of 2 pods have a node"), half.outcome.message
    assert "waiting for flex-start capacity" in half.outcome.message
    assert sorted(r["state"] for r in nodes(emulator, status.name)) == ["RUNNING", "WAITING"]
    emulator.control.set_capacity({H100: 16})
    running = b.get_status(status.name)
    assert running is not None and (running.state, running.phase) == ("Running", Phase.RUNNING), running
    assert len(running.details["nodes"]) == 2 and running.timings.started is not None
    clock.advance(RUN_SECONDS + 1)
    done = b.get_status(status.name)
    assert done is not None and done.phase is Phase.SUCCEEDED, done.outcome.message
    assert (done.details["succeeded"], len(done.details["nodes"])) == (2, 2)
    assert b.find(identity)[0].name == status.name  # by the identity label


def test_deleting_a_job_still_waiting_withdraws_its_node_requests(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env({H100: 8})
    b, identity = backend(), who()
    manifest = FlexStartJobAdapter(operator()).build(identity)
    first, _ = b.submit(manifest, identity)
    again, created_again = b.submit(manifest, identity)
    assert not created_again and again.name == first.name and len(b.find(identity)) == 1
    assert b.get_status(first.name).state == "WaitingForNodes"  # type: ignore[union-attr]
    assert b.release(first.name, wait=True) is True
    assert b.get_status(first.name) is None and b.release(first.name) is False
    records = nodes(emulator, first.name)
    assert sorted(r["state"] for r in records) == ["RUNNING", "WITHDRAWN"]
    [up] = [r for r in records if r["state"] == "RUNNING"]
    assert up["active_pods"] == []  # empty: the autoscaler scales it down
    emulator.control.set_kube_flex_start(scale_down_seconds=0)
    clock.advance(1)
    assert [r["state"] for r in nodes(emulator, first.name) if r["state"] != "WITHDRAWN"] == ["SCALED_DOWN"]
    assert emulator.control.capacity()[H100]["in_use"] == 0


def test_a_node_at_its_max_run_is_capacity_lost_not_a_workload_failure(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env()
    b, identity = backend(), who()
    adapter = FlexStartJobAdapter(operator(parallelism=1))
    status, _ = b.submit(adapter.build(identity), identity)
    assert b.get_status(status.name).phase is Phase.RUNNING  # type: ignore[union-attr]
    [node] = nodes(emulator, status.name)
    emulator.control.expire_flex_start_node(node["node"])
    ended = b.get_status(status.name)
    assert ended is not None and ended.state == "CapacityRevoked", (ended.state, ended.outcome.message)
    assert (
        ended.outcome.failure is FailureKind.PREEMPTED and "imminent node shutdown" in ended.outcome.message
    )
    assert isinstance(
        adapter.error(ended, Placement("us-central1"), timedelta(hours=1)), CapacityPreemptedError
    )
    adapter.release_failed(ended, Placement("us-central1"))
    assert b.get_status(status.name) is None


def test_a_failed_job_is_the_workloads_failure(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env()
    b, identity = backend(), who()
    adapter = FlexStartJobAdapter(operator(exit_code=3))
    status, _ = b.submit(adapter.build(identity), identity)
    assert b.get_status(status.name).phase is Phase.RUNNING  # type: ignore[union-attr]
    clock.advance(RUN_SECONDS + 1)
    ended = b.get_status(status.name)
    assert ended is not None and ended.state == "Failed", ended.state if ended else None
    assert isinstance(adapter.error(ended, Placement("us-central1"), timedelta(hours=1)), WorkloadFailedError)


def test_a_tpu_single_host_slice_runs_on_the_tpu_flex_start_pool(emulator_env: Any, clock: FakeClock) -> None:
    emulator = emulator_env()
    b, identity = backend(), who()
    op = operator(accelerator=None, gpus=None, tpu="tpu-v5-lite-podslice", tpu_topology="2x4", parallelism=1)
    status, _ = b.submit(FlexStartJobAdapter(op).build(identity), identity)
    running = b.get_status(status.name)
    assert running is not None and running.phase is Phase.RUNNING, running.outcome.message
    assert running.description.startswith("1 pod x 8 tpu-v5-lite-podslice 2x4")
    [node] = nodes(emulator, status.name)
    assert (node["accelerator_type"], node["accelerator_count"], node["tpu_topology"]) == (
        "v5litepod",
        8,
        "2x4",
    )


def test_the_async_client_lists_reads_and_releases(emulator_env: Any) -> None:
    emulator_env({H100: 32})
    b = backend()
    names = []
    for task in ("a", "b"):
        identity = who(task)
        names.append(b.submit(FlexStartJobAdapter(operator(task)).build(identity), identity)[0].name)

    async def run() -> tuple[Any, Any, bool, bool]:
        ab = backend()
        listed = await ab.alist_live(set(names))
        one = await ab.aget_status(names[0])
        released = await ab.arelease(names[1])
        again = await ab.arelease(names[1])
        await ab.aclose()
        return listed, one, released, again

    listed, one, released, again = asyncio.run(run())
    assert set(listed) == set(names) and {s.phase for s in listed.values()} == {Phase.RUNNING}
    assert one.name == names[0] and len(one.details["nodes"]) == 2
    assert (released, again) == (True, False)
    assert b.get_status(names[1]) is None


def test_the_trigger_deletes_a_job_not_all_on_nodes_at_its_max_wait(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env({H100: 8})
    clock.advance(-3600)  # the emulator's timestamps an hour back: the max wait has passed at once
    b, identity = backend(), who()
    adapter = FlexStartJobAdapter(operator(max_wait=timedelta(minutes=10)))
    status, _ = b.submit(adapter.build(identity), identity)
    waiting = b.get_status(status.name)
    assert waiting is not None and waiting.phase is Phase.WAITING and waiting.details["scheduled"] == 1
    trigger = AttemptLoop(adapter.op, adapter).trigger(
        waiting, Placement("us-central1"), timedelta(minutes=10), {}
    )
    event = asyncio.run(first_event(trigger))
    assert event["phase"] == Phase.NOT_OBTAINED.value
    assert b.get_status(status.name) is None  # deleted, pods and all
    assert "WAITING" not in {r["state"] for r in nodes(emulator, status.name)}


def test_the_operator_runs_the_job_and_returns_its_result(emulator_env: Any) -> None:
    emulator_env()
    ti = FakeTI("nd_success")
    op = operator(ti.task_id, env_vars={"DWS_EMULATOR_RUN_SECONDS": "0"})
    result = op.execute({"ti": ti})
    assert result["status"] == "Complete"
    assert result["name"] == RequestIdentity(ti.dag_id, ti.task_id, ti.run_id).queued_resource_id()
    assert (result["namespace"], result["succeeded"], result["failed"], len(result["nodes"])) == (
        "default",
        2,
        0,
        2,
    )
    assert ti.xcom["job_name"] == result["name"]
    assert ti.xcom["dws_request"]["phase"] == "succeeded"
    assert ti.xcom["dws_gke_flex_job_link"].endswith(f"/default/{result['name']}/details?project=emu-project")


class ReleaseTI:
    """The release task's instance: its XCom pushes, and no XCom of the setup (it wrote none)."""

    dag_id, map_index, task_id, try_number = "flex_on_emulator", -1, "release", 1

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, **_: Any) -> Any:
        return None

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_a_job_handed_over_runs_on_until_its_release_deletes_it(emulator_env: Any, clock: FakeClock) -> None:
    from airflow_provider_dws.operators.gke_flex import DeleteGKEFlexStartJobOperator
    from airflow_provider_dws.records import XCOM_KEY, read_records
    from airflow_provider_dws.runtime.gke_flex import release_flex_jobs

    emulator = emulator_env()
    ti = FakeTI("serve")
    op = operator(ti.task_id, wait_until_finished=False)  # the pods would run 10 minutes
    result = op.execute({"ti": ti})
    # Returned once both pods had their nodes: the Job runs on, handed over.
    assert (result["status"], len(result["nodes"]), result["succeeded"]) == ("Running", 2, 0)
    assert result["wait_seconds"] is not None and result["run_seconds"] is None
    name = result["name"]
    b = backend()
    assert b.get_status(name).phase is Phase.RUNNING  # type: ignore[union-attr]
    release = DeleteGKEFlexStartJobOperator(
        task_id="release",
        setup_task_id="serve",
        project_id="emu-project",
        location="us-central1",
        cluster_name="dws-cluster",
        namespace="default",
    )
    releasing = ReleaseTI(ti.run_id)
    released = release_flex_jobs(release, {"ti": releasing})  # type: ignore[arg-type]
    assert released == {"released": [name], "deleted": True, "state_before": "Running"}
    assert b.get_status(name) is None
    assert all(not r["active_pods"] for r in nodes(emulator, name))  # emptied: they scale down
    (record,) = read_records(releasing.pushed[XCOM_KEY])
    assert (record.api, record.kind, record.holds) == ("gke_flex_start_job", "GKE flex-start Job", False)
    # Released again: nothing left to do.
    assert release_flex_jobs(release, {"ti": ReleaseTI(ti.run_id)})["released"] == []  # type: ignore[arg-type]
