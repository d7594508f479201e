"""The GKE cluster behind the Kubernetes API: queued provisioning on the shared capacity model.

Driven in process as the routes drive it (admission, then the store, then ticks), with a fake clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_kube_cluster_env import (
    NS,
    POD,
    PR,
    TEMPLATE,
    Env,
    consuming_pod,
    provisioned,
    request,
    template,
)

from dws_emulator.kube.store import KINDS, Event


@pytest.fixture
def env() -> Env:
    return Env()


def test_seeds_default_and_kube_system_namespaces(env: Env) -> None:
    namespaces = {n["metadata"]["name"]: n for n in env.store.select(KINDS["namespaces"])}
    assert set(namespaces) == {"default", "kube-system"}
    assert namespaces["default"]["status"] == {"phase": "Active"}


def test_request_is_accepted_then_provisioned_with_capacity_booked(env: Env) -> None:
    env.create(TEMPLATE, template())
    env.create(PR, request(count=2))
    conditions = env.conditions("req", tick=False)
    assert list(conditions) == ["Accepted"]  # waiting: no False Provisioned/Failed to misread
    assert env.state.capacity.inventory()["us-central1/NVIDIA_H100_80GB"]["queued"] == 1
    env.state.tick()
    conditions = env.conditions("req")
    assert list(conditions) == ["Accepted", "Provisioned"]
    prov = conditions["Provisioned"]
    assert prov["status"] == "True" and prov["reason"] == "CapacityIsProvisioned"
    assert prov["observedGeneration"] == 1 and prov["lastTransitionTime"].endswith("Z") and prov["message"]
    assert env.pool() == {"total": 32, "in_use": 16, "free": 16, "queued": 0}
    record = env.record("req")
    assert record["state"] == "PROVISIONED" and record["holding"] and len(record["nodes"]) == 2
    assert record["pool"] == "us-central1/NVIDIA_H100_80GB" and record["accelerator_count"] == 16


def test_whole_set_strict_fifo_shared_with_the_other_apis(env: Env) -> None:
    env.create(TEMPLATE, template())
    env.create(PR, request("a", count=3))  # 24 of 32
    env.create(PR, request("b", count=2))  # 16: does not fit
    env.create(PR, request("c", count=1))  # 8 would fit, but waits behind b
    env.state.tick()
    assert "Provisioned" in env.conditions("a")
    assert list(env.conditions("b")) == ["Accepted"] and list(env.conditions("c")) == ["Accepted"]
    assert env.pool()["in_use"] == 24 and env.pool()["queued"] == 2
    env.delete(PR, "a")  # deleting releases what it holds
    env.state.tick()
    assert "Provisioned" in env.conditions("b") and "Provisioned" in env.conditions("c")
    assert env.pool()["in_use"] == 24
    assert env.record("a")["deleted"] and not env.record("a")["holding"]


def test_deleting_a_queued_request_leaves_the_queue(env: Env) -> None:
    env.create(TEMPLATE, template())
    env.create(PR, request("big", count=4))
    env.create(PR, request("next", count=1))
    env.state.tick()
    assert env.pool()["queued"] == 1
    env.delete(PR, "next")
    assert env.pool()["queued"] == 0 and env.pool()["in_use"] == 32


def _by_pool(name: str, gpus: int = 4) -> dict[str, Any]:
    """A template that selects its node pool by name (as GKE's guide does), not by accelerator."""
    tmpl = template(accelerator=None, gpus=gpus)
    tmpl["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": name}
    return tmpl


def test_template_may_select_the_queued_node_pool_by_name(env: Env) -> None:
    env.create(TEMPLATE, _by_pool("dws-nvidia-l4"))
    env.create(PR, request(count=1))
    env.state.tick()
    assert "Provisioned" in env.conditions("req")
    assert env.record("req")["pool"] == "us-central1/NVIDIA_L4"
    pod = consuming_pod("p", accelerator=None, gpus=4)
    pod["spec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": "dws-nvidia-l4"}
    env.create(POD, pod)
    assert env.get(POD, "p")["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("tmpl", "reason", "needle"),
    [
        (None, "FailedToCreatePods", "PodTemplate default/tmpl not found"),
        (template(gpus=0), "FailedToCreatePods", "asks for no nvidia.com/gpu"),
        (template(accelerator="nvidia-tesla-t4"), "FailedToCreatePods", "accelerator nvidia-tesla-t4"),
        (
            template(accelerator=None),
            "FailedToCreatePods",
            "no nodeSelector cloud.google.com/gke-accelerator",
        ),
        (template(gpus=4, accelerator="nvidia-l4"), "FailedToBookCapacity", "never provide more than 16"),
        (template(gpus=8, accelerator="nvidia-l4"), "FailedToCreatePods", "has 4: no node can ever fit it"),
    ],
)
def test_requests_that_can_never_be_provisioned_fail(
    env: Env, tmpl: dict[str, Any] | None, reason: str, needle: str
) -> None:
    if tmpl is not None:
        env.create(TEMPLATE, tmpl)
    env.create(PR, request(count=5))
    conditions = env.conditions("req")
    assert list(conditions) == ["Failed"]
    assert conditions["Failed"]["status"] == "True" and conditions["Failed"]["reason"] == reason
    assert needle in conditions["Failed"]["message"]
    assert all(v["queued"] == 0 and v["in_use"] == 0 for v in env.state.inventory().values())
    assert env.record("req")["state"] == "FAILED" and env.record("req")["error"]["reason"] == reason


def test_booking_expires_without_a_consuming_pod(env: Env) -> None:
    provisioned(env)
    env.advance(599)
    assert "BookingExpired" not in env.conditions("req")
    env.advance(1)
    expired = env.conditions("req")["BookingExpired"]
    assert expired["status"] == "True" and expired["reason"] == "CapacityReservationTimeExpired"
    assert env.pool()["in_use"] == 0
    env.create(POD, consuming_pod("late"))
    pod = env.get(POD, "late")
    assert (
        pod["status"]["phase"] == "Pending" and "BOOKING_EXPIRED" in pod["status"]["conditions"][0]["message"]
    )


def test_booking_window_is_settable_through_control(env: Env) -> None:
    reply = env.cluster.control_methods()["SetKubeBookingWindow"]({"seconds": 60})
    assert reply["booking_seconds"] == 60
    provisioned(env)
    env.advance(60)
    assert "BookingExpired" in env.conditions("req")


def test_consuming_pods_run_on_the_nodes_and_release_when_all_ended(env: Env) -> None:
    provisioned(env)
    nodes = env.record("req")["nodes"]
    env.create(POD, consuming_pod("p0", run=700))
    env.create(POD, consuming_pod("p1", run=800))
    pods = {p["metadata"]["name"]: p for p in env.pods()}
    for pod in pods.values():
        status = pod["status"]
        assert status["phase"] == "Running" and pod["spec"]["nodeName"] in nodes
        assert status["podIP"] and status["hostIP"] and status["startTime"]
        assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
        assert {c["type"] for c in status["conditions"] if c["status"] == "True"} >= {"PodScheduled", "Ready"}
    assert pods["p0"]["spec"]["nodeName"] != pods["p1"]["spec"]["nodeName"]
    env.advance(650)  # past the booking window: consumed, so no expiry
    assert "BookingExpired" not in env.conditions("req")
    env.advance(60)  # p0 ended, p1 still runs
    assert env.get(POD, "p0")["status"]["phase"] == "Succeeded" and env.pool()["in_use"] == 16
    env.advance(100)
    env.state.tick()
    terminated = env.get(POD, "p1")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert env.pool()["in_use"] == 0
    assert env.record("req")["state"] == "CONSUMED" and list(env.conditions("req")) == [
        "Accepted",
        "Provisioned",
    ]


def test_max_run_duration_revokes_capacity_and_fails_pods(env: Env) -> None:
    provisioned(env, maxRunDurationSeconds="300")
    env.create(POD, consuming_pod("p0", run=1000))
    env.advance(300)
    revoked = env.conditions("req")["CapacityRevoked"]
    assert revoked["status"] == "True" and "revoked" in revoked["message"]
    pod = env.get(POD, "p0")["status"]
    assert pod["phase"] == "Failed" and pod["reason"] == "CapacityRevoked" and "revoked" in pod["message"]
    assert pod["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"
    assert env.pool()["in_use"] == 0 and env.record("req")["state"] == "CAPACITY_REVOKED"


@pytest.mark.parametrize(
    ("annotations", "toleration", "needle"),
    [
        ({}, True, "autoscaling.x-k8s.io/consume-provisioning-request"),
        ({"name": "missing"}, True, "default/missing"),
        ({"name": "waiting"}, True, "not Provisioned yet"),
        ({"name": "req"}, False, "untolerated taint"),
    ],
)
def test_gpu_pods_without_a_provisioned_request_stay_unschedulable(
    env: Env, annotations: dict[str, str], toleration: bool, needle: str
) -> None:
    provisioned(env, count=4)
    env.create(PR, request("waiting", count=1))
    pod = consuming_pod("p", annotations.get("name", "x"), toleration=toleration)
    if not annotations:
        pod["metadata"].pop("annotations")
    env.create(POD, pod)
    status = env.get(POD, "p")["status"]
    assert status["phase"] == "Pending" and not env.get(POD, "p")["spec"].get("nodeName")
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert needle in cond["message"]


def test_pending_pod_starts_once_its_request_is_provisioned(env: Env) -> None:
    provisioned(env, "first", count=4)
    env.create(PR, request("second", count=1))
    env.create(POD, consuming_pod("p", "second"))
    assert env.get(POD, "p")["status"]["phase"] == "Pending"
    env.delete(PR, "first")
    env.state.tick()
    assert env.get(POD, "p")["status"]["phase"] == "Running"


def test_cpu_pod_runs_at_once_and_logs(env: Env) -> None:
    env.create(POD, {"metadata": {"name": "cpu"}, "spec": _cpu_spec(run=5, exit_code=3)})
    pod = env.get(POD, "cpu")
    assert pod["status"]["phase"] == "Running" and "default-pool" in pod["spec"]["nodeName"]
    log = env.cluster.pod_log(NS, "cpu", None)
    assert f"started on node {pod['spec']['nodeName']}" in log and "python train.py" in log
    env.advance(5)
    status = env.get(POD, "cpu")["status"]
    assert status["phase"] == "Failed"
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert env.cluster.pod_log(NS, "cpu", "train").endswith("exited with code 3\n")
    assert env.cluster.pod_log(NS, "cpu", None) == env.cluster.pod_log(NS, "cpu", None)


def test_pod_log_errors(env: Env) -> None:
    from dws_emulator.kube.store import KubeError

    with pytest.raises(KubeError) as missing:
        env.cluster.pod_log(NS, "nope", None)
    assert missing.value.status == 404
    env.create(POD, consuming_pod("waiting", "nope"))
    with pytest.raises(KubeError) as waiting:
        env.cluster.pod_log(NS, "waiting", None)
    assert waiting.value.status == 400 and "waiting to start" in waiting.value.message
    with pytest.raises(KubeError) as wrong:
        env.cluster.pod_log(NS, "waiting", "other")
    assert wrong.value.status == 400


def _cpu_spec(**kwargs: Any) -> dict[str, Any]:
    from test_kube_cluster_env import pod_spec

    return pod_spec(gpus=0, accelerator=None, toleration=False, **kwargs)


def test_records_for_list_requests(env: Env) -> None:
    provisioned(env)
    env.delete(PR, "req")
    env.create(PR, request("req", count=1))  # the same name again: a second record
    records = [r for r in env.state.requests() if r["kind"] == "ProvisioningRequest"]
    assert [r["deleted"] for r in records] == [True, False]
    first = records[0]
    assert (
        first["labels"] == {"dws_key": "req"} and first["namespace"] == NS and first["name"] == "default/req"
    )
    assert first["create_time"] and first["start_time"] and first["end_time"]
    assert [h["state"] for h in first["history"]] == ["ACCEPTED", "PROVISIONED", "DELETED"]
    assert first["uid"] != records[1]["uid"]


def test_control_fail_and_revoke(env: Env) -> None:
    from dws_emulator.core.errors import EmulatorError

    methods = env.cluster.control_methods()
    provisioned(env, "a", count=1)
    env.create(POD, consuming_pod("p", "a", run=100))
    reply = methods["RevokeProvisioningRequest"]({"name": "a"})["provisioning_request"]
    assert reply["state"] == "CAPACITY_REVOKED" and env.get(POD, "p")["status"]["phase"] == "Failed"
    with pytest.raises(EmulatorError):
        methods["RevokeProvisioningRequest"]({"name": "a"})
    env.create(PR, request("b", count=8))  # 64 GPUs: never fits, fails by itself
    env.create(PR, request("c", count=1))
    reply = methods["FailProvisioningRequest"](
        {"name": "c", "reason": "ResourcePoolExhausted", "message": "no"}
    )
    assert reply["provisioning_request"]["state"] == "FAILED"
    assert env.conditions("c")["Failed"]["reason"] == "ResourcePoolExhausted"
    with pytest.raises(EmulatorError):
        methods["FailProvisioningRequest"]({"name": "zzz"})


def test_node_pools_listed_and_set(env: Env) -> None:
    methods = env.cluster.control_methods()
    pools = {p["accelerator"]: p for p in methods["GetKubeNodePools"]({})["node_pools"]}
    assert {"nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4", None} <= set(pools)
    h100 = pools["nvidia-h100-80gb"]
    assert h100["node_labels"]["cloud.google.com/gke-queued"] == "true"
    assert h100["taints"] == [{"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}]
    env.create(TEMPLATE, template("a100", gpus=8, accelerator="nvidia-tesla-a100"))
    env.create(PR, request("before", "a100", count=1))
    assert "Failed" in env.conditions("before")
    methods["SetKubeNodePools"]({"node_pools": ["a100-40=nvidia-tesla-a100"]})
    env.create(PR, request("after", "a100", count=1))
    env.state.tick()
    assert "Provisioned" in env.conditions("after")
    assert (
        env.record("after")["node_pool"] == "a100-40"
        and env.record("after")["pool"] == "us-central1/NVIDIA_TESLA_A100"
    )


def test_controllers_get_every_change_and_tick(env: Env) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.events: list[tuple[str, str]] = []
            self.ticks: list[float] = []

        def changed(self, event: Event) -> None:
            self.events.append((event.type, event.obj["metadata"]["name"]))

        def due(self, now: float) -> None:
            self.ticks.append(now)

    recorder = Recorder()
    env.cluster.controllers.append(recorder)
    env.create(TEMPLATE, template())
    env.create(PR, request())
    env.state.tick()
    # ADDED first, then the controller's own writes in order (Accepted, then Provisioned).
    assert recorder.events[:4] == [
        ("ADDED", "tmpl"),
        ("ADDED", "req"),
        ("MODIFIED", "req"),
        ("MODIFIED", "req"),
    ]
    assert recorder.ticks


def test_revoke_reasons_and_the_cli_table(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    from dws_emulator.cli import _print_requests

    provisioned(env, "timed", count=1, maxRunDurationSeconds="60")
    env.advance(60)
    assert env.conditions("timed")["CapacityRevoked"]["reason"] == "MaxRunDurationReached"
    provisioned(env, "manual", count=1, maxRunDurationSeconds="600")
    env.cluster.control_methods()["RevokeProvisioningRequest"]({"name": "manual"})
    assert env.conditions("manual")["CapacityRevoked"]["reason"] == "CapacityRevoked"
    env.create(PR, request("huge", count=9))
    records = [r for r in env.state.requests() if r["kind"] == "ProvisioningRequest"]
    assert [r["error"]["reason"] for r in records] == [
        "MaxRunDurationReached",
        "CapacityRevoked",
        "FailedToBookCapacity",
    ]
    _print_requests(records)
    out = capsys.readouterr().out
    assert "CAPACITY_REVOKED" in out and "error: code=8 " in out
    assert "never provide more than 32" in out


def test_cli_node_pool_and_booking_flags() -> None:
    from dws_emulator.cli import build_parser

    args = build_parser().parse_args(
        ["serve", "--kube-node-pools", "nvidia-l4", "h100=nvidia-h100-80gb", "--kube-booking-seconds", "30"]
    )
    assert args.kube_node_pools == ["nvidia-l4", "h100=nvidia-h100-80gb"] and args.kube_booking_seconds == 30
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--kube-node-pools", "nvidia-k80000"])
    env = Env()
    env.cluster.set_node_pools(args.kube_node_pools, replace=True)
    assert sorted(env.cluster.node_pools.by_accelerator) == ["nvidia-h100-80gb", "nvidia-l4"]
    assert env.cluster.node_pools.get("nvidia-h100-80gb").name == "h100"  # type: ignore[union-attr]


def test_manual_mode_leaves_new_requests_to_whoever_writes_their_conditions(env: Env) -> None:
    env.cluster.provisioning.manual = True
    env.create(TEMPLATE, template())
    env.create(PR, request())
    env.state.tick()
    assert env.conditions("req") == {} and env.pool()["in_use"] == 0
    assert env.record("req")["state"] == "PENDING"


def test_a_consumed_request_deleted_after_its_pods_ended_records_consumed(env: Env) -> None:
    provisioned(env, count=1)
    env.create(POD, consuming_pod("p", run=5))
    env.clock.advance(5)
    with env.state.lock:  # the pod ends and the request is deleted in one step (as Kueue's cleanup does)
        env.state.tick()
        env.store.delete(PR, NS, "req")
    record = env.record("req")
    assert [h["state"] for h in record["history"]] == ["ACCEPTED", "PROVISIONED", "CONSUMED", "DELETED"]
    assert env.pool()["in_use"] == 0


def test_a_node_pool_with_a_location_of_its_own_is_selected_by_name_and_books_there() -> None:
    """``NAME=ACCELERATOR@LOCATION``: a second H100 pool drawing on another region's capacity, got
    only by pods that name it; the cluster's own H100 pool is untouched."""
    env = Env({"us-central1/NVIDIA_H100_80GB": 32, "us-east1/NVIDIA_H100_80GB": 8})
    env.cluster.set_node_pools(["east=nvidia-h100-80gb@us-east1"])
    assert env.cluster.node_pools.get("nvidia-h100-80gb").name == "dws-nvidia-h100-80gb"  # type: ignore[union-attr]
    spec = template("east-tmpl")
    spec["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-nodepool": "east"}
    env.create(TEMPLATE, spec)
    env.create(PR, request("east-req", tmpl="east-tmpl", count=1))
    env.state.tick()
    assert "Provisioned" in env.conditions("east-req")
    record = env.record("east-req")
    assert record["pool"] == "us-east1/NVIDIA_H100_80GB" and record["node_pool"] == "east"
    assert env.pool("us-east1/NVIDIA_H100_80GB")["in_use"] == 8
    assert env.pool()["in_use"] == 0
    # Two at once would need 16 of the 8 there: never, whatever the cluster's own pool has.
    env.create(PR, request("too-big", tmpl="east-tmpl", count=2))
    env.state.tick()
    failed = env.conditions("too-big")["Failed"]
    assert failed["reason"] == "FailedToBookCapacity" and "in us-east1" in failed["message"]
    with pytest.raises(ValueError, match="needs a name"):
        env.cluster.set_node_pools(["nvidia-l4@us-east1"])
