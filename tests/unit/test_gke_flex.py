"""GKE flex-start Jobs: the state read from a Job and its pods, the Job built, the parse-time checks,
the errors each end raises."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.gke_flex import (
    FLEX_JOB_STATES,
    FlexStartJobBackend,
    flex_job_state,
    flex_job_status,
)
from airflow_provider_dws.exceptions import (
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
from airflow_provider_dws.registry import BACKENDS, backend_from_spec
from airflow_provider_dws.runtime.gke_flex import FlexStartJobAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement

IDENTITY = RequestIdentity(
    "flex_dag", "evaluate", "manual__2026-12-01T10:00:00+00:00", attempt=1, try_number=2
)
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def make(**kwargs: Any) -> CreateGKEFlexStartJobOperator:
    args: dict[str, Any] = {
        "task_id": "evaluate",
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "dws-cluster",
        "namespace": "ml",
        "image": "us-docker.pkg.dev/my-project/eval:1",
        "cmds": ["python", "eval.py"],
        "accelerator": "nvidia-l4",
        "gpus": 4,
        "parallelism": 2,
        "max_wait": timedelta(hours=1),
        "labels": {"team": "ml"},
    }
    args.update(kwargs)
    return CreateGKEFlexStartJobOperator(**args)


def job(
    parallelism: int = 2, conditions: list[dict[str, Any]] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": IDENTITY.queued_resource_id(),
            "namespace": "ml",
            "uid": "job-uid",
            "creationTimestamp": stamp(0),
            "labels": {**IDENTITY.kube_labels(), "dws_max_wait": "3600"},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
                }
            },
        },
        "status": {**status, **({"conditions": conditions} if conditions else {})},
    }


def pod(name: str, node: str | None, at: float = 0, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    conditions: list[dict[str, Any]]
    if node:
        conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(at)}]
    else:
        message = "0/3 nodes are available; pod triggered scale-up: dws-flex-nvidia-l4 0->1"
        conditions = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return {
        "metadata": {"name": name, "ownerReferences": [{"uid": "job-uid", "kind": "Job"}]},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase if node else "Pending",
            "conditions": conditions + extra.pop("more", []),
            **extra,
        },
    }


# -- the state, from the Job and its pods ----------------------------------------------------------


def test_a_job_waits_until_every_pod_it_runs_at_once_has_a_node() -> None:
    assert flex_job_state(job(), [])[0] == "WaitingForNodes"
    state, message = flex_job_state(job(), [pod("a", "node-1", 30), pod("b", None)])
    assert state == "WaitingForNodes"
    assert message.startswith("1 of 2 pods have a node; b: 0/3 nodes are available")
    status = flex_job_status(job(), [pod("a", "node-1", 30), pod("b", None)])
    assert status.phase is Phase.WAITING and status.timings.started is None
    assert (status.details["scheduled"], status.details["pods"]) == (1, 2)


def test_the_job_runs_once_the_last_pod_has_its_node_and_that_is_when_it_started() -> None:
    status = flex_job_status(job(startTime=stamp(5)), [pod("a", "node-1", 30), pod("b", "node-2", 90)])
    assert (status.state, status.phase) == ("Running", Phase.RUNNING)
    assert status.timings.started == T0 + timedelta(seconds=90)
    assert status.details["nodes"] == ["node-1", "node-2"]


def test_a_complete_job_carries_its_result() -> None:
    done = job(
        conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": stamp(150)}],
        succeeded=2,
        completionTime=stamp(150),
    )
    pods = [pod("a", "node-1", 30, "Succeeded"), pod("b", "node-2", 90, "Succeeded")]
    status = flex_job_status(done, pods)
    assert status.phase is Phase.SUCCEEDED
    assert status.details[RESULT] == {
        "name": IDENTITY.queued_resource_id(),
        "namespace": "ml",
        "status": "Complete",
        "succeeded": 2,
        "failed": 0,
        "nodes": ["node-1", "node-2"],
        "wait_seconds": 90.0,
        "run_seconds": 60.0,
    }


def test_a_failed_job_is_the_workloads_failure_unless_its_node_went_away() -> None:
    failed = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}]
    status = flex_job_status(job(conditions=failed, failed=1), [pod("a", "node-1", 30, "Failed")])
    assert (status.state, status.outcome.failure) == ("Failed", FailureKind.WORKLOAD_FAILED)
    shutdown = pod(
        "a",
        "node-1",
        30,
        "Failed",
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
        more=[{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}],
    )
    status = flex_job_status(job(conditions=failed, failed=1), [shutdown])
    assert (status.state, status.outcome.failure) == ("CapacityRevoked", FailureKind.PREEMPTED)
    assert "imminent node shutdown" in status.outcome.message and "node-1" in status.outcome.message


def test_a_job_being_deleted_is_cancelled_and_the_table_knows_every_state() -> None:
    deleting = job()
    deleting["metadata"]["deletionTimestamp"] = stamp(10)
    assert flex_job_status(deleting, []).phase is Phase.CANCELLED
    assert FLEX_JOB_STATES.live_states() == ("WaitingForNodes", "Running")


# -- the Job built ---------------------------------------------------------------------------------


def test_the_job_asks_for_flex_start_nodes_and_its_pods_carry_the_identity() -> None:
    manifest = FlexStartJobAdapter(make(max_run=timedelta(hours=4))).build(IDENTITY, timedelta(minutes=30))
    meta, spec = manifest["metadata"], manifest["spec"]
    assert meta["name"] == IDENTITY.queued_resource_id() and meta["namespace"] == "ml"
    assert meta["labels"]["dws_key"] == IDENTITY.key and meta["labels"]["dws_max_wait"] == "1800"
    assert "suspend" not in spec and spec["activeDeadlineSeconds"] == 4 * 3600 + 1800
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (2, 2, 0)
    template = spec["template"]
    assert template["metadata"]["labels"] == meta["labels"]  # the poller lists the pods by them
    pod_spec = template["spec"]
    assert pod_spec["nodeSelector"] == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
    }
    assert pod_spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    assert pod_spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert json.loads(json.dumps(manifest)) == manifest


def test_a_tpu_job_asks_for_its_single_host_slice() -> None:
    op = make(accelerator=None, gpus=None, tpu="tpu-v6e-slice", tpu_topology="2x4", parallelism=1)
    pod_spec = FlexStartJobAdapter(op).build(IDENTITY)["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    assert pod_spec["containers"][0]["resources"] == {"limits": {"google.com/tpu": "8"}}
    assert pod_spec["tolerations"][0]["key"] == "google.com/tpu"


def test_a_users_manifest_gets_the_flex_start_selector_beside_its_own() -> None:
    manifest = {
        "metadata": {"name": "mine", "uid": "old", "labels": {"app": "eval"}},
        "spec": {
            "parallelism": 3,
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}
                    ],
                }
            },
        },
    }
    op = make(job=manifest, image=None, cmds=None, accelerator=None, gpus=None, parallelism=1)
    built = FlexStartJobAdapter(op).build(IDENTITY)
    assert built["metadata"]["name"] == IDENTITY.queued_resource_id() and "uid" not in built["metadata"]
    assert built["metadata"]["labels"]["app"] == "eval"
    pod_spec = built["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    assert pod_spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    assert pod_spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert manifest["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"
    }  # the DAG's own dict is left as it was
    facts = FlexStartJobAdapter(op).record_facts(flex_job_status(built, []), Placement("us-central1"))
    assert (facts["accelerator_type"], facts["accelerator_count"]) == ("nvidia-h100-80gb", 24)


# -- parse-time checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"accelerator": None, "gpus": None}, "pass accelerator and gpus"),
        ({"tpu": "tpu-v6e-slice", "tpu_topology": "2x4"}, "pass accelerator and gpus"),
        (
            {"accelerator": None, "gpus": None, "tpu": "tpu-v4-podslice", "tpu_topology": "2x2x1"},
            "tpu must be",
        ),
        ({"accelerator": None, "gpus": None, "tpu": "tpu-v6e-slice", "tpu_topology": "4x4"}, "single-host"),
        ({"gpus": 9}, "nvidia-l4"),
        ({"job": {"spec": {}}}, "exactly one of job"),
        ({"failover": ["us-east1"]}, "failover is not supported"),
        ({"max_run": timedelta(days=8)}, "max_run"),
        ({"cluster_name": None}, "pass cluster_name"),
        ({"parallelism": 0}, "parallelism"),
    ],
)
def test_bad_parameters_are_refused_at_parse_time(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        make(**kwargs)


# -- each end, its error ---------------------------------------------------------------------------


def _ended(state: str, message: str) -> RequestStatus:
    return RequestStatus(
        name=IDENTITY.queued_resource_id(),
        state=state,
        outcome=FLEX_JOB_STATES.classify(state, message=message),
        timings=RequestTimings(submitted=T0),
        description="2 pods x 4 nvidia-l4 on flex-start nodes in namespace ml",
    )


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        (_ended("Failed", "BackoffLimitExceeded: limit"), WorkloadFailedError, "workload failed"),
        (
            _ended("CapacityRevoked", "a flex-start node went away"),
            CapacityPreemptedError,
            "lost its capacity",
        ),
        (_ended("Deleting", ""), RequestCancelledError, "deleted before it finished"),
    ],
)
def test_each_end_raises_its_own_error(status: RequestStatus, error: type[Exception], words: str) -> None:
    raised = FlexStartJobAdapter(make()).error(status, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(raised, error) and words in str(raised)


def test_not_every_pod_by_the_max_wait_says_so_and_that_nothing_stays() -> None:
    waiting = flex_job_status(job(), [pod("a", "node-1", 30), pod("b", None)])
    given_up = replace(
        waiting,
        outcome=Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, waiting.outcome.message),
    )
    raised = FlexStartJobAdapter(make()).error(given_up, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(raised, CapacityNotObtainedError)
    assert "1 of 2 pods have a node" in str(raised) and "the Job was deleted" in str(raised)


def test_gke_has_no_max_wait_so_the_trigger_deletes_the_job_with_no_grace() -> None:
    adapter = FlexStartJobAdapter(make())
    assert (adapter.target, adapter.wait_grace, adapter.submits_in_trigger) == ("end", timedelta(0), True)


def test_the_backend_is_registered_and_rebuilt_from_its_spec() -> None:
    assert BACKENDS["gke_flex_start_job"] == "airflow_provider_dws.backends.gke_flex:FlexStartJobBackend"
    backend = FlexStartJobBackend("p", "us-central1", cluster_name="c", namespace="ml")
    spec = backend.spec()
    rebuilt = backend_from_spec("gke_flex_start_job", spec)
    assert isinstance(rebuilt, FlexStartJobBackend) and rebuilt.spec() == spec


def test_a_request_given_up_at_its_max_wait_keeps_what_it_last_said() -> None:
    from airflow_provider_dws.triggers.outcomes import not_obtained

    waiting = flex_job_status(job(), [pod("a", "node-1", 30), pod("b", None)])
    given_up = not_obtained(waiting, "max wait passed without capacity", T0 + timedelta(hours=1))
    assert given_up.phase is Phase.NOT_OBTAINED
    assert given_up.outcome.message.startswith("max wait passed without capacity (it last said: 1 of 2 pods")
    quiet = replace(waiting, outcome=Outcome(Phase.WAITING, None, ""))
    assert not_obtained(quiet, "max wait passed", T0).outcome.message == "max wait passed"


def test_a_running_job_whose_pods_that_ran_are_gone_does_not_read_as_waiting_again() -> None:
    # Two pods at once, four completions: two succeeded (their pods garbage-collected), two more run.
    running = job(startTime=stamp(5), succeeded=2)
    running["spec"]["completions"] = 4
    status = flex_job_status(running, [pod("c", "node-1", 200), pod("d", None)])
    assert (status.state, status.phase) == ("Running", Phase.RUNNING)
    assert status.timings.started == T0 + timedelta(seconds=5)  # the ran pods are gone: the Job's start


def test_only_the_last_failure_says_whether_the_node_took_the_job_down() -> None:
    failed = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}]

    def ended(name: str, at: float, node_shutdown: bool) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 143 if node_shutdown else 3, "finishedAt": stamp(at)}}}
            ]
        }
        if node_shutdown:
            extra.update(
                reason="Terminated", message="Pod was terminated in response to imminent node shutdown."
            )
            extra["more"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
        return pod(name, f"node-{name}", 10, "Failed", **extra)

    # A pod lost its node and was replaced; the replacement failed on its own: the workload's failure.
    mine = flex_job_status(job(conditions=failed, failed=2), [ended("a", 100, True), ended("b", 300, False)])
    assert (mine.state, mine.outcome.failure) == ("Failed", FailureKind.WORKLOAD_FAILED)
    # The other way round: the last failure was the node's.
    lost = flex_job_status(job(conditions=failed, failed=2), [ended("a", 100, False), ended("b", 300, True)])
    assert (lost.state, lost.outcome.failure) == ("CapacityRevoked", FailureKind.PREEMPTED)


def test_a_suspended_job_waits_and_says_why() -> None:
    suspended = job()
    suspended["spec"]["suspend"] = True
    assert flex_job_state(suspended, []) == ("WaitingForNodes", "the Job is suspended: it makes no pods")


def test_pods_pair_with_their_job_by_the_controller_uid_label_alone() -> None:
    from airflow_provider_dws.backends.kube_jobs import owned_by

    labelled = {"metadata": {"name": "p", "labels": {"batch.kubernetes.io/controller-uid": "job-uid"}}}
    owner = {"metadata": {"name": "q", "ownerReferences": [{"uid": "job-uid"}]}}
    other = {"metadata": {"name": "r", "labels": {"batch.kubernetes.io/controller-uid": "other"}}}
    paired = owned_by([labelled, owner, other], FlexStartJobBackend.owned_uid_label)
    assert [p["metadata"]["name"] for p in paired["job-uid"]] == ["p", "q"]
    assert FlexStartJobBackend.owned_have_labels  # no whole-namespace list for a Job without pods


def test_wait_until_finished_false_hands_the_running_job_over() -> None:
    from airflow_provider_dws import registry
    from airflow_provider_dws.runtime.gke_flex import FlexStartJobHandOverAdapter

    assert make().adapter_entry() == registry.FLEX_START_JOB_ADAPTER
    op = make(wait_until_finished=False)
    assert op.adapter_entry() == registry.FLEX_START_JOB_HANDOVER_ADAPTER
    assert isinstance(op.adapter(), FlexStartJobHandOverAdapter) and op.adapter().target == "running"
    with pytest.raises(ValueError, match="wait_until_finished"):
        make(wait_until_finished="no")


def test_the_release_takes_its_cluster_from_its_setup_and_refuses_another_kind() -> None:
    from datetime import datetime

    from airflow.sdk import DAG

    from airflow_provider_dws.operators.gke_flex import DeleteGKEFlexStartJobOperator

    with DAG("d", schedule=None, start_date=datetime(2026, 1, 1)):
        make(
            task_id="serve",
            location="us-east5",
            cluster_name="eval",
            namespace="ml",
            wait_until_finished=False,
        )
        release = DeleteGKEFlexStartJobOperator(task_id="release", setup_task_id="serve")
        other = DeleteGKEFlexStartJobOperator(task_id="release_other", setup_task_id="release")
    release.take_from_setup({})  # type: ignore[arg-type]
    assert (release.location, release.cluster_name, release.namespace) == ("us-east5", "eval", "ml")
    with pytest.raises(ValueError, match="is not a CreateGKEFlexStartJobOperator"):
        other.execute({})  # type: ignore[arg-type]
