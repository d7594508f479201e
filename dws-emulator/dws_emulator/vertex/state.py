"""Vertex AI CustomJobs: their life cycle and delete operations, on the shared core.

Everything here works on raw protobuf messages (``CustomJob.pb()`` etc.); :mod:`.service` only
decodes requests, calls :class:`VertexState` and encodes replies. Every public method takes the
core's lock and ticks first.

Life cycle of a CustomJob (``JobState`` names without the ``JOB_STATE_`` prefix):

* FLEX_START: QUEUED at create, PENDING on the next tick while it waits in its pool's FIFO
  queue, RUNNING once the whole set is free, then SUCCEEDED / FAILED after its run time. If its
  max wait passes first it FAILS with RESOURCE_EXHAUSTED and no start_time.
* STANDARD / SPOT / unspecified: the whole set is taken at create (PENDING, RUNNING on the next
  tick) or the job FAILS at once with RESOURCE_EXHAUSTED (a stock-out). No queueing.
* on a reservation (``machine_spec.reservation_affinity`` SPECIFIC_RESERVATION, any other strategy
  than FLEX_START and SPOT): like FLEX_START, but in the reservation's own pool
  (:mod:`..core.reservations`) and without a max wait, so a job created before the reservation is
  delivered waits for it. An unknown or ended reservation, one in another region, for another
  machine type or GPU is INVALID_ARGUMENT. When the reservation ends the job FAILS (code 14
  UNAVAILABLE once it ran, 8 RESOURCE_EXHAUSTED before), with the reservation's message.
* jobs without accelerators use no pool and run at once.
* cancel: CANCELLING (capacity released immediately), CANCELLED on the next tick.

A tick visits only the jobs its :class:`~..core.clock.Schedule` says are due (a run that ends, a
state that moves on at the next tick); jobs waiting for capacity cost nothing until the capacity
model starts or expires them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import custom_job as gca_custom_job
from google.cloud.aiplatform_v1.types import job_state as gca_job_state
from google.cloud.aiplatform_v1.types import operation as gca_operation
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2
from google.rpc import code_pb2

from ..core.api import Api, Core
from ..core.capacity import PoolKey
from ..core.clock import Schedule, iso
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from ..core.filters import FilterError, compile_job_filter
from ..core.reservations import Reservation
from ..core.state import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from . import JOB_SERVICE, METHODS
from .service import JobServiceServicer
from .validation import JobPlan, invalid, validate_custom_job

log = logging.getLogger("dws_emulator")

JobState = gca_job_state.JobState
CustomJobPb = gca_custom_job.CustomJob.pb()
DeleteOperationMetadataPb = gca_operation.DeleteOperationMetadata.pb()

TERMINAL_STATES = frozenset(
    {
        JobState.JOB_STATE_SUCCEEDED,
        JobState.JOB_STATE_FAILED,
        JobState.JOB_STATE_CANCELLED,
        JobState.JOB_STATE_EXPIRED,
        JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
    }
)
STATE_NAMES = frozenset(JobState.__members__)

_PARENT_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_JOB_NAME_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)/customJobs/(\d+)")


@dataclass
class JobRecord:
    """One CustomJob ever created, with the bookkeeping the life cycle needs."""

    name: str
    project: str
    location: str
    job: Any  # raw CustomJob protobuf, returned (copied) to clients
    plan: JobPlan
    created_at: float
    history: list[tuple[str, float]] = field(default_factory=list)
    pool: PoolKey | None = None
    started_at: float | None = None
    finish_at: float | None = None  # when a RUNNING job ends
    deleted: bool = False

    @property
    def state(self) -> int:
        return int(self.job.state)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class VertexState(Api):
    """``google.cloud.aiplatform.v1.JobService`` CustomJobs; every method runs under ``core.lock``."""

    name = "vertex"
    services = {JOB_SERVICE: METHODS}

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._next_job_id = core.first_job_id()
        self.jobs: dict[str, JobRecord] = {}  # insertion order = creation order
        self._due = Schedule()  # jobs with a transition due (before the capacity advance)
        self._to_start: dict[str, None] = {}  # PENDING jobs to start after the advance, in order
        self._pending_ops: list[str] = []

    @property
    def lock(self) -> Any:
        return self.core.lock

    @property
    def clock(self) -> Any:
        return self.core.clock

    @property
    def capacity(self) -> Any:
        return self.core.capacity

    def tick(self) -> None:
        self.core.tick()

    def owns(self, holder: str) -> bool:
        return holder in self.jobs

    def handlers(self) -> list[tuple[str, Any]]:
        return [(JOB_SERVICE, JobServiceServicer(self).handler())]

    # -- life cycle ------------------------------------------------------------------------
    def _set_state(self, rec: JobRecord, state: int, now: float) -> None:
        old = JobState(rec.state).name
        rec.job.state = state
        rec.job.update_time.CopyFrom(_timestamp(now))
        new = JobState(state).name
        rec.history.append((new, now))
        before = "new" if old == "JOB_STATE_UNSPECIFIED" else old.removeprefix("JOB_STATE_")
        log.info(
            "CustomJob %s (%r): %s -> %s",
            rec.name,
            rec.job.display_name,
            before,
            new.removeprefix("JOB_STATE_"),
        )
        self._set_due(rec)

    def _finish(
        self, rec: JobRecord, state: int, now: float, code: int | None = None, message: str = ""
    ) -> None:
        if code is not None:
            rec.job.error.code = code
            rec.job.error.message = message
        rec.job.end_time.CopyFrom(_timestamp(now))
        self.capacity.release(rec.name)
        rec.finish_at = None
        self._set_state(rec, state, now)
        if message:
            log.info("CustomJob %s: %s", rec.name, message)

    def _start(self, rec: JobRecord, now: float) -> None:
        rec.started_at = now
        rec.job.start_time.CopyFrom(_timestamp(now))
        rec.finish_at = now + rec.plan.run_seconds
        if rec.plan.timeout is not None:
            rec.finish_at = min(rec.finish_at, now + rec.plan.timeout)
        self._set_state(rec, JobState.JOB_STATE_RUNNING, now)

    def _complete(self, rec: JobRecord, now: float) -> None:
        plan = rec.plan
        if plan.timeout is not None and plan.run_seconds > plan.timeout:
            self._finish(
                rec,
                JobState.JOB_STATE_FAILED,
                now,
                code_pb2.DEADLINE_EXCEEDED,
                f"The job ran longer than its scheduling.timeout of {plan.timeout:g}s and was stopped.",
            )
        elif plan.exit_code != 0:
            self._finish(
                rec,
                JobState.JOB_STATE_FAILED,
                now,
                code_pb2.INTERNAL,
                f"The replica workerpool0-0 exited with a non-zero status of {plan.exit_code}. "
                "To find out more about why your job exited please check the logs.",
            )
        else:
            self._finish(rec, JobState.JOB_STATE_SUCCEEDED, now)

    def _set_due(self, rec: JobRecord) -> None:
        """Put ``rec`` on the agenda its new state needs (nothing for waiting and final states)."""
        state = rec.state
        if state in (JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_CANCELLING):
            self._due.next_tick(rec.name)
        elif state == JobState.JOB_STATE_RUNNING and rec.finish_at is not None:
            self._due.at(rec.name, rec.finish_at)

    # -- tick hooks ------------------------------------------------------------------------
    def before_advance(self, now: float) -> None:
        for name in self._due.due(now):
            rec = self.jobs[name]
            if rec.state == JobState.JOB_STATE_CANCELLING:
                self._finish(rec, JobState.JOB_STATE_CANCELLED, now, code_pb2.CANCELLED, "CANCELED")
            elif rec.state == JobState.JOB_STATE_RUNNING and rec.finish_at is not None:
                if now >= rec.finish_at:
                    self._complete(rec, now)
                else:  # visited early: keep its end on the agenda
                    self._due.at(name, rec.finish_at)
            elif rec.state == JobState.JOB_STATE_QUEUED:
                self._set_state(rec, JobState.JOB_STATE_PENDING, now)
                self._to_start[name] = None

    def expired(self, holder: str, now: float) -> None:
        rec = self.jobs[holder]
        plan = rec.plan
        self._finish(
            rec,
            JobState.JOB_STATE_FAILED,
            now,
            code_pb2.RESOURCE_EXHAUSTED,
            f"The requested resources ({plan.accelerator_count} x {plan.accelerator} in "
            f"{rec.location}) were not available within the max wait duration of "
            f"{plan.max_wait:g}s.",
        )

    def started(self, holder: str, now: float) -> None:
        self._to_start.pop(holder, None)
        self._start(self.jobs[holder], now)

    def after_advance(self, now: float) -> None:
        # PENDING jobs that need no queueing: on-demand sets already taken, or no accelerator.
        to_start, self._to_start = self._to_start, {}
        for name in to_start:
            rec = self.jobs[name]
            if rec.state != JobState.JOB_STATE_PENDING:
                continue
            if self.capacity.is_queued(name):
                continue  # the capacity model starts it (``started``) when its set is free
            self._start(rec, now)
        for op_name in self._pending_ops:
            op = self.core.operations.get(op_name)
            if op is not None:
                op.done = True
        self._pending_ops.clear()

    def forget_operation(self, name: str) -> None:
        if name in self._pending_ops:
            self._pending_ops.remove(name)

    # -- CustomJob RPCs --------------------------------------------------------------------
    @staticmethod
    def _parse_parent(parent: str) -> tuple[str, str]:
        match = _PARENT_RE.fullmatch(parent)
        if not match:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid parent {parent!r}: expected projects/{{project}}/locations/{{location}}.",
            )
        return match.group(1), match.group(2)

    def _lookup(self, name: str) -> JobRecord:
        if not _JOB_NAME_RE.fullmatch(name):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid CustomJob name {name!r}: expected "
                "projects/{project}/locations/{location}/customJobs/{custom_job}.",
            )
        rec = self.jobs.get(name)
        if rec is None or rec.deleted:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"The CustomJob {name} does not exist.")
        return rec

    def create_custom_job(self, parent: str, job: Any) -> Any:
        """CreateCustomJob: validate, name, then queue / start / stock-out. Returns a CustomJob pb."""
        with self.lock:
            self.tick()
            project, location = self._parse_parent(parent)
            plan = validate_custom_job(job)
            pool = None
            reservation = None
            if plan.reservation is not None:
                reservation = self._reservation(plan, project, location)
                pool = reservation.pool
            elif plan.accelerator is not None:
                pool = PoolKey(location, plan.accelerator)
                if not self.capacity.has_pool(pool):
                    elsewhere = self.capacity.locations_for(plan.accelerator)
                    hint = f" Available in: {', '.join(elsewhere)}." if elsewhere else ""
                    raise EmulatorError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "List of found errors:\t1.Field: "
                        "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type; "
                        f"Message: Accelerator type {plan.accelerator} is not available in {location}.{hint}\t",
                    )
            now = self.clock()
            job_id = self._next_job_id
            self._next_job_id += 1
            name = f"projects/{project}/locations/{location}/customJobs/{job_id}"
            stored = CustomJobPb()
            stored.CopyFrom(job)
            stored.name = name
            # Output-only fields are ignored on input, as in the real API.
            for output_field in ("state", "error", "create_time", "start_time", "end_time", "update_time"):
                stored.ClearField(output_field)
            stored.create_time.CopyFrom(_timestamp(now))
            rec = JobRecord(name, project, location, stored, plan, now, pool=pool)
            self.jobs[name] = rec
            if reservation is not None:
                self.core.reservations.consume(name, reservation, "CustomJob")
            log.info(
                "CustomJob %s (%r) created: strategy=%s accelerators=%s",
                name,
                job.display_name,
                plan.strategy,
                f"{plan.accelerator_count} x {plan.accelerator}" if pool else "none",
            )
            if plan.queued:
                if pool is not None:
                    max_wait = None if reservation is not None else plan.max_wait
                    self.capacity.enqueue(name, pool, plan.accelerator_count, max_wait)
                self._set_state(rec, JobState.JOB_STATE_QUEUED, now)
            elif pool is not None and not self.capacity.acquire_now(name, pool, plan.accelerator_count):
                self._set_state(rec, JobState.JOB_STATE_PENDING, now)
                self._finish(
                    rec,
                    JobState.JOB_STATE_FAILED,
                    now,
                    code_pb2.RESOURCE_EXHAUSTED,
                    f"Resources are insufficient in region: {location}. The requested resources "
                    f"({plan.accelerator_count} x {plan.accelerator}) are not available right now; "
                    "try again later or use the FLEX_START scheduling strategy.",
                )
            else:
                self._set_state(rec, JobState.JOB_STATE_PENDING, now)
                self._to_start[name] = None
            return self._copy(rec)

    def _reservation(self, plan: JobPlan, project: str, location: str) -> Reservation:
        """The live reservation the job consumes, or INVALID_ARGUMENT."""
        assert plan.reservation is not None
        field = "custom_job.job_spec.worker_pool_specs[0].machine_spec"
        res = self.core.reservations.resolve(plan.reservation, project, region=location)
        if res is None or res.ended:
            raise invalid(
                f"{field}.reservation_affinity.values",
                f"Reservation {plan.reservation} does not exist in project {project}, region {location}.",
            )
        if res.accelerator != plan.accelerator or (
            res.machine_type and res.machine_type != plan.machine_type
        ):
            raise invalid(
                f"{field}.machine_type",
                f"Reservation {res.path} holds {res.machine_type or res.accelerator} machines; the job asks for "
                f"{plan.machine_type} with {plan.accelerator}.",
            )
        return res

    def reservation_ended(self, holder: str, reservation: Reservation, message: str, now: float) -> None:
        rec = self.jobs[holder]
        if rec.terminal or rec.state == JobState.JOB_STATE_CANCELLING:
            return
        self._to_start.pop(holder, None)
        code = code_pb2.UNAVAILABLE if rec.started_at is not None else code_pb2.RESOURCE_EXHAUSTED
        self._finish(rec, JobState.JOB_STATE_FAILED, now, code, message)

    @staticmethod
    def _copy(rec: JobRecord) -> Any:
        out = CustomJobPb()
        out.CopyFrom(rec.job)
        return out

    def get_custom_job(self, name: str) -> Any:
        with self.lock:
            self.tick()
            return self._copy(self._lookup(name))

    def list_custom_jobs(self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""):
        """ListCustomJobs, newest first. The page token is the id of the last job returned."""
        with self.lock:
            self.tick()
            project, location = self._parse_parent(parent)
            if page_size < 0:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative.")
            size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
            try:
                predicate = compile_job_filter(filter_text, STATE_NAMES)
            except FilterError as exc:
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter {filter_text!r}: {exc}"
                ) from None
            cursor = None
            if page_token:
                # The token is a job id: a cursor, so jobs created between pages do not shift pages.
                if not page_token.isdigit():
                    raise EmulatorError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}."
                    )
                cursor = int(page_token)
            matches = []
            for rec in reversed(self.jobs.values()):
                if rec.deleted or rec.project != project or rec.location != location:
                    continue
                job_id = int(rec.name.rsplit("/", 1)[1])
                if cursor is not None and job_id >= cursor:
                    continue
                if predicate(self._filter_record(rec)):
                    matches.append(rec)
                    if len(matches) > size:
                        break
            page = matches[:size]
            next_token = page[-1].name.rsplit("/", 1)[1] if len(matches) > size else ""
            return [self._copy(rec) for rec in page], next_token

    @staticmethod
    def _filter_record(rec: JobRecord) -> dict[str, Any]:
        return {
            "state": JobState(rec.state).name,
            "display_name": rec.job.display_name,
            "labels": dict(rec.job.labels),
            "create_time": rec.job.create_time.ToNanoseconds() / 1e9,
        }

    def cancel_custom_job(self, name: str) -> None:
        with self.lock:
            self.tick()
            rec = self._lookup(name)
            if rec.terminal:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Cannot cancel CustomJob {name} because it is in state {JobState(rec.state).name}.",
                )
            if rec.state == JobState.JOB_STATE_CANCELLING:
                return
            # Release now so the next job in the queue can start without waiting for CANCELLED.
            self.capacity.release(name)
            rec.finish_at = None
            self._to_start.pop(name, None)
            self._set_state(rec, JobState.JOB_STATE_CANCELLING, self.clock())

    def delete_custom_job(self, name: str) -> operations_pb2.Operation:
        """Delete a terminal job; returns a long-running Operation that completes on the next tick."""
        with self.lock:
            self.tick()
            rec = self._lookup(name)
            if not rec.terminal:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"CustomJob {name} is in state {JobState(rec.state).name}; only jobs in a final "
                    "state can be deleted. Cancel it first.",
                )
            now = self.clock()
            rec.deleted = True
            rec.history.append(("DELETED", now))
            log.info("CustomJob %s (%r): deleted", name, rec.job.display_name)
            op_id = self.core.new_operation_id()
            meta = DeleteOperationMetadataPb()
            meta.generic_metadata.create_time.CopyFrom(_timestamp(now))
            meta.generic_metadata.update_time.CopyFrom(_timestamp(now))
            op = operations_pb2.Operation(name=f"{name}/operations/{op_id}", done=False)
            op.metadata.Pack(meta)
            response = any_pb2.Any()
            response.Pack(empty_pb2.Empty())
            op.response.CopyFrom(response)
            self.core.operations[op.name] = op
            # Not done yet: the client's future then polls GetOperation like against the real API.
            self._pending_ops.append(op.name)
            returned = operations_pb2.Operation()
            returned.CopyFrom(op)
            returned.ClearField("response")
            return returned

    # -- control ---------------------------------------------------------------------------
    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        """Every CustomJob ever created (deleted ones included), with its create time."""
        timed: list[tuple[float, dict[str, Any]]] = []
        for rec in self.jobs.values():
            job = rec.job
            timed.append(
                (
                    rec.created_at,
                    {
                        "name": rec.name,
                        "kind": "CustomJob",
                        "display_name": job.display_name,
                        "project": rec.project,
                        "location": rec.location,
                        "labels": dict(job.labels),
                        "strategy": rec.plan.strategy,
                        "accelerator_type": rec.plan.accelerator,
                        "accelerator_count": rec.plan.accelerator_count,
                        "pool": str(rec.pool) if rec.pool else None,
                        "reservation": rec.plan.reservation,
                        "state": JobState(rec.state).name,
                        "deleted": rec.deleted,
                        "create_time": iso(rec.created_at),
                        "start_time": iso(rec.started_at),
                        "end_time": iso(job.end_time.ToNanoseconds() / 1e9)
                        if job.HasField("end_time")
                        else None,
                        "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
                        "error": (
                            {"code": job.error.code, "message": job.error.message}
                            if job.HasField("error")
                            else None
                        ),
                    },
                )
            )
        return timed
