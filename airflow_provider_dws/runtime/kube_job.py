"""What the adapters whose request is a ``batch/v1`` Job share (Kueue Jobs, flex-start Jobs): the
Job a task asks for (the user's manifest, or one built from ``image``), named and labelled from the
task instance, with what its pods must carry added once each; and :class:`JobAdapter`, every step
of the attempt loop such a Job takes the same way (find and adopt, submit, the result, the
record, the console link, the errors)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.kube_base import LABEL_MAX_WAIT
from airflow_provider_dws.backends.kube_jobs import JobBackend, job_result
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links import StoredUrlLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.gke import cluster_backend
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.scheduling.policies import Placement

_JobBackend = TypeVar("_JobBackend", bound=JobBackend)
#: Who a Job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")

#: Server-set metadata a user's manifest (copied from a live Job) may carry: never sent.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


def job_from_parameters(op: Any) -> dict[str, Any]:
    """The Job of an operator's ``image``, ``cmds``, ``arguments``, ``env_vars`` and
    ``parallelism``: one container, ``parallelism`` pods at once and as many completions, no retry
    of a failed pod (``backoffLimit: 0``: a failure is the task's, for Airflow's retries)."""
    container: dict[str, Any] = {"name": "main", "image": op.image}
    if op.cmds:
        container["command"] = list(op.cmds)
    if op.arguments:
        container["args"] = list(op.arguments)
    if op.env_vars:
        container["env"] = [{"name": k, "value": v} for k, v in op.env_vars.items()]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {},
        "spec": {
            "parallelism": op.parallelism,
            "completions": op.parallelism,
            "backoffLimit": 0,
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        },
    }


def named_job(
    op: Any, identity: RequestIdentity, max_wait: timedelta, extra_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The operator's Job (its ``job`` manifest, else :func:`job_from_parameters`) named from
    ``identity`` in the operator's namespace, with the operator's ``labels``, the identity labels
    and the max wait label; server-set metadata and any status dropped."""
    manifest = copy.deepcopy(dict(op.job)) if op.job is not None else job_from_parameters(op)
    manifest["apiVersion"], manifest["kind"] = "batch/v1", "Job"
    meta = dict(manifest.get("metadata") or {})
    for key in (*SERVER_METADATA, "generateName"):
        meta.pop(key, None)
    meta["name"] = identity.queued_resource_id()
    meta["namespace"] = op.namespace
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **(op.labels or {}),
        **identity.kube_labels(),
        **(extra_labels or {}),
        LABEL_MAX_WAIT: str(round(max_wait.total_seconds())),
    }
    manifest["metadata"] = meta
    manifest["spec"] = dict(manifest.get("spec") or {})
    manifest.pop("status", None)
    return manifest


def pod_spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The Job's pod spec, made its own dict (to add to it)."""
    spec = manifest.setdefault("spec", {})
    template = spec["template"] = dict(spec.get("template") or {})
    pod = template["spec"] = dict(template.get("spec") or {})
    return pod


def add_tolerations(pod: dict[str, Any], wanted: Iterable[Mapping[str, str]]) -> None:
    """Add each of ``wanted`` to the pod spec's tolerations, unless one of its key is there."""
    tolerations = list(pod.get("tolerations") or [])
    for toleration in wanted:
        if not any(t.get("key") == toleration["key"] for t in tolerations if isinstance(t, Mapping)):
            tolerations.append(dict(toleration))
    pod["tolerations"] = tolerations


def gke_job_console_url(project_id: str, location: str, cluster: str, namespace: str, name: str) -> str:
    """The console page of one Job of a GKE cluster."""
    return f"{CONSOLE}/kubernetes/job/{location}/{cluster}/{namespace}/{name}/details?project={project_id}"


class JobAdapter(RequestAdapter[Any, _JobBackend]):
    """What the adapters whose request is a Job share: one Job per attempt in the operator's cluster
    and namespace, made by the trigger; the wait ends when the Job ends. GKE has no max wait for a
    Job (Kueue neither): the trigger deletes one still waiting at its max wait, with no grace.

    A subclass gives :attr:`backend_class`, :attr:`link`, :attr:`kind_name`, :meth:`build`,
    :meth:`shape` and what its Job waited in, for the log and the errors (:meth:`waits_in`).
    """

    name_key = "job_name"
    target = "end"
    wait_grace = timedelta(0)
    submits_in_trigger = True
    #: The Job backend of the surface, its console link, and its record's readable kind.
    backend_class: ClassVar[type[JobBackend]]
    link: ClassVar[type[StoredUrlLink]]
    kind_name: ClassVar[str]

    def backend(self, location: str | None = None) -> _JobBackend:
        """The backend of the operator's cluster and namespace (one location: the cluster's)."""
        cls: Any = self.backend_class
        return cluster_backend(self, cls, location)

    def location_of(self, name: str) -> str:
        """Every Job of the task is in the cluster's location."""
        return str(self.op.location)

    def build(self, identity: RequestIdentity, max_wait: timedelta | None = None) -> dict[str, Any]:
        """The Job manifest to create for ``identity``."""
        raise NotImplementedError

    def shape(self, manifest: Mapping[str, Any]) -> tuple[int, int, str]:
        """(pods at once, accelerators per pod, accelerator) of a Job manifest (the record's facts)."""
        raise NotImplementedError

    def waits_in(self) -> str:
        """Where the Job waits, in words (``LocalQueue dws-queue``), for the log and the errors."""
        raise NotImplementedError

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The Job manifest of :meth:`build`, for the trigger to create (it is JSON already; one
        cluster, so ``placement`` changes nothing)."""
        return self.build(identity, max_wait)

    def announce(self) -> dict[str, Any]:
        """The Job's name under ``job_name``, its console page (when the cluster is named) under
        the link's key."""
        url = self._console_url("{id}")
        return {"name_key": self.name_key, **({"link_key": self.link.key, "link": url} if url else {})}

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """This task instance's live Job (or a Job that already succeeded), to adopt."""
        jobs = {job.name: job for job in self.backend().find(identity)}
        decision = choose_existing([Candidate(n, j.phase, j.timings.submitted) for n, j in jobs.items()])
        self.log.info("%s", decision.describe(identity.describe()))
        if decision.name is None:
            return None
        job = jobs[decision.name]
        self.remember(context, job)
        return Found(job, self.op.home_placement(), int(job.details.get("attempt") or 1))

    def persist_link(self, context: Context, status: RequestStatus) -> str | None:
        """The Job's console page, when the cluster is named."""
        url = self._console_url(status.name)
        if url:
            push_url(context, self.link.key, url)
        return url

    def _console_url(self, name: str) -> str | None:
        op = self.op
        if not op.project_id or not op.cluster_name or is_pending(name):
            return None
        return gke_job_console_url(str(op.project_id), op.location, op.cluster_name, op.namespace, name)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's Job (or adopt the one of that name)."""
        try:
            job, created = self.backend().submit(self.build(identity, max_wait), identity)
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the Job: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"the Kubernetes API refused the Job: {err.message}") from None
        self.log.info(
            "%s Job %s in %s (attempt %d, %s); it may wait up to %s",
            "Submitted" if created else "Adopted",
            job.name,
            self.waits_in(),
            identity.attempt,
            job.description,
            max_wait,
        )
        self.remember(context, job)
        return job

    def result(self, context: Context, status: RequestStatus) -> dict[str, Any]:
        """What the Job did: its name, namespace, status, pod counts, wait and run seconds."""
        if RESULT in status.details:  # read by the trigger with the Job's final status
            return dict(status.details[RESULT])
        fresh = self.backend().get_status(status.name)
        details = fresh.details if fresh is not None else status.details
        return job_result(status, self.op.namespace, details)

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The Job's accelerators over every pod, the accelerator, its console page."""
        pods, per_pod, accelerator = self.shape(self.build(_SHAPE_ONLY))
        return {
            "api": self.backend_class.kind,
            "kind": self.kind_name,
            # The record's project when neither the operator nor its Google connection names one (a
            # cluster reached through a Kubernetes connection).
            "project": "",
            "accelerator_type": accelerator or None,
            "accelerator_count": pods * per_pod,
            "machine_type": None,
            "pricing_model": "flex_start",
            "console_url": self._console_url(status.name),
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a Job that ended without success."""
        message = status.outcome.message
        where = f"Job {status.name} in namespace {self.op.namespace}"
        failure = status.outcome.failure
        if failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(self.not_obtained_words(status, max_wait, where))
        if failure is FailureKind.WORKLOAD_FAILED:
            return WorkloadFailedError(f"workload failed: {message or status.state} ({where})")
        if failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the Job lost its capacity: {message} ({where})")
        if failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"the Job was refused: {message} ({where})")
        return RequestCancelledError(
            f"{where} was deleted before it finished{': ' + message if message else ''}"
        )

    def not_obtained_words(self, status: RequestStatus, max_wait: timedelta, where: str) -> str:
        """The message of a Job that got no capacity within ``max_wait``."""
        message = status.outcome.message
        return (
            f"no capacity within max wait {max_wait} in {self.waits_in()} for {status.description or 'the Job'} "
            f"({where}{': ' + message if message else ''})"
        )
