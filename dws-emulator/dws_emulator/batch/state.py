"""Cloud Batch jobs, their tasks and cancel/delete operations, on the shared core.

Life cycle (``JobStatus.State``); each change appends a ``STATUS_CHANGED`` status event
"Job state is set from A to B for job NAME." (with the reason after it, as the real API words it):

* FLEX_START: QUEUED while it waits in its pool's FIFO queue for all its GPUs at once; SCHEDULED
  when it gets them (VMs being created, :data:`SCHEDULE_SECONDS`); RUNNING; then SUCCEEDED, or
  FAILED if ``DWS_EMULATOR_EXIT_CODE`` is not 0 or the run passes ``max_run_duration``. QUEUED for
  :data:`QUEUED_LIMIT_SECONDS` (2 days, as the Batch quotas page says) it FAILS on its own.
* STANDARD / SPOT (and unset, PREEMPTIBLE, RESERVATION_BOUND): the GPUs are taken at create if
  free; on the next tick SCHEDULED, or FAILED with a resources-unavailable event (a stock-out).
* on a reservation (``policy.reservation``, RESERVATION_BOUND or STANDARD): like FLEX_START, but
  in the reservation's own pool (:mod:`..core.reservations`; QUEUED until it is delivered and has
  room). An unknown or ended reservation, or one for another machine type, is INVALID_ARGUMENT.
  When it ends the job FAILS with the reservation's message in its last status event.
* jobs without GPUs use no pool and start at once.
* cancel (QUEUED, SCHEDULED, RUNNING): CANCELLATION_IN_PROGRESS, capacity released at once,
  CANCELLED :attr:`BatchState.cancel_seconds` later. delete (any state): DELETION_IN_PROGRESS,
  then gone (NOT_FOUND) :attr:`BatchState.delete_seconds` later. Both return long-running
  operations, done when the job gets there.

``request_id`` on CreateJob / CancelJob / DeleteJob: a replay returns what the first call
returned (the same job, the same operation) instead of acting again.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.batch_v1.types import batch as gcb_batch
from google.cloud.batch_v1.types import job as gcb_job
from google.cloud.batch_v1.types import task as gcb_task
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ..core.api import Api, Core
from ..core.clock import Schedule, iso
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from ..core.operations import finish_operation, start_operation
from ..core.reservations import Reservation
from . import BATCH_SERVICE, METHODS
from .reads import BatchReads
from .service import BatchServicer
from .validation import BatchPlan, check_request_id, parse_parent, validate_job

log = logging.getLogger("dws_emulator")

JobPb = gcb_job.Job.pb()
StatusEventPb = gcb_task.StatusEvent.pb()
OperationMetadataPb = gcb_batch.OperationMetadata.pb()
CancelJobResponsePb = gcb_batch.CancelJobResponse.pb()
State = gcb_job.JobStatus.State

#: A job still QUEUED after this long fails on its own (the Batch quotas page: 2 days).
QUEUED_LIMIT_SECONDS = 2 * 24 * 3600.0
#: How long SCHEDULED lasts (the VMs being created) before RUNNING.
SCHEDULE_SECONDS = 0.5
#: Default durations of CANCELLATION_IN_PROGRESS and DELETION_IN_PROGRESS.
CANCEL_SECONDS = 0.5
DELETE_SECONDS = 0.5
GROUP = "group0"

TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
CANCELLABLE = frozenset({State.QUEUED, State.SCHEDULED, State.RUNNING})


@dataclass
class BatchJobRecord:
    """One Batch job ever created."""

    name: str
    project: str
    location: str
    seq: int
    job: Any  # raw Job protobuf, returned (copied) to clients
    plan: BatchPlan
    created_at: float
    history: list[tuple[str, float]] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    until: float | None = None  # when the current timed state ends
    stock_out: bool = False  # no GPUs at create (on-demand): FAILED on the next tick
    error_code: int | None = None  # google.rpc code of a FAILED job, for the control API
    deleted: bool = False
    reservation: Reservation | None = None  # the calendar-mode reservation it consumes

    @property
    def state(self) -> int:
        return int(self.job.status.state)

    @property
    def job_id(self) -> str:
        return self.name.rsplit("/", 1)[1]


@dataclass
class _PendingOperation:
    name: str
    verb: str  # "cancel" or "delete"
    target: BatchJobRecord


class BatchState(Api, BatchReads):
    """``google.cloud.batch.v1.BatchService``; every method runs under ``core.lock``."""

    name = "batch"
    services = {BATCH_SERVICE: METHODS}

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.jobs: dict[str, BatchJobRecord] = {}  # by name: the latest with that name
        self.all_records: list[BatchJobRecord] = []  # every one ever created, oldest first
        self._seq = 0
        self._due = Schedule()
        self._pending: list[_PendingOperation] = []
        self._replies: dict[tuple[str, str], Any] = {}  # (verb, request_id) -> what was returned
        #: Durations of CANCELLATION_IN_PROGRESS and DELETION_IN_PROGRESS (emulator clock seconds).
        self.cancel_seconds = CANCEL_SECONDS
        self.delete_seconds = DELETE_SECONDS

    # -- registration ----------------------------------------------------------------------
    def owns(self, holder: str) -> bool:
        return holder in self.jobs

    def handlers(self) -> list[tuple[str, grpc.GenericRpcHandler]]:
        return [(BATCH_SERVICE, BatchServicer(self).handler())]

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return [(rec.created_at, self.record(rec)) for rec in self.all_records]

    def forget_operation(self, name: str) -> None:
        self._pending = [p for p in self._pending if p.name != name]

    # -- life cycle ------------------------------------------------------------------------
    def _set_state(self, rec: BatchJobRecord, state: int, now: float, reason: str = "") -> None:
        status = rec.job.status
        old = State(rec.state).name
        status.state = state
        new = State(state).name
        rec.job.update_time.CopyFrom(_timestamp(now))
        rec.history.append((new, now))
        if old != "STATE_UNSPECIFIED":
            text = f"Job state is set from {old} to {new} for job {rec.name}."
            event = status.status_events.add(type_="STATUS_CHANGED", description=f"{text} {reason}".strip())
            event.event_time.CopyFrom(_timestamp(now))
        self._sync_status(rec, now)
        log.info(
            "Batch job %s: %s -> %s%s",
            rec.name,
            "new" if old == "STATE_UNSPECIFIED" else old,
            new,
            f" ({reason})" if reason else "",
        )
        if state in (
            State.SCHEDULED,
            State.CANCELLATION_IN_PROGRESS,
            State.DELETION_IN_PROGRESS,
            State.RUNNING,
        ):
            if rec.until is not None:
                self._due.at(rec.name, rec.until)
        elif state == State.QUEUED and not rec.plan.queued:
            self._due.next_tick(rec.name)

    def _sync_status(self, rec: BatchJobRecord, now: float) -> None:
        """``status.task_groups`` counts and ``status.run_duration`` from the job's state."""
        status = rec.job.status
        group = status.task_groups[GROUP]
        group.counts.clear()
        group.counts.update(Counter(self.task_states(rec)))
        if rec.started_at is not None:
            end = rec.ended_at if rec.ended_at is not None else now
            status.run_duration.FromNanoseconds(int((end - rec.started_at) * 1e9))

    def _end(
        self, rec: BatchJobRecord, state: int, now: float, reason: str = "", code: int | None = None
    ) -> None:
        self.core.capacity.release(rec.name)
        rec.error_code = code
        rec.ended_at = now
        rec.until = None
        self._set_state(rec, state, now, reason)

    def _schedule(self, rec: BatchJobRecord, now: float) -> None:
        rec.until = now + SCHEDULE_SECONDS
        self._set_state(rec, State.SCHEDULED, now)

    def _run(self, rec: BatchJobRecord, now: float) -> None:
        rec.started_at = now
        plan = rec.plan
        run = plan.run_seconds if plan.max_run is None else min(plan.run_seconds, plan.max_run)
        rec.until = now + run
        self._set_state(rec, State.RUNNING, now)

    def _complete(self, rec: BatchJobRecord, now: float) -> None:
        plan = rec.plan
        if plan.max_run is not None and plan.run_seconds > plan.max_run:
            self._end(
                rec,
                State.FAILED,
                now,
                f"Job failed due to task failure. Specifically, task with index 0 "
                f"exceeded its max_run_duration of {plan.max_run:g}s and was stopped.",
                code_pb2.DEADLINE_EXCEEDED,
            )
        elif plan.exit_code != 0:
            self._end(
                rec,
                State.FAILED,
                now,
                "Job failed due to task failure. Specifically, task with index 0 "
                'failed due to the following task event: "Task state is updated from RUNNING to FAILED '
                f'with exit code {plan.exit_code}."',
                code_pb2.INTERNAL,
            )
        else:
            self._end(rec, State.SUCCEEDED, now)

    def _resources(self, rec: BatchJobRecord) -> str:
        plan = rec.plan
        return (
            f"{plan.vms} VM(s) x {plan.gpus_per_vm} {plan.accelerator} ({plan.gpus} GPUs) in {rec.location}"
        )

    # -- tick hooks ------------------------------------------------------------------------
    def before_advance(self, now: float) -> None:
        for name in self._due.due(now):
            rec = self.jobs.get(name)
            if rec is None or rec.deleted:
                continue
            state = rec.state
            if state == State.QUEUED and not rec.plan.queued:
                self._schedule(rec, now)
                if rec.stock_out:
                    self._end(
                        rec,
                        State.FAILED,
                        now,
                        "Batch Error: code - CODE_GCE_ZONE_RESOURCE_POOL_EXHAUSTED, "
                        f"description - The resources ({self._resources(rec)}) are not available right "
                        f"now ({rec.plan.provisioning_model}); try again later or use FLEX_START.",
                        code_pb2.RESOURCE_EXHAUSTED,
                    )
            elif rec.until is None or now < rec.until:
                if rec.until is not None:
                    self._due.at(name, rec.until)  # visited early: keep its end on the agenda
            elif state == State.SCHEDULED:
                self._run(rec, now)
            elif state == State.RUNNING:
                self._complete(rec, now)
            elif state == State.CANCELLATION_IN_PROGRESS:
                self._end(rec, State.CANCELLED, now)
            elif state == State.DELETION_IN_PROGRESS:
                rec.deleted = True
                rec.until = None
                rec.history.append(("DELETED", now))
                log.info("Batch job %s: deleted", rec.name)

    def started(self, holder: str, now: float) -> None:
        self._schedule(self.jobs[holder], now)

    def expired(self, holder: str, now: float) -> None:
        rec = self.jobs[holder]
        self._end(
            rec,
            State.FAILED,
            now,
            f"The job was QUEUED for more than {QUEUED_LIMIT_SECONDS / 86400:g} days "
            f"without obtaining its resources ({self._resources(rec)}).",
            code_pb2.RESOURCE_EXHAUSTED,
        )

    def after_advance(self, now: float) -> None:
        still: list[_PendingOperation] = []
        for pending in self._pending:
            rec = pending.target
            if pending.verb == "cancel" and (rec.state in TERMINAL or rec.deleted):
                self._complete_operation(pending, CancelJobResponsePb(), now)
            elif pending.verb == "delete" and rec.deleted:
                self._complete_operation(pending, empty_pb2.Empty(), now)
            else:
                still.append(pending)
        self._pending = still

    # -- operations ------------------------------------------------------------------------
    def _new_operation(self, verb: str, rec: BatchJobRecord, now: float) -> operations_pb2.Operation:
        parent = f"projects/{rec.project}/locations/{rec.location}"
        op = start_operation(self.core, parent, OperationMetadataPb, rec.name, verb, "v1", now)
        self._pending.append(_PendingOperation(op.name, verb, rec))
        return op

    def _complete_operation(self, pending: _PendingOperation, response: Any, now: float) -> None:
        finish_operation(self.core, pending.name, OperationMetadataPb, response, now)

    def _replay(self, verb: str, request_id: str) -> Any:
        check_request_id(request_id)
        if not request_id:
            return None
        reply = self._replies.get((verb, request_id))
        if reply is None:
            return None
        if verb == "create":
            rec = reply
            return self._copy(rec)
        out = operations_pb2.Operation(name=reply, done=True)  # the client may have deleted it
        stored = self.core.operations.get(reply)
        if stored is not None:
            out.CopyFrom(stored)  # a copy: it is serialised after the lock is released
        return out

    # -- RPCs ------------------------------------------------------------------------------
    def _copy(self, rec: BatchJobRecord) -> Any:
        if rec.state == State.RUNNING:
            self._sync_status(rec, self.core.clock())  # run_duration grows while it runs
        out = JobPb()
        out.CopyFrom(rec.job)
        return out

    def create(self, parent: str, job_id: str, job: Any, request_id: str = "") -> Any:
        core = self.core
        with core.lock:
            core.tick()
            replayed = self._replay("create", request_id)
            if replayed is not None:
                return replayed
            project, location = parse_parent(parent)
            plan = validate_job(parent, job_id, job)
            reservation = self._reservation(plan, project, location) if plan.reservation else None
            pool = reservation.pool if reservation is not None else plan.pool(location)
            if pool is not None and not core.capacity.has_pool(pool):
                elsewhere = core.capacity.locations_for(pool.accelerator)
                hint = f" Available in: {', '.join(elsewhere)}." if elsewhere else ""
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "Invalid value for field 'job.allocation_policy.instances[0].policy.accelerators[0].type': "
                    f"{pool.accelerator} is not available in {location}.{hint}",
                )
            if not job_id:
                job_id = f"job-{uuid.UUID(int=core.id_rng.getrandbits(128)).hex[:20]}"
            name = f"{parent}/jobs/{job_id}"
            existing = self.jobs.get(name)
            if existing is not None and not existing.deleted:
                raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"Job {name} already exists.")
            now = core.clock()
            stored = JobPb()
            stored.CopyFrom(job)
            stored.name = name
            stored.uid = f"{job_id[:40]}-{uuid.UUID(int=core.id_rng.getrandbits(128)).hex[:12]}"
            stored.ClearField("status")
            stored.create_time.CopyFrom(_timestamp(now))
            stored.task_groups[0].name = f"{name}/taskGroups/{GROUP}"
            stored.task_groups[0].task_count = plan.task_count
            stored.task_groups[0].parallelism = plan.parallelism
            rec = BatchJobRecord(
                name, project, location, self._seq, stored, plan, now, reservation=reservation
            )
            self._seq += 1
            self.jobs.pop(name, None)  # a deleted one with the same id makes way (kept in all_records)
            self.jobs[name] = rec
            self.all_records.append(rec)
            log.info(
                "Batch job %s created: %s, %s",
                name,
                plan.provisioning_model,
                self._resources(rec) if pool else "no GPUs",
            )
            if reservation is not None:
                core.reservations.consume(name, reservation, "BatchJob")
            if pool is not None and plan.queued:
                core.capacity.enqueue(name, pool, plan.gpus, QUEUED_LIMIT_SECONDS)
            elif pool is not None:
                rec.stock_out = not core.capacity.acquire_now(name, pool, plan.gpus)
            self._set_state(rec, State.QUEUED, now)
            if request_id:
                self._replies[("create", request_id)] = rec
            return self._copy(rec)

    def _reservation(self, plan: BatchPlan, project: str, location: str) -> Reservation:
        """The live reservation the job's VMs consume, or INVALID_ARGUMENT."""
        assert plan.reservation is not None
        field = "Invalid value for field 'job.allocation_policy.instances[0].policy.reservation': "
        res = self.core.reservations.resolve(plan.reservation, project, region=location)
        if res is None or res.ended:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{field}reservation {plan.reservation} does not exist in project {project}, region {location}.",
            )
        if res.accelerator != plan.accelerator or (
            res.machine_type and res.machine_type != plan.machine_type
        ):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{field}reservation {res.path} holds {res.machine_type or res.accelerator} machines, not "
                f"{plan.machine_type}.",
            )
        return res

    def reservation_ended(self, holder: str, reservation: Reservation, message: str, now: float) -> None:
        rec = self.jobs.get(holder)
        if rec is None or rec.deleted or rec.state not in CANCELLABLE:
            return
        code = code_pb2.UNAVAILABLE if rec.started_at is not None else code_pb2.RESOURCE_EXHAUSTED
        self._end(rec, State.FAILED, now, message, code)

    def get(self, name: str) -> Any:
        with self.core.lock:
            self.core.tick()
            return self._copy(self.lookup(name))

    def cancel(self, name: str, request_id: str = "") -> operations_pb2.Operation:
        with self.core.lock:
            self.core.tick()
            replayed = self._replay("cancel", request_id)
            if replayed is not None:
                return replayed
            rec = self.lookup(name)
            if rec.state not in CANCELLABLE and rec.state != State.CANCELLATION_IN_PROGRESS:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Job {name} is in state {State(rec.state).name} and cannot be cancelled.",
                )
            now = self.core.clock()
            if rec.state != State.CANCELLATION_IN_PROGRESS:
                self.core.capacity.release(name)  # the next queued job may start at once
                rec.until = now + self.cancel_seconds
                self._set_state(rec, State.CANCELLATION_IN_PROGRESS, now)
            op = self._new_operation("cancel", rec, now)
            if request_id:
                self._replies[("cancel", request_id)] = op.name
            return op

    def delete(self, name: str, request_id: str = "") -> operations_pb2.Operation:
        with self.core.lock:
            self.core.tick()
            replayed = self._replay("delete", request_id)
            if replayed is not None:
                return replayed
            rec = self.lookup(name)
            if rec.state == State.DELETION_IN_PROGRESS:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"Job {name} is already being deleted."
                )
            now = self.core.clock()
            self.core.capacity.release(name)
            if rec.started_at is not None and rec.ended_at is None:
                rec.ended_at = now
            rec.until = now + self.delete_seconds
            self._set_state(rec, State.DELETION_IN_PROGRESS, now)
            op = self._new_operation("delete", rec, now)
            if request_id:
                self._replies[("delete", request_id)] = op.name
            return op

    # -- control ---------------------------------------------------------------------------
    def record(self, rec: BatchJobRecord) -> dict[str, Any]:
        plan = rec.plan
        events = rec.job.status.status_events
        pool = rec.reservation.pool if rec.reservation is not None else plan.pool(rec.location)
        return {
            "kind": "BatchJob",
            "name": rec.name,
            "display_name": rec.job_id,
            "project": rec.project,
            "location": rec.location,
            "labels": dict(rec.job.labels),
            "strategy": plan.provisioning_model,
            "accelerator_type": plan.accelerator,
            "accelerator_count": plan.gpus,
            "machine_type": plan.machine_type,
            "vms": plan.vms,
            "task_count": plan.task_count,
            "parallelism": plan.parallelism,
            "pool": str(pool) if pool else None,
            "reservation": rec.reservation.path if rec.reservation is not None else plan.reservation,
            "state": State(rec.state).name,
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "start_time": iso(rec.started_at),
            "end_time": iso(rec.ended_at),
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": (
                {"code": rec.error_code, "message": events[-1].description}
                if rec.error_code is not None and events
                else None
            ),
        }
