"""Cloud Batch jobs in the attempt loop: build the Flex Start job, find it, classify its end."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.batch import (
    LABEL_MAX_WAIT,
    BatchJobBackend,
    job_from_spec,
    job_result,
    job_status,
    parse_job_name,
    task_counts,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links import BatchFlexStartJobLink, BatchJobLogsLink
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.batch_job import job_json
from airflow_provider_dws.specs.vertex_pools import duration
from airflow_provider_dws.triggers.submit import DETAIL_TOKEN

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.batch_v1 import Job

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

#: Who a job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")


#: A logs policy without a destination, in the spellings a job's JSON may have.
_NO_DESTINATION = (None, "", 0, "DESTINATION_UNSPECIFIED")


def batch_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one Cloud Batch job."""
    return f"{CONSOLE}/batch/jobsDetail/regions/{region}/jobs/{job_id}/details?project={project_id}"


def batch_job_logs_url(project_id: str, job_uid: str) -> str:
    """Logs Explorer on the job's task logs: ``logName="projects/P/logs/batch_task_logs" AND
    labels.job_uid="UID"``, the query Cloud Batch's documentation gives for a job's task logs (they
    are labelled with the job's server-made ``uid``, not its id). The logs exist only for a job
    whose ``logs_policy`` sends them to Cloud Logging, as the operator's jobs do by default."""
    from urllib.parse import quote

    query = f'logName="projects/{project_id}/logs/batch_task_logs" AND labels.job_uid="{job_uid}"'
    return f"{CONSOLE}/logs/query;query={quote(query, safe='')}?project={project_id}"


def _accelerators(gpus: tuple[str, int] | None) -> list[dict[str, Any]]:
    return [{"type": gpus[0], "count": gpus[1]}] if gpus else []


def _place(policy: dict[str, Any], placement: Placement) -> None:
    """Swap an instance policy's machine type (and its GPUs) for a failover placement's."""
    assert placement.machine_type
    accelerators = policy.get("accelerators") or []
    current = accelerators[0] if accelerators else None
    gpus = _gpus(
        placement.machine_type,
        placement.accelerator_type or (current.get("type") if current else None),
        int(current.get("count") or 0) if current else None,
    )
    policy["machine_type"] = placement.machine_type
    policy["accelerators"] = _accelerators(gpus)


def _gpus(machine_type: str, accelerator_type: str | None, count: int | None) -> tuple[str, int] | None:
    """The GPUs of one VM: a GPU machine's own, else ``count`` x ``accelerator_type`` (if any)."""
    own = catalog.batch_machine_gpus(machine_type)
    if own is not None:
        return own
    return (accelerator_type, count or 1) if accelerator_type else None


class BatchFlexStartAdapter(RequestAdapter["CreateBatchFlexStartJobOperator", BatchJobBackend]):
    """A Flex Start Cloud Batch job per attempt; the wait ends when the job ends.

    Batch has no max-wait field: the trigger cancels a job still waiting at its max wait, with
    no grace (:attr:`wait_grace`), and the task fails with capacity not obtained.
    """

    name_key = "job_name"

    target = "end"
    wait_grace = timedelta(0)
    submits_in_trigger = True
    #: What the job is, in the task log.
    label = "Flex Start"
    op: CreateBatchFlexStartJobOperator

    def backend(self, location: str | None = None) -> BatchJobBackend:
        """The Cloud Batch backend of ``location`` (default: the operator's region)."""
        return self.cached_backend(BatchJobBackend, location or self.op.region)

    def location_of(self, name: str) -> str:
        """The region of ``projects/P/locations/R/jobs/ID``."""
        return parse_job_name(name)[1]

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The ``Job`` to submit, as JSON: the user's job (or the one the parameters describe) with
        FLEX_START on every instance policy, the identity labels and the max wait label. Built
        without the client library (the trigger makes the message).

        A failover ``placement`` may swap the machine type (and its GPUs) of every instance policy;
        ``max_wait`` is the effective wait decided by the scheduling core (default: ``max_wait``).
        """
        op = self.op
        job = job_json(op.job) if op.job is not None else self._job_from_parameters()
        if op.max_run is not None:
            for group in job.get("task_groups") or []:
                group.setdefault("task_spec", {})["max_run_duration"] = duration(op.max_run)
        for instance in (job.get("allocation_policy") or {}).get("instances") or []:
            policy = instance.setdefault("policy", {})
            if placement is not None and placement.machine_type:
                _place(policy, placement)
            policy["provisioning_model"] = "FLEX_START"
        if op.service_account:
            job.setdefault("allocation_policy", {})["service_account"] = {"email": op.service_account}
        if op.network or op.subnetwork:
            interface = {"network": op.network or "", "subnetwork": op.subnetwork or ""}
            job.setdefault("allocation_policy", {})["network"] = {"network_interfaces": [interface]}
        if (job.get("logs_policy") or {}).get("destination") in _NO_DESTINATION:
            # Task logs go to Cloud Logging, where the task's "Batch Job Logs" link looks.
            job["logs_policy"] = {"destination": "CLOUD_LOGGING"}
        wait = max_wait or op.max_wait
        job["labels"] = {
            **(job.get("labels") or {}),
            **(op.labels or {}),
            **identity.labels(),
            LABEL_MAX_WAIT: str(round(wait.total_seconds())),
        }
        return job

    def _job_from_parameters(self) -> dict[str, Any]:
        """One task group of ``task_count`` tasks running the container or script, on one policy."""
        op = self.op
        if op.image_uri:
            container = {
                "image_uri": op.image_uri,
                "commands": list(op.commands or []),
                "entrypoint": op.entrypoint or "",
            }
            runnable: dict[str, Any] = {"container": container}
        else:
            runnable = {"script": {"text": op.script or ""}}
        spec: dict[str, Any] = {"runnables": [runnable]}
        if op.environment:
            spec["environment"] = {"variables": dict(op.environment)}
        group = {"task_spec": spec, "task_count": op.task_count or 1, "parallelism": op.parallelism or 0}
        assert op.machine_type is not None  # the operator requires it without a whole job
        gpus = _gpus(op.machine_type, op.accelerator_type, op.accelerator_count)
        policy = {"machine_type": op.machine_type, "accelerators": _accelerators(gpus)}
        instance = {"policy": policy, "install_gpu_drivers": op.install_gpu_drivers}
        return {"task_groups": [group], "allocation_policy": {"instances": [instance]}}

    def build(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> Job:
        """:meth:`request_spec` as the ``Job`` message (the worker's own submit path)."""
        try:
            return job_from_spec(self.request_spec(identity, placement, max_wait))
        except ValueError as err:
            raise BadRequestError(f"the Batch job is not valid: {err}") from None

    def announce(self) -> dict[str, Any]:
        """The job's name under ``job_name``, its console page under the link's key, and its task
        logs' link once the job has its uid."""
        project = resolve_project(self.op)
        return {
            "name_key": self.name_key,
            "link_key": BatchFlexStartJobLink.key,
            "link": batch_job_console_url(project, "{location}", "{id}"),
            "detail_links": [
                {
                    "key": BatchJobLogsLink.key,
                    "detail": "uid",
                    "link": batch_job_logs_url(project, DETAIL_TOKEN),
                    "token": DETAIL_TOKEN,
                }
            ],
        }

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The job's console page (and, once the job has a uid, its task logs' link, logged)."""
        _, region, job_id = parse_job_name(status.name)
        project = resolve_project(self.op)
        # A resumed task knows the uid from the succeeded job's summary (its event carries no details).
        uid = status.details.get("uid") or (status.details.get(RESULT) or {}).get("uid")
        if uid:
            self.log.info(
                "Task logs: %s", push_url(context, BatchJobLogsLink.key, batch_job_logs_url(project, uid))
            )
        return push_url(context, BatchFlexStartJobLink.key, batch_job_console_url(project, region, job_id))

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create the job of this attempt in the placement's region (ALREADY_EXISTS: adopt it)."""
        job_id = identity.batch_job_id()
        try:
            job, created = self.backend(placement.location).submit(
                self.build(identity, placement, max_wait), identity, job_id
            )
        except PermissionDeniedApiError as err:
            raise BadRequestError(
                f"permission denied creating the Batch job {job_id}: {err.message}"
            ) from None
        except InvalidRequestError as err:
            raise BadRequestError(f"Cloud Batch refused the job {job_id}: {err.message}") from None
        if not created and job.phase.terminal:
            self.log.warning("Job %s of this attempt already ended %s", job.name, job.state)
        self.log.info(
            "%s %s Batch job %s (attempt %d, %s); the provider cancels it if it still waits "
            "for capacity after %s",
            "Submitted" if created else "Adopted",
            self.label,
            job.name,
            identity.attempt,
            job.description,
            max_wait,
        )
        self.remember(context, job)
        return job

    def result(self, context: Context, status: RequestStatus) -> Any:
        """A summary of the succeeded job: name, state, task counts by state, shape and timings."""
        if RESULT in status.details:  # read by the trigger with the job's final status
            return status.details[RESULT]
        job = self.backend(self.location_of(status.name)).get(status.name)
        if job is None:
            raise RequestCancelledError(f"{status.name} disappeared right after it succeeded")
        return job_result(job, job_status(job))

    def shape(self, placement: Placement | None) -> tuple[str | None, tuple[str, int] | None, int]:
        """The job's machine type, its GPUs per VM and how many VMs it runs at once (its tasks, or
        its parallelism, over the tasks a VM takes) in ``placement``."""
        job = self.request_spec(_SHAPE_ONLY, placement)
        instances = (job.get("allocation_policy") or {}).get("instances") or []
        policy = instances[0].get("policy") or {} if instances else {}
        machine = policy.get("machine_type") or None
        accelerators = policy.get("accelerators") or []
        current = accelerators[0] if accelerators else None
        gpus = _gpus(
            machine or "",
            (current.get("type") or "") if current else None,
            int(current.get("count") or 0) if current else None,
        )
        vms = 0
        for group in job.get("task_groups") or []:
            tasks = int(group.get("task_count") or 0) or 1
            parallelism = int(group.get("parallelism") or 0)
            at_once = min(tasks, parallelism) if parallelism else tasks
            per_vm = int(group.get("task_count_per_node") or 0) or 1
            vms += -(-at_once // per_vm)
        return machine, gpus, vms

    def advise(self, placements: Sequence[Placement]) -> list[tuple[Placement, float]] | None:
        """Capacity advice for the VMs the job runs at once, per region (a Batch job chooses its
        zone: a region scores its best zone); ``None`` for a job whose machine type is not known."""
        from airflow_provider_dws.backends.compute_advice import rank_placements
        from airflow_provider_dws.backends.compute_base import ComputeBackend

        shapes = {p: self.shape(p) for p in placements}
        machines = {p: shape[0] for p, shape in shapes.items()}
        if not all(machines.values()):
            return None
        vms = max(shapes[placements[0]][2], 1)
        op = self.op
        project = resolve_project(op)

        def advice_backend(where: str) -> ComputeBackend:
            return self._backends.get(ComputeBackend, project, where, op.gcp_conn_id, op.impersonation_chain)

        return rank_placements(placements, advice_backend, lambda p: str(machines[p]), vms)

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The job's GPUs over every VM it runs at once, its machine type and its console page."""
        machine, gpus, vms = self.shape(placement)
        try:
            _, region, job_id = parse_job_name(status.name)
        except ValueError:  # recorded before its trigger made it: no page yet
            region, job_id = placement.location, ""
        return {
            "api": BatchJobBackend.kind,
            "kind": "Cloud Batch job",
            "accelerator_type": gpus[0] if gpus else None,
            "accelerator_count": gpus[1] * max(vms, 1) if gpus else 0,
            "machine_type": machine,
            "pricing_model": "flex_start",
            "console_url": batch_job_console_url(resolve_project(self.op), region, job_id)
            if job_id
            else None,
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a job that ended without success."""
        message = status.outcome.message
        region = status.details.get("region") or placement.location
        detail = f"job {status.name}{': ' + message if message else ''}"
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            what = status.description.rsplit(" in ", 1)[0] if status.description else "the requested GPU VMs"
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in {region} for {what} ({detail})"
            )
        if status.outcome.failure is FailureKind.WORKLOAD_FAILED:
            return WorkloadFailedError(f"workload failed: {self._failed_tasks(status)} ({detail})")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Cloud Batch refused the job ({detail})")
        return RequestCancelledError(f"the Batch job was cancelled before it finished ({detail})")

    def _failed_tasks(self, status: RequestStatus) -> str:
        """``2 of 16 tasks failed`` (read again: an event carries no task counts)."""
        try:
            job = self.backend(self.location_of(status.name)).get(status.name)
        except Exception:  # the message is a nicety: never lose the error over it
            job = None
        counts = task_counts(job) if job is not None else {}
        total = sum(counts.values())
        return f"{counts.get('FAILED', 0)} of {total} tasks failed" if total else "a task failed"
