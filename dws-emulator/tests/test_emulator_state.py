"""In-process tests of the emulator's job life cycle with a fake clock (no gRPC, no sleeps)."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from google.cloud.aiplatform_v1 import types

from dws_emulator.core.errors import EmulatorError
from dws_emulator.state import EmulatorState
from dws_emulator.vertex.state import JobState

H100 = "us-central1/NVIDIA_H100_80GB"
PARENT = "projects/p/locations/us-central1"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def flex_job(count: int = 8, run_seconds: float = 10, max_wait: float | None = None):
    job = types.CustomJob(
        display_name="j",
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(
                        accelerator_type="NVIDIA_H100_80GB", accelerator_count=count
                    ),
                    container_spec=types.ContainerSpec(
                        image_uri="img",
                        env=[types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value=str(run_seconds))],
                    ),
                )
            ],
            scheduling=types.Scheduling(strategy="FLEX_START"),
        ),
    )
    if max_wait is not None:
        job.job_spec.scheduling.max_wait_duration = timedelta(seconds=max_wait)
    return types.CustomJob.pb(job)


def state_names(state: EmulatorState, name: str) -> list[str]:
    return [s.removeprefix("JOB_STATE_") for s, _ in state.vertex.jobs[name].history]


def test_life_cycle_timestamps_follow_the_clock() -> None:
    clock = FakeClock()
    state = EmulatorState({H100: 8}, seed=1, clock=clock)
    name = state.vertex.create_custom_job(PARENT, flex_job(run_seconds=10)).name
    clock.now += 1
    state.tick()
    job = state.vertex.get_custom_job(name)
    assert state_names(state, name) == ["QUEUED", "PENDING", "RUNNING"]
    assert job.start_time.seconds == int(clock.now)
    clock.now += 9.99
    state.tick()
    assert state_names(state, name)[-1] == "RUNNING"
    clock.now += 0.01
    state.tick()
    job = state.vertex.get_custom_job(name)
    assert state_names(state, name)[-1] == "SUCCEEDED"
    assert job.end_time.ToNanoseconds() - job.start_time.ToNanoseconds() == pytest.approx(10e9, rel=1e-6)
    assert state.inventory()[H100]["in_use"] == 0


def test_default_max_wait_is_24h_and_zero_waits_forever() -> None:
    clock = FakeClock()
    state = EmulatorState({H100: 0}, clock=clock)
    default = state.vertex.create_custom_job(PARENT, flex_job()).name
    forever = state.vertex.create_custom_job(PARENT, flex_job(max_wait=0)).name
    clock.now += 24 * 3600 - 1
    state.tick()
    assert state_names(state, default)[-1] == "PENDING"
    clock.now += 1
    state.tick()
    assert state_names(state, default)[-1] == "FAILED"
    assert "max wait duration of 86400s" in state.vertex.get_custom_job(default).error.message
    clock.now += 365 * 24 * 3600
    state.tick()
    assert state_names(state, forever)[-1] == "PENDING"


def test_deleted_jobs_stay_in_requests_and_ids_are_seeded() -> None:
    clock = FakeClock()
    a, b = EmulatorState({H100: 8}, seed=5, clock=clock), EmulatorState({H100: 8}, seed=5, clock=clock)
    name = a.vertex.create_custom_job(PARENT, flex_job(run_seconds=0)).name
    assert b.vertex.create_custom_job(PARENT, flex_job()).name == name
    assert EmulatorState({H100: 8}, seed=6).vertex.create_custom_job(PARENT, flex_job()).name != name
    a.tick()
    a.tick()
    op = a.vertex.delete_custom_job(name)
    assert not op.done
    a.tick()
    assert a.get_operation(op.name).done
    with pytest.raises(EmulatorError) as info:
        a.vertex.get_custom_job(name)
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    [record] = a.requests()
    assert record["deleted"] is True
    assert record["state"] == "JOB_STATE_SUCCEEDED"
    ops, _ = a.list_operations(name)
    assert [o.name for o in ops] == [op.name]
    a.delete_operation(op.name)
    with pytest.raises(EmulatorError):
        a.get_operation(op.name)


def test_a_tick_leaves_waiting_jobs_alone() -> None:
    """Jobs waiting for capacity are on no agenda: a tick costs what changes, not what exists."""
    clock = FakeClock()
    state = EmulatorState({H100: 0}, seed=1, clock=clock)
    names = [state.vertex.create_custom_job(PARENT, flex_job()).name for _ in range(200)]
    clock.now += 1
    state.tick()  # QUEUED -> PENDING for all 200: they were due
    assert {JobState(state.vertex.get_custom_job(n).state).name for n in names} == {"JOB_STATE_PENDING"}
    assert len(state.vertex._due) == 0
    assert not state.capacity._dirty
    clock.now += 3600
    state.tick()
    assert {JobState(state.vertex.get_custom_job(n).state).name for n in names} == {"JOB_STATE_PENDING"}
    state.set_capacity({H100: 16})  # room for the first two, in arrival order
    assert [JobState(state.vertex.get_custom_job(n).state).name for n in names[:3]] == [
        "JOB_STATE_RUNNING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_PENDING",
    ]
