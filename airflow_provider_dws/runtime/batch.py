"""Cloud Batch jobs in the attempt loop: build the Flex Start job, find it, classify its end."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.batch import (
    LABEL_MAX_WAIT,
    BatchJobBackend,
    job_status,
    parse_job_name,
    task_counts,
)
from airflow_provider_dws.console import batch_job_console_url, batch_job_logs_url, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links import BatchFlexStartJobLink, BatchJobLogsLink
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.reserved import ReservedSteps, check_machine
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.batch_job import as_job_dict

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.batch_v1 import Job

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

#: Who a job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")


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
    #: What the job is, in the task log.
    label = "Flex Start"
    op: CreateBatchFlexStartJobOperator

    def backend(self, location: str | None = None) -> BatchJobBackend:
        """The Cloud Batch backend of ``location`` (default: the operator's region)."""
        return self.cached_backend(BatchJobBackend, location or self.op.region)

    def location_of(self, name: str) -> str:
        """The region of ``projects/P/locations/R/jobs/ID``."""
        return parse_job_name(name)[1]

    def build(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> Job:
        """The ``Job`` to submit: the user's job (or the one the parameters describe) with FLEX_START
        on every instance policy, the identity labels and the max wait label.

        A failover ``placement`` may swap the machine type (and its GPUs) of every instance policy;
        ``max_wait`` is the effective wait decided by the scheduling core (default: ``max_wait``).
        """
        from google.cloud.batch_v1 import AllocationPolicy, Job, LogsPolicy, ServiceAccount

        op = self.op
        job = Job(as_job_dict(op.job)) if op.job is not None else self._job_from_parameters()
        if op.max_run is not None:
            for group in job.task_groups:
                # proto-plus takes a timedelta for a Duration (the stubs type only the message).
                group.task_spec.max_run_duration = op.max_run  # type: ignore[assignment]
        for instance in job.allocation_policy.instances:
            policy = instance.policy
            if placement is not None and placement.machine_type:
                current = policy.accelerators[0] if policy.accelerators else None
                gpus = _gpus(
                    placement.machine_type,
                    placement.accelerator_type or (current.type_ if current else None),
                    current.count if current else None,
                )
                policy.machine_type = placement.machine_type
                policy.accelerators = (
                    [AllocationPolicy.Accelerator(type_=gpus[0], count=gpus[1])] if gpus else []
                )
            policy.provisioning_model = AllocationPolicy.ProvisioningModel.FLEX_START  # type: ignore[assignment]
        if op.service_account:
            job.allocation_policy.service_account = ServiceAccount(email=op.service_account)
        if op.network or op.subnetwork:
            interface = AllocationPolicy.NetworkInterface(
                network=op.network or "", subnetwork=op.subnetwork or ""
            )
            job.allocation_policy.network = AllocationPolicy.NetworkPolicy(network_interfaces=[interface])
        if not job.logs_policy.destination:
            # Task logs go to Cloud Logging, where the task's "Batch Job Logs" link looks.
            job.logs_policy = LogsPolicy(destination=LogsPolicy.Destination.CLOUD_LOGGING)
        wait = max_wait or op.max_wait
        job.labels = {
            **dict(job.labels),
            **(op.labels or {}),
            **identity.labels(),
            LABEL_MAX_WAIT: str(round(wait.total_seconds())),
        }
        return job

    def _job_from_parameters(self) -> Job:
        """One task group of ``task_count`` tasks running the container or script, on one policy."""
        from google.cloud.batch_v1 import (
            AllocationPolicy,
            Environment,
            Job,
            Runnable,
            TaskGroup,
            TaskSpec,
        )

        op = self.op
        if op.image_uri:
            runnable = Runnable(
                container=Runnable.Container(
                    image_uri=op.image_uri, commands=list(op.commands or []), entrypoint=op.entrypoint or ""
                )
            )
        else:
            runnable = Runnable(script=Runnable.Script(text=op.script or ""))
        spec = TaskSpec(runnables=[runnable])
        if op.environment:
            spec.environment = Environment(variables=dict(op.environment))
        group = TaskGroup(task_spec=spec, task_count=op.task_count or 1, parallelism=op.parallelism or 0)
        assert op.machine_type is not None  # the operator requires it without a whole job
        gpus = _gpus(op.machine_type, op.accelerator_type, op.accelerator_count)
        policy = AllocationPolicy.InstancePolicy(
            machine_type=op.machine_type,
            accelerators=[AllocationPolicy.Accelerator(type_=gpus[0], count=gpus[1])] if gpus else [],
        )
        instance = AllocationPolicy.InstancePolicyOrTemplate(
            policy=policy, install_gpu_drivers=op.install_gpu_drivers
        )
        return Job(task_groups=[group], allocation_policy=AllocationPolicy(instances=[instance]))

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The job's console page (and, once the job has a uid, its task logs' link, logged)."""
        _, region, job_id = parse_job_name(status.name)
        project = resolve_project(self.op)
        if status.details.get("uid"):
            self.log.info(
                "Task logs: %s",
                push_url(context, BatchJobLogsLink.key, batch_job_logs_url(project, status.details["uid"])),
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
        from google.cloud.batch_v1 import Job as JobMessage

        project, region, job_id = parse_job_name(status.name)
        job = self.backend(region).get(status.name)
        if job is None:
            raise RequestCancelledError(f"{status.name} disappeared right after it succeeded")
        current = job_status(job)
        timings = current.timings
        group = job.task_groups[0] if job.task_groups else None
        labels = dict(job.labels)
        data = JobMessage.to_dict(job, use_integers_for_enums=False)
        return {
            "name": job.name,
            "job_id": job_id,
            "uid": job.uid,
            "project_id": project,
            "region": region,
            "state": current.state,
            "description": current.description,
            "task_count": int(group.task_count) if group else 0,
            "parallelism": int(group.parallelism) if group else 0,
            "task_counts": task_counts(job),
            "create_time": data.get("create_time"),
            "update_time": data.get("update_time"),
            "timings": timings.to_dict(),
            "wait_seconds": timings.wait_seconds,
            "run_seconds": timings.run_seconds,
            "labels": labels,
        }

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The job's GPUs over every VM it runs at once (its tasks, or its parallelism, over
        the tasks a VM takes), its machine type and its console page."""
        job = self.build(_SHAPE_ONLY, placement)
        instances = job.allocation_policy.instances
        policy = instances[0].policy if instances else None
        machine = (policy.machine_type if policy else "") or None
        current = policy.accelerators[0] if policy and policy.accelerators else None
        gpus = _gpus(machine or "", current.type_ if current else None, current.count if current else None)
        vms = 0
        for group in job.task_groups:
            tasks = group.task_count or 1
            at_once = min(tasks, group.parallelism) if group.parallelism else tasks
            per_vm = group.task_count_per_node or 1
            vms += -(-at_once // per_vm)
        _, region, job_id = parse_job_name(status.name)
        return {
            "api": BatchJobBackend.kind,
            "kind": "Cloud Batch job",
            "accelerator_type": gpus[0] if gpus else None,
            "accelerator_count": gpus[1] * max(vms, 1) if gpus else 0,
            "machine_type": machine,
            "pricing_model": "flex_start",
            "console_url": batch_job_console_url(resolve_project(self.op), region, job_id),
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


class BatchReservedAdapter(ReservedSteps, BatchFlexStartAdapter):
    """A Cloud Batch job on the block's reservation: RESERVATION_BOUND VMs that consume only it, in
    its zone; the wait ends when the job ends."""

    label = "reserved"

    def build(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> Job:
        """The Flex Start job's spec, bound to the block's reservation instead."""
        from google.cloud.batch_v1 import AllocationPolicy

        job = super().build(identity, placement, max_wait)
        block = self.block
        assert block is not None, "the block is found before a job is built"
        for instance in job.allocation_policy.instances:
            policy = instance.policy
            check_machine(self.op, block, policy.machine_type)
            policy.provisioning_model = AllocationPolicy.ProvisioningModel.RESERVATION_BOUND  # type: ignore[assignment]
            policy.reservation = block.reservation
        job.allocation_policy.location = AllocationPolicy.LocationPolicy(
            allowed_locations=[f"zones/{block.zone}"]
        )
        return job
