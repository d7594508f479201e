"""Cloud Batch jobs on Flex Start VMs as DWS capacity requests."""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from collections.abc import Collection, Container, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.base import (
    RESULT,
    ListMemo,
    RequestStatus,
    classify_listed,
    ended_since_filter,
    find_listed,
)
from airflow_provider_dws.backends.google import GoogleBackend, translated
from airflow_provider_dws.errors import ConflictError, RequestNotFoundError
from airflow_provider_dws.hooks.batch import DwsBatchAsyncHook, DwsBatchHook
from airflow_provider_dws.patterns import LazyPattern
from airflow_provider_dws.scheduling.identity import (
    LABEL_ATTEMPT,
    LABEL_KEY,
    LABEL_MANAGED,
    LABEL_TRY,
    RequestIdentity,
)
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    StateTable,
    reservation_outcome,
)

if TYPE_CHECKING:
    from google.cloud.batch_v1 import Job

log = logging.getLogger(__name__)

# The one table from Cloud Batch ``JobStatus.State`` names to phases. A Flex Start job waits for
# its VMs in QUEUED, then SCHEDULED (Batch's own words: "scheduled to run as soon as resource
# allocation is ready"; a stock-out keeps a job there), so both are WAITING. Cancelling is terminal
# here: a job being cancelled only gives its VMs back, it cannot end SUCCEEDED. FAILED is refined by
# :func:`classify_batch_job`.
BATCH_JOB_STATE_PHASES: dict[str, Phase] = {
    "STATE_UNSPECIFIED": Phase.WAITING,
    "QUEUED": Phase.WAITING,
    "SCHEDULED": Phase.WAITING,
    "RUNNING": Phase.RUNNING,
    "SUCCEEDED": Phase.SUCCEEDED,
    "FAILED": Phase.FAILED,
    "CANCELLATION_IN_PROGRESS": Phase.CANCELLED,
    "CANCELLED": Phase.CANCELLED,
    "DELETION_IN_PROGRESS": Phase.CANCELLED,
}

#: A Batch status event saying the VMs could not be had: a stock-out, or the queue's time limit.
BATCH_CAPACITY_EVENT = LazyPattern(
    r"resource_pool_exhausted|stockout|no capacity|insufficient (capacity|resources)"
    r"|not enough resources|resources? (are |is )?(not available|unavailable)|unavailable resources?"
    r"|queued (for )?too long|(max(imum)? )?(wait|queue|queuing) (time|duration|limit) "
    r"(was |has been )?(exceeded|reached|passed)",
    re.IGNORECASE,
)
#: A Batch status event saying the job itself was wrong, so resubmitting it cannot help.
BATCH_BAD_REQUEST_EVENT = LazyPattern(
    r"invalid|INVALID_ARGUMENT|FAILED_PRECONDITION|PERMISSION_DENIED|permission|not found|does not exist"
    r"|not supported|unsupported|not allowed|quota",
    re.IGNORECASE,
)


def classify_batch_job(
    state_name: str, *, started: bool = False, events: Sequence[str] = (), message: str = ""
) -> Outcome:
    """Classify a Cloud Batch job state into a phase and, for failures, a reason.

    :param started: whether any task of the job ever ran (a RUNNING transition, a run duration).
    :param events: the descriptions of the job's status events, oldest first.
    :param message: what to tell the user (default: the last event).

    A job that ran and then FAILED is a workload failure. One that FAILED before running never
    got its VMs: capacity not obtained when an event says so (resources unavailable, queued too
    long), a bad request when an event says the job was wrong (invalid, permission, not found,
    quota), and capacity not obtained otherwise, as for Cloud TPU: that is what a Flex Start job
    that ends unstarted most often means, and a capacity retry is bounded.
    """
    phase = BATCH_JOB_STATE_PHASES.get(state_name, Phase.WAITING)
    message = message or (events[-1] if events else "")
    if phase is Phase.FAILED:
        ended = next(
            (found for found in (reservation_outcome(e) for e in reversed(events)) if found is not None), None
        )
        if ended is not None:
            return ended
        if started:
            return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, message)
        capacity = [e for e in events if BATCH_CAPACITY_EVENT.search(e)]
        if capacity:
            return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, capacity[-1])
        refused = [e for e in events if BATCH_BAD_REQUEST_EVENT.search(e)]
        if refused:
            return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, refused[-1])
        return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, message)
    if phase is Phase.CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, message or f"the job is {state_name.lower()}")
    return Outcome(phase, None, message if phase is Phase.SUCCEEDED else "")


#: Cloud Batch jobs (``JobStatus.State``); facts: ``started``, ``events``, ``message``.
BATCH_JOB_STATES = StateTable("batch_job", BATCH_JOB_STATE_PHASES, classify_batch_job)

#: The max wait the provider enforces for a job (Batch has no such field), in seconds, as a label:
#: a task that reattaches to a job goes on with that job's own wait.
LABEL_MAX_WAIT = "dws_max_wait"
#: Jobs a waiting trigger follows: made by the provider and live in the phase table.
LIVE_STATES = BATCH_JOB_STATES.live_states()
LIVE_STATES_FILTER = " OR ".join(f'status.state="{s}"' for s in LIVE_STATES)
LIVE_FILTER = f'labels.{LABEL_MANAGED}="true" AND ({LIVE_STATES_FILTER})'
ENDED_STATES = BATCH_JOB_STATES.ended_states()
#: Jobs per list page (see the Vertex backend's LIST_PAGE_SIZE).
LIST_PAGE_SIZE = 250
#: Task states that mean a task ran (a FAILED count alone does not: an unstarted job fails its tasks).
_RAN_COUNTS = ("RUNNING", "SUCCEEDED")
#: How a status event names a move to RUNNING ("Job state is set from SCHEDULED to RUNNING ...").
_TO_RUNNING = re.compile(r"\bto RUNNING\b")
#: Namespace of the cancel calls' request ids (one per job: a repeated cancel is answered once).
_CANCEL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws/batch/cancel")


def _when(value: Any) -> datetime | None:
    """proto-plus gives timestamps as datetimes (typed as protobuf ``Timestamp``); unset is ``None``."""
    return cast("datetime | None", value) or None


#: ``projects/P/locations/R/jobs/ID``: read here without the client library, so a task that only
#: names its job (its region, its console link) never imports it.
_JOB_NAME = re.compile(r"projects/([^/]+)/locations/([^/]+)/jobs/([^/]+)")


def parse_job_name(name: str) -> tuple[str, str, str]:
    """Split ``projects/P/locations/R/jobs/ID`` into (project, region, job id)."""
    match = _JOB_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Cloud Batch job name: {name!r}")
    return match.group(1), match.group(2), match.group(3)


def task_counts(job: Job) -> dict[str, int]:
    """Tasks by state (``{"SUCCEEDED": 14, "FAILED": 2}``), over every task group."""
    counts: dict[str, int] = {}
    for group in job.status.task_groups.values():
        for state, count in group.counts.items():
            counts[state] = counts.get(state, 0) + int(count)
    return counts


def describe_job(job: Job, region: str) -> str:
    """``16 tasks on g2-standard-4 (1 x nvidia-l4 each) in us-central1`` (what the job asks for)."""
    tasks = sum(group.task_count or 1 for group in job.task_groups) or 1
    instances = job.allocation_policy.instances
    policy = instances[0].policy if instances else None
    machine = policy.machine_type if policy else ""
    gpus = ""
    if policy and policy.accelerators:
        accelerator = policy.accelerators[0]
        gpus = f"{accelerator.count} x {accelerator.type_}"
    elif machine in catalog.GPU_MACHINES:
        spec = catalog.GPU_MACHINES[machine]
        gpus = f"{spec.accelerator_count} x {catalog.compute_gpu_name(spec.accelerator_type)}"
    what = f"{tasks} task{'s' if tasks != 1 else ''} on {machine or 'Batch VMs'}"
    return f"{what} ({gpus} each) in {region}" if gpus else f"{what} in {region}"


def _ran(job: Job, started: datetime | None) -> bool:
    """Whether any task of the job ever ran: a RUNNING transition, a run duration, a task execution,
    or tasks counted RUNNING or SUCCEEDED."""
    if started is not None or cast("timedelta | None", job.status.run_duration):
        return True
    if any("task_execution" in event for event in job.status.status_events):
        return True
    counts = task_counts(job)
    return any(counts.get(state) for state in _RAN_COUNTS)


def _started_at(job: Job) -> datetime | None:
    """When the job (or its first task) moved to RUNNING, from its status events."""
    from google.cloud.batch_v1 import TaskStatus

    for event in job.status.status_events:
        if _TO_RUNNING.search(event.description) or event.task_state == TaskStatus.State.RUNNING:
            return _when(event.event_time)
    return None


def job_version(job: Job) -> tuple[int, int, int, int]:
    """What changes whenever :func:`job_status` would read something new: the update time, the
    state and the number of status events, read from the raw message (no proto-plus conversion)."""
    from google.cloud.batch_v1 import Job as JobMessage

    raw = JobMessage.pb(job)
    return raw.update_time.seconds, raw.update_time.nanos, raw.status.state, len(raw.status.status_events)


def job_status(job: Job) -> RequestStatus:
    """Classify a Cloud Batch ``Job`` into the shared vocabulary (pure: no API call).

    Its status events decide why a job that failed before running failed (:func:`classify_batch_job`);
    the first event that moves it to RUNNING times its start, and the last event of an ended job its end.
    """
    from google.cloud.batch_v1 import JobStatus

    _, region, job_id = parse_job_name(job.name) if job.name else ("", "", "")
    state = JobStatus.State(job.status.state).name
    started = _started_at(job)
    ran = _ran(job, started)
    events = [event.description for event in job.status.status_events]
    outcome = BATCH_JOB_STATES.classify(state, started=ran, events=events)
    finished: datetime | None = None
    if outcome.phase.terminal:
        times = [t for t in (_when(event.event_time) for event in job.status.status_events) if t]
        finished = max(times) if times else _when(job.update_time)
    run_duration = cast("timedelta | None", job.status.run_duration)
    if started is None and ran:
        if finished is not None and run_duration:
            started = finished - run_duration
        elif state == "RUNNING":
            started = _when(job.update_time)  # no event: it changed to RUNNING when last updated
    labels = job.labels
    attempt = labels.get(LABEL_ATTEMPT, "")
    max_wait = labels.get(LABEL_MAX_WAIT, "")
    tried = labels.get(LABEL_TRY, "")
    status = RequestStatus(
        name=job.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(submitted=_when(job.create_time), started=started, finished=finished),
        description=describe_job(job, region),
        details={
            "region": region,
            "job_id": job_id,
            "uid": job.uid,
            "max_wait_seconds": float(max_wait) if max_wait.isdigit() else None,
            "attempt": int(attempt) if attempt.isdigit() else 1,
            "try": int(tried) if tried.isdigit() else None,
            "task_counts": task_counts(job),
        },
    )
    if state == "SUCCEEDED":
        # The task's return value, read from the message in hand, so the resumed task needs
        # neither the client library nor another call.
        status.details[RESULT] = job_result(job, status)
    return status


def job_result(job: Job, status: RequestStatus) -> dict[str, Any]:
    """What a task whose job succeeded returns: name, state, task counts by state, shape, timings."""
    from google.cloud.batch_v1 import Job as JobMessage

    project, region, job_id = parse_job_name(job.name)
    group = job.task_groups[0] if job.task_groups else None
    data = JobMessage.to_dict(job, use_integers_for_enums=False)
    timings = status.timings
    return {
        "name": job.name,
        "job_id": job_id,
        "uid": job.uid,
        "project_id": project,
        "region": region,
        "state": status.state,
        "description": status.description,
        "task_count": int(group.task_count) if group else 0,
        "parallelism": int(group.parallelism) if group else 0,
        "task_counts": task_counts(job),
        "create_time": data.get("create_time"),
        "update_time": data.get("update_time"),
        "timings": timings.to_dict(),
        "wait_seconds": timings.wait_seconds,
        "run_seconds": timings.run_seconds,
        "labels": dict(job.labels),
    }


def job_from_spec(spec: dict[str, Any]) -> Job:
    """The ``Job`` message of a JSON request spec (``RequestAdapter.request_spec``): field names as
    in the proto or in JSON, durations as ``"3600s"``, enums by name; an unknown field is refused
    (``ValueError``), as the API would refuse it."""
    from google.cloud.batch_v1 import Job as JobMessage
    from google.protobuf.json_format import ParseError

    try:
        return JobMessage.from_json(json.dumps(spec))
    except ParseError as err:
        raise ValueError(f"not a valid Batch Job: {err}") from None


class BatchJobBackend(GoogleBackend[DwsBatchHook, DwsBatchAsyncHook]):
    """Create, find, read and cancel Cloud Batch jobs through the google client library.

    Sync methods serve the operator (in a worker); ``a*`` methods serve the trigger. The caller
    names each job (``job_id``) and each create carries a ``request_id``, both derived from the
    task instance: ALREADY_EXISTS means "adopt", and a create retried after a lost reply looks
    the job up first. Releasing is cancelling: ended, gone or already cancelling is success.
    """

    kind = "batch_job"
    location_key = "region"
    sync_hook_class = DwsBatchHook
    async_hook_class = DwsBatchAsyncHook

    def __init__(
        self,
        project_id: str,
        region: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        rpc_timeout: float | None = None,
    ) -> None:
        super().__init__(project_id, region, gcp_conn_id, impersonation_chain, rpc_timeout)

    @property
    def region(self) -> str:
        """The Cloud Batch region."""
        return self.location

    def name_of(self, job_id: str) -> str:
        """The full resource name of ``job_id`` in this region."""
        return f"{self.parent}/jobs/{job_id}"

    def _client(self) -> Any:
        return self.hook.get_batch_client()

    # -- sync (worker) -------------------------------------------------------------------------

    def list_jobs(self, filter: str) -> list[Job]:
        """Every job of the region matching the list ``filter``, all pages."""
        from google.cloud.batch_v1 import ListJobsRequest

        request = ListJobsRequest(parent=self.parent, filter=filter, page_size=LIST_PAGE_SIZE)

        def list_all() -> list[Job]:
            return list(self._client().list_jobs(request=request, timeout=self.rpc_timeout))

        return self._call(f"list jobs in {self.parent}", list_all)

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every job (any state, try and attempt) of this task instance in the region: one list on
        its identity label."""
        return [job_status(job) for job in self.list_jobs(f'labels.{LABEL_KEY}="{identity.key}"')]

    def get(self, name: str) -> Job | None:
        """Read one job; ``None`` when it does not exist."""
        try:
            return self._rpc(f"get {name}", self._client().get_job, name=name)
        except RequestNotFoundError:
            return None

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one job, classified; ``None`` when it does not exist."""
        job = self.get(name)
        return None if job is None else job_status(job)

    def submit(
        self, request: Job, identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Create the job ``request_id`` (its job id), or adopt the existing one of that id.

        The create carries ``identity.request_uuid()`` as its ``request_id``, so a create the
        server already answered is answered again rather than made twice. Returns the job's status
        and whether this call created it. A replayed create looks like the first on the wire (the
        same Job), so a second submit within the API's request_id memory (>= 60 min) reports
        ``True`` too; after it, the create is ALREADY_EXISTS and the job is adopted (``False``).
        """
        from google.cloud.batch_v1 import CreateJobRequest

        if not request_id:
            raise ValueError("a Cloud Batch job needs its id (request_id)")
        name = self.name_of(request_id)
        create_request = CreateJobRequest(
            parent=self.parent, job_id=request_id, job=request, request_id=identity.request_uuid()
        )

        def create() -> RequestStatus:
            job = self._client().create_job(request=create_request, timeout=self.rpc_timeout)
            return job_status(job)

        return self._create_named(name, create)

    def submit_spec(self, spec: dict[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (what a trigger is handed), under the job id of
        ``identity`` (its try and attempt), as the worker's own submit names it."""
        return self.submit(job_from_spec(spec), identity, identity.batch_job_id())

    def _cancel_request(self, name: str) -> Any:
        from google.cloud.batch_v1 import CancelJobRequest

        return CancelJobRequest(name=name, request_id=str(uuid.uuid5(_CANCEL_NAMESPACE, name)))

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Cancel a job; one that already ended, is being cancelled (FAILED_PRECONDITION) or is gone
        is fine (False). ``wait``: until the cancel operation is done (its VMs given back).

        Every cancel of one job carries the same ``request_id``, so a repeated cancel (a retry, the
        trigger's then the worker's) is answered with the first one's operation: ``True`` again,
        nothing done twice.
        """
        try:
            operation = self._rpc(
                f"cancel {name}", self._client().cancel_job, request=self._cancel_request(name)
            )
        except (ConflictError, RequestNotFoundError):
            log.info("Job %s had already ended; nothing to cancel", name)
            return False
        if wait:
            self._operation_result(operation, f"cancel {name}")
        return True

    # -- async (triggerer) ---------------------------------------------------------------------

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one job, classified; one call, errors propagate (the shared poller retries)."""
        client = await self.async_hook.get_batch_client()
        return job_status(await self._arpc_once(client.get_job, name=name))

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every live job of the region the provider made, classified: one paged ``ListJobs`` with
        :data:`LIVE_FILTER` (``labels.dws_managed="true" AND (status.state="QUEUED" OR ...)``).

        A job that ended is absent, and the shared poller reads it once. ``only``: classify just
        these names. Errors propagate: the shared poller backs off as a whole.
        """
        from google.cloud.batch_v1 import ListJobsRequest

        client = await self.async_hook.get_batch_client()
        request = ListJobsRequest(parent=self.parent, filter=LIVE_FILTER, page_size=LIST_PAGE_SIZE)
        pager = await self._arpc_once(client.list_jobs, request=request)
        with translated():  # later pages are fetched while iterating
            return await classify_listed(
                (page.jobs async for page in pager.pages), only, job_status, self._list_memo
            )

    async def alist_ended(
        self, wanted: Collection[str], created_after: datetime, scan_limit: int
    ) -> dict[str, RequestStatus]:
        """The ended jobs among ``wanted``: one paged ``ListJobs`` of the provider's jobs in an ended
        state created since ``created_after``, at most about ``scan_limit`` jobs scanned. A filter
        the API refuses makes the shared poller read each job instead. Errors propagate."""
        from google.cloud.batch_v1 import ListJobsRequest

        client = await self.async_hook.get_batch_client()
        request = ListJobsRequest(
            parent=self.parent,
            filter=ended_since_filter("status.state", ENDED_STATES, created_after),
            page_size=LIST_PAGE_SIZE,
        )
        pager = await self._arpc_once(client.list_jobs, request=request)
        with translated():
            return await find_listed(
                (page.jobs async for page in pager.pages), wanted, job_status, scan_limit
            )

    @functools.cached_property
    def _list_memo(self) -> ListMemo:
        return ListMemo(job_version)

    async def arelease(self, name: str) -> bool:
        """Cancel a job from the event loop; one already ended, cancelling or gone is fine (False)."""
        client = await self.async_hook.get_batch_client()
        try:
            await self._acall(
                f"cancel {name}",
                client.cancel_job,
                request=self._cancel_request(name),
                timeout=self.rpc_timeout,
            )
        except (ConflictError, RequestNotFoundError):
            log.info("Job %s had already ended; nothing to cancel", name)
            return False
        return True
