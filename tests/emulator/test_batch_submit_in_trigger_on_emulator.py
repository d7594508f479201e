"""Ring 2: a deferrable Cloud Batch task whose trigger makes its job (issue 36), end to end on a
live dws-emulator: the task defers without a call, the trigger (run here in-process, rebuilt from
its serialized form as the triggerer does) looks the task instance's jobs up and creates the job,
and the resumed task returns the job's summary without another call. A second trigger for the same
try adopts the job the first made: lookup before create, never a duplicate.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.submit import is_pending
from dws_emulator.testing import FakeClock
from tests.emulator.test_provider_batch_on_emulator import (  # noqa: F401 (fixtures)
    L4,
    FakeTI,
    batch_records,
    clock,
    emulator_env,
    operator,
    ticking,
)

pytestmark = pytest.mark.emulator


class TI(FakeTI):
    """A task instance the resumed task can read its records from."""

    try_number = 1
    max_tries = 0

    def xcom_pull(self, *, key: str, task_ids: str, map_indexes: int) -> Any:
        return self.xcom.get(key)


def deferred_trigger(op: Any, ti: TI) -> tuple[CapacityRequestTrigger, str]:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CapacityRequestTrigger) and trigger.submit is not None
    # Rebuilt from serialize(), as the triggerer does.
    return CapacityRequestTrigger(**trigger.serialize()[1]), deferred.value.method_name


def test_the_trigger_makes_the_job_once_and_the_task_resumes_on_its_summary(
    emulator_env: Any,  # noqa: F811 (the Batch ring's fixture)
    clock: FakeClock,  # noqa: F811
) -> None:
    emulator = emulator_env({L4: 1})
    ti = TI("made_by_trigger")
    op = operator(ti.task_id, environment={"DWS_EMULATOR_RUN_SECONDS": "0"}, deferrable=True)
    trigger, method = deferred_trigger(op, ti)
    assert batch_records(emulator) == []  # the worker made no call
    [waiting] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(waiting.request_name) and waiting.accelerator_type == "nvidia-l4"

    with ticking(clock):
        event = asyncio.run(asyncio.wait_for(first_event(trigger), 120))
    assert event["state"] == "SUCCEEDED" and "result" in event
    who = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    assert event["name"].endswith("/jobs/" + who.batch_job_id())
    [record] = batch_records(emulator)
    assert record["state"] == "SUCCEEDED"

    # A second trigger of the same try (a triggerer restarted before it reported) adopts the job.
    ti2 = TI(ti.task_id)
    ti2.run_id = ti.run_id
    again, _ = deferred_trigger(operator(ti.task_id, deferrable=True), ti2)
    event2 = asyncio.run(asyncio.wait_for(first_event(again), 120))
    assert event2["name"] == event["name"] and event2["state"] == "SUCCEEDED"
    assert len(batch_records(emulator)) == 1  # found, not made twice

    resumed = TI(ti.task_id)
    resumed.run_id, resumed.xcom = ti.run_id, ti.xcom
    calls = [emulator.calls(method) for method in ("CreateJob", "GetJob", "ListJobs")]
    result = getattr(operator(ti.task_id, deferrable=True), method)({"ti": resumed}, event)
    assert result["state"] == "SUCCEEDED" and result["task_counts"] == {"SUCCEEDED": 1}
    assert result["name"] == event["name"] and resumed.xcom["job_name"] == event["name"]
    # The resume read the job's summary from the event: no call at all.
    assert [emulator.calls(method) for method in ("CreateJob", "GetJob", "ListJobs")] == calls
    [done] = read_records(resumed.xcom[XCOM_KEY])
    assert (done.request_name, done.outcome) == (event["name"], "succeeded")
