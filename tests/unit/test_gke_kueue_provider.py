"""The Kueue Job built, the backend's calls (on fake clients), what the task returns and raises."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.kube_base import translate
from airflow_provider_dws.backends.kueue import KueueJobBackend
from airflow_provider_dws.errors import (
    ConflictError,
    InvalidRequestError,
    PermissionDeniedApiError,
    QuotaExceededError,
    RequestAlreadyExistsError,
    RequestNotFoundError,
    TransientApiError,
)
from airflow_provider_dws.exceptions import (
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.registry import BACKENDS, backend_from_spec
from airflow_provider_dws.runtime.gke_kueue import KueueJobAdapter, job_result
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement
from tests.probe import DAG_PROCESSOR, Probe

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = RequestIdentity("kueue_dag", "train", "manual__2026-12-01T10:00:00+00:00", attempt=2, try_number=3)
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def make(**kwargs: Any) -> CreateGKEQueuedJobOperator:
    args: dict[str, Any] = {
        "task_id": "train",
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "dws-cluster",
        "namespace": "ml",
        "queue_name": "dws-queue",
        "image": "us-docker.pkg.dev/my-project/train:1",
        "cmds": ["python", "train.py"],
        "arguments": ["--epochs", "3"],
        "env_vars": {"MODEL": "llama"},
        "gpus": 8,
        "accelerator": "nvidia-h100-80gb",
        "parallelism": 2,
        "max_run": timedelta(hours=6),
        "max_wait": timedelta(hours=2),
        "labels": {"team": "ml"},
    }
    args.update(kwargs)
    return CreateGKEQueuedJobOperator(**args)


# -- the Job built ---------------------------------------------------------------------------------


def test_the_job_from_parameters_is_suspended_queued_labelled_and_named_from_the_identity() -> None:
    job = KueueJobAdapter(make()).build(IDENTITY, timedelta(minutes=90))
    meta, spec = job["metadata"], job["spec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert meta["name"] == IDENTITY.queued_resource_id()
    assert meta["name"].endswith("-t3-a2") and len(meta["name"]) <= 63
    assert meta["namespace"] == "ml"
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queue"
    assert meta["labels"]["dws_key"] == IDENTITY.key
    assert meta["labels"]["dws_max_wait"] == "5400"
    assert meta["labels"]["team"] == "ml"
    assert meta["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "21600"}
    assert spec["suspend"] is True
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (2, 2, 0)
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "us-docker.pkg.dev/my-project/train:1"
    assert container["command"] == ["python", "train.py"]
    assert container["args"] == ["--epochs", "3"]
    assert container["env"] == [{"name": "MODEL", "value": "llama"}]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert pod["restartPolicy"] == "Never"
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "cloud.google.com/gke-queued"}


def test_a_job_without_gpus_still_tolerates_the_queued_node_pool() -> None:
    pod = KueueJobAdapter(make(gpus=None, accelerator=None)).build(IDENTITY, timedelta(minutes=90))
    pod = pod["spec"]["template"]["spec"]
    assert [t["key"] for t in pod["tolerations"]] == ["cloud.google.com/gke-queued"]
    assert "resources" not in pod["containers"][0] and "nodeSelector" not in pod


def test_a_users_manifest_keeps_its_pod_and_loses_server_fields_and_its_own_name() -> None:
    user = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "mine",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "annotations": {"a": "b"},
        },
        "spec": {
            "suspend": False,
            "parallelism": 4,
            "template": {
                "spec": {"containers": [{"name": "c", "image": "img"}], "restartPolicy": "OnFailure"}
            },
        },
        "status": {"active": 1},
    }
    op = make(
        image=None,
        cmds=None,
        arguments=None,
        env_vars=None,
        gpus=None,
        accelerator=None,
        parallelism=1,
        job=user,
    )
    job = KueueJobAdapter(op).build(IDENTITY)
    assert job["metadata"]["name"] == IDENTITY.queued_resource_id()
    assert "uid" not in job["metadata"] and "resourceVersion" not in job["metadata"]
    assert job["metadata"]["labels"]["app"] == "x"
    assert job["metadata"]["annotations"]["a"] == "b"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == 4
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "status" not in job
    assert user["metadata"]["name"] == "mine" and user["spec"]["suspend"] is False  # not changed in place


def test_labels_are_valid_kubernetes_label_values() -> None:
    import re

    valid = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
    ugly = RequestIdentity("_dag_", "task_", "scheduled__2026-12-01T00:00:00+00:00_")
    op = make(labels=None)
    labels = KueueJobAdapter(op).build(ugly)["metadata"]["labels"]
    for value in labels.values():
        assert valid.fullmatch(value), value
    assert labels["dws_dag"] != "_dag_"


def test_the_record_counts_every_pods_gpus() -> None:
    status = RequestStatus("n", "Running", Outcome(Phase.RUNNING), RequestTimings())
    facts = KueueJobAdapter(make()).record_facts(status, Placement("us-central1"))
    assert facts["api"] == "gke_kueue_job"
    assert (facts["accelerator_type"], facts["accelerator_count"]) == ("nvidia-h100-80gb", 16)
    assert facts["console_url"].endswith(
        "/kubernetes/job/us-central1/dws-cluster/ml/n/details?project=my-project"
    )


# -- what the task returns and raises ---------------------------------------------------------------


def ended(state: str, phase: Phase, failure: FailureKind | None = None, message: str = "") -> RequestStatus:
    return RequestStatus(
        name="dws-train-x-t1-a1",
        state=state,
        outcome=Outcome(phase, failure, message),
        timings=RequestTimings(T0, T0 + timedelta(minutes=30), T0 + timedelta(hours=2)),
        description="2 pods x 8 nvidia-h100-80gb in namespace ml, queue dws-queue",
    )


def test_the_result_is_the_jobs_status_counts_wait_and_run() -> None:
    result = job_result(ended("Complete", Phase.SUCCEEDED), "ml", {"succeeded": 2, "failed": 0})
    assert result == {
        "name": "dws-train-x-t1-a1",
        "namespace": "ml",
        "status": "Complete",
        "succeeded": 2,
        "failed": 0,
        "wait_seconds": 1800.0,
        "run_seconds": 5400.0,
    }
    json.dumps(result)  # an XCom


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        (
            ended("Failed", Phase.FAILED, FailureKind.WORKLOAD_FAILED, "BackoffLimitExceeded: x"),
            WorkloadFailedError,
            "BackoffLimitExceeded",
        ),
        (
            ended("Rejected", Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, "check rejected"),
            CapacityNotObtainedError,
            "LocalQueue dws-queue",
        ),
        (
            ended("CapacityRevoked", Phase.FAILED, FailureKind.PREEMPTED, "revoked"),
            CapacityPreemptedError,
            "revoked",
        ),
        (
            ended("Deleting", Phase.CANCELLED, FailureKind.CANCELLED, ""),
            RequestCancelledError,
            "deleted before",
        ),
    ],
)
def test_each_end_raises_its_own_error(status: RequestStatus, error: type[Exception], words: str) -> None:
    raised = KueueJobAdapter(make()).error(status, Placement("us-central1"), timedelta(hours=2))
    assert type(raised) is error
    assert words in str(raised)


def test_kueue_has_no_max_wait_so_the_trigger_deletes_the_job_with_no_grace() -> None:
    adapter = KueueJobAdapter(make())
    status = ended("Queued", Phase.WAITING)
    trigger = AttemptLoop(adapter.op, adapter).trigger(
        status, Placement("us-central1"), timedelta(hours=2), {}
    )
    assert trigger.wait_grace == 0
    assert trigger.kind == "gke_kueue_job"
    assert trigger.target == "end"
    assert backend_from_spec(trigger.kind, trigger.backend_spec).spec() == trigger.backend_spec


# -- the backend on fake clients -------------------------------------------------------------------


class ApiException(Exception):
    """Shaped like both clients' ``ApiException`` (``status``, ``reason``, a ``kind: Status`` body)."""

    __module__ = "kubernetes.client.exceptions"

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(status)
        self.status = status
        self.reason = reason
        self.body = json.dumps({"kind": "Status", "reason": reason, "message": message, "code": status})


class FakeApi:
    """Both the BatchV1Api and the CustomObjectsApi, sync or async, over one dict of objects."""

    def __init__(
        self,
        jobs: dict[str, dict[str, Any]],
        workloads: list[dict[str, Any]],
        is_async: bool = False,
        served: tuple[str, ...] = ("v1beta2", "v1beta1"),
    ) -> None:
        self.jobs, self.workloads, self.is_async, self.served = jobs, workloads, is_async, served
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: list[Exception] = []

    def _answer(self, name: str, kwargs: dict[str, Any], value: Any) -> Any:
        self.calls.append((name, kwargs))
        if self.fail:
            raise self.fail.pop(0)
        if self.is_async:

            async def done() -> Any:
                return value() if callable(value) else value

            return done()
        return value() if callable(value) else value

    def list_namespaced_job(self, **kwargs: Any) -> Any:
        key, _, value = kwargs["label_selector"].partition("=")
        items = [j for j in self.jobs.values() if j["metadata"]["labels"].get(key) == value]
        return self._answer("list_jobs", kwargs, {"items": items, "metadata": {}})

    def get_api_versions(self, **kwargs: Any) -> Any:
        """``GET /apis``: the Kueue group at the versions this cluster serves (none: no group)."""
        versions = [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in self.served]
        groups = [{"name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}]}]
        if versions:
            groups.append({"name": "kueue.x-k8s.io", "versions": versions, "preferredVersion": versions[0]})
        return self._answer("discovery", kwargs, {"kind": "APIGroupList", "groups": groups})

    def list_namespaced_custom_object(self, **kwargs: Any) -> Any:
        newest = self.served[0] if self.served else "v1beta1"
        assert (kwargs["group"], kwargs["version"], kwargs["plural"]) == (
            "kueue.x-k8s.io",
            newest,
            "workloads",
        )
        return self._answer("list_workloads", kwargs, {"items": list(self.workloads), "metadata": {}})

    def read_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any:
        def read() -> Any:
            if name not in self.jobs:
                raise ApiException(404, "NotFound", f'jobs.batch "{name}" not found')
            return self.jobs[name]

        return self._answer("read_job", {"name": name, **kwargs}, read)

    def create_namespaced_job(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        def create() -> Any:
            name = body["metadata"]["name"]
            if name in self.jobs:
                raise ApiException(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = json.loads(json.dumps(body))
            job["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-12-01T10:00:00Z")
            self.jobs[name] = job
            return job

        return self._answer("create_job", {"body": body, **kwargs}, create)

    def delete_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any:
        def delete() -> Any:
            if self.jobs.pop(name, None) is None:
                raise ApiException(404, "NotFound", "gone")
            return {"kind": "Status", "status": "Success"}

        return self._answer("delete_job", {"name": name, **kwargs}, delete)


class FakeBackend(KueueJobBackend):
    def __init__(self, api: FakeApi) -> None:
        super().__init__("my-project", "us-central1", "dws-cluster", "ml")
        self.api = api

    def api_client(self) -> Any:
        return self

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return obj

    async def async_api_client(self) -> Any:
        return self

    def _batch(self) -> Any:
        return self.api

    def _custom(self) -> Any:
        return self.api

    def _discovery(self) -> Any:
        return self.api

    async def _adiscovery(self) -> Any:
        return self.api

    async def _abatch(self) -> Any:
        return self.api

    async def _acustom(self) -> Any:
        return self.api


def test_the_backend_is_registered_and_rebuilt_from_its_spec() -> None:
    assert BACKENDS["gke_kueue_job"] == "airflow_provider_dws.backends.kueue:KueueJobBackend"
    backend = KueueJobBackend(
        "p", "us-central1", cluster_name="c", namespace="ml", kubernetes_conn_id="k", use_internal_ip=True
    )
    spec = backend.spec()
    assert json.loads(json.dumps(spec)) == spec
    rebuilt = backend_from_spec("gke_kueue_job", spec)
    assert isinstance(rebuilt, KueueJobBackend) and rebuilt.spec() == spec


def test_submit_creates_then_adopts_on_already_exists() -> None:
    api = FakeApi({}, [])
    backend = FakeBackend(api)
    manifest = KueueJobAdapter(make()).build(IDENTITY)
    status, created = backend.submit(manifest, IDENTITY)
    assert created and status.name == IDENTITY.queued_resource_id()
    assert status.state == "Suspended" and status.phase is Phase.WAITING
    again, created = backend.submit(manifest, IDENTITY)
    assert not created and again.name == status.name
    assert [c[0] for c in api.calls].count("create_job") == 2
    assert len(api.jobs) == 1


def test_a_create_whose_reply_was_lost_is_adopted_not_made_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "sleep", lambda s: None)
    api = FakeApi({}, [])
    backend = FakeBackend(api)
    manifest = KueueJobAdapter(make()).build(IDENTITY)
    real = api.create_namespaced_job

    def lost_reply(namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        real(namespace, body, **kwargs)
        raise ApiException(503, "ServiceUnavailable", "reply lost")

    api.create_namespaced_job = lost_reply  # type: ignore[method-assign]
    status, created = backend.submit(manifest, IDENTITY)
    assert not created and status.name == IDENTITY.queued_resource_id()
    assert len(api.jobs) == 1


def test_find_lists_by_the_identity_and_pairs_workloads() -> None:
    api = FakeApi({}, [])
    backend = FakeBackend(api)
    backend.submit(KueueJobAdapter(make()).build(IDENTITY), IDENTITY)
    name = IDENTITY.queued_resource_id()
    api.workloads.append(
        {
            "metadata": {"name": f"job-{name}-abcde", "labels": {"kueue.x-k8s.io/job-uid": f"uid-{name}"}},
            "status": {
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admissionChecks": [{"name": "prov", "state": "Pending"}],
            },
        }
    )
    (found,) = backend.find(IDENTITY.with_attempt(1))
    assert found.state == "AwaitingCapacity"
    assert found.details["workload"] == f"job-{name}-abcde"
    assert found.details["attempt"] == 2
    assert api.calls[-3][1]["label_selector"] == f"dws_key={IDENTITY.key}"
    assert backend.find(RequestIdentity("other", "t", "r")) == []


def test_release_deletes_in_the_background_and_gone_is_fine() -> None:
    api = FakeApi({}, [])
    backend = FakeBackend(api)
    backend.submit(KueueJobAdapter(make()).build(IDENTITY), IDENTITY)
    name = IDENTITY.queued_resource_id()
    assert backend.release(name) is True
    assert api.calls[-1][1]["propagation_policy"] == "Background"
    assert backend.release(name) is False
    assert backend.get_status(name) is None


def test_the_async_half_lists_once_per_namespace_and_releases() -> None:
    api = FakeApi({}, [], is_async=False)
    sync = FakeBackend(api)
    for attempt in (1, 2):
        sync.submit(KueueJobAdapter(make()).build(IDENTITY.with_attempt(attempt)), IDENTITY)
    api.is_async = True
    api.calls.clear()
    backend = FakeBackend(api)
    names = sorted(api.jobs)

    async def run() -> tuple[dict[str, RequestStatus], RequestStatus, bool, bool]:
        listed = await backend.alist_live({names[0]})
        one = await backend.aget_status(names[1])
        return listed, one, await backend.arelease(names[1]), await backend.arelease(names[1])

    listed, one, released, again = asyncio.run(run())
    assert set(listed) == {names[0]}
    assert listed[names[0]].phase is Phase.WAITING
    assert [c[0] for c in api.calls[:3]] == ["list_jobs", "discovery", "list_workloads"]
    assert api.calls[0][1]["label_selector"] == "dws_managed=true"
    assert one.name == names[1]
    assert (released, again) == (True, False)


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (404, "NotFound", RequestNotFoundError),
        (409, "AlreadyExists", RequestAlreadyExistsError),
        (409, "Conflict", ConflictError),
        (422, "Invalid", InvalidRequestError),
        (415, "UnsupportedMediaType", InvalidRequestError),
        (403, "Forbidden", PermissionDeniedApiError),
        (429, "TooManyRequests", QuotaExceededError),
        (503, "ServiceUnavailable", TransientApiError),
        (500, "InternalError", TransientApiError),
    ],
)
def test_kubernetes_errors_are_translated_in_one_place(
    status: int, reason: str, error: type[Exception]
) -> None:
    ours = translate(ApiException(status, reason, "what the server said"))
    assert type(ours) is error
    assert "what the server said" in str(ours)


def test_the_real_clients_exceptions_and_transport_errors_are_translated() -> None:
    from kubernetes.client.exceptions import ApiException as SyncApiException
    from kubernetes.client.exceptions import ForbiddenException, NotFoundException, ServiceException
    from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

    for cls in (SyncApiException, AsyncApiException, NotFoundException):
        exc = cls(status=404, reason="Not Found")
        assert isinstance(translate(exc), RequestNotFoundError)
    assert isinstance(translate(ForbiddenException(status=403, reason="Forbidden")), PermissionDeniedApiError)
    assert isinstance(translate(ServiceException(status=503, reason="Unavailable")), TransientApiError)
    import aiohttp
    import urllib3

    assert isinstance(translate(urllib3.exceptions.MaxRetryError(None, "/", "refused")), TransientApiError)
    assert isinstance(translate(aiohttp.ClientConnectionError("refused")), TransientApiError)
    assert isinstance(translate(ConnectionRefusedError()), TransientApiError)
    other = ValueError("not an API error")
    assert translate(other) is other


def test_a_dag_file_with_the_operator_loads_only_its_parse_path(probe: Probe) -> None:
    code = """
import json, sys
import airflow.dag_processing.processor, airflow.sdk
before = set(sys.modules)
from datetime import datetime
from airflow.sdk import DAG
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
with DAG(dag_id="k", schedule=None, start_date=datetime(2026, 1, 1)):
    CreateGKEQueuedJobOperator(task_id="t", project_id="my-project", location="us-central1",
        cluster_name="c", queue_name="q", image="img:1", gpus=8, accelerator="nvidia-h100-80gb",
        env_vars={"A": "1"}, cmds=["python"], parallelism=2)
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith(("airflow_provider_dws", "kubernetes")))))
"""
    out = probe.run(code, cwd=ROOT, preload=DAG_PROCESSOR).check()
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "airflow_provider_dws.operators.gke_kueue" in loaded
    assert not {m for m in loaded if m.startswith("kubernetes")}
    assert not {
        m for m in loaded if ".runtime" in m or ".backends" in m or ".hooks" in m or m.endswith("_checks")
    }


@pytest.mark.parametrize(
    ("served", "read_at"),
    [
        (("v1beta2", "v1beta1"), "v1beta2"),  # Kueue 0.15 and newer
        (("v1beta1",), "v1beta1"),  # a Kueue before 0.15
        (("v1", "v1beta2"), "v1beta2"),  # a Kueue newer than the provider: the newest it knows
        ((), "v1beta1"),  # no Kueue group: the list then says what is missing
    ],
)
def test_workloads_are_read_at_the_newest_version_the_cluster_serves(
    served: tuple[str, ...], read_at: str
) -> None:
    api = FakeApi({}, [], served=served)
    backend = FakeBackend(api)
    assert backend.workloads_version() == read_at
    assert backend.workloads_version() == read_at
    assert [c[0] for c in api.calls].count("discovery") == 1
    # The triggerer's backend is rebuilt with the version found: it does not ask again.
    assert backend.spec()["workload_version"] == read_at
    rebuilt = backend_from_spec("gke_kueue_job", backend.spec())
    assert isinstance(rebuilt, KueueJobBackend) and rebuilt.workload_version == read_at


def test_a_refused_discovery_falls_back_to_v1beta1_and_a_transient_error_is_retried(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    api = FakeApi({}, [], served=("v1beta1",))
    api.fail.append(ApiException(403, "Forbidden", "discovery is forbidden"))
    with caplog.at_level("WARNING"):
        assert FakeBackend(api).workloads_version() == "v1beta1"
    assert "Could not read the API groups" in caplog.text and "discovery is forbidden" in caplog.text
    # A transient error is not a refusal: asked again, the answer is the cluster's.
    monkeypatch.setattr(time, "sleep", lambda s: None)
    api = FakeApi({}, [], served=("v1beta2", "v1beta1"))
    api.fail.append(ApiException(503, "ServiceUnavailable", "down"))
    assert FakeBackend(api).workloads_version() == "v1beta2"
    assert [c[0] for c in api.calls] == ["discovery", "discovery"]


def test_the_async_half_asks_discovery_once_then_lists_at_the_version_found() -> None:
    api = FakeApi({}, [], is_async=True, served=("v1beta2", "v1beta1"))
    backend = FakeBackend(api)

    async def run() -> list[str]:
        return [await backend.aworkloads_version(), await backend.aworkloads_version()]

    assert asyncio.run(run()) == ["v1beta2", "v1beta2"]
    assert [c[0] for c in api.calls] == ["discovery"]
