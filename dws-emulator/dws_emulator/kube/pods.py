"""Pods (the scheduler and the kubelet, in one step) and the ``batch/v1`` Job controller.

Pods: one that asks for no GPU and no queued node pool runs at once on the ``default-pool``
node. One that asks for ``nvidia.com/gpu`` or a queued node pool runs only on the nodes of a
Provisioned ProvisioningRequest of its namespace that its annotations
(``autoscaling.x-k8s.io/consume-provisioning-request`` and ``.../provisioning-class-name``) name,
with the ``cloud.google.com/gke-queued`` toleration; otherwise it stays Pending with
``PodScheduled`` False, reason ``Unschedulable``, and a message that says why (retried when the
request changes). A pod that selects a flex-start node pool is placed by :mod:`.flexstart`
(which starts and ends it with :meth:`PodController.start` and :meth:`PodController.finish`). A
running pod ends after ``DWS_EMULATOR_RUN_SECONDS`` (its first container's
env), Succeeded or Failed by ``DWS_EMULATOR_EXIT_CODE``; revoked capacity fails it at once.

Jobs: pods ``<job>-<5 chars>`` with the template's labels, the labels the Job controller adds
(``batch.kubernetes.io/job-name``, ``job-name``, ``batch.kubernetes.io/controller-uid``,
``controller-uid``) and an owner reference, up to
``parallelism`` at a time until ``completions`` succeeded (``Complete``, ``SuccessCriteriaMet``,
``completionTime``) or more than ``backoffLimit`` failed (``FailureTarget``, ``Failed``);
``suspend: true`` deletes active pods, clears ``startTime`` and sets ``Suspended``.

Limits: containers start together and never restart (``OnFailure`` acts as ``Never``); no
init containers, probes, Indexed completion or pod failure policy; ``activeDeadlineSeconds`` fails the
Job (``DeadlineExceeded``) and deletes its active pods;
one pod per node slot, counted by pods not GPUs; pod IPs and container ids are made up.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .nodepools import ACCELERATOR_LABEL, NODEPOOL_LABEL, QUEUED_LABEL
from .provisioning import CLASS_ANNOTATION, CONSUME_ANNOTATION, PROVISIONED, RequestRecord, gpu_limit
from .store import KINDS, Event, KubeError, not_found, timestamp
from .validation import QUEUED_CLASS, job_labels, workload

if TYPE_CHECKING:
    from ..core.clock import Schedule
    from .nodepools import NodePools
    from .provisioning import ProvisioningController
    from .store import KubeStore


class Host(Protocol):
    """The part of :class:`~.cluster.Cluster` the pod and Job controllers use (no import cycle)."""

    store: KubeStore
    node_pools: NodePools
    provisioning: ProvisioningController
    schedule: Schedule


POD = KINDS["pods"]
JOB = KINDS["jobs.batch"]
DEFAULT_NODE = "gke-dws-cluster-default-pool-3f9a1c2e-k7p2"
ENDED_PHASES = ("Succeeded", "Failed")


def pod_condition(type_: str, status: str, now: float, reason: str = "", message: str = "") -> dict[str, Any]:
    """A pod (or Job) condition as the kubelet and controllers write it."""
    cond: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": timestamp(now),
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _hex(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def tolerates_queued(spec: dict[str, Any]) -> bool:
    for tol in spec.get("tolerations") or []:
        key, op = tol.get("key"), tol.get("operator", "Equal")
        if tol.get("effect") not in (None, "", "NoSchedule"):
            continue
        if (key == QUEUED_LABEL and (op == "Exists" or tol.get("value") == "true")) or (
            not key and op == "Exists"
        ):
            return True
    return False


class PodController:
    """Places pods on nodes, runs them for their run time, and ends them."""

    def __init__(self, cluster: Host) -> None:
        self.cluster = cluster
        self.store = cluster.store
        # uid -> (end time, exit code): what the running pod will do (timestamps are whole seconds).
        self._runs: dict[str, tuple[float, int]] = {}
        self._ip_seq = 0

    # -- consumers of a request ----------------------------------------------------------------
    def consumers(self, namespace: str, request: str, active_only: bool = False) -> list[dict[str, Any]]:
        """Pods of ``namespace`` whose annotation names ``request`` (active: Pending or Running)."""
        out = []
        for pod in self.store.iter(POD, namespace):
            if (pod["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION) != request:
                continue
            if active_only and (pod.get("status") or {}).get("phase") in ENDED_PHASES:
                continue
            out.append(pod)
        return out

    def retry_pending(self, namespace: str, request: str, now: float) -> None:
        for pod in self.consumers(namespace, request, active_only=True):
            if not pod["spec"].get("nodeName"):
                self.place(namespace, pod["metadata"]["name"], now)

    def fail_consumers(self, rec: RequestRecord, message: str, now: float) -> None:
        """The request's capacity is gone: its running pods fail."""
        for pod in self.consumers(rec.namespace, rec.name, active_only=True):
            if pod["spec"].get("nodeName"):
                self.finish(rec.namespace, pod["metadata"]["name"], 143, now, "CapacityRevoked", message)
            else:
                self.place(rec.namespace, pod["metadata"]["name"], now)

    # -- scheduling ----------------------------------------------------------------------------
    def added(self, obj: dict[str, Any], now: float) -> None:
        self.place(obj["metadata"]["namespace"], obj["metadata"]["name"], now)

    def place(self, namespace: str, name: str, now: float) -> None:
        """Run the pod on a node if one fits it, else mark it Unschedulable with the reason."""
        pod = self.store.find(POD, namespace, name)
        if (
            pod is None
            or pod["spec"].get("nodeName")
            or (pod.get("status") or {}).get("phase") in ENDED_PHASES
        ):
            return
        node, rec, why = self._node_for(pod)
        if node is None:
            self.unschedulable(pod, why, now)
            return
        self.start(pod, node, rec, now)

    def _needs_queued(self, spec: dict[str, Any]) -> bool:
        selector = spec.get("nodeSelector") or {}
        if gpu_limit(spec) > 0 or QUEUED_LABEL in selector or ACCELERATOR_LABEL in selector:
            return True
        pool = self.cluster.node_pools.by_name(selector.get(NODEPOOL_LABEL, ""))
        return pool is not None and pool.queued

    def _node_for(self, pod: dict[str, Any]) -> tuple[str | None, RequestRecord | None, str]:
        spec = pod["spec"]
        annotations = pod["metadata"].get("annotations") or {}
        namespace = pod["metadata"]["namespace"]
        nodes = 1 + sum(
            len(r.nodes) for r in self.cluster.provisioning.live.values() if r.state == PROVISIONED
        )
        prefix = f"0/{nodes} nodes are available: "
        if not self._needs_queued(spec):
            return DEFAULT_NODE, None, ""
        request = annotations.get(CONSUME_ANNOTATION)
        if not request or annotations.get(CLASS_ANNOTATION) != QUEUED_CLASS:
            return (
                None,
                None,
                (
                    f"{prefix}1 Insufficient nvidia.com/gpu. The pod asks for nvidia.com/gpu or a queued node "
                    "pool, whose nodes exist only for a Provisioned ProvisioningRequest: it needs the annotations "
                    f"{CONSUME_ANNOTATION}: <request name> and {CLASS_ANNOTATION}: {QUEUED_CLASS}"
                ),
            )
        rec = self.cluster.provisioning.get(namespace, request)
        if rec is None:
            return (
                None,
                None,
                f"{prefix}ProvisioningRequest {namespace}/{request} (annotation {CONSUME_ANNOTATION}) does not exist",
            )
        if rec.state != PROVISIONED:
            state = {"ACCEPTED": "not Provisioned yet (Accepted, waiting for capacity)"}.get(
                rec.state, f"{rec.state} (its nodes are gone)"
            )
            return None, None, f"{prefix}ProvisioningRequest {namespace}/{request} is {state}"
        selector = spec.get("nodeSelector") or {}
        pool = rec.node_pool
        assert pool is not None
        if (
            selector.get(ACCELERATOR_LABEL, pool.accelerator) != pool.accelerator
            or selector.get(NODEPOOL_LABEL, pool.name) != pool.name
        ):
            return (
                None,
                None,
                (
                    f"{prefix}{len(rec.nodes)} node(s) didn't match Pod's node affinity/selector (the nodes of "
                    f"ProvisioningRequest {namespace}/{request} are in node pool {pool.name}, {pool.accelerator})"
                ),
            )
        if not tolerates_queued(spec):
            return (
                None,
                None,
                (
                    f"{prefix}{len(rec.nodes)} node(s) had untolerated taint {{{QUEUED_LABEL}: true}} (the pod needs "
                    f"the toleration {QUEUED_LABEL}=true:NoSchedule)"
                ),
            )
        running = [
            p for p in self.consumers(namespace, request, active_only=True) if p["spec"].get("nodeName")
        ]
        if len(running) >= rec.pods:
            return (
                None,
                None,
                (
                    f"{prefix}the {rec.pods} pod slot(s) of ProvisioningRequest {namespace}/{request} are all taken"
                ),
            )
        return rec.nodes[len(running) % len(rec.nodes)], rec, ""

    def unschedulable(self, pod: dict[str, Any], message: str, now: float) -> None:
        """Mark a pod Pending with ``PodScheduled`` False, Unschedulable, ``message`` (if it changed)."""
        current = [
            c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"
        ]
        if current and current[0].get("message") == message:
            return

        def change(obj: dict[str, Any]) -> None:
            obj["status"] = {
                "phase": "Pending",
                "conditions": [pod_condition("PodScheduled", "False", now, "Unschedulable", message)],
                "qosClass": "BestEffort",
            }

        self.store.update(POD, pod["metadata"]["namespace"], pod["metadata"]["name"], change, status=True)

    def start(self, pod: dict[str, Any], node: str, rec: RequestRecord | None, now: float) -> None:
        """Bind the pod to ``node`` and run it (``rec``: the ProvisioningRequest it consumes)."""
        meta = pod["metadata"]
        run_seconds, exit_code = workload(pod["spec"])
        self._runs[meta["uid"]] = (now + run_seconds, exit_code)
        self._ip_seq += 1
        pod_ip = f"10.8.{self._ip_seq // 250}.{self._ip_seq % 250 + 2}"
        host_ip = f"10.128.0.{int(_hex(node)[:4], 16) % 250 + 2}"
        # nodeName is spec (the binding), the rest status: two writes, as scheduler and kubelet do.
        self.store.update(
            POD, meta["namespace"], meta["name"], lambda o: o["spec"].__setitem__("nodeName", node)
        )

        def change(obj: dict[str, Any]) -> None:
            obj["status"] = {
                "phase": "Running",
                "conditions": [
                    pod_condition(t, "True", now)
                    for t in (
                        "PodReadyToStartContainers",
                        "Initialized",
                        "Ready",
                        "ContainersReady",
                        "PodScheduled",
                    )
                ],
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": timestamp(now),
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c.get("image", ""),
                        "imageID": f"{c.get('image', '')}@sha256:{_hex(c.get('image', ''))}",
                        "containerID": f"containerd://{_hex(meta['uid'], c['name'])}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": timestamp(now)}},
                        "lastState": {},
                    }
                    for c in obj["spec"].get("containers") or []
                ],
                "qosClass": "BestEffort",
            }

        self.store.update(POD, meta["namespace"], meta["name"], change, status=True)
        if rec is not None:
            self.cluster.provisioning.consumed(rec)
        self.cluster.schedule.at(f"pod:{meta['uid']}:{meta['namespace']}/{meta['name']}", now + run_seconds)

    # -- ending ----------------------------------------------------------------------------------
    def due(self, key: str, now: float) -> None:
        uid, _, ref = key.partition(":")
        namespace, _, name = ref.partition("/")
        run = self._runs.get(uid)
        pod = self.store.find(POD, namespace, name)
        if run is None or pod is None or pod["metadata"]["uid"] != uid or now < run[0]:
            return
        self.finish(namespace, name, run[1], now)

    def finish(
        self,
        namespace: str,
        name: str,
        exit_code: int,
        now: float,
        reason: str = "",
        message: str = "",
        conditions: list[dict[str, Any]] | None = None,
    ) -> None:
        """End a running pod: Succeeded with exit code 0, else Failed (always Failed with a
        ``reason``); ``conditions`` are added to its own (``DisruptionTarget``)."""
        pod = self.store.find(POD, namespace, name)
        if pod is None or (pod.get("status") or {}).get("phase") in ENDED_PHASES:
            return
        self._runs.pop(pod["metadata"]["uid"], None)
        phase = "Succeeded" if exit_code == 0 and not reason else "Failed"

        def change(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = phase
            done = {"Ready", "ContainersReady", "PodReadyToStartContainers"}
            added = {c["type"] for c in conditions or []}
            status["conditions"] = [
                pod_condition(c["type"], "False", now, "PodCompleted") if c["type"] in done else c
                for c in status.get("conditions") or []
                if c["type"] not in added
            ] + [dict(c) for c in conditions or []]
            if reason:
                status["reason"], status["message"] = reason, message
            for cs in status.get("containerStatuses") or []:
                started = (cs.get("state", {}).get("running") or {}).get("startedAt", timestamp(now))
                cs["state"] = {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if phase == "Succeeded" else "Error",
                        "startedAt": started,
                        "finishedAt": timestamp(now),
                        "containerID": cs.get("containerID", ""),
                        **({"message": message} if message else {}),
                    }
                }
                cs["ready"], cs["started"] = False, False

        self.store.update(POD, namespace, name, change, status=True)
        self._ended(pod, now)

    def deleted(self, obj: dict[str, Any], now: float) -> None:
        self._runs.pop(obj["metadata"]["uid"], None)
        self._ended(obj, now)

    def _ended(self, pod: dict[str, Any], now: float) -> None:
        """A consuming pod ended: the request may release its nodes (on the next tick, so a Job's
        replacement pod, created in the same step, still counts), and a waiting pod may take its slot."""
        namespace = pod["metadata"]["namespace"]
        request = (pod["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION)
        rec = self.cluster.provisioning.get(namespace, request) if request else None
        if rec is not None:
            self.cluster.schedule.next_tick(f"pr:{rec.holder}")
            self.retry_pending(namespace, rec.name, now)

    # -- logs ------------------------------------------------------------------------------------
    def log(self, namespace: str, name: str, container: str | None) -> str:
        """Deterministic log lines: started on node X, the command, exited with code N."""
        pod = self.store.find(POD, namespace, name)
        if pod is None:
            raise not_found(POD, name)
        containers = pod["spec"].get("containers") or []
        names = [c.get("name") for c in containers]
        if container is None:
            if len(containers) != 1:
                raise KubeError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(map(str, names))}]",
                )
            container = str(names[0])
        if container not in names:
            raise KubeError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        status = pod.get("status") or {}
        if not pod["spec"].get("nodeName"):
            raise KubeError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating',
            )
        spec = containers[names.index(container)]
        command = " ".join(str(x) for x in [*(spec.get("command") or []), *(spec.get("args") or [])])
        lines = [
            f"dws-emulator: pod {namespace}/{name} container {container} started on node {pod['spec']['nodeName']}",
            f"dws-emulator: command: {command or '(image entrypoint)'} (image {spec.get('image', '')})",
        ]
        for cs in status.get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if cs.get("name") == container and terminated:
                if terminated.get("message"):
                    lines.append(f"dws-emulator: {terminated['message']}")
                lines.append(f"dws-emulator: exited with code {terminated['exitCode']}")
        return "".join(line + "\n" for line in lines)


class JobController:
    """``batch/v1`` Jobs: pods, counts, conditions, suspend and resume."""

    def __init__(self, cluster: Host) -> None:
        self.cluster = cluster
        self.store = cluster.store
        #: Job uid -> the (namespace, name) of the pods it owns, kept as each pod is written (a
        #: listener of the store, so a pod counts from its create on): a Job's sync reads its own
        #: pods, not the namespace's (1,000 Jobs' syncs over 1,000 pods each were most of a tick).
        self._owned: dict[str, set[tuple[str, str]]] = {}
        self.store.listen(self._track)

    def _track(self, event: Event) -> None:
        if event.kind is not POD:
            return
        meta = event.obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        for ref in meta.get("ownerReferences") or []:
            uid = str(ref.get("uid") or "")
            if event.type == "DELETED":
                self._owned.get(uid, set()).discard(key)
            elif uid:
                self._owned.setdefault(uid, set()).add(key)

    def pods_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The pods ``job`` owns, by name."""
        uid = job["metadata"]["uid"]
        found = (
            self.store.find(POD, namespace, name) for namespace, name in sorted(self._owned.get(uid, ()))
        )
        return [
            pod
            for pod in found
            if pod is not None
            and any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
        ]

    def sync(self, namespace: str, name: str, now: float) -> None:
        job = self.store.find(JOB, namespace, name)
        if job is None:
            return
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions):
            return
        pods = self.pods_of(job)
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in ENDED_PHASES]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        new = dict(status)
        conds = [dict(c) for c in conditions]
        if spec.get("suspend"):
            for pod in active:
                self.store.delete(POD, namespace, pod["metadata"]["name"])
            active = []
            new.pop("startTime", None)
            if not any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
                conds = [c for c in conds if c["type"] != "Suspended"]
                conds.append(self._cond("Suspended", "True", now, "JobSuspended", "Job suspended"))
        else:
            if any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
                conds = [c for c in conds if c["type"] != "Suspended"]
                conds.append(self._cond("Suspended", "False", now, "JobResumed", "Job resumed"))
            if "startTime" not in new:
                new["startTime"] = timestamp(now)
                self._schedule_deadline(spec, namespace, name, now)
            completions = int(spec.get("completions", 1) or 1)
            over = self._past_deadline(spec, new["startTime"], now)
            if over or failed > int(spec.get("backoffLimit", 6)):
                for pod in active:
                    self.store.delete(POD, namespace, pod["metadata"]["name"])
                active = []
                reason, text = (
                    ("DeadlineExceeded", "Job was active longer than specified deadline")
                    if over
                    else ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                )
                conds.append(self._cond("FailureTarget", "True", now, reason, text))
                conds.append(self._cond("Failed", "True", now, reason, text))
            elif succeeded >= completions:
                text = "Reached expected number of succeeded pods"
                conds.append(self._cond("SuccessCriteriaMet", "True", now, "CompletionsReached", text))
                conds.append(self._cond("Complete", "True", now, "CompletionsReached", text))
                new["completionTime"] = timestamp(now)
            else:
                want = min(int(spec.get("parallelism", 1)), completions - succeeded) - len(active)
                for _ in range(max(0, want)):
                    active.append(self._create_pod(job))
        new["active"] = len(active)
        new["ready"] = sum(1 for p in active if (p.get("status") or {}).get("phase") == "Running")
        new["succeeded"], new["failed"], new["terminating"] = succeeded, failed, 0
        new["uncountedTerminatedPods"] = {}
        for key in ("active", "succeeded", "failed"):
            if new[key] == 0:
                new.pop(key)  # the API server omits zero counts
        if conds:
            new["conditions"] = conds
        if new != status:
            self.store.update(JOB, namespace, name, lambda o: o.__setitem__("status", new), status=True)

    def _schedule_deadline(self, spec: dict[str, Any], namespace: str, name: str, now: float) -> None:
        deadline = spec.get("activeDeadlineSeconds")
        if type(deadline) is int and deadline > 0:
            self.cluster.schedule.at(f"job:{namespace}/{name}", now + deadline)

    @staticmethod
    def _past_deadline(spec: dict[str, Any], started: str, now: float) -> bool:
        """``activeDeadlineSeconds`` passed since the Job started (its ``startTime``)."""
        deadline = spec.get("activeDeadlineSeconds")
        if type(deadline) is not int or deadline <= 0:
            return False
        start = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        return now >= start + deadline

    def due(self, key: str, now: float) -> None:
        """A Job's ``activeDeadlineSeconds`` may have passed."""
        namespace, _, name = key.partition("/")
        self.sync(namespace, name, now)

    @staticmethod
    def _cond(type_: str, status: str, now: float, reason: str, message: str) -> dict[str, Any]:
        cond = pod_condition(type_, status, now, reason, message)
        cond["lastProbeTime"] = timestamp(now)
        return cond

    def _create_pod(self, job: dict[str, Any]) -> dict[str, Any]:
        meta = job["metadata"]
        template = job["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        pod = {
            "metadata": {
                "generateName": f"{meta['name']}-",
                "labels": {**(tmeta.get("labels") or {}), **job_labels(meta["name"], meta["uid"])},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "restartPolicy": "Never",
                "schedulerName": "default-scheduler",
                **dict(template.get("spec") or {}),
            },
        }
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        return self.store.create(POD, meta["namespace"], pod)
