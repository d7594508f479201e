"""The emulator's state: CustomJobs, their life cycle, delete operations and the capacity model.

Everything here works on raw protobuf messages (``CustomJob.pb()`` etc.) and is transport
agnostic: the gRPC layer in :mod:`.server` only decodes requests, calls :class:`EmulatorState`
and encodes replies. All public methods take the state's lock, and each one first calls
:meth:`EmulatorState.tick` so the model is current whatever the background ticker is doing.

Life cycle of a CustomJob (``JobState`` names without the ``JOB_STATE_`` prefix):

* FLEX_START: QUEUED at create, PENDING on the next tick while it waits in its pool's FIFO
  queue, RUNNING once the whole set is free, then SUCCEEDED / FAILED after its run time. If its
  max wait passes first it FAILS with RESOURCE_EXHAUSTED and no start_time.
* STANDARD / SPOT / unspecified: the whole set is taken at create (PENDING, RUNNING on the next
  tick) or the job FAILS at once with RESOURCE_EXHAUSTED (a stock-out). No queueing.
* jobs without accelerators use no pool and run at once.
* cancel: CANCELLING (capacity released immediately), CANCELLED on the next tick.

TPU queued resources live in :class:`.tpu_state.TpuState` (``EmulatorState.tpu``), which shares
this lock, clock, capacity model and operations table; ``tick`` advances both.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import custom_job as gca_custom_job
from google.cloud.aiplatform_v1.types import job_state as gca_job_state
from google.cloud.aiplatform_v1.types import operation as gca_operation
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, timestamp_pb2
from google.rpc import code_pb2

from .capacity import CapacityModel, PoolKey
from .filters import FilterError, compile_job_filter
from .validation import EmulatorError, JobPlan, validate_custom_job

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

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

_PARENT_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_JOB_NAME_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)/customJobs/(\d+)")


def iso(t: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC string (None stays None)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _timestamp(t: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


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


class EmulatorState:
    """All emulator state behind one lock. ``clock`` returns epoch seconds (injectable for tests)."""

    def __init__(
        self,
        capacity: Mapping[Any, int] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.seed = seed
        # Fault injection draws from this (see .faults); ids use their own stream so faults never shift them.
        self.rng = random.Random(seed)
        id_rng = random.Random(f"dws-emulator-ids:{seed}")
        self._next_job_id = id_rng.randrange(10**18, 5 * 10**18)
        self._next_op_id = id_rng.randrange(10**18, 5 * 10**18)
        self.capacity = CapacityModel(capacity, clock=clock)
        self.jobs: dict[str, JobRecord] = {}  # insertion order = creation order
        # The jobs not yet in a final state, in creation order: a tick only ever changes these, so
        # it walks them instead of every job ever made (a read must not slow down as jobs pile up).
        self._live: dict[str, JobRecord] = {}
        self.operations: dict[str, operations_pb2.Operation] = {}
        self._pending_ops: list[str] = []
        from .tpu_state import TpuState  # local: tpu_state imports helpers from this module

        self.tpu = TpuState(self)

    def new_operation_id(self) -> int:
        """The next long-running operation id (shared by CustomJob and TPU operations)."""
        op_id = self._next_op_id
        self._next_op_id += 1
        return op_id

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

    def tick(self) -> None:
        """Advance every job and operation to ``clock()``; cheap enough to call on every RPC."""
        with self.lock:
            now = self.clock()
            for rec in self._live.values():
                if rec.state == JobState.JOB_STATE_CANCELLING:
                    self._finish(rec, JobState.JOB_STATE_CANCELLED, now, code_pb2.CANCELLED, "CANCELED")
                elif rec.state == JobState.JOB_STATE_RUNNING and rec.finish_at is not None:
                    if now >= rec.finish_at:
                        self._complete(rec, now)
            for rec in self._live.values():
                if rec.state == JobState.JOB_STATE_QUEUED:
                    self._set_state(rec, JobState.JOB_STATE_PENDING, now)
            self.tpu.before_advance(now)
            # Capacity is advanced after releases so a freed set is handed on in the same tick.
            result = self.capacity.advance()
            for holder in result.expired:
                if holder not in self.jobs:
                    self.tpu.expired(holder, now)
                    continue
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
            for holder in result.started:
                if holder in self.jobs:
                    self._start(self.jobs[holder], now)
                else:
                    self.tpu.started(holder, now)
            self.tpu.after_advance(now)
            for rec in self._live.values():
                # PENDING jobs that need no queueing: on-demand sets already taken, or no accelerator.
                if rec.state == JobState.JOB_STATE_PENDING and not self.capacity.is_queued(rec.name):
                    self._start(rec, now)
            for name in [name for name, rec in self._live.items() if rec.terminal]:
                del self._live[name]
            for op_name in self._pending_ops:
                self.operations[op_name].done = True
            self._pending_ops.clear()

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
            if plan.accelerator is not None:
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
            self._live[name] = rec
            log.info(
                "CustomJob %s (%r) created: strategy=%s accelerators=%s",
                name,
                job.display_name,
                plan.strategy,
                f"{plan.accelerator_count} x {plan.accelerator}" if pool else "none",
            )
            if plan.flex_start:
                if pool is not None:
                    self.capacity.enqueue(name, pool, plan.accelerator_count, plan.max_wait)
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
            return self._copy(rec)

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
            op_id = self.new_operation_id()
            meta = DeleteOperationMetadataPb()
            meta.generic_metadata.create_time.CopyFrom(_timestamp(now))
            meta.generic_metadata.update_time.CopyFrom(_timestamp(now))
            op = operations_pb2.Operation(name=f"{name}/operations/{op_id}", done=False)
            op.metadata.Pack(meta)
            response = any_pb2.Any()
            response.Pack(empty_pb2.Empty())
            op.response.CopyFrom(response)
            self.operations[op.name] = op
            # Not done yet: the client's future then polls GetOperation like against the real API.
            self._pending_ops.append(op.name)
            returned = operations_pb2.Operation()
            returned.CopyFrom(op)
            returned.ClearField("response")
            return returned

    # -- Operations RPCs -------------------------------------------------------------------
    def get_operation(self, name: str) -> operations_pb2.Operation:
        with self.lock:
            self.tick()
            op = self.operations.get(name)
            if op is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            out = operations_pb2.Operation()
            out.CopyFrom(op)
            if not out.done:
                out.ClearField("result")
            return out

    def list_operations(self, name: str, page_size: int = 0, page_token: str = ""):
        with self.lock:
            self.tick()
            names = sorted(n for n in self.operations if n.startswith(name.rstrip("/") + "/"))
            start = 0
            if page_token:
                if not page_token.isdigit():
                    raise EmulatorError(
                        grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}."
                    )
                start = int(page_token)
            size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
            chunk = names[start : start + size]
            next_token = str(start + size) if start + size < len(names) else ""
            return [self.get_operation(n) for n in chunk], next_token

    def delete_operation(self, name: str) -> None:
        with self.lock:
            if self.operations.pop(name, None) is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
            if name in self._pending_ops:
                self._pending_ops.remove(name)
            self.tpu.forget_operation(name)

    def cancel_operation(self, name: str) -> None:
        # Deletes are instantaneous in the emulator, so there is nothing left to cancel.
        self.get_operation(name)

    def operation_done(self, name: str) -> bool:
        return self.get_operation(name).done

    # -- control ---------------------------------------------------------------------------
    def requests(self) -> list[dict[str, Any]]:
        """Every request ever created (deleted ones included), oldest first, as plain dicts.

        CustomJobs and TPU QueuedResources (``kind`` tells them apart) are merged by create time.
        """
        with self.lock:
            self.tick()
            timed: list[tuple[float, dict[str, Any]]] = [
                (qr.created_at, self.tpu.record(qr)) for qr in self.tpu.all_records
            ]
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
            timed.sort(key=lambda item: item[0])  # stable: creation order within equal times
            return [record for _, record in timed]

    def inventory(self) -> dict[str, dict[str, int]]:
        with self.lock:
            self.tick()
            return self.capacity.inventory()

    def set_capacity(self, pools: Mapping[Any, int]) -> dict[str, dict[str, int]]:
        """Create or resize pools (others unchanged); queued jobs may start right away."""
        with self.lock:
            for key, total in pools.items():
                self.capacity.set_total(key, total)
                log.info("capacity %s set to %d", key, total)
            self.tick()
            return self.capacity.inventory()
