"""The Kueue-like controller over the Kubernetes store, in process with a fake clock (no HTTP).

The cluster is wired by hand, as ``Cluster`` will: ``store.listen(kueue.changed)`` and
``kueue.due(now)`` after every tick. The ProvisioningRequest conditions the provisioning
controller would write are written here through the store.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from dws_emulator.kube.kueue import Kueue
from dws_emulator.kube.kueue_objects import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    CONFIGS,
    JOBS,
    LOCAL_QUEUES,
    PODS,
    PODTEMPLATES,
    REQUESTS,
    RESOURCE_FLAVORS,
    WORKLOADS,
    attempt_of,
    backoff_seconds,
    pod_template_name,
    request_name,
    workload_name,
)
from dws_emulator.kube.kueue_queues import seed
from dws_emulator.kube.state import KubeState
from dws_emulator.kube.store import timestamp
from dws_emulator.state import EmulatorState
from dws_emulator.testing import FakeClock

NS = "default"
START = 1_800_000_000.0


class Env:
    """An emulator with the Kubernetes API and a Kueue listening to its store."""

    def __init__(self) -> None:
        self.clock = FakeClock(START)
        self.state = EmulatorState({}, seed=3, clock=self.clock)
        if "kube" not in self.state.apis:  # registered at merge; until then host it here
            self.state.apis["kube"] = KubeState(self.state)
        cluster = self.state.kube.cluster
        self.store = self.state.kube.store
        if hasattr(cluster, "provisioning"):
            cluster.provisioning.manual = True  # the tests write the requests' conditions
        wired = [c for c in getattr(cluster, "controllers", []) if isinstance(c, Kueue)]
        if wired:  # the cluster hosts Kueue: use that one
            self.kueue = wired[0]
        else:
            self.kueue = Kueue(cluster)
            self.store.listen(self.kueue.changed)
        seed(self.store)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.state.tick()
        self.kueue.due(self.clock())

    def submit(
        self,
        name: str = "train",
        queue: str | None = "dws-queue",
        gpus: int = 8,
        parallelism: int = 2,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        labels = {"app": "x"} | ({"kueue.x-k8s.io/queue-name": queue} if queue else {})
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        job = {
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": {
                "suspend": True,
                "parallelism": parallelism,
                "completions": parallelism,
                "template": {
                    "metadata": {"labels": {"job-name": name, "batch.kubernetes.io/job-name": name}},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
                    },
                },
            },
        }
        self.kueue.admit("CREATE", JOBS, NS, job, None)
        return self.store.create(JOBS, NS, job)

    def job(self, name: str = "train") -> dict[str, Any]:
        return self.store.get(JOBS, NS, name)

    def workload(self, job: dict[str, Any]) -> dict[str, Any]:
        return self.store.get(WORKLOADS, NS, workload_name(job["metadata"]["name"], job["metadata"]["uid"]))

    def requests(self) -> list[str]:
        return [pr["metadata"]["name"] for pr in self.store.iter(REQUESTS, NS)]

    def templates(self) -> list[str]:
        return [pt["metadata"]["name"] for pt in self.store.iter(PODTEMPLATES, NS)]

    def condition(self, request: str, type_: str, reason: str, message: str) -> None:
        """Write a True condition on a request, as the provisioning controller would."""
        cond = {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": timestamp(self.clock()),
            "observedGeneration": 1,
        }
        self.store.update(
            REQUESTS,
            NS,
            request,
            lambda o: o["status"].setdefault("conditions", []).append(cond),
            status=True,
        )


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def check(wl: dict[str, Any]) -> dict[str, Any]:
    (state,) = wl["status"]["admissionChecks"]
    return state


@pytest.fixture
def env() -> Env:
    return Env()


def test_seeded_queues_are_active(env: Env) -> None:
    cq = env.store.get(CLUSTER_QUEUES, "", "dws-cluster-queue")
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "dws-prov"}]}
    assert cond(cq, "Active")["status"] == "True"
    ac = env.store.get(ADMISSION_CHECKS, "", "dws-prov")
    assert ac["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert ac["spec"]["parameters"]["name"] == "dws-config"
    config = env.store.get(CONFIGS, "", "dws-config")["spec"]
    assert config["provisioningClassName"] == "queued-provisioning.gke.io"
    assert config["managedResources"] == ["nvidia.com/gpu"]
    assert config["retryStrategy"] == {
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 1800,
    }
    lq = env.store.get(LOCAL_QUEUES, NS, "dws-queue")
    assert lq["spec"]["clusterQueue"] == "dws-cluster-queue"
    assert cond(lq, "Active")["reason"] == "Ready"
    seed(env.store)  # a second seed keeps what is there
    assert env.store.get(LOCAL_QUEUES, NS, "dws-queue")["metadata"]["uid"] == lq["metadata"]["uid"]


def test_a_job_without_the_queue_label_is_not_kueues(env: Env) -> None:
    env.submit(queue=None)
    assert list(env.store.iter(WORKLOADS)) == []
    assert env.requests() == []
    job = {"metadata": {"name": "y"}, "spec": {"suspend": False}}
    env.kueue.admit("CREATE", JOBS, NS, job, None)
    assert job["spec"]["suspend"] is False


def test_the_webhook_suspends_a_labelled_job() -> None:
    job = {"metadata": {"name": "y", "labels": {"kueue.x-k8s.io/queue-name": "dws-queue"}}, "spec": {}}
    Kueue(type("C", (), {"store": None})()).admit("CREATE", JOBS, NS, job, None)
    assert job["spec"]["suspend"] is True


def test_workload_and_request_names_and_contents(env: Env) -> None:
    job = env.submit(annotations={"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "3600", "other": "x"})
    uid = job["metadata"]["uid"]
    digest = hashlib.sha1(f"Job\nbatch\ntrain\n{uid}".encode()).hexdigest()[:5]
    wl = env.workload(job)
    assert wl["metadata"]["name"] == f"job-train-{digest}"
    assert wl["metadata"]["ownerReferences"][0] | {} == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert wl["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": uid}
    assert wl["metadata"]["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "3600"}
    (podset,) = wl["spec"]["podSets"]
    assert podset["name"] == "main" and podset["count"] == 2
    assert podset["template"]["metadata"]["labels"] == {"batch.kubernetes.io/job-name": "train"}
    assert wl["spec"]["queueName"] == "dws-queue"
    assert cond(wl, "QuotaReserved")["status"] == "True"
    assert cond(wl, "Admitted")["status"] == "False"
    assert wl["status"]["admission"]["clusterQueue"] == "dws-cluster-queue"
    assert check(wl)["state"] == "Pending"

    pr_name = f"job-train-{digest}-dws-prov-1"
    assert env.requests() == [pr_name]
    pr = env.store.get(REQUESTS, NS, pr_name)
    assert pr["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert pr["metadata"]["ownerReferences"][0]["uid"] == wl["metadata"]["uid"]
    assert pr["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert pr["spec"]["parameters"] == {"maxRunDurationSeconds": "3600"}
    assert pr["spec"]["podSets"] == [{"podTemplateRef": {"name": f"ppt-{pr_name}-main"}, "count": 2}]
    pt = env.store.get(PODTEMPLATES, NS, f"ppt-{pr_name}-main")
    assert pt["metadata"]["ownerReferences"][0]["uid"] == pr["metadata"]["uid"]
    spec = pt["template"]["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-queued": "true",
    }
    assert {
        "key": "cloud.google.com/gke-queued",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in (spec["tolerations"])
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert env.job()["spec"]["suspend"] is True


def test_provisioned_unsuspends_the_job_with_the_consume_annotations(env: Env) -> None:
    job = env.submit()
    (pr,) = env.requests()
    env.condition(pr, "Accepted", "Accepted", "queued")
    assert env.job()["spec"]["suspend"] is True
    env.condition(pr, "Provisioned", "Provisioned", "capacity is ready")
    wl = env.workload(job)
    assert check(wl)["state"] == "Ready"
    assert check(wl)["message"] == "capacity is ready"
    assert check(wl)["podSetUpdates"] == [
        {
            "name": "main",
            "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": pr,
                "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
            },
        }
    ]
    assert cond(wl, "Admitted")["status"] == "True"
    started = env.job()
    assert started["spec"]["suspend"] is False
    template = started["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "autoscaling.x-k8s.io/consume-provisioning-request": pr,
        "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
    }
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
    assert template["spec"]["nodeSelector"]["cloud.google.com/gke-queued"] == "true"
    assert template["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    assert template["spec"]["tolerations"] == [
        {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    # Steady: a change to the Job that Kueue has nothing to do about writes nothing else.
    revision = env.store.revision
    env.store.update(JOBS, NS, "train", lambda o: o["metadata"]["labels"].__setitem__("touched", "1"))
    assert env.store.revision == revision + 1


def test_failed_is_retried_with_backoff_then_rejected(env: Env) -> None:
    job = env.submit()
    wl_name = env.workload(job)["metadata"]["name"]
    waits = []
    for attempt in (1, 2, 3):
        assert env.requests() == [f"{wl_name}-dws-prov-{attempt}"]
        assert env.templates() == [f"ppt-{wl_name}-dws-prov-{attempt}-main"]
        failed_at = env.clock()
        env.condition(f"{wl_name}-dws-prov-{attempt}", "Failed", "NotProvisioned", f"no capacity {attempt}")
        wl = env.workload(job)
        assert cond(wl, "Evicted")["reason"] == "AdmissionCheck"
        assert cond(wl, "Evicted")["message"] == (
            f'Evicted due to AdmissionCheck in Retry state: "dws-prov" (Retrying after failure: no capacity {attempt})'
        )
        assert cond(wl, "QuotaReserved")["status"] == "False"
        assert check(wl)["state"] == "Pending"
        assert check(wl)["retryCount"] == attempt
        wait = check(wl)["requeueAfterSeconds"]
        waits.append(wait)
        assert wl["status"]["requeueState"]["requeueAt"] == timestamp(failed_at + wait)
        assert env.requests() == [f"{wl_name}-dws-prov-{attempt}"]  # deleted on the next tick
        env.advance(0)
        assert env.requests() == [] and env.templates() == []
        env.advance(wait - 1)
        assert env.requests() == []
        env.advance(1)
        wl = env.workload(job)
        assert cond(wl, "Requeued")["reason"] == "BackoffFinished"
        assert cond(wl, "QuotaReserved")["status"] == "True"
        assert cond(wl, "Evicted")["status"] == "False"
        assert env.job()["spec"]["suspend"] is True
    assert waits == [60, 120, 240]
    env.condition(f"{wl_name}-dws-prov-4", "Failed", "NotProvisioned", "never fits")
    wl = env.workload(job)
    assert wl["spec"]["active"] is False
    evicted = cond(wl, "Evicted")
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert evicted["message"] == (
        'The workload is deactivated due to AdmissionCheck in Rejected state: "dws-prov" (never fits)'
    )
    assert all(c["type"] != "DeactivationTarget" for c in wl["status"]["conditions"])
    assert cond(wl, "QuotaReserved")["status"] == "False"
    env.advance(0)
    assert env.requests() == [] and env.templates() == []
    assert env.job()["spec"]["suspend"] is True
    env.advance(3600)
    assert env.requests() == []
    assert env.kueue.workloads()[0]["state"] == "deactivated"


def test_names_are_cut_to_fit_as_kueue_cuts_them() -> None:
    assert request_name("job-a-12345", "dws-prov", 3) == "job-a-12345-dws-prov-3"
    assert pod_template_name("job-a-12345-dws-prov-3", "main") == "ppt-job-a-12345-dws-prov-3-main"
    assert attempt_of("job-a-12345-dws-prov-12", "job-a-12345", "dws-prov") == 12
    assert attempt_of("job-a-12345-other-1", "job-a-12345", "dws-prov") is None
    long_wl = workload_name("j" * 300, "uid")
    assert len(long_wl) == 253 and long_wl.startswith("job-jjj")
    long_pr = request_name("w" * 250, "dws-prov", 1)
    full = f"{'w' * 250}-dws-prov-1"
    assert len(long_pr) == 253 and long_pr == f"{full[:247]}-{hashlib.sha1(full.encode()).hexdigest()[:5]}"


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_seconds(n, 60, 1800) for n in range(1, 8)] == [60, 120, 240, 480, 960, 1800, 1800]


def test_booking_expired_before_admission_is_retried(env: Env) -> None:
    job = env.submit()
    (pr,) = env.requests()
    env.condition(pr, "BookingExpired", "BookingExpired", "booking expired")
    wl = env.workload(job)
    assert "Retrying after booking expired: booking expired" in cond(wl, "Evicted")["message"]
    env.advance(60)
    assert env.requests() == [pr[:-1] + "2"]


def test_booking_expired_once_admitted_is_left_to_the_pods(env: Env) -> None:
    job = env.submit()
    (pr,) = env.requests()
    env.condition(pr, "Provisioned", "Provisioned", "ok")
    env.condition(pr, "BookingExpired", "BookingExpired", "expired")
    assert cond(env.workload(job), "Admitted")["status"] == "True"
    assert env.job()["spec"]["suspend"] is False
    assert env.requests() == [pr]


def test_capacity_revoked_evicts_the_running_job(env: Env) -> None:
    job = env.submit()
    (pr,) = env.requests()
    env.condition(pr, "Provisioned", "Provisioned", "ok")
    env.store.update(
        JOBS, NS, "train", lambda o: o["status"].__setitem__("startTime", "2027-01-15T08:00:00Z"), status=True
    )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    for name, phase in (("train-abcde", "Running"), ("train-fghij", "Succeeded")):
        env.store.create(PODS, NS, {"metadata": {"name": name, "ownerReferences": [owner]}, "spec": {}})
        env.store.update(PODS, NS, name, lambda o, p=phase: o["status"].__setitem__("phase", p), status=True)
    env.condition(pr, "CapacityRevoked", "CapacityRevoked", "max run duration reached")
    wl = env.workload(job)
    assert wl["spec"]["active"] is False
    assert cond(wl, "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"
    assert "max run duration reached" in cond(wl, "Evicted")["message"]
    stopped = env.job()
    assert stopped["spec"]["suspend"] is True
    assert "startTime" not in stopped["status"]
    template = stopped["spec"]["template"]
    assert "annotations" not in template["metadata"]
    # The pod set's labels, plus whatever the Job controller keeps there (its uid labels).
    labels = template["metadata"]["labels"]
    assert "kueue.x-k8s.io/podset" not in labels
    assert {"job-name": "train", "batch.kubernetes.io/job-name": "train"}.items() <= labels.items()
    assert template["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert "tolerations" not in template["spec"]
    # Live pods go by the next tick (Kueue's deletion waits for it: the controller that revoked may
    # still be failing them; a Job controller may delete them on suspend before that).
    env.advance(0)
    assert [p["metadata"]["name"] for p in env.store.iter(PODS, NS)] == ["train-fghij"]
    assert env.requests() == [] and env.templates() == []


@pytest.mark.parametrize(("type_", "reason"), [("Complete", "Succeeded"), ("Failed", "Failed")])
def test_a_finished_job_finishes_its_workload(env: Env, type_: str, reason: str) -> None:
    job = env.submit()
    (pr,) = env.requests()
    env.condition(pr, "Provisioned", "Provisioned", "ok")
    done = {"type": type_, "status": "True", "reason": "X", "message": f"job {type_}"}
    env.store.update(
        JOBS, NS, "train", lambda o: o["status"].setdefault("conditions", []).append(done), status=True
    )
    wl = env.workload(job)
    assert cond(wl, "Finished")["reason"] == reason
    assert cond(wl, "Finished")["message"] == f"job {type_}"
    env.advance(0)
    assert env.requests() == [] and env.templates() == []
    assert env.kueue.workloads()[0]["state"] == "finished"


def test_deleting_the_job_deletes_its_workload_requests_and_templates(env: Env) -> None:
    env.submit(name="a")
    env.submit(name="b")
    assert len(env.requests()) == 2 and len(env.templates()) == 2
    env.store.delete(JOBS, NS, "a")
    assert len(list(env.store.iter(WORKLOADS, NS))) == 2
    env.advance(0)
    (wl,) = env.store.iter(WORKLOADS, NS)
    assert wl["metadata"]["ownerReferences"][0]["name"] == "b"
    assert len(env.requests()) == 1 and env.requests()[0].startswith("job-b-")
    assert len(env.templates()) == 1 and env.templates()[0].startswith("ppt-job-b-")


def test_a_deleted_workload_takes_its_request_and_comes_back(env: Env) -> None:
    job = env.submit()
    (pr,) = env.requests()
    old = env.store.get(REQUESTS, NS, pr)["metadata"]["uid"]
    env.store.delete(WORKLOADS, NS, env.workload(job)["metadata"]["name"])
    # The Job (still Kueue's) got a new Workload at once; the old request goes on the next tick,
    # and the new Workload's takes its name.
    assert check(env.workload(job))["message"] == f'Error creating ProvisioningRequest "{pr}": already exists'
    env.advance(0)
    assert check(env.workload(job))["state"] == "Pending"
    (again,) = env.requests()
    assert env.store.get(REQUESTS, NS, pr)["metadata"]["uid"] != old
    assert again == pr
    assert (
        env.store.get(REQUESTS, NS, pr)["metadata"]["ownerReferences"][0]["uid"]
        == (env.workload(job)["metadata"]["uid"])
    )


def test_an_unknown_local_queue_leaves_the_job_suspended(env: Env) -> None:
    job = env.submit(queue="nope")
    wl = env.workload(job)
    quota = cond(wl, "QuotaReserved")
    assert (quota["status"], quota["reason"], quota["message"]) == (
        "False",
        "Misconfigured",
        "LocalQueue nope doesn't exist",
    )
    assert env.requests() == []
    assert env.job()["spec"]["suspend"] is True
    assert env.kueue.workloads()[0]["state"] == "inadmissible"
    # The queue created later: the Workload goes on.
    env.store.create(
        LOCAL_QUEUES, NS, {"metadata": {"name": "nope"}, "spec": {"clusterQueue": "dws-cluster-queue"}}
    )
    assert cond(env.workload(job), "QuotaReserved")["status"] == "True"
    assert len(env.requests()) == 1


def test_a_job_without_gpus_needs_no_request(env: Env) -> None:
    job = env.submit(gpus=0)
    wl = env.workload(job)
    assert check(wl)["state"] == "Ready"
    assert check(wl)["message"] == "the provisioning request is not needed"
    assert cond(wl, "Admitted")["status"] == "True"
    assert env.requests() == []
    assert env.job()["spec"]["suspend"] is False


def test_workloads_summary(env: Env) -> None:
    job = env.submit()
    (summary,) = env.kueue.workloads()
    assert summary == {
        "namespace": NS,
        "name": env.workload(job)["metadata"]["name"],
        "job": "train",
        "queue": "dws-queue",
        "state": "quota-reserved",
        "checks": {"dws-prov": "Pending"},
        "attempts": {"dws-prov": 1},
        "requests": env.requests(),
        "message": "",
    }
    env.condition(env.requests()[0], "Failed", "NotProvisioned", "no room")
    (summary,) = env.kueue.workloads()
    assert summary["state"] == "evicted" and summary["attempts"] == {"dws-prov": 2}
    assert summary["message"].endswith("(Retrying after failure: no room)")


def test_a_labelled_job_created_running_is_suspended_first(env: Env) -> None:
    job = {
        "metadata": {"name": "eager", "labels": {"kueue.x-k8s.io/queue-name": "dws-queue"}},
        "spec": {"suspend": False, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    created = env.store.create(JOBS, NS, job)  # no webhook on this path
    wl = env.workload(created)
    # No GPUs: admitted at once and started again, after having been stopped for want of a Workload.
    assert cond(wl, "Admitted")["status"] == "True"
    seen = [
        e.obj["spec"]["suspend"]
        for e in env.store.events
        if e.kind is JOBS and e.obj["metadata"]["name"] == "eager"
    ]
    # (a Job controller may write the status in between: only the changes of ``suspend`` count)
    assert [v for i, v in enumerate(seen) if i == 0 or v != seen[i - 1]] == [False, True, False]


def test_a_config_of_its_own_sets_the_limit_and_cap(env: Env) -> None:
    env.store.create(
        CONFIGS,
        "",
        {
            "metadata": {"name": "tight"},
            "spec": {
                "provisioningClassName": "queued-provisioning.gke.io",
                "managedResources": ["nvidia.com/gpu"],
                "parameters": {"maxRunDurationSeconds": "600"},
                "retryStrategy": {
                    "backoffLimitCount": 2,
                    "backoffBaseSeconds": 500,
                    "backoffMaxSeconds": 700,
                },
            },
        },
    )
    env.store.create(
        ADMISSION_CHECKS,
        "",
        {
            "metadata": {"name": "tight-check"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": "tight",
                },
            },
        },
    )
    env.store.create(
        CLUSTER_QUEUES,
        "",
        {
            "metadata": {"name": "tight-cq"},
            "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "tight-check"}]}},
        },
    )
    env.store.create(LOCAL_QUEUES, NS, {"metadata": {"name": "tight"}, "spec": {"clusterQueue": "tight-cq"}})
    job = env.submit(queue="tight", annotations={"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "1200"})
    wl_name = env.workload(job)["metadata"]["name"]
    (pr,) = env.requests()
    assert pr == f"{wl_name}-tight-check-1"
    # The Job's annotation wins over the config's parameter.
    assert env.store.get(REQUESTS, NS, pr)["spec"]["parameters"] == {"maxRunDurationSeconds": "1200"}
    waits = []
    for attempt in (1, 2):
        env.condition(f"{wl_name}-tight-check-{attempt}", "Failed", "NotProvisioned", "no")
        waits.append(check(env.workload(job))["requeueAfterSeconds"])
        env.advance(waits[-1])
        assert env.requests() == [f"{wl_name}-tight-check-{attempt + 1}"]
    assert waits == [500, 700]
    env.condition(f"{wl_name}-tight-check-3", "Failed", "NotProvisioned", "no")
    assert env.workload(job)["spec"]["active"] is False


def test_queue_counts_follow_the_workloads(env: Env) -> None:
    def counts() -> list[list[int]]:
        keys = ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads")
        lq = env.store.get(LOCAL_QUEUES, NS, "dws-queue")["status"]
        cq = env.store.get(CLUSTER_QUEUES, "", "dws-cluster-queue")["status"]
        return [[lq[k] for k in keys], [cq[k] for k in keys]]

    assert counts() == [[0, 0, 0], [0, 0, 0]]
    env.submit(name="a")
    env.submit(name="b")
    assert counts() == [[0, 2, 0], [0, 2, 0]]
    pr_a = next(p for p in env.requests() if p.startswith("job-a-"))
    env.condition(pr_a, "Provisioned", "Provisioned", "ok")
    assert counts() == [[0, 2, 1], [0, 2, 1]]
    pr_b = next(p for p in env.requests() if p.startswith("job-b-"))
    env.condition(pr_b, "Failed", "NotProvisioned", "no")  # evicted, waiting for its backoff
    assert counts() == [[1, 1, 1], [1, 1, 1]]
    env.store.delete(JOBS, NS, "a")
    env.advance(0)
    assert counts() == [[1, 0, 0], [1, 0, 0]]


def test_a_queue_without_its_flavor_holds_the_workload_until_the_flavor_exists(env: Env) -> None:
    env.store.create(
        CLUSTER_QUEUES,
        "",
        {
            "metadata": {"name": "spot-cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": "spot", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "64"}]}
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": "dws-prov"}]},
            },
        },
    )
    env.store.create(LOCAL_QUEUES, NS, {"metadata": {"name": "spot"}, "spec": {"clusterQueue": "spot-cq"}})
    job = env.submit(queue="spot")
    quota = cond(env.workload(job), "QuotaReserved")
    assert (quota["status"], quota["reason"], quota["message"]) == (
        "False",
        "Suspended",
        "ClusterQueue spot-cq is inactive",
    )
    assert cond(env.store.get(CLUSTER_QUEUES, "", "spot-cq"), "Active")["reason"] == "FlavorNotFound"
    assert env.requests() == []
    assert env.kueue.workloads()[0]["state"] == "inadmissible"
    # The flavor created: the queue is active, the Workload gets quota on that flavor, and the flavor's
    # node labels and tolerations (read from the object) go into the request's pod template.
    toleration = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    env.store.create(
        RESOURCE_FLAVORS,
        "",
        {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"pool": "spot"}, "tolerations": [toleration]}},
    )
    wl = env.workload(job)
    assert cond(wl, "QuotaReserved")["status"] == "True"
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "spot"}
    (pr,) = env.requests()
    (pt,) = env.templates()
    spec = env.store.get(PODTEMPLATES, NS, pt)["template"]["spec"]
    assert (
        spec["nodeSelector"]["pool"] == "spot" and "cloud.google.com/gke-queued" not in spec["nodeSelector"]
    )
    assert toleration in spec["tolerations"]
    env.condition(pr, "Provisioned", "Provisioned", "ok")
    assert env.job()["spec"]["template"]["spec"]["nodeSelector"]["pool"] == "spot"
