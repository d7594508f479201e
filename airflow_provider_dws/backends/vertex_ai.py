"""Vertex AI custom jobs with Flex Start scheduling, as DWS capacity requests."""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import tenacity
from google.api_core import exceptions as gexc
from google.cloud.aiplatform_v1 import CustomJob, JobState, ListCustomJobsRequest

from airflow_provider_dws.backends.base import RequestStatus, classify_listed
from airflow_provider_dws.backends.retry import retry_kwargs
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIAsyncHook, DwsVertexAIHook
from airflow_provider_dws.scheduling.identity import LABEL_MANAGED, RequestIdentity
from airflow_provider_dws.scheduling.phases import RequestTimings, classify_vertex_job
from airflow_provider_dws.scheduling.reattach import Candidate, ReattachDecision, choose_existing

log = logging.getLogger(__name__)

#: Jobs a waiting trigger follows: made by the provider and not ended. CANCELLING is listed too,
#: since a cancelling job may still end SUCCEEDED.
LIVE_STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING")
LIVE_STATES_FILTER = " OR ".join(f'state="{s}"' for s in LIVE_STATES)
LIVE_FILTER = f'labels.{LABEL_MANAGED}="true" AND ({LIVE_STATES_FILTER})'
#: Jobs per list page: big enough that 5,000 waits take a handful of calls, small enough that one
#: page is parsed in a few milliseconds of the triggerer's event loop.
LIST_PAGE_SIZE = 250

_JOB_NAME_RE = re.compile(r"^projects/[^/]+/locations/(?P<region>[^/]+)/customJobs/(?P<job_id>[^/]+)$")


def _when(value: Any) -> datetime | None:
    """proto-plus gives timestamps as datetimes (typed as protobuf ``Timestamp``); unset is ``None``."""
    return cast("datetime | None", value)


def parse_job_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/R/customJobs/ID`` into (region, job id)."""
    match = _JOB_NAME_RE.fullmatch(name)
    if not match:
        raise ValueError(f"not a Vertex AI custom job name: {name!r}")
    return match["region"], match["job_id"]


def describe_job(job: CustomJob, region: str) -> str:
    """``8 x NVIDIA_H100_80GB in us-central1`` (what capacity the job asks for)."""
    total = 0
    accelerator = ""
    machine = ""
    for pool in job.job_spec.worker_pool_specs:
        spec = pool.machine_spec
        machine = machine or spec.machine_type
        if spec.accelerator_count:
            accelerator = accelerator or spec.accelerator_type.name
            total += spec.accelerator_count * max(pool.replica_count, 1)
    if accelerator:
        return f"{total} x {accelerator} in {region}"
    return f"{machine or 'CPU'} in {region}"


def job_status(job: CustomJob) -> RequestStatus:
    """Classify a ``CustomJob`` into the shared vocabulary (pure: no API call)."""
    region = parse_job_name(job.name)[0] if job.name else ""
    state = JobState(job.state).name
    outcome = classify_vertex_job(
        state,
        started=job.start_time is not None,
        error_code=job.error.code,
        error_message=job.error.message,
    )
    max_wait = cast("timedelta | None", job.job_spec.scheduling.max_wait_duration)
    return RequestStatus(
        name=job.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=_when(job.create_time), started=_when(job.start_time), finished=_when(job.end_time)
        ),
        description=describe_job(job, region),
        details={
            "display_name": job.display_name,
            "region": region,
            "max_wait_seconds": max_wait.total_seconds() if max_wait else None,
        },
    )


class VertexCustomJobBackend:
    """Submit, find, read and cancel Vertex AI custom jobs through the google client library.

    Sync methods serve the operator (in a worker); ``a*`` methods serve the trigger (in the
    triggerer's event loop). Every call retries transient errors (see :mod:`.retry`).
    """

    kind = "vertex_custom_job"

    def __init__(
        self,
        project_id: str,
        region: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
    ) -> None:
        self.project_id = project_id
        self.region = region
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._hook: DwsVertexAIHook | None = None
        self._async_hook: DwsVertexAIAsyncHook | None = None

    @property
    def parent(self) -> str:
        """``projects/P/locations/R``."""
        return f"projects/{self.project_id}/locations/{self.region}"

    def spec(self) -> dict[str, Any]:
        """Constructor arguments, to rebuild the backend in the triggerer."""
        chain = self.impersonation_chain
        return {
            "project_id": self.project_id,
            "region": self.region,
            "gcp_conn_id": self.gcp_conn_id,
            "impersonation_chain": list(chain) if isinstance(chain, (list, tuple)) else chain,
        }

    # -- sync (worker) -------------------------------------------------------------------------

    @property
    def hook(self) -> DwsVertexAIHook:
        """The sync hook, created on first use."""
        if self._hook is None:
            self._hook = DwsVertexAIHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._hook

    def _client(self) -> Any:
        return self.hook.get_job_service_client(self.region)

    def find(self, identity: RequestIdentity) -> list[CustomJob]:
        """Every job (any state) carrying this task instance's identity label."""
        request = ListCustomJobsRequest(parent=self.parent, filter=identity.vertex_filter(), page_size=100)
        for attempt in tenacity.Retrying(**retry_kwargs(f"list custom jobs in {self.parent}")):
            with attempt:
                return list(self._client().list_custom_jobs(request=request))
        raise AssertionError("unreachable")  # pragma: no cover

    def decide(self, identity: RequestIdentity) -> tuple[ReattachDecision, dict[str, CustomJob]]:
        """Look for this identity's earlier jobs and decide: reattach, take success, or submit."""
        jobs = {job.name: job for job in self.find(identity)}
        candidates = [
            Candidate(name, job_status(job).phase, _when(job.create_time)) for name, job in jobs.items()
        ]
        return choose_existing(candidates), jobs

    def submit(self, custom_job: CustomJob, identity: RequestIdentity) -> tuple[CustomJob, bool]:
        """Create the job, or adopt the one an earlier, unanswered create already made.

        A create that timed out may still have created the job; before each retry the identity is
        looked up again, so a retried create can never make a second job. Returns the job and
        whether this call created it.
        """
        client = self._client()
        first = True
        for attempt in tenacity.Retrying(**retry_kwargs(f"create custom job in {self.parent}")):
            with attempt:
                if not first:
                    decision, jobs = self.decide(identity)
                    if decision.name is not None:
                        log.warning("An earlier create call did succeed: %s", decision.reason)
                        return jobs[decision.name], False
                first = False
                job = client.create_custom_job(parent=self.parent, custom_job=custom_job)
                return job, True
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, name: str) -> CustomJob:
        """Read one job."""
        for attempt in tenacity.Retrying(**retry_kwargs(f"get {name}")):
            with attempt:
                return self._client().get_custom_job(name=name)
        raise AssertionError("unreachable")  # pragma: no cover

    def get_status(self, name: str) -> RequestStatus:
        """Read one job, classified."""
        return job_status(self.get(name))

    def cancel(self, name: str) -> None:
        """Cancel a job; one that already ended (FAILED_PRECONDITION) or is gone is fine."""
        for attempt in tenacity.Retrying(**retry_kwargs(f"cancel {name}")):
            with attempt:
                try:
                    self._client().cancel_custom_job(name=name)
                except (gexc.FailedPrecondition, gexc.NotFound):
                    log.info("Job %s had already ended; nothing to cancel", name)

    # -- async (triggerer) ---------------------------------------------------------------------

    @property
    def async_hook(self) -> DwsVertexAIAsyncHook:
        """The async hook, created on first use."""
        if self._async_hook is None:
            self._async_hook = DwsVertexAIAsyncHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._async_hook

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one job, classified; one call, errors propagate (the shared poller retries)."""
        client = await self.async_hook.get_job_service_client(self.region)
        job = await client.get_custom_job(name=name)
        return job_status(job)

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every live job of the region that the provider made (``dws_managed``), classified.

        One list, paged. The filter uses only fields ListCustomJobs documents (``labels``,
        ``state``): ``update_time`` is not one of them, so a job that ended is absent and the
        shared poller reads it once. ``only``: classify just these names (the others are skipped
        unparsed). Errors propagate: the shared poller backs off as a whole.
        """
        client = await self.async_hook.get_job_service_client(self.region)
        request = ListCustomJobsRequest(parent=self.parent, filter=LIVE_FILTER, page_size=LIST_PAGE_SIZE)
        pager = await client.list_custom_jobs(request=request)
        return await classify_listed((page.custom_jobs async for page in pager.pages), only, job_status)

    async def acancel(self, name: str) -> None:
        """Cancel a job from the event loop; one already ended or gone is fine."""
        async for attempt in tenacity.AsyncRetrying(**retry_kwargs(f"cancel {name}")):
            with attempt:
                client = await self.async_hook.get_job_service_client(self.region)
                try:
                    await client.cancel_custom_job(name=name)
                except (gexc.FailedPrecondition, gexc.NotFound):
                    log.info("Job %s had already ended; nothing to cancel", name)
