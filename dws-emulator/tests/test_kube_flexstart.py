"""GKE flex-start node pools (no queued provisioning) through the unmodified ``kubernetes`` client:
nodes one at a time on the shared capacity model, withdrawn requests, scale-down, max run expiry,
pods that never trigger a scale-up, the TPU pool, and the control API around them."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from kubernetes import client

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

NS = "default"
H100 = "us-central1/NVIDIA_H100_80GB"
V5E = "us-central1-a/v5litepod"
FLEX = "cloud.google.com/gke-flex-start"
WAITING = "pod triggered scale-up: dws-flex-nvidia-h100-80gb"


@pytest.fixture
def emulator(dws_emulator_server_factory, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    capacity = {H100: 8, V5E: 8, "us-central1/NVIDIA_TESLA_A100": 8, "us-east1/NVIDIA_H100_80GB": 8}
    return dws_emulator_server_factory(capacity, clock=FakeClock())


@pytest.fixture
def api(emulator) -> Any:
    with client.ApiClient(client.Configuration(host=emulator.rest_url)) as api_client:
        yield api_client


def spec(gpus: int = 8, run: float = 30, **selector: str) -> dict[str, Any]:
    """A flex-start pod spec: an H100 unless ``selector`` says otherwise (``None`` drops a key)."""
    chosen = {FLEX: "true", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb", **selector}
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "restartPolicy": "Never",
        "nodeSelector": {k: v for k, v in chosen.items() if v is not None},
        "containers": [
            {
                "name": "train",
                "image": "busybox",
                "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": str(run)}],
                "resources": resources,
            }
        ],
    }


def job(name: str, pods: int = 1, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
    labels = {"dws_key": name, "dws_attempt": "1"}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": retries,
            "template": {"metadata": {"labels": labels}, "spec": spec(**kwargs)},
        },
    }


def pods(api, name: str) -> list[Any]:
    found = client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"job-name={name}").items
    return sorted(found, key=lambda p: (p.status.phase, p.metadata.name))


def scheduled(pod: Any) -> Any:
    return next(c for c in pod.status.conditions if c.type == "PodScheduled")


def nodes(emulator, key: str | None = None) -> list[dict[str, Any]]:
    """The FlexStartNode records (of one workload's ``dws_key``), oldest first (the call ticks)."""
    records = [r for r in emulator.control.requests() if r["kind"] == "FlexStartNode"]
    return [r for r in records if key is None or r["labels"].get("dws_key") == key]


def advance(emulator, seconds: float) -> None:
    emulator.clock.advance(seconds)
    emulator.control.capacity()  # any call ticks


def test_job_pods_get_nodes_one_at_a_time_as_capacity_frees(api, emulator) -> None:
    client.BatchV1Api(api).create_namespaced_job(NS, job("train", pods=2))
    pending, running = pods(api, "train")  # Pending sorts before Running
    assert running.status.phase == "Running" and pending.status.phase == "Pending"
    assert running.spec.node_name.startswith("gke-dws-cluster-dws-flex-nvidia-h100-80gb-")
    labels = running.metadata.labels
    assert labels["dws_key"] == "train" and labels["job-name"] == "train"
    assert labels["batch.kubernetes.io/job-name"] == "train"
    assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"]
    condition = scheduled(pending)
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    # Written when the pod was last placed (both pods waited then): a node coming up for another pod
    # does not rewrite every waiting pod's message (at a thousand pods, a million writes).
    assert condition.message.startswith("0/1 nodes are available: ")
    assert condition.message.endswith(f"{WAITING} 0->2 (waiting for flex-start capacity)")
    up, waiting = nodes(emulator, "train")
    assert (up["state"], up["name"], up["pods"]) == (
        "RUNNING",
        running.spec.node_name,
        [running.metadata.name],
    )
    assert up["holding"] and up["accelerator_count"] == 8 and up["pool"] == H100
    assert up["node_pool"] == "dws-flex-nvidia-h100-80gb" and up["max_run_duration_seconds"] == 604800
    assert waiting["state"] == "WAITING" and not waiting["holding"] and waiting["node"] is None
    assert waiting["name"].startswith("dws-flex-nvidia-h100-80gb/request-")
    assert waiting["labels"]["dws_attempt"] == "1" and waiting["display_name"] == pending.metadata.name
    assert emulator.control.capacity()[H100] == {"total": 8, "in_use": 8, "free": 0, "queued": 1}

    emulator.control.set_capacity({H100: 16})
    first, second = pods(api, "train")
    assert first.status.phase == second.status.phase == "Running"
    assert first.spec.node_name != second.spec.node_name
    assert [r["state"] for r in nodes(emulator, "train")] == ["RUNNING", "RUNNING"]
    report = emulator.control.kube_flex_start_nodes()
    assert len(report["nodes"]) == 2 and report["waiting"] == []


def test_a_node_freed_by_a_finished_pod_takes_the_waiting_pod(api, emulator) -> None:
    """The scheduler binds a pending pod to a node that has room again: its request is withdrawn."""
    client.BatchV1Api(api).create_namespaced_job(NS, job("seq", pods=2, run=10))
    pending, first = pods(api, "seq")  # Pending sorts before Running
    assert (pending.status.phase, first.status.phase) == ("Pending", "Running")
    advance(emulator, 10)
    running, done = pods(api, "seq")
    assert (running.metadata.name, done.metadata.name) == (pending.metadata.name, first.metadata.name)
    assert (running.status.phase, done.status.phase) == ("Running", "Succeeded")
    assert running.spec.node_name == first.spec.node_name
    up, withdrawn = nodes(emulator, "seq")
    assert up["state"] == "RUNNING" and len(up["pods"]) == 2
    assert withdrawn["state"] == "WITHDRAWN" and withdrawn["deleted"] and not withdrawn["holding"]
    assert [h["state"] for h in withdrawn["history"]] == ["WAITING", "WITHDRAWN"]


def test_deleting_a_waiting_job_withdraws_its_node_requests(api, emulator) -> None:
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(NS, job("blocker", run=1000))
    batch.create_namespaced_job(NS, job("waits", pods=2))
    assert [p.status.phase for p in pods(api, "waits")] == ["Pending", "Pending"]
    assert [r["state"] for r in nodes(emulator, "waits")] == ["WAITING", "WAITING"]
    assert emulator.control.capacity()[H100]["queued"] == 2

    batch.delete_namespaced_job("waits", NS, propagation_policy="Background")
    assert pods(api, "waits") == []
    records = nodes(emulator, "waits")
    assert [(r["state"], r["deleted"], r["holding"]) for r in records] == [("WITHDRAWN", True, False)] * 2
    assert all(r["end_time"] for r in records)
    assert emulator.control.capacity()[H100] == {"total": 8, "in_use": 8, "free": 0, "queued": 0}
    assert emulator.control.kube_flex_start_nodes()["waiting"] == []


def test_an_empty_node_scales_down_after_the_scale_down_time(api, emulator) -> None:
    report = emulator.control.set_kube_flex_start(scale_down_seconds=60)
    assert report["scale_down_seconds"] == 60
    client.BatchV1Api(api).create_namespaced_job(NS, job("short", run=10))
    assert pods(api, "short")[0].status.phase == "Running"  # its node came up on this call's tick
    advance(emulator, 10)
    assert pods(api, "short")[0].status.phase == "Succeeded"
    (node,) = nodes(emulator, "short")
    assert node["state"] == "RUNNING" and node["active_pods"] == [] and node["holding"]
    advance(emulator, 59)
    assert nodes(emulator, "short")[0]["state"] == "RUNNING"
    advance(emulator, 1)
    (node,) = nodes(emulator, "short")
    assert (node["state"], node["deleted"], node["holding"]) == ("SCALED_DOWN", True, False)
    assert [h["state"] for h in node["history"]] == ["WAITING", "RUNNING", "SCALED_DOWN"]
    assert emulator.control.capacity()[H100]["in_use"] == 0


def _assert_terminated_by_node_shutdown(pod: Any) -> None:
    assert pod.status.phase == "Failed" and pod.status.reason == "Terminated"
    assert pod.status.message == "Pod was terminated in response to imminent node shutdown."
    disruption = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "TerminationByKubelet")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 143


def test_max_run_expiry_fails_the_running_pod(api, emulator) -> None:
    report = emulator.control.set_kube_flex_start(max_run_seconds=120)
    assert {p["name"]: p["max_run_seconds"] for p in report["node_pools"]}["dws-flex-nvidia-h100-80gb"] == 120
    client.BatchV1Api(api).create_namespaced_job(NS, job("long", run=1000))
    assert pods(api, "long")[0].status.phase == "Running"
    advance(emulator, 119)
    assert pods(api, "long")[0].status.phase == "Running"
    advance(emulator, 1)
    (pod,) = pods(api, "long")
    _assert_terminated_by_node_shutdown(pod)
    (node,) = nodes(emulator, "long")
    assert (node["state"], node["deleted"], node["holding"]) == ("EXPIRED", True, False)
    assert node["error"]["reason"] == "MaxRunDurationReached" and node["max_run_duration_seconds"] == 120
    failed = client.BatchV1Api(api).read_namespaced_job("long", NS)
    assert any(c.type == "Failed" and c.status == "True" for c in failed.status.conditions)
    assert emulator.control.capacity()[H100]["in_use"] == 0


def test_a_replacement_pod_gets_a_new_node_after_an_expiry(api, emulator) -> None:
    emulator.control.set_kube_flex_start(max_run_seconds=120)
    client.BatchV1Api(api).create_namespaced_job(NS, job("again", retries=1, run=1000))
    assert pods(api, "again")[0].status.phase == "Running"
    advance(emulator, 120)
    failed, replacement = sorted(pods(api, "again"), key=lambda p: p.status.phase)
    _assert_terminated_by_node_shutdown(failed)
    assert replacement.status.phase == "Running" and replacement.spec.node_name != failed.spec.node_name
    assert [r["state"] for r in nodes(emulator, "again")] == ["EXPIRED", "RUNNING"]


def test_expire_a_node_through_the_control_api(api, emulator) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        NS, {"metadata": {"name": "bare", "labels": {"dws_key": "bare"}}, "spec": spec()}
    )
    node = core.read_namespaced_pod("bare", NS).spec.node_name
    record = emulator.control.expire_flex_start_node(node)
    assert record["state"] == "EXPIRED" and record["pods"] == ["bare"]
    _assert_terminated_by_node_shutdown(core.read_namespaced_pod("bare", NS))
    with pytest.raises(grpc.RpcError) as exc:
        emulator.control.expire_flex_start_node(node)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    for method, body in (
        ("ExpireFlexStartNode", {}),
        ("SetKubeFlexStart", {}),
        ("SetKubeFlexStart", {"max_run_seconds": 604801}),
        ("SetKubeFlexStart", {"scale_down_seconds": -1}),
        ("SetKubeFlexStart", {"scale_down": 5}),
        ("SetKubeNodePools", {"node_pools": ["tpu-v5-lite-podslice"], "flex_start": True}),
    ):
        with pytest.raises(grpc.RpcError) as exc:
            emulator.control.call(method, body)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, body)


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        (
            {"**": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}},
            "no flex-start node pool has accelerator nvidia-tesla-a100",
        ),
        (
            {"gpus": 16},
            "the pod asks for 16 nvidia.com/gpu and a node of node pool dws-flex-nvidia-h100-80gb",
        ),
        (
            {"**": {"cloud.google.com/gke-nodepool": "dws-nvidia-h100-80gb"}},
            "node pool dws-nvidia-h100-80gb is not a flex-start node pool",
        ),
    ],
)
def test_a_pod_no_node_can_fit_never_triggers_a_scale_up(api, emulator, kwargs, why) -> None:
    core = client.CoreV1Api(api)
    body = spec(gpus=kwargs.get("gpus", 8), **kwargs.get("**", {}))
    core.create_namespaced_pod(NS, {"metadata": {"name": "never"}, "spec": body})
    advance(emulator, 3600)
    pod = core.read_namespaced_pod("never", NS)
    condition = scheduled(pod)
    assert pod.status.phase == "Pending" and condition.reason == "Unschedulable"
    assert f"pod didn't trigger scale-up: {why}" in condition.message, condition.message
    assert nodes(emulator) == [] and emulator.control.capacity()[H100]["queued"] == 0


def test_a_stuck_pod_gets_a_node_once_a_flex_pool_exists(api, emulator) -> None:
    core = client.CoreV1Api(api)
    body = spec(**{"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"})
    core.create_namespaced_pod(NS, {"metadata": {"name": "a100"}, "spec": body})
    assert "didn't trigger scale-up" in scheduled(core.read_namespaced_pod("a100", NS)).message
    emulator.control.set_kube_node_pools(["nvidia-tesla-a100"], flex_start=True)
    pod = core.read_namespaced_pod("a100", NS)
    assert pod.status.phase == "Running" and "-dws-flex-nvidia-tesla-a100-" in pod.spec.node_name


def test_tpu_v5e_pod_runs_on_the_tpu_flex_pool(api, emulator) -> None:
    core = client.CoreV1Api(api)
    body = spec(gpus=0, **{"cloud.google.com/gke-accelerator": None})
    body["nodeSelector"].update(
        {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
        }
    )
    body["containers"][0]["resources"] = {"limits": {"google.com/tpu": "8"}}
    core.create_namespaced_pod(NS, {"metadata": {"name": "tpu"}, "spec": body})
    core.create_namespaced_pod(NS, {"metadata": {"name": "tpu-2"}, "spec": body})
    pod, second = core.read_namespaced_pod("tpu", NS), core.read_namespaced_pod("tpu-2", NS)
    assert pod.status.phase == "Running" and "-dws-flex-tpu-v5-lite-podslice-" in pod.spec.node_name
    assert "pod triggered scale-up: dws-flex-tpu-v5-lite-podslice 1->2" in scheduled(second).message
    up, waiting = nodes(emulator)
    assert (up["accelerator_type"], up["accelerator_count"], up["pool"]) == ("v5litepod", 8, V5E)
    assert up["tpu_topology"] == "2x4" and waiting["state"] == "WAITING"
    assert emulator.control.capacity()[V5E] == {"total": 8, "in_use": 8, "free": 0, "queued": 1}
    topology = dict(body, nodeSelector={**body["nodeSelector"], "cloud.google.com/gke-tpu-topology": "4x4"})
    core.create_namespaced_pod(NS, {"metadata": {"name": "tpu-4x4"}, "spec": topology})
    assert "no flex-start node pool has TPU tpu-v5-lite-podslice in topology 4x4" in (
        scheduled(core.read_namespaced_pod("tpu-4x4", NS)).message
    )


def test_small_pods_share_a_node_and_a_pool_is_selected_by_name(api, emulator) -> None:
    core = client.CoreV1Api(api)
    for name in ("half-a", "half-b"):
        core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": spec(gpus=4)})
    a, b = core.read_namespaced_pod("half-a", NS), core.read_namespaced_pod("half-b", NS)
    assert a.status.phase == b.status.phase == "Running" and a.spec.node_name == b.spec.node_name
    (node,) = nodes(emulator)
    assert node["pods"] == ["half-a", "half-b"]
    # A pool with a location of its own: selected by name only (no flex-start label needed).
    emulator.control.set_kube_node_pools(["east=nvidia-h100-80gb@us-east1"], flex_start=True)
    by_name = spec(
        **{FLEX: None, "cloud.google.com/gke-accelerator": None, "cloud.google.com/gke-nodepool": "east"}
    )
    core.create_namespaced_pod(NS, {"metadata": {"name": "east"}, "spec": by_name})
    east = core.read_namespaced_pod("east", NS)
    assert east.status.phase == "Running" and "-east-" in east.spec.node_name
    assert nodes(emulator)[-1]["pool"] == "us-east1/NVIDIA_H100_80GB"
    assert emulator.control.capacity()["us-east1/NVIDIA_H100_80GB"]["in_use"] == 8


def test_flex_pools_are_listed_and_set(emulator) -> None:
    listed = emulator.control.kube_node_pools()
    assert all(not p["flex_start"] for p in listed["node_pools"])
    flex = {p["name"]: p for p in listed["flex_start_node_pools"]}
    h100, tpu = flex["dws-flex-nvidia-h100-80gb"], flex["dws-flex-tpu-v5-lite-podslice"]
    assert h100["pool"] == H100 and h100["max_run_seconds"] == 604800 and not h100["queued_provisioning"]
    assert h100["node_labels"] == {
        "cloud.google.com/gke-nodepool": "dws-flex-nvidia-h100-80gb",
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        FLEX: "true",
    }
    assert (tpu["pool"], tpu["machine_type"], tpu["tpu_chips_per_node"]) == (V5E, "ct5lp-hightpu-8t", 8)
    replaced = emulator.control.set_kube_node_pools(
        ["v6e=tpu-v6e-slice:1x1@us-east5-a"], replace=True, flex_start=True
    )
    (v6e,) = replaced["flex_start_node_pools"]
    assert (v6e["pool"], v6e["machine_type"]) == ("us-east5-a/v6e", "ct6e-standard-1t")
    assert [p["name"] for p in replaced["node_pools"]] == [p["name"] for p in listed["node_pools"]]


def test_cli_flex_start_pools_flag() -> None:
    from dws_emulator.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["serve", "--kube-flex-start-pools", "nvidia-l4", "tpu=tpu-v6e-slice:2x2@us-east5-a"]
    )
    assert args.kube_flex_start_pools == ["nvidia-l4", "tpu=tpu-v6e-slice:2x2@us-east5-a"]
    assert parser.parse_args(["serve", "--kube-flex-start-pools"]).kube_flex_start_pools == []
    assert parser.parse_args(["serve"]).kube_flex_start_pools is None
    for bad in ("tpu-v5-lite-podslice:4x4", "nvidia-k80000", "nvidia-l4@us-east1"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--kube-flex-start-pools", bad])
