"""Helpers of the cluster tests: an in-process :class:`EmulatorState` driven as the routes drive it."""

from __future__ import annotations

import copy
from typing import Any

from dws_emulator.defaults import DEFAULT_CAPACITY
from dws_emulator.kube.store import KINDS
from dws_emulator.state import EmulatorState
from dws_emulator.testing import FakeClock

PR = KINDS["provisioningrequests.autoscaling.x-k8s.io"]
POD = KINDS["pods"]
JOB = KINDS["jobs.batch"]
TEMPLATE = KINDS["podtemplates"]
NS = "default"
QUEUED = "queued-provisioning.gke.io"
CONSUME = {
    "autoscaling.x-k8s.io/consume-provisioning-request": "",
    "autoscaling.x-k8s.io/provisioning-class-name": QUEUED,
}
TOLERATION = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}


class Env:
    """The state, its fake clock and route-like writes (admission, then the store)."""

    def __init__(self, capacity: dict[str, int] | None = None) -> None:
        self.clock = FakeClock(1_800_000_000.0)
        self.state = EmulatorState(DEFAULT_CAPACITY if capacity is None else capacity, clock=self.clock)
        if "kube" not in self.state.apis:  # registered by the routes' branch; add it when absent
            from dws_emulator.kube.state import KubeState

            self.state.apis["kube"] = KubeState(self.state)
        self.kube = self.state.apis["kube"]
        self.cluster = self.kube.cluster
        self.store = self.kube.store

    def create(self, kind: Any, obj: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        with self.state.lock:
            self.state.tick()
            self.cluster.admit("CREATE", kind, namespace, obj, None)
            return self.store.create(kind, namespace, obj)

    def update(self, kind: Any, name: str, change: Any, namespace: str = NS) -> dict[str, Any]:
        with self.state.lock:
            self.state.tick()
            obj = self.store.get(kind, namespace, name)
            old = copy.deepcopy(obj)
            change(obj)
            self.cluster.admit("UPDATE", kind, namespace, obj, old)
            return self.store.replace(kind, namespace, name, obj)

    def delete(self, kind: Any, name: str, namespace: str = NS) -> None:
        with self.state.lock:
            self.state.tick()
            self.store.delete(kind, namespace, name)

    def get(self, kind: Any, name: str, namespace: str = NS) -> dict[str, Any]:
        with self.state.lock:
            self.state.tick()
            return self.store.get(kind, namespace, name)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.state.tick()

    def conditions(self, name: str, tick: bool = True) -> dict[str, dict[str, Any]]:
        """The request's conditions by type (``tick=False``: as stored, before the next tick)."""
        obj = self.get(PR, name) if tick else self.store.get(PR, NS, name)
        return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}

    def pool(self, key: str = "us-central1/NVIDIA_H100_80GB") -> dict[str, int]:
        return self.state.inventory()[key]

    def record(self, name: str) -> dict[str, Any]:
        return [
            r
            for r in self.state.requests()
            if r["kind"] == "ProvisioningRequest" and r["display_name"] == name
        ][-1]

    def pods(self, namespace: str = NS) -> list[dict[str, Any]]:
        with self.state.lock:
            self.state.tick()
            return self.store.select(POD, namespace)


def pod_spec(
    gpus: int = 8,
    accelerator: str | None = "nvidia-h100-80gb",
    run: float | None = 30,
    exit_code: int | None = None,
    toleration: bool = True,
) -> dict[str, Any]:
    env = []
    if run is not None:
        env.append({"name": "DWS_EMULATOR_RUN_SECONDS", "value": str(run)})
    if exit_code is not None:
        env.append({"name": "DWS_EMULATOR_EXIT_CODE", "value": str(exit_code)})
    container: dict[str, Any] = {
        "name": "train",
        "image": "busybox",
        "command": ["python", "train.py"],
        "env": env,
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    if accelerator:
        spec["nodeSelector"] = {"cloud.google.com/gke-accelerator": accelerator}
    if toleration:
        spec["tolerations"] = [dict(TOLERATION)]
    return spec


def template(name: str = "tmpl", **kwargs: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "template": {"spec": pod_spec(**kwargs)}}


def request(name: str = "req", tmpl: str = "tmpl", count: int = 2, **parameters: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "provisioningClassName": QUEUED,
        "podSets": [{"podTemplateRef": {"name": tmpl}, "count": count}],
    }
    if parameters:
        spec["parameters"] = dict(parameters)
    return {"metadata": {"name": name, "labels": {"dws_key": name}}, "spec": spec}


def consuming_pod(name: str, req: str = "req", **kwargs: Any) -> dict[str, Any]:
    annotations = {**CONSUME, "autoscaling.x-k8s.io/consume-provisioning-request": req}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": pod_spec(**kwargs)}


def provisioned(env: Env, name: str = "req", count: int = 2, tmpl: str = "tmpl", **parameters: str) -> None:
    """A PodTemplate (if absent) and a request, ticked until Provisioned."""
    if env.store.find(TEMPLATE, NS, tmpl) is None:
        env.create(TEMPLATE, template(tmpl))
    env.create(PR, request(name, tmpl, count, **parameters))
    env.state.tick()
    assert "Provisioned" in env.conditions(name), env.conditions(name)
