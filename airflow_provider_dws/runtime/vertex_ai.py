"""Vertex AI ``JobService`` jobs in the attempt loop: find, submit, link, result and error, shared;
the Flex Start custom job built here (batch prediction: :mod:`.vertex_batch`)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links import StoredUrlLink, VertexAIFlexStartJobLink
from airflow_provider_dws.patterns import LazyPattern
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.vertex_pools import (
    VERTEX_JOB_KIND,
    as_dict,
    duration,
    jsonable,
    parse_job_name,
    spec_accelerators,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend, VertexJobBackend
    from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

_EXIT_CODE_RE = LazyPattern(r"non-zero status of (-?\d+)")
#: Who a job is built for when only its shape matters (the request record's facts).
_SHAPE_ONLY = RequestIdentity(dag_id="dws", task_id="record", run_id="facts")


def custom_job_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one custom job."""
    return f"{CONSOLE}/vertex-ai/locations/{region}/training/{job_id}/cpu?project={project_id}"


_B = TypeVar("_B", bound="VertexJobBackend")


class VertexJobAdapter(RequestAdapter[Any, _B]):
    """What the adapters of Vertex AI ``JobService`` jobs share: a job per attempt, made by the
    trigger, found by its identity labels; the wait ends when the job ends. A subclass builds its
    job (:meth:`request_spec`), names its backend and its console page."""

    name_key = "job_name"

    target = "end"
    submits_in_trigger = True
    #: What the job is, in the task log.
    label = "Flex Start"
    #: What the job is called in errors.
    noun: ClassVar[str] = "custom job"
    #: The console link's class.
    link: ClassVar[type[StoredUrlLink]] = VertexAIFlexStartJobLink

    def backend(self, location: str | None = None) -> _B:
        """The backend of ``location`` (default: the operator's region)."""
        raise NotImplementedError

    @staticmethod
    def parse_name(name: str) -> tuple[str, str]:
        """(region, job id) of a job's full name."""
        raise NotImplementedError

    @staticmethod
    def console_url(project_id: str, region: str, job_id: str) -> str:
        """The console page of one job."""
        raise NotImplementedError

    def location_of(self, name: str) -> str:
        """The region of a job's full name."""
        return self.parse_name(name)[0]

    def build(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> Any:
        """:meth:`request_spec` as the job's message (the worker's own submit path)."""
        try:
            return self.message_of(self.request_spec(identity, placement, max_wait))
        except ValueError as err:
            raise BadRequestError(f"the {self.noun} is not valid: {err}") from None

    def message_of(self, spec: dict[str, Any]) -> Any:
        """The job message of a JSON spec (``ValueError`` when it is not one)."""
        raise NotImplementedError

    def announce(self) -> dict[str, Any]:
        """The job's name under ``job_name``, its console page under the link's key."""
        link = self.console_url(resolve_project(self.op), "{location}", "{id}")
        return {"name_key": self.name_key, "link_key": self.link.key, "link": link}

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The job's console page."""
        region, job_id = self.parse_name(status.name)
        return push_url(context, self.link.key, self.console_url(resolve_project(self.op), region, job_id))

    def console_page(self, name: str, placement: Placement) -> tuple[str, str | None]:
        """(region, console page) of a job for its record; no page for one not made yet."""
        try:
            region, job_id = self.parse_name(name)
        except ValueError:  # recorded before its trigger made it: no page yet
            return placement.location, None
        return region, self.console_url(resolve_project(self.op), region, job_id)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create the job of this attempt in the placement's region (or adopt the one a lost reply made)."""
        try:
            job, created = self.backend(placement.location).submit(
                self.build(identity, placement, max_wait), identity
            )
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the job: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"Vertex AI refused the job: {err.message}") from None
        self.log.info(
            "%s %s job %s (attempt %d, %s); it may wait up to %s for capacity and run up to %s",
            "Submitted" if created else "Adopted",
            self.label,
            job.name,
            identity.attempt,
            job.description,
            max_wait,
            self.op.max_run or "its block's end",
        )
        self.remember(context, job)
        return job

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The succeeded job as a dict."""
        if RESULT in status.details:  # read by the trigger with the job's final status
            return status.details[RESULT]
        backend = self.backend(self.location_of(status.name))
        return backend.status_of(backend.get(status.name)).details.get(RESULT)

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a job that ended without success."""
        message = status.outcome.message
        region = status.details.get("region") or placement.location
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            what = status.description.rsplit(" in ", 1)[0] if status.description else "the requested GPUs"
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in {region} for {what} "
                f"(job {status.name}{': ' + message if message else ''})"
            )
        if status.outcome.failure is FailureKind.WORKLOAD_FAILED:
            match = _EXIT_CODE_RE.search(message)
            reason = f"exit code {match.group(1)}" if match else (message or status.state)
            return WorkloadFailedError(f"workload failed: {reason} (job {status.name}: {message})")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Vertex AI refused the job {status.name}: {message}")
        return RequestCancelledError(
            f"job {status.name} was cancelled before it finished{': ' + message if message else ''}"
        )


class VertexFlexStartAdapter(VertexJobAdapter["VertexCustomJobBackend"]):
    """A Flex Start ``CustomJob`` per attempt; the wait ends when the job ends."""

    op: CreateVertexAIFlexStartJobOperator
    parse_name = staticmethod(parse_job_name)
    console_url = staticmethod(custom_job_console_url)

    def backend(self, location: str | None = None) -> VertexCustomJobBackend:
        """The Vertex AI backend of ``location`` (default: the operator's region)."""
        # Imported here: a resumed task that only reads its trigger's event needs no backend.
        from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend

        return self.cached_backend(VertexCustomJobBackend, location or self.op.region)

    def message_of(self, spec: dict[str, Any]) -> Any:
        """The ``CustomJob`` of a JSON spec."""
        from airflow_provider_dws.backends.vertex_ai import job_from_spec

        return job_from_spec(spec)

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The ``CustomJob`` to submit, as JSON: the user's spec plus Flex Start scheduling and
        identity labels. Built without the client library (the trigger makes the message).

        A failover ``placement`` may swap the machine and accelerator type of every pool;
        ``max_wait`` is the effective wait decided by the scheduling core (default: ``max_wait``).
        """
        op = self.op
        if op.custom_job is not None:
            job = jsonable(as_dict(op.custom_job, "custom_job"))
        else:
            job = {
                "job_spec": {
                    "worker_pool_specs": [
                        jsonable(as_dict(p, "worker_pool_specs")) for p in op.worker_pool_specs or []
                    ]
                }
            }
        job["display_name"] = op.display_name or job.get("display_name") or identity.display_name()
        spec = job.setdefault("job_spec", {})
        old = spec.get("scheduling") or {}
        scheduling = {"strategy": "FLEX_START", "max_wait_duration": duration(max_wait or op.max_wait)}
        if op.max_run is not None:
            scheduling["timeout"] = duration(op.max_run)
        for kept in ("restart_job_on_worker_restart", "disable_retries"):
            if old.get(kept):
                scheduling[kept] = old[kept]
        spec["scheduling"] = scheduling
        if op.service_account:
            spec["service_account"] = op.service_account
        if op.network:
            spec["network"] = op.network
        if op.base_output_directory:
            spec["base_output_directory"] = {"output_uri_prefix": op.base_output_directory}
        if placement is not None:
            self._place(spec.get("worker_pool_specs") or [], placement)
        job["labels"] = {**(job.get("labels") or {}), **(op.labels or {}), **identity.labels()}
        return job

    @staticmethod
    def _place(pools: list[dict[str, Any]], placement: Placement) -> None:
        """Swap every pool's machine and accelerator type for a failover placement's."""
        machine = catalog.GPU_MACHINES.get(placement.machine_type or "")
        for pool in pools:
            machine_spec = pool.setdefault("machine_spec", {})
            if placement.machine_type:
                machine_spec["machine_type"] = placement.machine_type
            if machine is not None and machine_spec.get("accelerator_count"):
                # Another machine type comes with its own number of GPUs.
                machine_spec["accelerator_count"] = machine.accelerator_count
            if placement.accelerator_type:
                machine_spec["accelerator_type"] = placement.accelerator_type

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The job's GPUs over every pool and replica, its first machine type, its console page."""
        total, accelerator, machine = spec_accelerators(self.request_spec(_SHAPE_ONLY, placement))
        _, page = self.console_page(status.name, placement)
        return {
            "api": VERTEX_JOB_KIND,
            "kind": "Vertex AI custom job",
            "accelerator_type": accelerator or None,
            "accelerator_count": total,
            "machine_type": machine or None,
            "pricing_model": "flex_start",
            "console_url": page,
        }
