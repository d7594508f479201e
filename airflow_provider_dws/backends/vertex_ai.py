"""Vertex AI custom jobs with Flex Start scheduling, as DWS capacity requests."""

from __future__ import annotations

import functools
import importlib
import json
import logging
from collections.abc import Collection, Container, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws.backends.base import (
    RESULT,
    ListMemo,
    RequestStatus,
    classify_listed,
    ended_since_filter,
    find_listed,
)
from airflow_provider_dws.backends.google import (
    RPC_FAILED_PRECONDITION,
    RPC_INVALID_ARGUMENT,
    GoogleBackend,
    translated,
)
from airflow_provider_dws.errors import ConflictError, RequestNotFoundError
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIAsyncHook, DwsVertexAIHook
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, LABEL_MANAGED, LABEL_TRY, RequestIdentity
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    StateTable,
    reservation_outcome,
)
from airflow_provider_dws.scheduling.reattach import Candidate, ReattachDecision, choose_existing
from airflow_provider_dws.specs.vertex_pools import VERTEX_JOB_KIND, parse_job_name

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob

log = logging.getLogger(__name__)

# The one table from Vertex AI ``JobState`` names to phases. Vertex has no separate
# provisioning state: a Flex Start job sits in QUEUED then PENDING until its whole set of
# machines is free, so both are WAITING. FAILED and EXPIRED are refined by
# :func:`classify_vertex_job` (capacity never obtained vs. the workload failed).
VERTEX_JOB_STATE_PHASES: dict[str, Phase] = {
    "JOB_STATE_UNSPECIFIED": Phase.WAITING,
    "JOB_STATE_QUEUED": Phase.WAITING,
    "JOB_STATE_PENDING": Phase.WAITING,
    "JOB_STATE_PAUSED": Phase.WAITING,
    "JOB_STATE_RUNNING": Phase.RUNNING,
    "JOB_STATE_UPDATING": Phase.RUNNING,
    "JOB_STATE_SUCCEEDED": Phase.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": Phase.FAILED,
    "JOB_STATE_FAILED": Phase.FAILED,
    "JOB_STATE_EXPIRED": Phase.FAILED,
    # Still live: a cancelling job can hold capacity and may yet end SUCCEEDED or FAILED.
    "JOB_STATE_CANCELLING": Phase.WAITING,
    "JOB_STATE_CANCELLED": Phase.CANCELLED,
}


def vertex_phase(state_name: str) -> Phase:
    """Map a Vertex AI ``JobState`` name (e.g. ``"JOB_STATE_PENDING"``) to a :class:`Phase`.

    An unknown name (a state added to the API after this release) is treated as WAITING, so the
    request keeps being watched rather than abandoned while it may hold capacity.
    """
    return VERTEX_JOB_STATE_PHASES.get(state_name, Phase.WAITING)


def classify_vertex_job(
    state_name: str,
    *,
    started: bool,
    error_code: int = 0,
    error_message: str = "",
) -> Outcome:
    """Classify a Vertex AI custom job state into a phase and, for failures, a reason.

    :param state_name: the ``JobState`` name.
    :param started: whether the job ever reached RUNNING (Vertex sets ``start_time`` then).
    :param error_code: ``google.rpc.Code`` of the job's ``error`` (0 when none).
    :param error_message: the job's error message, kept for the user.

    A job that ends FAILED or EXPIRED without ever starting never obtained capacity, unless its
    error is INVALID_ARGUMENT or FAILED_PRECONDITION: then the request was wrong, and resubmitting
    it cannot help (a bad request). One that started and then failed is a workload failure,
    whatever its code: the job's own code ran and ended it.
    """
    phase = vertex_phase(state_name)
    if state_name == "JOB_STATE_CANCELLING" and started:
        return Outcome(Phase.RUNNING, None, error_message)
    if phase is Phase.FAILED:
        ended = reservation_outcome(error_message)
        if ended is not None:
            return ended
        if error_code in (RPC_INVALID_ARGUMENT, RPC_FAILED_PRECONDITION) and not started:
            return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, error_message)
        if not started:
            return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, error_message)
        return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, error_message)
    if phase is Phase.CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, error_message)
    return Outcome(phase, None, error_message)


#: Vertex AI custom jobs (``JobState``); facts: ``started``, ``error_code``, ``error_message``.
VERTEX_JOB_STATES = StateTable("vertex_custom_job", VERTEX_JOB_STATE_PHASES, classify_vertex_job)

#: Jobs a waiting trigger follows: made by the provider and live in the phase table (CANCELLING
#: included, since a cancelling job may still end SUCCEEDED).
LIVE_STATES = VERTEX_JOB_STATES.live_states()
LIVE_STATES_FILTER = " OR ".join(f'state="{s}"' for s in LIVE_STATES)
LIVE_FILTER = f'labels.{LABEL_MANAGED}="true" AND ({LIVE_STATES_FILTER})'
ENDED_STATES = VERTEX_JOB_STATES.ended_states()
#: Jobs per list page: big enough that 5,000 waits take a handful of calls, small enough that one
#: page is parsed in a few milliseconds of the triggerer's event loop.
LIST_PAGE_SIZE = 250


def when(raw: Any, field_name: str) -> datetime | None:
    """A timestamp field of a raw message as an aware UTC datetime; unset is ``None``."""
    if not raw.HasField(field_name):
        return None
    when: datetime = getattr(raw, field_name).ToDatetime(tzinfo=timezone.utc)
    return when


@functools.cache
def enum_names(enum_name: str, module: str = "google.cloud.aiplatform_v1") -> dict[int, str]:
    """Number -> name of one of aiplatform's enums (``JobState``, ``AcceleratorType``)."""
    return {member.value: member.name for member in getattr(importlib.import_module(module), enum_name)}


def message_class(path: str) -> Any:
    """An aiplatform message class by ``"module:Name"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def message_dict(cls: Any, job: Any) -> dict[str, Any]:
    """A job as the task returns it: proto field names, enums by name."""
    return dict(cls.to_dict(job, use_integers_for_enums=False, preserving_proto_field_name=True))


def message_from_spec(cls: Any, spec: dict[str, Any]) -> Any:
    """The ``cls`` message of a JSON request spec (``RequestAdapter.request_spec``): field names as
    in the proto or in JSON, durations as ``"3600s"``, enums by name; an unknown field is refused
    (``ValueError``), as the API would refuse it."""
    from google.protobuf.json_format import ParseError

    try:
        return cls.from_json(json.dumps(spec))
    except ParseError as err:
        raise ValueError(f"not a valid {cls.__name__}: {err}") from None


def raw_version(raw: Any) -> tuple[int, int, int]:
    """What changes whenever a job's status would read something new: its update time and state."""
    return raw.update_time.seconds, raw.update_time.nanos, raw.state


_CUSTOM_JOB = "google.cloud.aiplatform_v1:CustomJob"


def _raw(job: CustomJob) -> Any:
    """The protobuf message under a proto-plus ``CustomJob``: its fields read without conversion.

    Classifying thousands of listed or ended jobs in the triggerer's event loop is then a few
    microseconds each, where proto-plus attribute access cost about 130.
    """
    return message_class(_CUSTOM_JOB).pb(job)


def job_accelerators(job: CustomJob) -> tuple[int, str, str]:
    """(accelerators over every pool and replica, the first accelerator type, the first machine
    type) of a job; ``0, "", ...`` for a job without accelerators."""
    total = 0
    accelerator = ""
    machine = ""
    accelerators = enum_names("AcceleratorType")
    for pool in _raw(job).job_spec.worker_pool_specs:
        spec = pool.machine_spec
        machine = machine or spec.machine_type
        if spec.accelerator_count:
            accelerator = accelerator or accelerators.get(spec.accelerator_type, str(spec.accelerator_type))
            total += spec.accelerator_count * max(pool.replica_count, 1)
    return total, accelerator, machine


def describe_job(job: CustomJob, region: str) -> str:
    """``8 x NVIDIA_H100_80GB in us-central1`` (what capacity the job asks for)."""
    total, accelerator, machine = job_accelerators(job)
    if accelerator:
        return f"{total} x {accelerator} in {region}"
    return f"{machine or 'CPU'} in {region}"


def job_status(job: CustomJob) -> RequestStatus:
    """Classify a ``CustomJob`` into the shared vocabulary (pure: no API call)."""
    raw = _raw(job)
    region = parse_job_name(raw.name)[0] if raw.name else ""
    # A state added to the API after this release keeps its number as its name (unknown: waiting).
    state = enum_names("JobState").get(raw.state, str(raw.state))
    started = when(raw, "start_time")
    outcome = VERTEX_JOB_STATES.classify(
        state, started=started is not None, error_code=raw.error.code, error_message=raw.error.message
    )
    scheduling = raw.job_spec.scheduling
    max_wait = (
        scheduling.max_wait_duration.ToTimedelta() if scheduling.HasField("max_wait_duration") else None
    )
    attempt = raw.labels.get(LABEL_ATTEMPT, "")
    details: dict[str, Any] = {
        "display_name": raw.display_name,
        "region": region,
        "max_wait_seconds": max_wait.total_seconds() if max_wait else None,
        "attempt": int(attempt) if attempt.isdigit() else 1,
        "try": int(tried) if (tried := raw.labels.get(LABEL_TRY, "")).isdigit() else None,
    }
    if state == "JOB_STATE_SUCCEEDED":
        # The task's return value, read here from the message already in hand (tens of
        # microseconds), so the resumed task needs neither the client library nor another call.
        details[RESULT] = job_dict(job)
    return RequestStatus(
        name=raw.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=when(raw, "create_time"), started=started, finished=when(raw, "end_time")
        ),
        description=describe_job(job, region),
        details=details,
    )


def job_dict(job: CustomJob) -> dict[str, Any]:
    """A ``CustomJob`` as the task returns it: proto field names, enums by name."""
    return message_dict(message_class(_CUSTOM_JOB), job)


def job_from_spec(spec: dict[str, Any]) -> CustomJob:
    """The ``CustomJob`` message of a JSON request spec (:func:`message_from_spec`)."""
    job: CustomJob = message_from_spec(message_class(_CUSTOM_JOB), spec)
    return job


def job_version(job: CustomJob) -> tuple[int, int, int]:
    """What changes whenever :func:`job_status` would read something new (no proto-plus conversion)."""
    return raw_version(_raw(job))


class VertexJobBackend(GoogleBackend[Any, Any]):
    """Submit, find, read and cancel one kind of Vertex AI ``JobService`` job through the google
    client library: what custom jobs and batch prediction jobs share (labels, ``JobState``, the
    list filters, cancel). A subclass names its :attr:`resource` and how one is classified.

    Sync methods serve the operator (in a worker); ``a*`` methods serve the trigger (in the
    triggerer's event loop). See :class:`~airflow_provider_dws.backends.base.RequestBackend`.
    """

    location_key = "region"
    #: The job's message in snake case: the client's method suffix (``create_custom_job``); its
    #: plural is the list reply's field (``custom_jobs``).
    resource: ClassVar[str]
    #: The client module whose request messages this backend sends.
    client_module: ClassVar[str]
    #: What a job is called in errors and log lines.
    noun: ClassVar[str]

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
        """The Vertex AI region."""
        return self.location

    def status_of(self, job: Any) -> RequestStatus:
        """Classify one job (pure: no API call)."""
        raise NotImplementedError

    def message_of(self, spec: dict[str, Any]) -> Any:
        """The job message of a JSON request spec; ``ValueError`` when it is not one."""
        raise NotImplementedError

    @staticmethod
    def version_of(job: Any) -> Any:
        """What changes whenever :meth:`status_of` would read something new."""
        raise NotImplementedError

    def _client(self) -> Any:
        return self.hook.get_job_service_client(self.region)

    def _method(self, client: Any, verb: str) -> Any:
        """``client.<verb>_<resource>`` (``list`` takes the plural: ``list_custom_jobs``)."""
        return getattr(client, f"{verb}_{self.resource}{'s' if verb == 'list' else ''}")

    def _list_request(self, **fields: Any) -> Any:
        camel = "".join(part.capitalize() for part in self.resource.split("_"))
        return getattr(importlib.import_module(self.client_module), f"List{camel}sRequest")(**fields)

    # -- sync (worker) -------------------------------------------------------------------------

    def find_jobs(self, identity: RequestIdentity) -> list[Any]:
        """Every job (any state, any attempt) carrying this task instance's identity label."""
        request = self._list_request(parent=self.parent, filter=identity.vertex_filter(), page_size=100)
        client = self._client()

        def list_all() -> list[Any]:
            return list(self._method(client, "list")(request=request, timeout=self.rpc_timeout))

        return self._call(f"list {self.noun}s in {self.parent}", list_all)

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every job of this task instance, classified (``details["attempt"]``: its attempt)."""
        return [self.status_of(job) for job in self.find_jobs(identity)]

    def decide(self, identity: RequestIdentity) -> ReattachDecision:
        """Look for this identity's earlier jobs and decide: reattach, take success, or submit."""
        candidates = [
            Candidate(status.name, status.phase, status.timings.submitted) for status in self.find(identity)
        ]
        return choose_existing(candidates)

    def submit(
        self, request: Any, identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Create the job, or adopt the one an earlier, unanswered create already made.

        A create that timed out may still have created the job; before each retry the identity is
        looked up again, so a retried create can never make a second job. Returns the job and
        whether this call created it. Vertex AI names jobs itself: ``request_id`` is unused.
        """
        client = self._client()

        def adopt() -> RequestStatus | None:
            decision = self.decide(identity)
            return None if decision.name is None else self.status_of(self.get(decision.name))

        def create() -> RequestStatus:
            made = self._method(client, "create")(
                parent=self.parent, **{self.resource: request}, timeout=self.rpc_timeout
            )
            return self.status_of(made)

        return self._create(f"create {self.noun} in {self.parent}", create, adopt)

    def submit_spec(self, spec: dict[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (what a trigger is handed)."""
        return self.submit(self.message_of(spec), identity)

    def get(self, name: str) -> Any:
        """Read one job (``RequestNotFoundError`` when it does not exist)."""
        return self._rpc(f"get {name}", self._method(self._client(), "get"), name=name)

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one job, classified; ``None`` when it does not exist."""
        try:
            return self.status_of(self.get(name))
        except RequestNotFoundError:
            return None

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Cancel a job; one that already ended (FAILED_PRECONDITION) or is gone is fine (False).

        A cancelled job ends CANCELLED on its own shortly after; ``wait`` is not needed for that.
        """
        try:
            self._rpc(f"cancel {name}", self._method(self._client(), "cancel"), name=name)
        except (ConflictError, RequestNotFoundError):
            log.info("Job %s had already ended; nothing to cancel", name)
            return False
        return True

    # -- async (triggerer) ---------------------------------------------------------------------

    async def _aclient(self) -> Any:
        return await self.async_hook.get_job_service_client(self.region)

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one job, classified; one call, errors propagate (the shared poller retries)."""
        client = await self._aclient()
        return self.status_of(await self._arpc_once(self._method(client, "get"), name=name))

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every live job of the region that the provider made (``dws_managed``), classified.

        One list, paged. The filter uses only fields the list methods document (``labels``,
        ``state``): ``update_time`` is not one of them, so a job that ended is absent and the
        shared poller reads it once. ``only``: classify just these names (the others are skipped
        unparsed). Errors propagate: the shared poller backs off as a whole.
        """
        return await self._alist(
            LIVE_FILTER, lambda jobs: classify_listed(jobs, only, self.status_of, self._list_memo)
        )

    async def alist_ended(
        self, wanted: Collection[str], created_after: datetime, scan_limit: int
    ) -> dict[str, RequestStatus]:
        """The ended jobs among ``wanted``: one paged list of the provider's jobs in an ended state
        created since ``created_after`` (``create_time`` is a documented filter field), at most
        about ``scan_limit`` jobs scanned. Errors propagate."""
        return await self._alist(
            ended_since_filter("state", ENDED_STATES, created_after),
            lambda jobs: find_listed(jobs, wanted, self.status_of, scan_limit),
        )

    async def _alist(self, filter_: str, read: Any) -> dict[str, RequestStatus]:
        client = await self._aclient()
        request = self._list_request(parent=self.parent, filter=filter_, page_size=LIST_PAGE_SIZE)
        pager = await self._arpc_once(self._method(client, "list"), request=request)
        field = f"{self.resource}s"
        with translated():  # later pages are fetched while iterating
            result: dict[str, RequestStatus] = await read(getattr(page, field) async for page in pager.pages)
            return result

    @functools.cached_property
    def _list_memo(self) -> ListMemo:
        return ListMemo(self.version_of)

    async def arelease(self, name: str) -> bool:
        """Cancel a job from the event loop; one already ended or gone is fine (False)."""
        client = await self._aclient()
        try:
            await self._acall(
                f"cancel {name}", self._method(client, "cancel"), name=name, timeout=self.rpc_timeout
            )
        except (ConflictError, RequestNotFoundError):
            log.info("Job %s had already ended; nothing to cancel", name)
            return False
        return True


class VertexCustomJobBackend(VertexJobBackend):
    """Vertex AI custom jobs with Flex Start scheduling (``aiplatform.v1``)."""

    kind = VERTEX_JOB_KIND
    resource = "custom_job"
    client_module = "google.cloud.aiplatform_v1"
    noun = "custom job"
    sync_hook_class = DwsVertexAIHook
    async_hook_class = DwsVertexAIAsyncHook

    def status_of(self, job: Any) -> RequestStatus:
        """:func:`job_status`."""
        return job_status(job)

    def message_of(self, spec: dict[str, Any]) -> Any:
        """:func:`job_from_spec`."""
        return job_from_spec(spec)

    version_of = staticmethod(job_version)
