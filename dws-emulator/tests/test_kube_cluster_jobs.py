"""The cluster's admission (422 with the real field paths) and its ``batch/v1`` Job controller."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_kube_cluster_env import (
    CONSUME,
    JOB,
    NS,
    POD,
    PR,
    QUEUED,
    TEMPLATE,
    Env,
    pod_spec,
    provisioned,
    request,
    template,
)

from dws_emulator.kube.store import KubeError


@pytest.fixture
def env() -> Env:
    return Env()


def _causes(exc: pytest.ExceptionInfo[KubeError]) -> dict[str, str]:
    assert exc.value.status == 422 and exc.value.reason == "Invalid"
    return {c["field"]: c["message"] for c in exc.value.details["causes"]}


def _spec(**changes: Any) -> dict[str, Any]:
    obj = request()
    obj["spec"].update(changes)
    return obj


@pytest.mark.parametrize(
    ("obj", "field", "needle"),
    [
        (_spec(podSets=[]), "spec.podSets", "at least 1 items"),
        (_spec(podSets=[{"podTemplateRef": {"name": "t"}, "count": 1}] * 33), "spec.podSets", "at most 32"),
        (_spec(podSets=[{"podTemplateRef": {"name": "t"}, "count": 0}]), "spec.podSets[0].count", ">= 1"),
        (
            _spec(podSets=[{"podTemplateRef": {"name": "Bad_Name"}, "count": 1}]),
            "spec.podSets[0].podTemplateRef.name",
            "should match",
        ),
        (_spec(podSets=[{"count": 1}]), "spec.podSets[0].podTemplateRef", "Required value"),
        (_spec(provisioningClassName=""), "spec.provisioningClassName", "Required value"),
        (
            _spec(provisioningClassName="check-capacity.autoscaling.x-k8s.io"),
            "spec.provisioningClassName",
            "Unsupported value",
        ),
        (
            _spec(parameters={"maxRunDurationSeconds": 3600}),
            "spec.parameters.maxRunDurationSeconds",
            "type string",
        ),
        (
            _spec(parameters={"maxRunDurationSeconds": "604801"}),
            "spec.parameters.maxRunDurationSeconds",
            "at most 604800",
        ),
        (
            _spec(parameters={"maxRunDurationSeconds": "1h"}),
            "spec.parameters.maxRunDurationSeconds",
            "integer",
        ),
    ],
)
def test_provisioning_request_admission(env: Env, obj: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(KubeError) as exc:
        env.create(PR, obj)
    causes = _causes(exc)
    assert field in causes, causes
    message = causes[field].replace("greater than or equal to 1", ">= 1")
    assert needle in message
    assert field in exc.value.message and exc.value.message.startswith(
        'ProvisioningRequest.autoscaling.x-k8s.io "req" is invalid'
    )
    assert not env.store.select(PR)


def test_valid_requests_of_both_classes_are_admitted(env: Env) -> None:
    env.create(PR, request("a", maxRunDurationSeconds="604800"))
    atomic = request("b")
    atomic["spec"]["provisioningClassName"] = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    env.create(PR, atomic)
    assert len(env.store.select(PR)) == 2


@pytest.mark.parametrize(
    ("kind", "obj", "field"),
    [
        (POD, {"metadata": {"name": "p"}, "spec": {"containers": []}}, "spec.containers"),
        (POD, {"metadata": {"name": "P!"}, "spec": pod_spec()}, "metadata.name"),
        (
            POD,
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "Main", "image": "x"}]}},
            "spec.containers[0].name",
        ),
        (
            POD,
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "m"}]}},
            "spec.containers[0].image",
        ),
        (TEMPLATE, {"metadata": {"name": "t"}, "template": {"spec": {}}}, "template.spec.containers"),
        (
            JOB,
            {
                "metadata": {"name": "j"},
                "spec": {"template": {"spec": {**pod_spec(), "restartPolicy": "Always"}}},
            },
            "spec.template.spec.restartPolicy",
        ),
        (
            JOB,
            {"metadata": {"name": "j"}, "spec": {"template": {"spec": pod_spec(run="soon")}}},
            "spec.template.spec.containers[0].env",
        ),
    ],
)
def test_pod_template_and_job_admission(env: Env, kind: Any, obj: dict[str, Any], field: str) -> None:
    with pytest.raises(KubeError) as exc:
        env.create(kind, obj)
    assert field in _causes(exc)


def _job(
    name: str = "j", suspend: bool | None = None, consume: str | None = None, **kwargs: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": pod_spec(**kwargs)}}
    if consume:
        spec["template"]["metadata"] = {
            "annotations": {**CONSUME, "autoscaling.x-k8s.io/consume-provisioning-request": consume}
        }
    if suspend is not None:
        spec["suspend"] = suspend
    return {"metadata": {"name": name}, "spec": spec}


def _cpu_job(name: str = "j", **kwargs: Any) -> dict[str, Any]:
    return _job(name, gpus=0, accelerator=None, toleration=False, **kwargs)


def _conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in job["status"].get("conditions", [])}


def test_job_defaults_labels_pods_and_completion(env: Env) -> None:
    created = env.create(JOB, _cpu_job(run=10))
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"], spec["suspend"]) == (
        1,
        1,
        6,
        False,
    )
    labels = spec["template"]["metadata"]["labels"]
    assert labels == {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "j",
        "controller-uid": uid,
        "job-name": "j",
    }
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert created["metadata"]["generation"] == 1
    (pod,) = env.pods()
    name = pod["metadata"]["name"]
    assert name.startswith("j-") and len(name) == len("j-") + 5
    assert pod["metadata"]["labels"] == labels
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Job", "j", uid, True)
    status = env.get(JOB, "j")["status"]
    assert status["active"] == 1 and status["ready"] == 1 and status["startTime"]
    env.advance(10)
    status = env.get(JOB, "j")["status"]
    conditions = _conditions({"status": status})
    assert conditions["Complete"]["status"] == "True" and conditions["SuccessCriteriaMet"]["status"] == "True"
    assert status["succeeded"] == 1 and "active" not in status and status["completionTime"]
    assert "Failed" not in conditions


def test_job_parallelism_and_completions(env: Env) -> None:
    job = _cpu_job(run=5)
    job["spec"].update(parallelism=2, completions=3)
    env.create(JOB, job)
    assert len(env.pods()) == 2
    env.advance(5)
    assert len(env.pods()) == 3 and env.get(JOB, "j")["status"]["succeeded"] == 2
    env.advance(5)
    status = env.get(JOB, "j")["status"]
    assert status["succeeded"] == 3 and "Complete" in _conditions({"status": status})


def test_job_backoff_limit(env: Env) -> None:
    job = _cpu_job(run=1, exit_code=1)
    job["spec"]["backoffLimit"] = 1
    env.create(JOB, job)
    env.advance(1)
    env.advance(1)
    status = env.get(JOB, "j")["status"]
    conditions = _conditions({"status": status})
    assert status["failed"] == 2 and len(env.pods()) == 2
    assert conditions["Failed"]["reason"] == "BackoffLimitExceeded"
    assert conditions["FailureTarget"]["status"] == "True"
    assert "Complete" not in conditions and "completionTime" not in status
    env.advance(10)
    assert len(env.pods()) == 2  # no more pods once Failed


def test_job_active_deadline_fails_it_and_deletes_its_pods(env: Env) -> None:
    job = _cpu_job(run=600)
    job["spec"]["activeDeadlineSeconds"] = 60
    env.create(JOB, job)
    assert len(env.pods()) == 1
    env.advance(59)
    assert "Failed" not in _conditions(env.get(JOB, "j"))
    env.advance(1)
    conditions = _conditions(env.get(JOB, "j"))
    assert conditions["Failed"]["reason"] == "DeadlineExceeded"
    assert conditions["Failed"]["message"] == "Job was active longer than specified deadline"
    assert not env.pods()


def test_suspended_job_makes_no_pods_until_resumed(env: Env) -> None:
    env.create(JOB, _cpu_job(suspend=True, run=5))
    job = env.get(JOB, "j")
    assert not env.pods() and "startTime" not in job["status"]
    suspended = _conditions(job)["Suspended"]
    assert suspended["status"] == "True" and suspended["reason"] == "JobSuspended"
    env.advance(30)
    env.update(JOB, "j", lambda o: o["spec"].__setitem__("suspend", False))
    job = env.get(JOB, "j")
    assert len(env.pods()) == 1 and job["status"]["startTime"]
    assert _conditions(job)["Suspended"]["status"] == "False"
    env.update(
        JOB, "j", lambda o: o["spec"].__setitem__("suspend", True)
    )  # suspending again deletes its pods
    job = env.get(JOB, "j")
    assert not env.pods() and "startTime" not in job["status"]


def test_job_consuming_a_request_keeps_its_capacity_across_retries(env: Env) -> None:
    provisioned(env, count=1)
    job = _job(consume="req", run=20, exit_code=1)
    job["spec"]["backoffLimit"] = 1
    env.create(JOB, job)
    (pod,) = env.pods()
    assert pod["status"]["phase"] == "Running"
    env.advance(20)  # the first pod fails; its replacement takes the same node
    pods = {p["metadata"]["name"]: p["status"]["phase"] for p in env.pods()}
    assert sorted(pods.values()) == ["Failed", "Running"]
    assert env.pool()["in_use"] == 8 and env.record("req")["state"] == "PROVISIONED"
    env.advance(20)
    assert "Failed" in _conditions(env.get(JOB, "j"))
    assert env.pool()["in_use"] == 0 and env.record("req")["state"] == "CONSUMED"


def test_job_gpu_pods_without_annotations_stay_pending(env: Env) -> None:
    provisioned(env, count=1)
    env.create(JOB, _job(run=5))
    (pod,) = env.pods()
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["conditions"][0]["reason"] == "Unschedulable"
    status = env.get(JOB, "j")["status"]
    assert status["active"] == 1 and status["ready"] == 0


def test_deleting_a_job_leaves_its_pods_to_the_garbage_collector(env: Env) -> None:
    env.create(JOB, _cpu_job(run=50))
    env.delete(JOB, "j")
    env.advance(60)
    (pod,) = env.pods()  # the routes delete dependents by propagation policy; the store alone does not
    assert pod["status"]["phase"] == "Succeeded"


def test_unknown_workload_values_do_not_break_other_objects(env: Env) -> None:
    env.create(TEMPLATE, template())
    obj = copy.deepcopy(request())
    obj["metadata"]["name"] = "ok"
    env.create(PR, obj)
    assert env.store.find(PR, NS, "ok") is not None
    assert env.get(PR, "ok")["spec"]["provisioningClassName"] == QUEUED


def test_status_writes_and_untouched_specs_are_not_revalidated(env: Env) -> None:
    env.create(JOB, _cpu_job(suspend=True))
    old = env.store.get(JOB, NS, "j")
    status_only = {"metadata": dict(old["metadata"]), "status": {"active": 0}}
    env.cluster.admit("UPDATE", JOB, NS, status_only, old)  # a /status PUT without the spec
    broken = copy.deepcopy(old)
    broken["spec"]["template"]["spec"]["containers"] = []
    with pytest.raises(KubeError):
        env.cluster.admit("UPDATE", JOB, NS, broken, old)
