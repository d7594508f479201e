"""Ring 2: the Kueue Job backend, adapter, trigger and operator against a live dws-emulator, through
the unmodified ``kubernetes`` (sync) and ``kubernetes_asyncio`` clients; nothing of the provider is
mocked.

Each test runs a private in-process emulator whose clock is a :class:`FakeClock`: every call ticks
the model first, so a transition that is due happens on the next call, and time passes only when
the test moves it (a run of ten minutes, Kueue's retry backoff, a max run that passes).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws.backends.kueue import KueueJobBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError, WorkloadFailedError
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.runtime.gke_kueue import KueueJobAdapter
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers.capacity_request import first_event
from dws_emulator.testing import FakeClock, InProcessEmulator

pytestmark = pytest.mark.emulator

H100 = "us-central1/NVIDIA_H100_80GB"
RUN_SECONDS = 600
_runs = itertools.count()


class FakeTI:
    """Just enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str) -> None:
        self.dag_id = "kueue_on_emulator"
        self.task_id = task_id
        self.run_id = f"manual__{next(_runs)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def who(task_id: str = "train", **kwargs: Any) -> RequestIdentity:
    return RequestIdentity("kueue_on_emulator", task_id, f"run{next(_runs)}_{time.monotonic_ns()}", **kwargs)


def operator(task_id: str = "train", exit_code: int = 0, **kwargs: Any) -> CreateGKEQueuedJobOperator:
    params: dict[str, Any] = {
        "project_id": "emu-project",
        "location": "us-central1",
        "cluster_name": "dws-cluster",
        "queue_name": "dws-queue",
        "image": "us-docker.pkg.dev/p/r/train:1",
        "gpus": 8,
        "accelerator": "nvidia-h100-80gb",
        "parallelism": 2,
        "env_vars": {"DWS_EMULATOR_RUN_SECONDS": str(RUN_SECONDS), "DWS_EMULATOR_EXIT_CODE": str(exit_code)},
        "max_wait": timedelta(hours=1),
        "poll_interval": 0.05,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateGKEQueuedJobOperator(task_id=task_id, **params)


def wire_kueue(emulator: InProcessEmulator) -> None:
    """Kueue on the emulated cluster, with the queues of GKE's guide, unless the emulator has it."""
    from dws_emulator.kube.kueue import Kueue
    from dws_emulator.kube.kueue_queues import seed

    cluster = emulator.server.state.kube.cluster
    with cluster.core.lock:
        if not any(isinstance(c, Kueue) for c in cluster.controllers):
            kueue = Kueue(cluster)
            cluster.controllers.append(kueue)
            cluster.admission.append(kueue.admit)
        seed(cluster.store)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator_env(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    def start(
        capacity: dict[str, int] | None = None, kueue_versions: tuple[str, ...] | None = None
    ) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity or {H100: 16}, clock=clock)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        wire_kueue(emulator)
        if kueue_versions:  # an older Kueue: v1beta1 only
            emulator.server.state.kube.cluster.kueue_versions = kueue_versions
        return emulator

    return start


def backend() -> KueueJobBackend:
    return KueueJobBackend("emu-project", "us-central1", cluster_name="dws-cluster", namespace="default")


def workloads(b: KueueJobBackend) -> list[dict[str, Any]]:
    return b.list_workloads()


# -- the backend through the sync client --------------------------------------------------------------


#: What the cluster's Kueue serves (Kueue 0.15 and newer; before 0.15) -> the version read.
KUEUE_RELEASES = pytest.mark.parametrize(
    ("served", "read_at"), [(("v1beta2", "v1beta1"), "v1beta2"), (("v1beta1",), "v1beta1")]
)


@KUEUE_RELEASES
def test_a_job_is_queued_admitted_runs_and_completes(
    emulator_env: Any, clock: FakeClock, served: tuple[str, ...], read_at: str
) -> None:
    emulator_env(kueue_versions=served)
    b, op, identity = backend(), operator(), who()
    status, created = b.submit(KueueJobAdapter(op).build(identity), identity)
    assert created and status.name == identity.queued_resource_id()
    job = b.get(status.name)
    assert job is not None
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queue"
    assert job["metadata"]["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == str(
        7 * 24 * 3600
    )
    now = b.get_status(status.name)
    assert now is not None
    # capacity is free: Kueue made the Workload, its ProvisioningRequest was provisioned, the Job runs
    assert (now.state, now.phase) == ("Running", Phase.RUNNING), now.outcome.message
    assert now.details["workload"]
    [workload] = [w for w in workloads(b) if w["metadata"]["name"] == now.details["workload"]]
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
    clock.advance(RUN_SECONDS + 1)
    done = b.get_status(status.name)
    assert done is not None
    assert (done.state, done.phase) == ("Complete", Phase.SUCCEEDED), done.outcome.message
    assert done.details["succeeded"] == 2
    assert done.timings.run_seconds is not None and done.timings.run_seconds >= RUN_SECONDS
    assert b.find(identity)[0].name == status.name  # by the identity label
    assert b.workload_version == read_at and workload["apiVersion"] == f"kueue.x-k8s.io/{read_at}"


def test_a_second_submit_adopts_and_release_takes_the_workload_and_request_with_it(emulator_env: Any) -> None:
    emulator = emulator_env()
    b, identity = backend(), who()
    manifest = KueueJobAdapter(operator()).build(identity)
    first, created = b.submit(manifest, identity)
    again, created_again = b.submit(manifest, identity)
    assert created and not created_again and again.name == first.name
    assert len(b.find(identity)) == 1
    workload = first.details.get("workload") or b.get_status(first.name).details["workload"]  # type: ignore[union-attr]
    assert b.release(first.name, wait=True) is True
    assert b.get_status(first.name) is None
    assert workload not in {w["metadata"]["name"] for w in workloads(b)}
    assert b.release(first.name) is False  # gone is fine
    requests = [r for r in emulator.control.requests() if r.get("kind") == "ProvisioningRequest"]
    assert all(r.get("state") != "PROVISIONED" for r in requests), requests


def test_a_job_that_never_fits_is_rejected_with_kueues_reason_after_its_retries(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator_env({H100: 8})
    b, identity = backend(), who()
    # 2 pods x 8 H100 on a pool that can ever hold 8: the request fails at once, Kueue retries it
    status, _ = b.submit(KueueJobAdapter(operator()).build(identity), identity)
    seen = set()
    for _ in range(40):
        now = b.get_status(status.name)
        assert now is not None
        seen.add(now.state)
        if now.phase.terminal:
            break
        clock.advance(120)
    assert now.state == "Rejected", (seen, now.outcome.message)
    assert now.phase is Phase.NOT_OBTAINED
    assert now.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert "Rejected" in now.outcome.message
    assert "AwaitingCapacity" in seen or "Requeued" in seen or "Queued" in seen
    adapter = KueueJobAdapter(operator())
    error = adapter.error(now, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(error, CapacityNotObtainedError)
    adapter.release_failed(now, Placement("us-central1"))
    assert b.get_status(status.name) is None  # nothing left behind


def test_a_revoked_capacity_is_preempted_not_a_workload_failure(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env()
    b, identity = backend(), who()
    op = operator(max_run=timedelta(minutes=5))  # the pods would run 10 minutes
    status, _ = b.submit(KueueJobAdapter(op).build(identity), identity)
    running = b.get_status(status.name)
    assert running is not None and running.phase is Phase.RUNNING, running
    clock.advance(301)
    ended = b.get_status(status.name)
    assert ended is not None
    assert ended.state == "CapacityRevoked", (ended.state, ended.outcome.message)
    assert ended.outcome.failure is FailureKind.PREEMPTED


def test_a_failed_job_is_the_workloads_failure(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env()
    b, identity = backend(), who()
    status, _ = b.submit(KueueJobAdapter(operator(exit_code=3)).build(identity), identity)
    running = b.get_status(status.name)  # a call ticks the model: the pods start now
    assert running is not None and running.phase is Phase.RUNNING
    clock.advance(RUN_SECONDS + 1)
    ended = b.get_status(status.name)
    assert ended is not None and ended.state == "Failed", ended.state if ended else None
    assert ended.outcome.failure is FailureKind.WORKLOAD_FAILED
    assert isinstance(
        KueueJobAdapter(operator()).error(ended, Placement("us-central1"), timedelta(hours=1)),
        WorkloadFailedError,
    )


# -- the async half and the trigger ------------------------------------------------------------------


@KUEUE_RELEASES
def test_the_async_client_lists_reads_and_releases(
    emulator_env: Any, clock: FakeClock, served: tuple[str, ...], read_at: str
) -> None:
    emulator_env({H100: 32}, kueue_versions=served)
    b = backend()
    names = []
    for task in ("a", "b"):
        identity = who(task)
        names.append(b.submit(KueueJobAdapter(operator(task)).build(identity), identity)[0].name)

    async def run() -> tuple[Any, Any, bool, bool]:
        ab = backend()
        listed = await ab.alist_live(set(names))
        one = await ab.aget_status(names[0])
        released = await ab.arelease(names[1])
        again = await ab.arelease(names[1])
        assert ab.workload_version == read_at  # asked of the cluster's discovery, from the loop
        return listed, one, released, again

    listed, one, released, again = asyncio.run(run())
    assert set(listed) == set(names)
    assert {s.phase for s in listed.values()} == {Phase.RUNNING}  # 32 GPUs: both fit
    assert one.name == names[0] and one.phase is Phase.RUNNING
    assert (released, again) == (True, False)
    assert b.get_status(names[1]) is None


def test_the_trigger_deletes_a_job_still_waiting_at_its_max_wait(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env({H100: 16})
    clock.advance(-3600)  # the emulator's timestamps an hour back: the max wait has passed at once
    b = backend()
    blocker = who("blocker")
    b.submit(KueueJobAdapter(operator("blocker")).build(blocker), blocker)  # takes all 16 GPUs
    identity = who("late")
    adapter = KueueJobAdapter(operator("late", max_wait=timedelta(minutes=10)))
    status, _ = b.submit(adapter.build(identity), identity)
    waiting = b.get_status(status.name)
    assert waiting is not None and waiting.phase is Phase.WAITING, waiting
    trigger = AttemptLoop(adapter.op, adapter).trigger(
        waiting, Placement("us-central1"), timedelta(minutes=10), {}
    )
    event = asyncio.run(first_event(trigger))
    assert event["phase"] == Phase.NOT_OBTAINED.value
    assert b.get_status(status.name) is None  # the provider deleted it


# -- the operator ---------------------------------------------------------------------------------------


def test_the_operator_runs_the_job_and_returns_its_result(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env()
    ti = FakeTI("nd_success")
    op = operator(ti.task_id, env_vars={"DWS_EMULATOR_RUN_SECONDS": "0"})
    result = op.execute({"ti": ti})
    assert result["status"] == "Complete"
    assert result["name"] == RequestIdentity(ti.dag_id, ti.task_id, ti.run_id).queued_resource_id()
    assert (result["namespace"], result["succeeded"], result["failed"]) == ("default", 2, 0)
    assert result["wait_seconds"] is not None and result["run_seconds"] is not None
    assert ti.xcom["job_name"] == result["name"]
    assert ti.xcom["dws_request"]["phase"] == "succeeded"
    assert ti.xcom["dws_gke_job_link"].endswith(f"/default/{result['name']}/details?project=emu-project")


def test_the_operator_fails_a_job_that_never_fits_and_leaves_nothing_behind(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator_env({H100: 8})
    ti = FakeTI("nd_never")
    op = operator(ti.task_id)
    import threading

    stop = threading.Event()

    def advance() -> None:  # Kueue's retry backoff passes while the worker waits
        while not stop.wait(0.01):
            clock.advance(10)

    thread = threading.Thread(target=advance, daemon=True)
    thread.start()
    try:
        with pytest.raises(CapacityNotObtainedError, match="LocalQueue dws-queue"):
            op.execute({"ti": ti})
    finally:
        stop.set()
        thread.join()
    assert backend().find(RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)) == []
