"""The provider's GKE side on the emulator's Kubernetes API, through the real clients: the backend's
submit, adopt, find, status, list and release (sync ``kubernetes``, async ``kubernetes_asyncio``,
both from ``GKEClusterHook`` on the emulator switch), and the operator's objects and XCom, with a
pod carrying that XCom running on the request's nodes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_dws import errors
from airflow_provider_dws.backends.kubernetes import ProvisioningAsk, ProvisioningRequestBackend
from airflow_provider_dws.hooks.base import EMULATOR_HOST_ENV
from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
from airflow_provider_dws.runtime.loop import is_done, is_success
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

NS = "default"
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    clock = FakeClock()
    server = dws_emulator_server_factory(clock=clock)
    monkeypatch.setenv(EMULATOR_HOST_ENV, server.address)
    return server


def backend() -> ProvisioningRequestBackend:
    # Any project, location and cluster map to the one emulated cluster.
    return ProvisioningRequestBackend("my-project", "us-central1", cluster_name="train", namespace=NS)


def pods_of(gpus: int = 8, **extra: Any) -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "trainer:1",
        "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": "600"}],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    return {"containers": [container], "nodeSelector": dict(H100), "restartPolicy": "Never", **extra}


def operator(**kwargs: Any) -> CreateGKEProvisioningRequestOperator:
    args: dict[str, Any] = {
        "task_id": "ask_for_nodes",
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "train",
        "namespace": NS,
        "pod_template": pods_of(),
        "count": 2,
        "max_run": timedelta(hours=1),
    }
    args.update(kwargs)
    return CreateGKEProvisioningRequestOperator(**args)


class TI:
    dag_id, run_id, map_index, task_id, try_number = "gke_dag", "manual__1", -1, "ask_for_nodes", 1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def ask_of(op: CreateGKEProvisioningRequestOperator, identity: RequestIdentity) -> ProvisioningAsk:
    return op.adapter().build(identity, timedelta(hours=2))


def test_submit_adopt_find_status_and_release(emulator: Any) -> None:
    identity = RequestIdentity("gke_dag", "ask_for_nodes", "manual__1")
    ask = ask_of(operator(), identity)
    name = identity.provisioning_request_name()
    pr = backend()

    status, created = pr.submit(ask, identity)
    assert created and status.name == name and status.phase.live
    again, created_again = backend().submit(ask, identity)  # a retried worker: adopted, not made again
    assert not created_again and again.name == name

    # The PodTemplate is the request's, with the identity and what a queued node pool needs.
    template = pr.pod_template(name)
    assert template is not None and template["metadata"]["labels"]["dws_key"] == identity.key
    spec = template["template"]["spec"]
    assert {"cloud.google.com/gke-queued", "nvidia.com/gpu"} <= {t["key"] for t in spec["tolerations"]}

    provisioned = pr.get_status(name)
    assert provisioned is not None
    assert (provisioned.state, provisioned.phase) == ("Provisioned", Phase.RUNNING)
    assert provisioned.details["count"] == 2 and provisioned.details["max_run_seconds"] == 3600
    assert provisioned.details["max_wait_seconds"] == 7200 and provisioned.timings.started is not None

    found = pr.find(identity)
    assert [s.name for s in found] == [name]
    assert pr.find(RequestIdentity("gke_dag", "another_task", "manual__1")) == []

    assert pr.release(name) is True
    assert pr.get_status(name) is None and pr.pod_template(name) is None
    assert pr.release(name) is False  # gone is success


def test_async_half_lists_reads_and_releases(emulator: Any) -> None:
    identity = RequestIdentity("gke_dag", "ask_for_nodes", "manual__2")
    other = RequestIdentity("gke_dag", "ask_for_nodes", "manual__3")
    sync = backend()
    for who in (identity, other):
        sync.submit(ask_of(operator(count=1), who), who)
    mine, theirs = identity.provisioning_request_name(), other.provisioning_request_name()

    async def run() -> tuple[Any, Any, Any, bool, bool]:
        pr = ProvisioningRequestBackend(**backend().spec())  # as the triggerer rebuilds it
        try:
            listed = await pr.alist_live({mine})
            everything = await pr.alist_live()
            one = await pr.aget_status(theirs)
            released = await pr.arelease(mine)
            released_again = await pr.arelease(mine)
            with pytest.raises(errors.RequestNotFoundError):
                await pr.aget_status(mine)
            return listed, everything, one, released, released_again
        finally:
            await pr.aclose()

    listed, everything, one, released, released_again = asyncio.run(run())
    assert set(listed) == {mine} and listed[mine].phase.live
    assert {mine, theirs} <= set(everything)
    assert one.name == theirs and one.phase.live
    assert released and not released_again
    assert sync.pod_template(mine) is None and sync.pod_template(theirs) is not None


def test_a_wrong_pod_template_fails_as_a_bad_request(emulator: Any) -> None:
    identity = RequestIdentity("gke_dag", "cpu_only", "manual__1")
    # Past the operator's checks (built by hand): a GPU node pool's selector and no GPU request.
    ask = ask_of(operator(pod_template={"containers": [{"name": "c", "image": "i"}]}), identity)
    ask.pod_template["template"]["spec"]["nodeSelector"].update(H100)
    pr = backend()
    pr.submit(ask, identity)
    status = pr.get_status(identity.provisioning_request_name())
    assert status is not None and status.state == "Failed"
    assert (status.phase, status.outcome.failure) == (Phase.FAILED, FailureKind.BAD_REQUEST)
    assert "FailedToCreatePods" in status.outcome.message
    pr.release(status.name)


def test_the_xcom_lets_a_pod_run_on_the_requests_nodes(emulator: Any) -> None:
    from kubernetes import client

    op = operator()
    adapter = op.adapter()
    identity = RequestIdentity("gke_dag", "ask_for_nodes", "manual__4")
    ti = TI()
    status = adapter.submit({"ti": ti}, identity, Placement("us-central1"), timedelta(hours=1))
    assert ti.xcom["provisioning_request_name"] == status.name
    current = adapter.backend().get_status(status.name)
    assert current is not None and is_done(adapter, current) and is_success(adapter, current)
    result = adapter.result({"ti": ti}, current)
    assert result["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == status.name
    assert result["node_selector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"

    # The workload's pod, as KubernetesPodOperator would make it from the XCom.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "annotations": result["annotations"]},
        "spec": {**pods_of(), "nodeSelector": result["node_selector"], "tolerations": result["tolerations"]},
    }
    core = client.CoreV1Api(adapter.backend().hook.api_client())
    core.create_namespaced_pod(NS, pod)
    assert core.read_namespaced_pod("train-0", NS).status.phase == "Running"
    assert adapter.backend().consumers(status.name) == ["train-0"]
    adapter.release_or_keep(status.name)
    assert adapter.backend().get_status(status.name) is None


class LoopTI(TI):
    """What the attempt loop reads of a task instance."""

    max_tries = 0

    def __init__(self, run_id: str) -> None:
        super().__init__()
        from datetime import datetime, timezone

        self.run_id = run_id
        self.start_date = datetime.now(timezone.utc)

    def xcom_pull(self, key: str = "return_value", task_ids: Any = None, **_: Any) -> Any:
        return self.xcom.get(key)


def test_the_wait_through_the_shared_poller_ends_when_provisioned(emulator: Any) -> None:
    import threading

    blocker = RequestIdentity("gke_dag", "blocker", "manual__5")
    pr = backend()
    pr.submit(ask_of(operator(count=4), blocker), blocker)  # all 32 H100s of the pool
    assert pr.get_status(blocker.provisioning_request_name()).phase is Phase.RUNNING  # type: ignore[union-attr]
    op = operator(count=1, poll_interval=1, deferrable=False, max_wait=timedelta(minutes=10))
    # The blocker's nodes come back while the task waits: the next list finds it Provisioned.
    timer = threading.Timer(2.0, pr.release, args=(blocker.provisioning_request_name(),))
    timer.start()
    try:
        result = op.execute({"ti": LoopTI("manual__5")})
    finally:
        timer.cancel()
    assert result["count"] == 1 and result["gpus_per_pod"] == 8
    status = pr.get_status(result["name"])
    assert status is not None and status.phase is Phase.RUNNING
    pr.release(result["name"])


def test_the_provider_deletes_a_request_still_queued_at_its_max_wait(emulator: Any) -> None:
    from airflow_provider_dws.exceptions import CapacityNotObtainedError

    blocker = RequestIdentity("gke_dag", "blocker", "manual__6")
    pr = backend()
    pr.submit(ask_of(operator(count=4), blocker), blocker)
    op = operator(count=1, poll_interval=1, deferrable=False, max_wait=timedelta(seconds=3))
    with pytest.raises(CapacityNotObtainedError, match="no GKE capacity within max wait 0:00:03"):
        op.execute({"ti": LoopTI("manual__6")})
    mine = RequestIdentity("gke_dag", "ask_for_nodes", "manual__6")
    assert pr.find(mine) == [] and pr.pod_template(mine.provisioning_request_name()) is None
    assert [s.name for s in pr.find(blocker)] == [blocker.provisioning_request_name()]  # untouched
    pr.release(blocker.provisioning_request_name())


def test_a_failed_request_is_retried_as_a_new_attempt_and_nothing_is_left(emulator: Any) -> None:
    from airflow_provider_dws.exceptions import CapacityNotObtainedError
    from airflow_provider_dws.scheduling.policies import CapacityRetry

    # 5 pods x 8 H100s: more than the emulator's pool can ever hold, so GKE says FailedToBookCapacity
    # (capacity, not a bad request) and the provider asks again, as attempt 2.
    retry = CapacityRetry(attempts=2, backoff=timedelta(seconds=1), jitter=False)
    op = operator(count=5, poll_interval=1, deferrable=False, capacity_retry=retry)
    ti = LoopTI("manual__7")
    with pytest.raises(CapacityNotObtainedError, match="FailedToBookCapacity") as raised:
        op.execute({"ti": ti})
    attempts = [a["request_name"] for a in ti.xcom["dws_attempts"]]
    identity = RequestIdentity("gke_dag", "ask_for_nodes", "manual__7")
    assert attempts == [identity.with_attempt(n).provisioning_request_name() for n in (1, 2)]
    assert "attempts:" in str(raised.value)
    pr = backend()
    assert pr.find(identity) == []  # every attempt deleted, with its PodTemplate
    assert all(pr.pod_template(name) is None for name in attempts)


class ReleaseTI:
    """The release task's instance: its XCom pushes, and no XCom of the setup (it wrote none)."""

    dag_id, run_id, map_index, task_id, try_number = "gke_dag", "manual__9", -1, "release_nodes", 1

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, **_: Any) -> Any:
        return None

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_a_refused_create_leaves_no_pod_template(emulator: Any) -> None:
    identity = RequestIdentity("gke_dag", "ask_for_nodes", "manual__8")
    ask = ask_of(operator(), identity)
    ask.provisioning_request["spec"]["podSets"][0]["count"] = 0  # past the operator's checks: a 422
    pr = backend()
    with pytest.raises(errors.ApiError, match="count"):
        pr.submit(ask, identity)
    name = identity.provisioning_request_name()
    assert pr.get_status(name) is None and pr.pod_template(name) is None


def test_the_release_deletes_the_requests_a_template_left_alone_and_records_them_as_gke(
    emulator: Any,
) -> None:
    from airflow_provider_dws.operators.gke import DeleteGKEProvisioningRequestOperator
    from airflow_provider_dws.records import XCOM_KEY, read_records
    from airflow_provider_dws.runtime.gke import release_all

    setup = RequestIdentity("gke_dag", "ask_for_nodes", "manual__9")
    pr = backend()
    status, _ = pr.submit(ask_of(operator(count=1), setup), setup)  # Provisioned; the setup died
    orphan = ask_of(operator(count=1), setup.with_attempt(2)).pod_template  # its request never made
    pr.ensure_pod_template(orphan)
    release = DeleteGKEProvisioningRequestOperator(
        task_id="release_nodes",
        setup_task_id="ask_for_nodes",
        project_id="my-project",
        location="us-central1",
        cluster_name="train",
        namespace=NS,
    )
    ti = ReleaseTI()

    result = release_all(release, {"ti": ti})  # type: ignore[arg-type]

    assert result["released"] == [status.name] and result["state_before"] == "Provisioned"
    assert pr.find(setup) == [] and pr.pod_templates(setup.kube_selector()) == []
    (record,) = read_records(ti.pushed[XCOM_KEY])
    assert (record.api, record.kind, record.location) == (
        "gke_provisioning_request",
        "GKE ProvisioningRequest",
        "us-central1",
    )
    assert (record.phase, record.holds, record.released is not None) == ("succeeded", False, True)
