"""The request records the attempt loop writes (``dws_requests``), each adapter's record facts,
the TPU release's record, and the metrics' names and tags (a fake ``Stats`` records the calls)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws import metrics
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.tpu_release import DeleteTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.records import XCOM_KEY, RequestRecord, read_records
from airflow_provider_dws.runtime import recording
from airflow_provider_dws.runtime.tpu import TPU_SLICES
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement


@pytest.fixture(autouse=True)
def _worker_submits(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the attempt loop's worker-side submission (every adapter that does not hand
    its request to the trigger, and ``deferrable=False``), with Vertex AI as the example adapter;
    its trigger-side submission is ``tests/unit/test_trigger_submission.py``'s."""
    from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter

    monkeypatch.setattr(VertexFlexStartAdapter, "submits_in_trigger", False)


H100_POOL = {
    "machine_spec": {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    },
    "replica_count": 2,
    "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/train:1"},
}
WORKER_POOL = {**H100_POOL, "replica_count": 1}
JOB = "projects/my-project/locations/us-central1/customJobs/{}"
SUBMITTED = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


class TI:
    """A task instance whose XComs live in a dict shared by "processes" (operator instances)."""

    dag_id = "d"
    task_id = "t"
    run_id = "r"
    map_index = -1

    def __init__(self, store: dict[tuple[str, str], Any] | None = None, task_id: str = "t") -> None:
        self.task_id = task_id
        self.try_number = 1
        self.start_date = SUBMITTED
        self.store = store if store is not None else {}
        self.pulls: list[dict[str, Any]] = []

    @property
    def xcom(self) -> dict[str, Any]:
        return {key: value for (task, key), value in self.store.items() if task == self.task_id}

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, *, key: str, task_ids: str | list[str], map_indexes: Any = "every") -> Any:
        self.pulls.append({"key": key, "task_ids": task_ids, "map_indexes": map_indexes})
        if isinstance(task_ids, list):  # every map index of each task: one value each here
            return [self.store.get((task_id, key)) for task_id in task_ids]
        return self.store.get((task_ids, key))


def status(
    name: str,
    phase: Phase,
    failure: FailureKind | None = None,
    started: datetime | None = None,
    finished: datetime | None = None,
) -> RequestStatus:
    return RequestStatus(
        name=name,
        state=phase.value.upper(),
        outcome=Outcome(phase, failure, "the message"),
        timings=RequestTimings(submitted=SUBMITTED, started=started, finished=finished),
    )


class FakeStats:
    """Stands in for ``airflow.sdk.observability.stats.Stats``: what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any, dict[str, str]]] = []

    def incr(self, name: str, count: int = 1, *, tags: dict[str, str]) -> None:
        self.sent.append(("incr", name, count, tags))

    def gauge(self, name: str, value: float, *, tags: dict[str, str]) -> None:
        self.sent.append(("gauge", name, value, tags))

    def timing(self, name: str, dt: timedelta, *, tags: dict[str, str]) -> None:
        self.sent.append(("timing", name, dt, tags))


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> FakeStats:
    fake = FakeStats()
    monkeypatch.setattr(metrics, "_stats", lambda: fake)
    return fake


def vertex(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    params: dict[str, Any] = {
        "task_id": "t",
        "project_id": "my-project",
        "region": "us-central1",
        "worker_pool_specs": [copy.deepcopy(H100_POOL), copy.deepcopy(WORKER_POOL)],
        "deferrable": True,
    }
    return CreateVertexAIFlexStartJobOperator(**{**params, **kwargs})


def stub(op: Any, monkeypatch: pytest.MonkeyPatch, submit_as: list[str]) -> list[int]:
    """The adapter finds nothing and submits ``submit_as`` names in turn (no API call)."""
    submitted: list[int] = []
    adapter = op.adapter()
    names = iter(submit_as)

    def submit(context: Any, identity: Any, placement: Any, max_wait: Any) -> RequestStatus:
        submitted.append(identity.attempt)
        return status(next(names), Phase.WAITING)

    monkeypatch.setattr(adapter, "find", lambda context, identity: None)
    monkeypatch.setattr(adapter, "submit", submit)
    monkeypatch.setattr(adapter, "result", lambda context, st: st.name)
    return submitted


def records_of(ti: TI) -> list[RequestRecord]:
    return read_records(ti.xcom[XCOM_KEY])


# -- record facts per adapter -----------------------------------------------------------------------


def test_vertex_facts_count_the_gpus_of_every_pool_and_replica() -> None:
    op = vertex()
    facts = op.adapter().record_facts(status(JOB.format(1), Phase.WAITING), Placement(location="us-central1"))
    assert facts == {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 24,  # 8 x (2 + 1) replicas
        "machine_type": "a3-highgpu-8g",
        "pricing_model": "flex_start",
        "console_url": "https://console.cloud.google.com/vertex-ai/locations/us-central1/training/1/cpu"
        "?project=my-project",
    }


def test_vertex_facts_follow_a_failover_machine() -> None:
    op = vertex(worker_pool_specs=[copy.deepcopy(H100_POOL)])
    placement = Placement(
        location="us-east4", machine_type="a2-highgpu-1g", accelerator_type="NVIDIA_TESLA_A100"
    )
    facts = op.adapter().record_facts(
        status(JOB.format(2).replace("us-central1", "us-east4"), Phase.WAITING), placement
    )
    assert facts["accelerator_type"] == "NVIDIA_TESLA_A100"
    assert facts["machine_type"] == "a2-highgpu-1g"
    assert facts["accelerator_count"] == 2  # one A100 per a2-highgpu-1g, two replicas


def batch(**kwargs: Any) -> CreateBatchFlexStartJobOperator:
    params: dict[str, Any] = {
        "task_id": "t",
        "project_id": "my-project",
        "region": "us-central1",
        "image_uri": "us-docker.pkg.dev/p/r/train:1",
        "machine_type": "g2-standard-8",
    }
    return CreateBatchFlexStartJobOperator(**{**params, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "count"),
    [
        ({}, 1),
        ({"task_count": 16}, 16),
        ({"task_count": 16, "parallelism": 4}, 4),
        ({"machine_type": "a3-highgpu-8g", "task_count": 2}, 16),
    ],
)
def test_batch_facts_count_the_gpus_of_the_vms_that_run_at_once(kwargs: dict[str, Any], count: int) -> None:
    op = batch(**kwargs)
    name = "projects/my-project/locations/us-central1/jobs/j-1"
    facts = op.adapter().record_facts(status(name, Phase.WAITING), Placement(location="us-central1"))
    assert facts["api"] == "batch_job"
    assert facts["kind"] == "Cloud Batch job"
    assert facts["accelerator_count"] == count
    assert facts["accelerator_type"] == ("nvidia-h100-80gb" if "machine_type" in kwargs else "nvidia-l4")
    assert facts["pricing_model"] == "flex_start"
    assert facts["console_url"].endswith(
        "/batch/jobsDetail/regions/us-central1/jobs/j-1/details?project=my-project"
    )


def tpu(**kwargs: Any) -> CreateTPUQueuedResourceOperator:
    params: dict[str, Any] = {
        "task_id": "t",
        "project_id": "my-project",
        "zone": "us-west4-a",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    return CreateTPUQueuedResourceOperator(**{**params, **kwargs})


QR = "projects/my-project/locations/us-west4-a/queuedResources/q-t1-a1"


@pytest.mark.parametrize(
    ("kwargs", "chips", "pricing"),
    [
        ({}, 16, "flex_start"),
        ({"node_count": 2}, 32, "flex_start"),
        ({"spot": True}, 16, "spot"),
        ({"reservation_name": "projects/my-project/locations/us-west4-a/reservations/r"}, 16, "reserved"),
    ],
)
def test_tpu_facts_count_chips_over_slices_and_read_the_tier(
    kwargs: dict[str, Any], chips: int, pricing: str
) -> None:
    facts = tpu(**kwargs).adapter().record_facts(status(QR, Phase.WAITING), Placement(location="us-west4-a"))
    assert facts["api"] == "tpu_queued_resource"
    assert facts["kind"] == "TPU queued resource"
    assert facts["accelerator_type"] == "v5litepod-16"
    assert facts["accelerator_count"] == chips
    assert facts["machine_type"] is None
    assert facts["pricing_model"] == pricing
    assert "queuedResource=q-t1-a1" in facts["console_url"]


# -- the loop writes the records -----------------------------------------------------------------------


class _AtSubmitted(datetime):
    """The attempt loop's clock stopped at :data:`SUBMITTED` (a weekday noon)."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return SUBMITTED.astimezone(tz) if tz else SUBMITTED.replace(tzinfo=None)


def test_the_waiting_record_is_pushed_before_the_task_defers(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_dws.runtime import loop

    # At noon the window (open until 23:59) leaves the whole 2 h max wait; on the wall clock after
    # 21:59 UTC its end would cut the max wait short, and the test failed at night.
    monkeypatch.setattr(loop, "datetime", _AtSubmitted)
    op = vertex(
        max_wait=timedelta(hours=2), window="Mon-Sun 00:00-23:59 UTC", execution_timeout=timedelta(hours=5)
    )
    stub(op, monkeypatch, [JOB.format(1)])
    ti = TI()
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": ti})
    [record] = records_of(ti)
    assert record.phase == "waiting" and record.live
    assert record.request_name == JOB.format(1)
    assert (record.api, record.project, record.location) == ("vertex_custom_job", "my-project", "us-central1")
    assert (record.attempt, record.try_number) == (1, 1)
    assert record.submitted == SUBMITTED.isoformat()
    assert record.max_wait_seconds == 7200
    assert record.wait_deadline == (SUBMITTED + timedelta(hours=2)).isoformat()
    assert record.deadline == (SUBMITTED + timedelta(hours=5)).isoformat()  # execution_timeout's end
    assert record.window is not None and "00:00" in record.window
    assert record.accelerator_count == 24 and record.accelerator_type == "NVIDIA_H100_80GB"
    assert ti.pulls == [{"key": XCOM_KEY, "task_ids": "t", "map_indexes": -1}]


def test_the_resumed_task_upserts_the_final_record_and_sends_the_metrics(
    monkeypatch: pytest.MonkeyPatch, stats: FakeStats
) -> None:
    store: dict[tuple[str, str], Any] = {}
    first = vertex()
    stub(first, monkeypatch, [JOB.format(1)])
    with pytest.raises(TaskDeferred) as deferred:
        first.attempt_loop().run({"ti": TI(store)})
    # The task resumes in a new process: a new operator, the XCom read back.
    resumed = vertex()
    stub(resumed, monkeypatch, [])
    started, ended = SUBMITTED + timedelta(minutes=10), SUBMITTED + timedelta(minutes=40)
    event = {
        **status(JOB.format(1), Phase.SUCCEEDED, started=started, finished=ended).to_event(),
        "resume": deferred.value.trigger.resume,
    }
    ti = TI(store)
    assert resumed.complete_attempt({"ti": ti}, event) == JOB.format(1)
    [record] = records_of(ti)
    assert (record.phase, record.outcome, record.holds) == ("succeeded", "succeeded", False)
    assert (record.started, record.ended) == (started.isoformat(), ended.isoformat())
    assert record.max_wait_seconds == vertex().max_wait.total_seconds()  # kept from the waiting record
    assert ti.xcom["wait_seconds"] == 600 and ti.xcom["run_seconds"] == 1800  # the old XComs stay
    tag = {"api": "vertex_custom_job", "location": "us-central1", "accelerator_type": "NVIDIA_H100_80GB"}
    assert stats.sent == [
        ("timing", metrics.REQUEST_WAIT, timedelta(minutes=10), tag),
        ("timing", metrics.REQUEST_RUN, timedelta(minutes=30), tag),
    ]


def test_capacity_attempts_accumulate_one_record_each(
    monkeypatch: pytest.MonkeyPatch, stats: FakeStats
) -> None:
    store: dict[tuple[str, str], Any] = {}
    op = vertex(capacity_retry=2)
    stub(op, monkeypatch, [JOB.format(1)])
    with pytest.raises(TaskDeferred) as deferred:
        op.attempt_loop().run({"ti": TI(store)})
    resumed = vertex(capacity_retry=2)
    stub(resumed, monkeypatch, [JOB.format(2)])
    event = {
        **status(
            JOB.format(1), Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, finished=SUBMITTED
        ).to_event(),
        "resume": deferred.value.trigger.resume,
    }
    ti = TI(store)
    with pytest.raises(TaskDeferred):  # the retry is submitted at once and deferred on
        resumed.complete_attempt({"ti": ti}, event)
    first, second = records_of(ti)
    assert (first.request_name, first.attempt) == (JOB.format(1), 1)
    assert (first.phase, first.outcome, first.message) == (
        "not_obtained",
        "capacity_not_obtained",
        "the message",
    )
    assert (second.request_name, second.attempt, second.phase) == (JOB.format(2), 2, "waiting")
    assert ("incr", metrics.CAPACITY_NOT_OBTAINED, 1) in [s[:3] for s in stats.sent]


def test_a_cancelled_request_is_counted(monkeypatch: pytest.MonkeyPatch, stats: FakeStats) -> None:
    op = vertex()
    stub(op, monkeypatch, [])
    ti = TI()
    with pytest.raises(Exception, match="cancelled"):
        op.complete_attempt(
            {"ti": ti}, status(JOB.format(3), Phase.CANCELLED, FailureKind.CANCELLED).to_event()
        )
    [record] = records_of(ti)
    assert record.phase == "cancelled" and record.outcome == "cancelled"
    assert [s[1] for s in stats.sent if s[0] == "incr"] == [metrics.REQUEST_CANCELLED]


def test_a_record_that_cannot_be_written_never_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    stub(op, monkeypatch, [JOB.format(1)])
    monkeypatch.setattr(op.adapter(), "record_facts", lambda *a: 1 / 0)
    ti = TI()
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": ti})
    [record] = records_of(ti)  # written without its facts
    assert record.kind == "VertexFlexStartAdapter" and record.accelerator_count == 0


def test_a_metrics_backend_that_raises_is_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def incr(self, *a: Any, **k: Any) -> None:
            raise RuntimeError("statsd down")

    monkeypatch.setattr(metrics, "_stats", lambda: Broken())
    metrics.incr(metrics.POLLER_CALLS, metrics.tags("batch_job", "us-central1"))


def test_tags_drop_what_a_statsd_line_cannot_carry() -> None:
    assert metrics.tags("batch_job", "us-central1", "nvidia,l4=x") == {
        "api": "batch_job",
        "location": "us-central1",
        "accelerator_type": "nvidia_l4_x",
    }
    assert metrics.tags("tpu_queued_resource", None) == {"api": "tpu_queued_resource"}
    assert all(name.startswith("dws.") for name in metrics.NAMES) and len(set(metrics.NAMES)) == 9


# -- TPU: held, then released ------------------------------------------------------------------------


def test_an_active_slice_holds_and_its_release_records_it_released(
    monkeypatch: pytest.MonkeyPatch, stats: FakeStats
) -> None:
    store: dict[tuple[str, str], Any] = {}
    op = tpu()
    stub(op, monkeypatch, [])
    active = SUBMITTED + timedelta(minutes=5)
    ti = TI(store, task_id="ask")
    op.complete_attempt({"ti": ti}, status(QR, Phase.RUNNING, started=active).to_event())
    [held] = records_of(ti)
    assert (held.phase, held.holds, held.held_since, held.ended) == (
        "running",
        True,
        active.isoformat(),
        None,
    )
    assert held.live

    release = DeleteTPUQueuedResourceOperator(
        task_id="release", zone="us-west4-a", setup_task_id="ask", project_id="my-project"
    )
    own = TI(store, task_id="release")
    recording.record_release(release, {"ti": own}, TPU_SLICES, recording.Released([(QR, "ACTIVE")]))
    [released] = records_of(own)
    assert released.request_name == QR
    assert (released.phase, released.holds, released.outcome) == ("succeeded", False, "succeeded")
    assert released.released is not None and released.ended == released.released
    assert released.accelerator_count == 16  # the setup's facts, carried over
    assert records_of(ti) == [held]  # the setup's own record is left as it was
    runs = [s for s in stats.sent if s[1] == metrics.REQUEST_RUN]
    assert len(runs) == 1 and runs[0][2] > timedelta(0)


def test_a_release_without_the_setups_record_writes_a_minimal_one() -> None:
    release = DeleteTPUQueuedResourceOperator(
        task_id="release", zone="us-west4-a", queued_resource_id="q", project_id="my-project"
    )
    own = TI(task_id="release")
    recording.record_release(
        release, {"ti": own}, TPU_SLICES, recording.Released([(QR, "WAITING_FOR_RESOURCES")])
    )
    [record] = records_of(own)
    assert (record.api, record.location, record.phase, record.holds) == (
        "tpu_queued_resource",
        "us-west4-a",
        "cancelled",
        False,
    )


def test_metrics_never_reach_the_poller_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sanity: CapacityNotObtainedError is still what a task without retries raises."""
    op = vertex()
    stub(op, monkeypatch, [])
    monkeypatch.setattr(metrics, "_stats", lambda: 1 / 0)
    with pytest.raises(CapacityNotObtainedError):
        op.complete_attempt(
            {"ti": TI()},
            status(JOB.format(4), Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED).to_event(),
        )


# -- retries: a new try starts with its XComs cleared ------------------------------------------------


class StateStore(dict):  # type: ignore[type-arg]
    """``context["task_state_store"]``: kept across tries, unlike XCom."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def test_a_retry_keeps_the_earlier_tries_records_from_the_state_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = StateStore()
    first = vertex()
    stub(first, monkeypatch, [JOB.format(1)])
    with pytest.raises(TaskDeferred):
        first.attempt_loop().run({"ti": TI(), "task_state_store": state})
    # The task is cleared while deferred: try 2 starts with no XComs, cancels job 1, submits job 2.
    second = vertex()
    stub(second, monkeypatch, [JOB.format(2)])
    monkeypatch.setattr(second.adapter(), "release_or_keep", lambda name: None)
    ti = TI()
    ti.try_number = 2
    with pytest.raises(TaskDeferred):
        second.attempt_loop().run({"ti": ti, "task_state_store": state})
    earlier, current = records_of(ti)
    assert (earlier.request_name, earlier.try_number, earlier.phase) == (JOB.format(1), 1, "cancelled")
    assert earlier.ended is not None and "try 1 ended" in earlier.message
    assert (current.request_name, current.try_number, current.phase) == (JOB.format(2), 2, "waiting")
    assert read_records(recording.stored_records(state[XCOM_KEY])) == [earlier, current]


def test_a_provisioning_request_is_recorded_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    op = tpu(deferrable=True)
    adapter = op.adapter()
    monkeypatch.setattr(adapter, "find", lambda context, identity: None)
    monkeypatch.setattr(adapter, "submit", lambda *a: status(QR, Phase.PROVISIONING))
    ti = TI()
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": ti})
    [record] = records_of(ti)
    assert record.phase == "waiting" and record.accelerator_count == 16


def test_a_rerun_that_takes_an_ended_request_sends_its_metrics_once(
    monkeypatch: pytest.MonkeyPatch, stats: FakeStats
) -> None:
    store: dict[tuple[str, str], Any] = {}
    done = status(JOB.format(5), Phase.SUCCEEDED, started=SUBMITTED, finished=SUBMITTED + timedelta(hours=1))
    for _ in range(2):
        op = vertex()
        stub(op, monkeypatch, [])
        op.complete_attempt({"ti": TI(store)}, done.to_event())
    assert len([s for s in stats.sent if s[1] == metrics.REQUEST_RUN]) == 1
    assert len(records_of(TI(store))) == 1
