# ruff: noqa: F811  (the fixtures imported from the families' own tests are arguments here)
"""Ring 2: GKE ProvisioningRequests and Kueue Jobs made by their trigger (issue 36), end to end on the
emulator's Kubernetes API: the task defers without creating anything, the trigger (run here, in this
process, as the triggerer would) creates the request through the backend's sync half in a thread,
waits on it through the async half, and the resumed task (a new operator) returns what the worker's
own path returns, from the event alone. A trigger run again (a triggerer restart) and a later try
adopt what is there instead of making a second request."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.kubernetes import ProvisioningRequestBackend
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.runtime.gke_kueue import KueueJobAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.triggers.capacity_request import first_event
from airflow_provider_dws.triggers.submit import is_pending
from tests.emulator.test_gke_kueue_provider_on_emulator import backend as kueue_backend
from tests.emulator.test_gke_kueue_provider_on_emulator import operator as kueue_operator
from tests.emulator.test_gke_provider_on_emulator import backend as gke_backend
from tests.emulator.test_gke_provider_on_emulator import operator as gke_operator
from tests.emulator.test_records_on_emulator import TI

pytestmark = pytest.mark.emulator

# The fixtures of the two families' own emulator tests.
from tests.emulator.test_gke_kueue_provider_on_emulator import clock, emulator_env  # noqa: E402, F401
from tests.emulator.test_gke_provider_on_emulator import emulator  # noqa: E402, F401


class LoopTI(TI):
    """What the attempt loop reads of a task instance, whose XComs outlive the operator."""

    max_tries = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from datetime import datetime, timezone

        self.start_date = datetime.now(timezone.utc)

    def again(self) -> LoopTI:
        resumed = LoopTI(self.dag_id, self.task_id, self.xcom, self.run_id)
        resumed.try_number = self.try_number
        return resumed


def event_of(deferred: TaskDeferred) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(first_event(deferred.trigger), 120))


def defer(op: Any, ti: LoopTI) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti})
    return deferred.value


# -- GKE ProvisioningRequests ---------------------------------------------------------------------


def test_a_gke_request_is_made_by_its_trigger_and_the_task_returns_from_the_event(emulator: Any) -> None:
    ti = LoopTI("gke_dag", "ask_for_nodes")
    identity = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    deferred = defer(gke_operator(deferrable=True, poll_interval=0.2), ti)
    # Nothing made by the worker: the request waits in the trigger's arguments, recorded pending.
    assert gke_backend().find(identity) == []
    [pending] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(pending.request_name) and pending.phase == "waiting"

    event = event_of(deferred)
    name = identity.provisioning_request_name()
    assert (event["name"], event["state"]) == (name, "Provisioned") and RESULT in event
    resumed = ti.again()
    result = getattr(gke_operator(deferrable=True), deferred.method_name)({"ti": resumed}, event)

    # What the worker's own path reads from the cluster, for the same request.
    status = RequestStatus.from_event({**event, RESULT: None})
    adapter = gke_operator().adapter()
    assert result == adapter._read_result(replace(status, details={}))
    assert result["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == name
    assert resumed.xcom["provisioning_request_name"] == name
    assert resumed.xcom["tolerations"] == result["tolerations"]
    [done] = read_records(resumed.xcom[XCOM_KEY])
    assert done.request_name == name and done.console_url

    # The trigger run again (its triggerer restarted): it adopts the request, makes no second one.
    again = event_of(deferred)
    assert again["name"] == name
    assert [s.name for s in gke_backend().find(identity)] == [name]
    gke_backend().release(name)


def test_the_gke_trigger_deletes_an_earlier_tries_ended_request_and_makes_its_own(emulator: Any) -> None:
    ti = LoopTI("gke_dag", "ask_for_nodes")
    earlier = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    pr = gke_backend()
    # Try 1 asked for 5 x 8 H100s, more than the pool can ever hold: GKE failed it, and it stays listed.
    ask = gke_operator(count=5).adapter().build(earlier, timedelta(hours=1))
    failed, _ = pr.submit(ask, earlier)
    status = pr.get_status(failed.name)
    assert status is not None and status.phase.terminal, status
    ti.try_number = 2
    deferred = defer(gke_operator(deferrable=True, poll_interval=0.2), ti)
    event = event_of(deferred)
    mine = replace(earlier, try_number=2).provisioning_request_name()
    assert event["state"] == "Provisioned" and event["name"] == mine != failed.name
    assert [s.name for s in pr.find(earlier)] == [event["name"]]  # the ended one deleted
    assert pr.pod_template(failed.name) is None
    pr.release(event["name"])


def test_a_gke_backends_sync_half_is_safe_from_threads(emulator: Any) -> None:
    import concurrent.futures

    pr = ProvisioningRequestBackend("my-project", "us-central1", cluster_name="train", namespace="default")
    who = [RequestIdentity("gke_dag", f"task{n}", "manual__threads") for n in range(6)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        found = list(pool.map(pr.find, who))
    assert found == [[]] * 6
    assert pr.hook.api_client() is pr.hook.api_client()  # one client, built once


# -- Kueue Jobs -----------------------------------------------------------------------------------


def test_a_kueue_job_is_made_by_its_trigger_and_the_task_returns_from_the_event(emulator_env: Any) -> None:
    emulator_env()
    ti = LoopTI("kueue_on_emulator", "trig_success")
    identity = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    params = {"env_vars": {"DWS_EMULATOR_RUN_SECONDS": "0"}, "deferrable": True}
    deferred = defer(kueue_operator(ti.task_id, **params), ti)
    assert kueue_backend().find(identity) == []
    [pending] = read_records(ti.xcom[XCOM_KEY])
    assert is_pending(pending.request_name) and pending.console_url is None

    event = event_of(deferred)
    name = identity.queued_resource_id()
    assert (event["name"], event["phase"]) == (name, Phase.SUCCEEDED.value) and RESULT in event
    resumed = ti.again()
    result = getattr(kueue_operator(ti.task_id, **params), deferred.method_name)({"ti": resumed}, event)
    # What the worker's own path reads from the cluster, for the same Job.
    status = RequestStatus.from_event({**event, RESULT: None})
    worker = KueueJobAdapter(kueue_operator(ti.task_id)).result({"ti": resumed}, replace(status, details={}))
    assert result == worker and (result["status"], result["succeeded"]) == ("Complete", 2)
    assert resumed.xcom["job_name"] == name
    assert resumed.xcom["dws_gke_job_link"].endswith(f"/default/{name}/details?project=emu-project")
    [done] = read_records(resumed.xcom[XCOM_KEY])
    assert (done.request_name, done.phase) == (name, "succeeded")
    assert done.console_url == resumed.xcom["dws_gke_job_link"]

    # The trigger run again (its triggerer restarted): the success is taken, no second Job.
    assert event_of(deferred)["name"] == name
    assert [s.name for s in kueue_backend().find(identity)] == [name]


def test_a_later_try_adopts_the_live_kueue_job_of_an_earlier_one(emulator_env: Any) -> None:
    emulator_env()
    ti = LoopTI("kueue_on_emulator", "trig_adopt")
    earlier = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    b = kueue_backend()
    # Try 1's worker made the Job and died before it deferred: the Job runs on.
    live, created = b.submit(KueueJobAdapter(kueue_operator(ti.task_id)).build(earlier), earlier)
    assert created
    ti.try_number = 2
    deferred = defer(kueue_operator(ti.task_id, deferrable=True, poll_interval=0.05), ti)
    trigger: Any = deferred.trigger
    made = asyncio.run(_made(trigger))
    assert (made.how, made.status.name) == ("adopted", live.name)
    assert made.status.details["try"] == 1
    assert [s.name for s in b.find(earlier)] == [live.name]  # no second Job
    b.release(live.name)


async def _made(trigger: Any) -> Any:
    from airflow_provider_dws.triggers.submit import find_or_submit

    return await find_or_submit(trigger.kind, trigger.submission)
