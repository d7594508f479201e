"""A Kueue-like admission controller over the Kubernetes store: Jobs, Workloads, ProvisioningRequests.

What it models (Kueue's job framework, workload controller, scheduler and provisioning admission
check, as far as a suspended ``batch/v1`` Job on the seeded queues goes; names, seeded objects and
status wording in :mod:`.kueue_objects`, the Job integration in :mod:`.kueue_jobs`):

- A Job with label ``kueue.x-k8s.io/queue-name`` is Kueue's (:meth:`Kueue.admit` suspends it at
  create, as Kueue's webhook does). It gets a Workload (owned by the Job, label
  ``kueue.x-k8s.io/job-uid``, the Job's ``provreq.kueue.x-k8s.io/*`` annotations, one pod set
  ``main`` of ``min(parallelism, completions)`` pods). A LocalQueue or ClusterQueue that does not
  exist leaves it with QuotaReserved False, reason Inadmissible, saying which.
- Quota is reserved at once (the seeded quota is far above any pool): QuotaReserved True, the
  admission (flavor ``dws-flavor``), the ClusterQueue's admission checks Pending, Admitted False.
- A check of controller ``kueue.x-k8s.io/provisioning-request`` creates PodTemplates
  ``ppt-<request>-<podset>`` (the pod set's template with the flavor merged, limits as missing
  requests; owned by the Workload, then by the request) and the request
  ``<workload>-<check>-<attempt>`` (class and parameters from the config, then the Workload's
  annotations; owned by the Workload; label ``kueue.x-k8s.io/managed``). A pod set without a
  managed resource needs no request: the check is Ready at once.
- Provisioned: the check Ready with podSetUpdates (the two consume annotations), the Workload
  Admitted, the Job unsuspended with the flavor's node selector and toleration, the updates and
  label ``kueue.x-k8s.io/podset`` merged into its pod template.
- Failed, or BookingExpired while not admitted: attempt <= backoffLimitCount: the check Retry
  (``requeueAfterSeconds`` = base * 2^(n-1), capped), the Workload Evicted (reason AdmissionCheck),
  its requests deleted (CleanupProvisioningRequestsOnEviction), QuotaReserved False, the check
  reset to Pending with ``retryCount`` + 1 and ``requeueState.requeueAt``; when that passes
  (:meth:`Kueue.due`), Requeued True (BackoffFinished), quota again, request attempt n + 1.
  Past the limit: the check Rejected, the Workload deactivated (``spec.active`` false, Evicted
  reason DeactivatedDueToAdmissionCheck with the check's message), the Job stays suspended.
- CapacityRevoked while the Workload is active: the check Rejected, deactivated and evicted as
  above; the Job is stopped as Kueue stops a Job: suspended, its template restored to the pod set's,
  ``status.startTime`` cleared, and its pods not yet ended deleted (what the Job controller does
  on suspend; done here too so the store path needs no Job controller).
- The Job Complete or Failed: the Workload Finished (Succeeded/Failed, the Job's message), its
  requests and their PodTemplates deleted. The Job deleted: its Workload, the Workload's requests
  and PodTemplates deleted (garbage collection by owner, done here for the store path). A Workload
  deleted by a client: its requests go, and the Job gets a new Workload.

Timing: everything but deletions happens inside the write that caused it (the store calls its
listeners synchronously). Deletions (requests, PodTemplates, pods, a deleted Job's Workload) are
carried out at the next :meth:`Kueue.due`, i.e. the next tick, each only if the object still has
the owner it was doomed for: the controller whose write led here (failing a request's pods,
collecting a Job's dependents) may still be working on those objects.

Limits: one pod set (batch/v1 Jobs only: no JobSet, RayJob, plain pods); no quota accounting,
cohorts, preemption, priorities, partial admission, waitForPodsReady, podSetMergePolicy, or
``podSetUpdates.nodeSelector`` from provisioning class details; of the queues' status only the
pending/reserving/admitted counts are kept (no flavor usage); a conflicting node selector is
overwritten rather than failing the Job; no Events are written; the backoff has no jitter. Writes
go to the store directly (the controllers' path), under the core's lock like every controller.
"""

from __future__ import annotations

import copy
import heapq
import json
import logging
from typing import Any

from .kueue_jobs import job_end, merged, new_workload, start_job, stop_job
from .kueue_objects import (
    ADMISSION_CHECKS,
    CLASS_ANNOTATION,
    CLUSTER_QUEUES,
    CONFIGS,
    CONSUME_ANNOTATION,
    CONTROLLER_NAME,
    JOBS,
    LOCAL_QUEUES,
    MANAGED_LABEL,
    MISCONFIGURED,
    PODS,
    PODTEMPLATES,
    PROVREQ_PREFIX,
    QUEUE_LABEL,
    REQUESTS,
    RESOURCE_FLAVORS,
    SUSPENDED,
    WORKLOADS,
    attempt_of,
    backoff_seconds,
    checks_message,
    controller_of,
    evict,
    find_condition,
    is_true,
    limits_as_requests,
    owned_by,
    owner_reference,
    parse_time,
    pod_resources,
    pod_template_name,
    remove_condition,
    request_name,
    reserve,
    retry_strategy,
    set_check_state,
    set_condition,
    true_in,
    workload_name,
    workload_summary,
)
from .kueue_queues import (
    QueueCounts,
    assigned_flavor,
    flavor_terms,
    is_active,
    seed,
    update_active,
    update_check_active,
)
from .store import Event, Kind, KubeError, KubeStore, timestamp

__all__ = ["Kueue", "pod_template_name", "request_name", "seed", "workload_name"]

log = logging.getLogger("dws_emulator")

_KINDS_BY_KEY = {kind.key: kind for kind in (REQUESTS, PODTEMPLATES, PODS, WORKLOADS)}

#: A drain that keeps finding work this long is a controller bug, not a busy cluster.
_MAX_STEPS = 100_000

Key = tuple[str, str, str]  # (what, namespace, name)


class Kueue:
    """Kueue over ``cluster.store``: call :meth:`changed` with every store change and :meth:`due` every tick."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.store: KubeStore = cluster.store
        self._queue: dict[Key, None] = {}  # ordered set of pending work
        self._draining = False
        self._heap: list[tuple[float, str, str]] = []  # (requeue time, namespace, job name)
        self._scheduled: dict[tuple[str, str], float] = {}
        # Deletions wait for the next tick: another controller may be in the middle of the write
        # that led here (failing a request's pods, collecting a Job's dependents) and must not find
        # its objects gone under it. (kind key, namespace, name) -> owner uids it must still have.
        self._doomed: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self._counts = QueueCounts(self.store)

    # -- the cluster's hooks ---------------------------------------------------------------------

    def admit(
        self, operation: str, kind: Kind, namespace: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Kueue's Job webhook: a Job created with the queue-name label is created suspended."""
        if operation == "CREATE" and kind.key == JOBS.key:
            if (obj.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL):
                obj.setdefault("spec", {})["suspend"] = True

    def changed(self, event: Event) -> None:
        """A stored object changed: reconcile what depends on it (our own writes come back here too)."""
        if event.kind is WORKLOADS:
            self._counts.seen(event.namespace, event.obj, event.type == "DELETED")
        for key in self._keys_of(event):
            self._queue[key] = None
        self._drain()

    def due(self, now: float) -> None:
        """Carry out the deletions decided since the last tick; requeue Workloads whose backoff passed."""
        doomed, self._doomed = self._doomed, {}
        for (kind_key, ns, name), owners in doomed.items():
            kind = _KINDS_BY_KEY[kind_key]
            obj = self.store.find(kind, ns, name)
            if obj is None or not any(owned_by(obj, uid) for uid in owners):
                continue
            if kind is PODS and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            self._delete(kind, ns, name)
        while self._heap and self._heap[0][0] <= now:
            _, namespace, job = heapq.heappop(self._heap)
            if self._scheduled.get((namespace, job), now + 1) <= now:
                del self._scheduled[(namespace, job)]
            self._queue[("job", namespace, job)] = None
        self._drain()

    def workloads(self) -> list[dict[str, Any]]:
        """A summary of every Workload: its Job, queue, state, checks, attempt, live requests, and why."""
        return [workload_summary(self.store, wl) for wl in self.store.iter(WORKLOADS)]

    # -- work queue ------------------------------------------------------------------------------

    def _keys_of(self, event: Event) -> list[Key]:
        obj, ns, key = event.obj, event.namespace, event.kind.key
        name = obj["metadata"]["name"]
        if key == JOBS.key:
            if event.type == "DELETED":
                return [("gc-job", ns, f"{name}/{obj['metadata'].get('uid', '')}")]
            return [("job", ns, name)]
        if key == WORKLOADS.key:
            job = controller_of(obj, "Job")
            keys: list[Key] = []
            if event.type == "DELETED":
                keys.append(("gc-workload", ns, json.dumps(obj)))
            if job:
                keys.append(("job", ns, job))
            return keys
        if key == REQUESTS.key:
            wl_name = controller_of(obj, "Workload")
            wl = self.store.find(WORKLOADS, ns, wl_name) if wl_name else None
            job = controller_of(wl, "Job") if wl else None
            return [("job", ns, job)] if job else []
        if key in (CLUSTER_QUEUES.key, RESOURCE_FLAVORS.key, ADMISSION_CHECKS.key, CONFIGS.key):
            # Rare: whether each ClusterQueue is active (and the Workloads it held back, if so).
            return [("queues", "", "")]
        if key == LOCAL_QUEUES.key and event.type == "ADDED":
            return self._held_back()
        return []

    def _held_back(self) -> list[Key]:
        """The Jobs whose Workloads wait for a queue (missing or inactive) to take them."""
        return [
            ("job", w["metadata"]["namespace"], job)
            for w in self.store.iter(WORKLOADS)
            if (job := controller_of(w, "Job")) and not is_true(w, "QuotaReserved")
        ]

    def _queues(self) -> None:
        """Kueue's AdmissionCheck and ClusterQueue controllers: each check's and queue's Active
        condition; a queue that became active looks again at the Workloads held back."""
        now = self.store.clock()
        for check in list(self.store.iter(ADMISSION_CHECKS)):
            update_check_active(self.store, check, now)
        woke = [update_active(self.store, cq, now) for cq in list(self.store.iter(CLUSTER_QUEUES))]
        if any(woke):
            for key in self._held_back():
                self._queue[key] = None

    def _drain(self) -> None:
        if self._draining:
            return
        self._draining = True
        try:
            steps = 0
            while self._queue or self._counts.dirty:
                if not self._queue:
                    self._counts.flush()
                    continue
                what, ns, name = next(iter(self._queue))
                del self._queue[(what, ns, name)]
                steps += 1
                if steps > _MAX_STEPS:
                    log.error(
                        "kueue: giving up a drain after %d steps (last %s %s/%s)", steps, what, ns, name
                    )
                    self._queue.clear()
                    break
                if what == "job":
                    self._reconcile(ns, name)
                elif what == "queues":
                    self._queues()
                elif what == "gc-job":
                    job_name, _, uid = name.rpartition("/")
                    self._collect_job(ns, job_name, uid)
                else:
                    self._collect_workload(ns, json.loads(name))
        finally:
            self._draining = False

    # -- garbage collection ----------------------------------------------------------------------

    def _delete(self, kind: Kind, ns: str, name: str) -> None:
        try:
            self.store.delete(kind, ns, name)
        except KubeError as err:
            if err.status != 404:
                raise

    def _doom(self, kind: Kind, ns: str, name: str, *owners: str) -> None:
        """Delete ``name`` on the next tick if it is still owned by one of ``owners`` then."""
        key = (kind.key, ns, name)
        self._doomed[key] = tuple(dict.fromkeys(self._doomed.get(key, ()) + owners))

    def _delete_requests(self, ns: str, wl: dict[str, Any]) -> None:
        """Every request and PodTemplate of every attempt of ``wl`` (found by name, kept if not its)."""
        meta, status = wl["metadata"], wl.get("status") or {}
        wl_uid = meta["uid"]
        for check in status.get("admissionChecks") or []:
            for attempt in range(1, int(check.get("retryCount") or 0) + 2):
                name = request_name(meta["name"], check["name"], attempt)
                pr = self.store.find(REQUESTS, ns, name)
                owners = [wl_uid]  # a template is the Workload's until its request takes it over
                if pr is not None and owned_by(pr, wl_uid):
                    self._doom(REQUESTS, ns, name, wl_uid)
                    owners.append(pr["metadata"]["uid"])
                for ps in wl["spec"].get("podSets") or []:
                    self._doom(PODTEMPLATES, ns, pod_template_name(name, ps["name"]), *owners)

    def _collect_job(self, ns: str, name: str, uid: str) -> None:
        wl = self.store.find(WORKLOADS, ns, workload_name(name, uid))
        if owned_by(wl, uid):
            assert wl is not None
            self._delete_requests(ns, wl)
            self._doom(WORKLOADS, ns, wl["metadata"]["name"], uid)

    def _collect_workload(self, ns: str, wl: dict[str, Any]) -> None:
        self._delete_requests(ns, wl)

    def _stop(self, ns: str, job: dict[str, Any], wl: dict[str, Any] | None) -> None:
        for pod in stop_job(self.store, ns, job, wl):
            self._doom(PODS, ns, pod, job["metadata"]["uid"])

    # -- the reconciler --------------------------------------------------------------------------

    def _reconcile(self, ns: str, name: str) -> None:
        job = self.store.find(JOBS, ns, name)
        if job is None:
            return
        queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            return  # not Kueue's (manageJobsWithoutQueueName is off)
        now = self.store.clock()
        wl_name = workload_name(name, job["metadata"]["uid"])
        found = self.store.find(WORKLOADS, ns, wl_name)
        wl = copy.deepcopy(found) if found is not None else None
        ended = job_end(job)
        if ended is not None:
            if wl is not None:
                if not is_true(wl, "Finished"):
                    success, message = ended
                    status = copy.deepcopy(wl.get("status") or {})
                    set_condition(
                        status,
                        "Finished",
                        "True",
                        "Succeeded" if success else "Failed",
                        message,
                        now,
                        wl["metadata"]["generation"],
                    )
                    self._write_status(ns, wl, status)
                self._delete_requests(ns, wl)
            return
        if wl is None:
            if not job["spec"].get("suspend"):
                # A Job running without a Workload (created past the webhook): stop it first.
                self._stop(ns, job, None)
                job = self.store.find(JOBS, ns, name) or job
            wl = self._create_workload(ns, job, wl_name, queue)
        self._sync(ns, job, wl, now)

    def _create_workload(self, ns: str, job: dict[str, Any], wl_name: str, queue: str) -> dict[str, Any]:
        try:
            return self.store.create(WORKLOADS, ns, new_workload(job, wl_name, queue))
        except KubeError as err:
            if err.status != 409:
                raise
            return self.store.get(WORKLOADS, ns, wl_name)

    def _schedule(self, ns: str, job: str, at: float) -> None:
        if self._scheduled.get((ns, job)) != at:
            self._scheduled[(ns, job)] = at
            heapq.heappush(self._heap, (at, ns, job))

    def _write_status(self, ns: str, wl: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if status == (wl.get("status") or {}):
            return wl
        return self.store.update(
            WORKLOADS, ns, wl["metadata"]["name"], lambda o: o.__setitem__("status", status), status=True
        )

    def _sync(self, ns: str, job: dict[str, Any], wl: dict[str, Any], now: float) -> None:
        """The workload controller, scheduler and provisioning check in one pass, then the Job."""
        if is_true(wl, "Finished"):
            return
        gen = wl["metadata"]["generation"]
        status = copy.deepcopy(wl.get("status") or {})
        if wl["spec"].get("active") is False:
            self._deactivated(ns, job, wl, status, now)
            return
        queue = wl["spec"].get("queueName", "")
        lq = self.store.find(LOCAL_QUEUES, ns, queue)
        cq_name = (lq or {}).get("spec", {}).get("clusterQueue", "")
        cq = self.store.find(CLUSTER_QUEUES, "", cq_name) if lq is not None else None
        if lq is None or cq is None:
            message = (
                f"LocalQueue {queue} doesn't exist" if lq is None else f"ClusterQueue {cq_name} doesn't exist"
            )
            if not is_true(wl, "QuotaReserved"):
                set_condition(status, "QuotaReserved", "False", MISCONFIGURED, message, now, gen)
                self._write_status(ns, wl, status)
            return
        if not true_in(status, "QuotaReserved") and not is_active(cq):
            message = f"ClusterQueue {cq_name} is inactive"
            set_condition(status, "QuotaReserved", "False", SUSPENDED, message, now, gen)
            self._write_status(ns, wl, status)
            return
        requeue = status.get("requeueState") or {}
        if requeue.get("requeueAt"):
            at = parse_time(requeue["requeueAt"])
            if at > now:
                self._schedule(ns, job["metadata"]["name"], at)
                self._write_status(ns, wl, status)
                return
            requeue.pop("requeueAt")
            set_condition(
                status, "Requeued", "True", "BackoffFinished", "The workload backoff was finished", now, gen
            )
        if not true_in(status, "QuotaReserved"):
            reserve(wl, status, cq, now)
        admitted = true_in(status, "Admitted")
        # The checks read the Workload as this pass leaves it (its admission: the flavor).
        current = {**wl, "status": status}
        for check in status.get("admissionChecks") or []:
            self._provision(ns, current, check, admitted, now)
        rejected = [c for c in status["admissionChecks"] if c["state"] == "Rejected"]
        retry = [c for c in status["admissionChecks"] if c["state"] == "Retry"]
        if rejected:
            # DeactivationTarget, then the workload controller turns the Workload off.
            message = checks_message(rejected, "Rejected")
            set_condition(status, "DeactivationTarget", "True", "AdmissionCheck", message, now, gen)
            wl = self._write_status(ns, wl, status)
            wl = self.store.update(
                WORKLOADS, ns, wl["metadata"]["name"], lambda o: o["spec"].__setitem__("active", False)
            )
            self._deactivated(ns, job, wl, copy.deepcopy(wl["status"]), now)
            return
        if retry:
            message = f"Evicted due to {checks_message(retry, 'Retry')}"
            at = max(
                parse_time(c["lastTransitionTime"]) + int(c.get("requeueAfterSeconds") or 0) for c in retry
            )
            evict(status, "AdmissionCheck", message, now, gen)
            status["requeueState"] = {
                "count": int((status.get("requeueState") or {}).get("count") or 0) + 1,
                "requeueAt": timestamp(at),
            }
            self._write_status(ns, wl, status)
            self._delete_requests(ns, wl)
            self._schedule(ns, job["metadata"]["name"], at)
            self._stop(ns, job, wl)
            return
        checks = status.get("admissionChecks") or []
        if all(c["state"] == "Ready" for c in checks) and not admitted:
            set_condition(status, "Admitted", "True", "Admitted", "The workload is admitted", now, gen)
        elif not all(c["state"] == "Ready" for c in checks):
            set_condition(
                status,
                "Admitted",
                "False",
                "UnsatisfiedChecks",
                "The workload has not all checks ready",
                now,
                gen,
            )
        wl = self._write_status(ns, wl, status)
        if true_in(status, "Admitted") and job["spec"].get("suspend"):
            start_job(self.store, ns, job, wl)
        elif not true_in(status, "Admitted") and not job["spec"].get("suspend"):
            self._stop(ns, job, wl)

    def _provision(
        self, ns: str, wl: dict[str, Any], check: dict[str, Any], admitted: bool, now: float
    ) -> None:
        """The provisioning admission check for one check state (changed in place)."""
        ac = self.store.find(ADMISSION_CHECKS, "", check["name"])
        if ac is None or ac["spec"].get("controllerName") != CONTROLLER_NAME:
            return  # another controller's check: it stays as it is
        params = ac["spec"].get("parameters") or {}
        config = (
            self.store.find(CONFIGS, "", params.get("name", ""))
            if params.get("kind") == "ProvisioningRequestConfig"
            else None
        )
        if config is None:
            set_check_state(check, "Pending", "the check is not active", now)
            return
        managed = set(config["spec"].get("managedResources") or [])
        podsets = [
            ps
            for ps in wl["spec"]["podSets"]
            if ps["count"] > 0 and (not managed or managed & pod_resources(ps["template"]))
        ]
        if not podsets:
            if check["state"] != "Ready":
                set_check_state(check, "Ready", "the provisioning request is not needed", now)
                check.pop("podSetUpdates", None)
            return
        limit, base, cap = retry_strategy(config)
        wl_name, retries = wl["metadata"]["name"], int(check.get("retryCount") or 0)
        name = request_name(wl_name, check["name"], retries + 1)
        pr = self.store.find(REQUESTS, ns, name)
        if pr is not None and not owned_by(pr, wl["metadata"]["uid"]):
            check["message"] = f'Error creating ProvisioningRequest "{name}": already exists'
            return
        if pr is None:
            if check["state"] != "Ready":
                self._create_request(ns, wl, config, name, podsets)
            return
        attempt = attempt_of(name, wl_name, check["name"]) or 1
        failed = find_condition(pr, "Failed")
        expired = find_condition(pr, "BookingExpired")
        if is_true(pr, "Failed") or (is_true(pr, "BookingExpired") and not admitted):
            cond, what = (failed, "failure") if is_true(pr, "Failed") else (expired, "booking expired")
            assert cond is not None
            if attempt <= limit:
                check["message"] = f"Retrying after {what}: {cond.get('message', '')}"
                if attempt > retries and check["state"] != "Retry":
                    set_check_state(check, "Retry", check["message"], now)
                    check["requeueAfterSeconds"] = backoff_seconds(retries + 1, base, cap)
            else:
                set_check_state(check, "Rejected", cond.get("message", ""), now)
        elif is_true(pr, "CapacityRevoked"):
            set_check_state(
                check, "Rejected", (find_condition(pr, "CapacityRevoked") or {}).get("message", ""), now
            )
        elif is_true(pr, "BookingExpired"):
            pass  # admitted already: Kueue leaves it to the pods
        elif is_true(pr, "Provisioned"):
            if check["state"] != "Ready":
                set_check_state(
                    check, "Ready", (find_condition(pr, "Provisioned") or {}).get("message", ""), now
                )
                check["podSetUpdates"] = [
                    {
                        "name": ps["name"],
                        "annotations": {
                            CONSUME_ANNOTATION: name,
                            CLASS_ANNOTATION: pr["spec"].get("provisioningClassName", ""),
                        },
                    }
                    for ps in podsets
                ]
        elif is_true(pr, "Accepted"):
            provisioned = find_condition(pr, "Provisioned")
            if provisioned is not None:
                set_check_state(check, "Pending", provisioned.get("message", ""), now)
        else:
            set_check_state(check, "Pending", "", now)

    def _create_request(
        self, ns: str, wl: dict[str, Any], config: dict[str, Any], name: str, podsets: list[dict[str, Any]]
    ) -> None:
        """PodTemplates (owned by the Workload), the request, then the templates handed to the request."""
        params = {str(k): str(v) for k, v in (config["spec"].get("parameters") or {}).items()}
        for key, value in (wl["metadata"].get("annotations") or {}).items():
            if key.startswith(PROVREQ_PREFIX):
                params[key[len(PROVREQ_PREFIX) :]] = str(value)
        refs = []
        for ps in podsets:
            pt_name = pod_template_name(name, ps["name"])
            if self.store.find(PODTEMPLATES, ns, pt_name) is None:
                labels, tolerations = flavor_terms(self.store, assigned_flavor(wl))
                template = limits_as_requests(merged(ps["template"], labels, tolerations))
                self.store.create(
                    PODTEMPLATES,
                    ns,
                    {
                        "metadata": {
                            "name": pt_name,
                            "labels": {MANAGED_LABEL: "true"},
                            "ownerReferences": [owner_reference(wl)],
                        },
                        "template": template,
                    },
                )
            refs.append({"podTemplateRef": {"name": pt_name}, "count": ps["count"]})
        spec: dict[str, Any] = {
            "provisioningClassName": config["spec"].get("provisioningClassName", ""),
            "podSets": refs,
            "parameters": params,
        }
        pr = self.store.create(
            REQUESTS,
            ns,
            {
                "metadata": {
                    "name": name,
                    "labels": {MANAGED_LABEL: "true"},
                    "ownerReferences": [owner_reference(wl)],
                },
                "spec": spec,
            },
        )
        for ref in refs:
            pt_name = ref["podTemplateRef"]["name"]
            if owned_by(self.store.find(PODTEMPLATES, ns, pt_name), wl["metadata"]["uid"]):
                self.store.update(
                    PODTEMPLATES,
                    ns,
                    pt_name,
                    lambda o: o["metadata"].__setitem__("ownerReferences", [owner_reference(pr)]),
                )

    def _deactivated(
        self, ns: str, job: dict[str, Any], wl: dict[str, Any], status: dict[str, Any], now: float
    ) -> None:
        """An inactive Workload: evicted once (its reason from DeactivationTarget), no quota, no requests."""
        gen = wl["metadata"]["generation"]
        if not true_in(status, "Evicted"):
            target = find_condition({"status": status}, "DeactivationTarget")
            reason, message = "Deactivated", "The workload is deactivated"
            if target is not None:
                reason, message = (
                    f"DeactivatedDueTo{target['reason']}",
                    f"{message} due to {target['message']}",
                )
            evict(status, reason, message, now, gen)
        remove_condition(status, "DeactivationTarget")
        status.pop("requeueState", None)
        wl = self._write_status(ns, wl, status)
        self._delete_requests(ns, wl)
        self._stop(ns, job, wl)
