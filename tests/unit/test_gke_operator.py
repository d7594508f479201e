"""CreateGKEProvisioningRequestOperator and its release without a cluster: parse-time checks, the
names and labels from the identity, the objects an attempt creates, the XCom the workload reads,
the record, the errors, and what the release deletes."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws import facts
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.kubernetes import request_status
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityRevokedError,
    RequestCancelledError,
)
from airflow_provider_dws.operators.gke import (
    CreateGKEProvisioningRequestOperator,
    DeleteGKEProvisioningRequestOperator,
)
from airflow_provider_dws.runtime import gke as runtime_gke
from airflow_provider_dws.scheduling.identity import RequestIdentity, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement

H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def gpu_pod(gpus: Any = 8, selector: dict[str, str] | None = H100, **extra: Any) -> dict[str, Any]:
    container = {"name": "train", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    spec: dict[str, Any] = {"containers": [container], **extra}
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    return spec


def op(**kwargs: Any) -> CreateGKEProvisioningRequestOperator:
    args: dict[str, Any] = {
        "task_id": "ask_for_nodes",
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "train",
        "namespace": "team",
        "pod_template": gpu_pod(),
        "count": 4,
        "max_run": timedelta(hours=2),
    }
    args.update(kwargs)
    return CreateGKEProvisioningRequestOperator(**args)


# -- parse-time checks ------------------------------------------------------------------------------


def test_a_good_request_parses_with_its_defaults() -> None:
    task = op(max_run=None)
    assert task.max_run is None and task.max_wait == facts.DEFAULT_MAX_WAIT
    assert task.provisioning_class == "queued-provisioning.gke.io" and task.count == 4
    assert op(max_run=3600).max_run == timedelta(hours=1)
    # A pod spec or a pod template spec, and CPU pods with no accelerator at all.
    op(pod_template={"metadata": {"labels": {"app": "x"}}, "spec": gpu_pod()})
    op(pod_template={"containers": [{"name": "c", "image": "i"}]})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, r"count must be an integer from 1"),
        ({"count": True}, r"count must be an integer from 1"),
        ({"max_run": timedelta(days=8)}, r"max_run"),
        ({"max_wait": timedelta(days=30)}, r"max_wait"),
        ({"namespace": "Team_A"}, r"namespace must be a Kubernetes namespace"),
        ({"cluster_name": "Train!"}, r"cluster_name must be a GKE cluster name"),
        ({"location": "mars"}, r"location must be the cluster's region or zone"),
        ({"provisioning_class": "Not A Class"}, r"provisioning_class must be"),
        ({"parameters": {"maxRunDurationSeconds": "60"}}, r"use max_run"),
        ({"parameters": {"x": 1}}, r"parameters must be a dict of strings"),
        ({"pod_template": {"spec": {"containers": []}}}, r"has no containers"),
        ({"pod_template": {"metadata": {}}}, r"must be a pod template spec"),
        ({"pod_template": {"containers": [{"name": "c"}]}}, r"needs a name and an image"),
        (
            {"pod_template": gpu_pod(16)},
            r"asks for 16 x nvidia.com/gpu but a node with nvidia-h100-80gb has at most 8",
        ),
        ({"pod_template": gpu_pod(selector=None)}, r"nodeSelector has no cloud.google.com/gke-accelerator"),
        ({"pod_template": gpu_pod(0)}, r"no container requests nvidia.com/gpu"),
        (
            {"pod_template": gpu_pod(selector={"cloud.google.com/gke-accelerator": "nvidia-h9000"})},
            r"not a GKE GPU",
        ),
        ({"pod_template": gpu_pod("1.5")}, r"whole number"),
        ({"failover": ["us-east4"]}, r"failover is not supported"),
    ],
)
def test_mistakes_fail_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        op(**kwargs)


def test_gpus_of_init_containers_and_several_containers() -> None:
    two = gpu_pod(4)
    two["containers"].append({"name": "b", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}})
    op(pod_template=two)  # 4 + 4 = 8 fits an H100 node
    two["containers"].append({"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": 1}}})
    with pytest.raises(ValueError, match="asks for 9 x"):
        op(pod_template=two)
    init = gpu_pod(
        2, initContainers=[{"name": "warm", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}]
    )
    op(pod_template=init)  # init containers run alone: max(2, 8)


def test_a_node_affinity_on_the_accelerator_is_left_to_the_scheduler() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "cloud.google.com/gke-accelerator",
                                "operator": "In",
                                "values": ["nvidia-l4"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    op(pod_template=gpu_pod(selector=None, affinity=affinity))


def test_a_templated_pod_template_is_checked_after_rendering() -> None:
    task = op(pod_template=gpu_pod("{{ params.gpus }}"))
    task.pod_template = gpu_pod(12)  # what rendering gave
    with pytest.raises(ValueError, match="asks for 12 x"):
        task.check_parameters(rendered=True)
    task.pod_template = gpu_pod(8)
    task.check_parameters(rendered=True)


def test_accelerator_facts_agree_with_the_machine_table() -> None:
    from airflow_provider_dws import catalog

    assert set(facts.GKE_ACCELERATOR_MAX_GPUS) == set(facts.COMPUTE_GPU_NAMES)
    for accelerator, most in facts.GKE_ACCELERATOR_MAX_GPUS.items():
        counts = [facts.GPU_MACHINE_ROWS[m][1] for m in catalog.gke_gpu_machines(accelerator)]
        if counts:  # GPUs of accelerator-optimized machines: the largest machine's count
            assert max(counts) == most, accelerator


# -- identity ------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ["ask_for_nodes", "Ask For H100 Nodes!!", "x" * 300, "_"])
def test_names_are_dns_1123_and_parse_back(task_id: str) -> None:
    identity = RequestIdentity(
        "_private dag", task_id, "manual__2026-12-02T10:00:00+00:00", try_number=3, attempt=2
    )
    name = identity.provisioning_request_name()
    assert len(name) <= 63 and re.fullmatch(facts.KUBE_NAME_PATTERN, name)
    assert name.endswith("-t3-a2") and parse_attempt_name(name)[1:] == (3, 2)  # type: ignore[index]
    assert name != identity.with_attempt(3).provisioning_request_name()
    for key, value in identity.kube_labels().items():
        assert re.fullmatch(facts.KUBE_LABEL_VALUE_PATTERN, value), (key, value)
    assert identity.kube_selector() == f"dws_key={identity.key}"


def test_label_values_that_gcp_allows_but_kubernetes_does_not_are_fixed_stably() -> None:
    from airflow_provider_dws.scheduling.identity import to_kube_label_value

    assert to_kube_label_value("nightly") == "nightly"
    fixed = to_kube_label_value("_nightly_")
    assert re.fullmatch(facts.KUBE_LABEL_VALUE_PATTERN, fixed) and fixed.startswith("nightly-")
    assert fixed == to_kube_label_value("_nightly_") != to_kube_label_value("nightly_")


# -- what an attempt creates and what the task returns -----------------------------------------------


IDENTITY = RequestIdentity("gke_dag", "ask_for_nodes", "manual__1")
NAME = IDENTITY.provisioning_request_name()


def test_an_attempt_creates_a_queued_pod_template_and_a_request_naming_it() -> None:
    task = op(labels={"team": "ml"}, parameters={"extra": "yes"})
    ask = task.adapter().build(IDENTITY, timedelta(hours=3))
    template, request = ask.pod_template, ask.provisioning_request
    assert template["metadata"]["name"] == request["metadata"]["name"] == NAME
    assert (
        template["metadata"]["labels"]["dws_key"] == IDENTITY.key
        and template["metadata"]["labels"]["team"] == "ml"
    )
    spec = template["template"]["spec"]
    assert facts.QUEUED_TOLERATION in spec["tolerations"] and facts.GPU_TOLERATION in spec["tolerations"]
    assert spec["nodeSelector"] == {**H100, "cloud.google.com/gke-queued": "true"}
    assert request["apiVersion"] == "autoscaling.x-k8s.io/v1" and request["kind"] == "ProvisioningRequest"
    assert request["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        "podSets": [{"podTemplateRef": {"name": NAME}, "count": 4}],
        "parameters": {"extra": "yes", "maxRunDurationSeconds": "7200"},
    }
    assert request["metadata"]["labels"]["dws_max_wait"] == "10800"
    assert task.pod_template == gpu_pod()  # the operator's own value is not changed


def test_a_toleration_the_template_has_is_not_added_twice() -> None:
    mine = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}
    spec = op(pod_template=gpu_pod(tolerations=[mine])).adapter().template()["spec"]
    assert [t["key"] for t in spec["tolerations"]] == ["cloud.google.com/gke-queued", "nvidia.com/gpu"]


def provisioned(name: str = NAME) -> RequestStatus:
    obj = {
        "metadata": {
            "name": name,
            "namespace": "team",
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "resourceVersion": "7",
        },
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "parameters": {"maxRunDurationSeconds": "7200"},
            "podSets": [{"podTemplateRef": {"name": name}, "count": 4}],
        },
        "status": {
            "conditions": [
                {"type": "Accepted", "status": "True", "lastTransitionTime": "2026-12-02T10:00:01Z"},
                {"type": "Provisioned", "status": "True", "lastTransitionTime": "2026-12-02T10:30:00Z"},
            ]
        },
    }
    return request_status(obj)


class FakeBackend:
    kind = "gke_provisioning_request"

    def __init__(
        self, statuses: list[RequestStatus] | None = None, template: dict[str, Any] | None = None
    ) -> None:
        self.statuses = {s.name: s for s in statuses or []}
        self.template = template
        self.released: list[str] = []
        self.consumed: dict[str, list[str]] = {}
        #: The task instance's PodTemplates: each request's, and any left without one.
        self.templates: list[str] = list(self.statuses)
        self.templates_deleted: list[str] = []

    def get_status(self, name: str) -> RequestStatus | None:
        return self.statuses.get(name)

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        return list(self.statuses.values())

    def pod_templates(self, selector: str) -> list[str]:
        return list(self.templates)

    def delete_pod_template(self, name: str) -> bool:
        self.templates_deleted.append(name)
        self.templates.remove(name)
        return True

    def pod_template(self, name: str) -> dict[str, Any] | None:
        return self.template

    def release(self, name: str, *, wait: bool = False) -> bool:
        self.released.append(name)
        if name in self.templates:  # deleted with its request
            self.templates.remove(name)
        return self.statuses.pop(name, None) is not None

    def consumers(self, name: str) -> list[str]:
        return self.consumed.get(name, [])

    def where(self) -> str:
        return "namespace team of projects/my-project/locations/us-central1/clusters/train"


class TI:
    dag_id, run_id, map_index, task_id = "gke_dag", "manual__1", -1, "ask_for_nodes"
    try_number, max_tries = 1, 0

    def __init__(
        self, store: dict[tuple[str, str], Any] | None = None, task_id: str = "ask_for_nodes"
    ) -> None:
        self.store = {} if store is None else store
        self.task_id = task_id
        self.start_date = datetime.now(timezone.utc)

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        return self.store.get((task_ids or self.task_id, key))


def with_backend(task: CreateGKEProvisioningRequestOperator, backend: FakeBackend) -> Any:
    adapter = task.adapter()
    adapter.backend = lambda location=None: backend  # type: ignore[method-assign]
    return adapter


def test_the_xcom_is_what_the_workloads_pods_must_carry() -> None:
    task = op()
    adapter = task.adapter()
    read_back = {"metadata": {"name": NAME}, "template": adapter.template()}
    adapter = with_backend(task, FakeBackend([provisioned()], read_back))
    ti = TI()
    result = adapter.result({"ti": ti}, provisioned())
    # Each also an XCom of its own, pushed by the attempt loop (and by a trigger that ends the task).
    assert adapter.result_keys == ("annotations", "node_selector", "tolerations")
    assert all(key in result for key in adapter.result_keys)
    assert result["name"] == NAME and result["namespace"] == "team" and result["pod_template"] == NAME
    assert result["annotations"] == {
        "autoscaling.x-k8s.io/consume-provisioning-request": NAME,
        "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
    }
    assert facts.QUEUED_TOLERATION in result["tolerations"]
    assert result["node_selector"] == {**H100, "cloud.google.com/gke-queued": "true"}
    assert (result["count"], result["accelerator"], result["gpus_per_pod"]) == (4, "nvidia-h100-80gb", 8)
    assert result["max_run_seconds"] == 7200 and result["wait_seconds"] == 1800
    assert result["cluster"] == {
        "project_id": "my-project",
        "location": "us-central1",
        "cluster_name": "train",
    }
    import json

    assert json.loads(json.dumps(result)) == result  # an XCom


def test_a_request_gone_before_the_result_is_cancelled() -> None:
    adapter = with_backend(op(), FakeBackend([], None))
    with pytest.raises(RequestCancelledError, match="disappeared"):
        adapter.result({"ti": TI()}, provisioned())


def test_record_facts_count_every_gpu_of_every_pod() -> None:
    facts_ = op().adapter().record_facts(provisioned(), Placement("us-central1"))
    assert facts_["api"] == "gke_provisioning_request" and facts_["pricing_model"] == "flex_start"
    assert (facts_["accelerator_type"], facts_["accelerator_count"]) == ("nvidia-h100-80gb", 32)
    assert facts_["console_url"].endswith(
        "/kubernetes/clusters/details/us-central1/train/details?project=my-project"
    )


def ended(state: str, failure: FailureKind | None, phase: Phase, message: str = "why") -> RequestStatus:
    return RequestStatus(NAME, state, Outcome(phase, failure, message), RequestTimings(), "4 pods")


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        (
            ended("Failed", FailureKind.CAPACITY_NOT_OBTAINED, Phase.NOT_OBTAINED),
            CapacityNotObtainedError,
            "no GKE capacity",
        ),
        (
            ended("BookingExpired", FailureKind.CAPACITY_NOT_OBTAINED, Phase.NOT_OBTAINED),
            CapacityNotObtainedError,
            "BookingExpired",
        ),
        (ended("CapacityRevoked", FailureKind.PREEMPTED, Phase.FAILED), CapacityRevokedError, "revoked"),
        (ended("Failed", FailureKind.BAD_REQUEST, Phase.FAILED), BadRequestError, "refused"),
        (ended("Deleted", FailureKind.CANCELLED, Phase.CANCELLED), RequestCancelledError, "deleted"),
    ],
)
def test_errors_are_classified(status: RequestStatus, error: type, words: str) -> None:
    adapter = with_backend(op(), FakeBackend())
    raised = adapter.error(status, Placement("us-central1"), timedelta(hours=1))
    assert isinstance(raised, error) and words in str(raised) and NAME in str(raised)


def test_find_adopts_the_newest_live_attempt_and_deletes_the_ended_ones() -> None:
    old = IDENTITY.with_attempt(1).provisioning_request_name()
    new = IDENTITY.with_attempt(2).provisioning_request_name()
    failed = ended("Failed", FailureKind.CAPACITY_NOT_OBTAINED, Phase.NOT_OBTAINED)
    failed = RequestStatus(old, failed.state, failed.outcome, failed.timings)
    backend = FakeBackend([failed, provisioned(new)])
    adapter = with_backend(op(), backend)
    ti = TI()
    found = adapter.find({"ti": ti}, IDENTITY)
    assert found is not None and found.status.name == new and found.attempt == 2
    assert ti.store[("ask_for_nodes", runtime_gke.REQUEST_XCOM)] == new
    adapter.delete_ended()
    assert backend.released == [old]


def test_the_release_deletes_every_attempt_of_its_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    with DAG("gke_dag", schedule=None, start_date=datetime(2026, 1, 1)):
        setup = op(namespace="{{ params.ns }}")
        release = DeleteGKEProvisioningRequestOperator(task_id="release_nodes", setup_task_id=setup.task_id)
    first = IDENTITY.with_attempt(2).provisioning_request_name()
    backend = FakeBackend([provisioned(first), provisioned(NAME)])
    backend.consumed[NAME] = ["train-0", "train-1"]
    orphan = IDENTITY.with_attempt(3).provisioning_request_name()
    backend.templates.append(orphan)  # its request's create failed
    made: list[tuple[Any, ...]] = []

    def fake_backend(*args: Any, **kwargs: Any) -> FakeBackend:
        made.append((args, kwargs))
        return backend

    recorded: list[Any] = []
    monkeypatch.setattr(runtime_gke, "ProvisioningRequestBackend", fake_backend)
    import airflow_provider_dws.runtime.recording as recording

    monkeypatch.setattr(
        recording, "record_release", lambda op_, ctx, api, released: recorded.append(released.requests)
    )
    monkeypatch.setattr(setup, "render_template", lambda value, context: "team")
    ti = TI(task_id="release_nodes")
    result = release.execute({"ti": ti})
    assert sorted(result["released"]) == sorted([first, NAME]) and result["deleted"]
    assert sorted(backend.released) == sorted([first, NAME])
    assert backend.templates_deleted == [orphan] and backend.templates == []
    args, kwargs = made[0]
    assert args[:2] == ("my-project", "us-central1") and kwargs["cluster_name"] == "train"
    assert kwargs["namespace"] == "team"  # the setup's, rendered
    assert recorded and {name for name, _ in recorded[0]} == {first, NAME}


def test_the_wait_ends_at_provisioned_and_the_provider_keeps_the_max_wait() -> None:
    submitted = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)
    status = RequestStatus(NAME, "Accepted", Outcome(Phase.WAITING), RequestTimings(submitted=submitted))
    trigger = (
        op(poll_interval=15).attempt_loop().trigger(status, Placement("us-central1"), timedelta(hours=1), {})
    )
    assert (trigger.kind, trigger.target, trigger.wait_grace) == ("gke_provisioning_request", "running", 0.0)
    assert trigger.wait_deadline == (submitted + timedelta(hours=1)).isoformat()
    assert trigger.backend_spec["namespace"] == "team" and trigger.backend_spec["cluster_name"] == "train"
    assert trigger.serialize()[1]["request_name"] == NAME
