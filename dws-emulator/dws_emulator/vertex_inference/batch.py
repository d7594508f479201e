"""BatchPredictionJobs (``google.cloud.aiplatform.v1beta1.JobService``): life cycle and deletes.

Everything works on raw protobuf messages; the owner (:class:`~.state.VertexInferenceState`)
calls in under the core's lock, after a tick, and routes the tick hooks here. Life cycle
(``JobState`` names without ``JOB_STATE_``), as :mod:`..vertex` runs CustomJobs:

* create: QUEUED. With ``flex_start`` and accelerators the job joins its pool's FIFO queue at once
  (shared with every other API's requests), is PENDING from the next tick and RUNNING once its
  whole set (replicas x ``machine_spec.accelerator_count``) is free. It has no max wait of its own
  (the API has none): it waits until capacity comes or it is cancelled. Without ``flex_start``
  (on demand or Spot) the whole set is taken at create or the job FAILS at once with
  RESOURCE_EXHAUSTED (a stock-out); without accelerators there is no pool. Both run from the next
  tick (PENDING, then RUNNING in the same tick).
* RUNNING for the workload's run time (:mod:`.` docstring), then SUCCEEDED with ``output_info``,
  ``completion_stats`` and ``resources_consumed``, or FAILED (code 13 INTERNAL) on a non-zero
  exit code.
* ``flex_start.max_runtime_duration`` passed before the run ends: FAILED, code 4 DEADLINE_EXCEEDED,
  capacity released. Emulator choice: counted from the start of running (the flex-start page
  counts a deployment's from its submission; a batch job has none to count from, and is not
  charged while queued).
* cancel: CANCELLING (capacity released at once; a waiting job leaves the queue), CANCELLED on the
  next tick (error code 1); an ended job is FAILED_PRECONDITION, as v1 CancelCustomJob.
* delete: only a job in a final state (else FAILED_PRECONDITION, as v1 DeleteCustomJob); it is
  gone at once (NOT_FOUND) and its operation is done on the next tick.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import grpc
from google.cloud.aiplatform_v1beta1.types import batch_prediction_job as gca_batch
from google.cloud.aiplatform_v1beta1.types import job_state as gca_job_state
from google.cloud.aiplatform_v1beta1.types import operation as gca_operation
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ..core.api import Core
from ..core.capacity import PoolKey
from ..core.clock import Schedule, iso
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from ..core.filters import FilterError, compile_job_filter
from . import lro
from .validation import (
    BQ_DESTINATION_RE,
    BatchPlan,
    page_size_of,
    parse_parent,
    resolve_pool,
    validate_batch_prediction_job,
)

log = logging.getLogger("dws_emulator")

JobState = gca_job_state.JobState
BatchPredictionJobPb = gca_batch.BatchPredictionJob.pb()
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
#: Instances each input source holds, as far as ``completion_stats`` tell (emulator choice).
INSTANCES_PER_INPUT = 100
_OUTPUT_ONLY = (
    "name",
    "model_version_id",
    "output_info",
    "state",
    "error",
    "partial_failures",
    "resources_consumed",
    "completion_stats",
    "create_time",
    "start_time",
    "end_time",
    "update_time",
)
_NAME_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)/batchPredictionJobs/(\d+)")


@dataclass
class BatchRecord:
    """One BatchPredictionJob ever created, with the bookkeeping its life cycle needs."""

    name: str
    project: str
    location: str
    job: Any  # raw BatchPredictionJob protobuf, returned (copied) to clients
    plan: BatchPlan
    created_at: float
    pool: PoolKey | None = None
    history: list[tuple[str, float]] = field(default_factory=list)
    started_at: float | None = None
    finish_at: float | None = None  # when a RUNNING job ends (its run, or its max runtime)
    deleted: bool = False

    @property
    def state(self) -> int:
        return int(self.job.state)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def job_id(self) -> int:
        return int(self.name.rsplit("/", 1)[1])


def output_stamp(t: float) -> str:
    """A job's create time as its output names spell it: ``YYYY_MM_DDThh_mm_ss_sssZ``."""
    when = datetime.fromtimestamp(t, timezone.utc)
    return when.strftime("%Y_%m_%dT%H_%M_%S") + f"_{when.microsecond // 1000:03d}Z"


class BatchPredictionJobs:
    """The BatchPredictionJobs of one emulator; every method runs under ``core.lock``."""

    def __init__(self, core: Core, first_id: int) -> None:
        self.core = core
        self._next_id = first_id
        self.jobs: dict[str, BatchRecord] = {}  # insertion order = creation order
        self._due = Schedule()  # jobs with a transition due before the capacity advance
        self._to_start: dict[str, None] = {}  # PENDING jobs to start after the advance, in order
        self._pending_ops: list[str] = []  # delete operations, done on the next tick

    def owns(self, holder: str) -> bool:
        return holder in self.jobs

    # -- life cycle ------------------------------------------------------------------------
    def _set_state(self, rec: BatchRecord, state: int, now: float) -> None:
        old = JobState(rec.state).name.removeprefix("JOB_STATE_")
        rec.job.state = state
        rec.job.update_time.CopyFrom(_timestamp(now))
        new = JobState(state).name
        rec.history.append((new, now))
        before = "new" if old == "UNSPECIFIED" else old
        log.info("BatchPredictionJob %s: %s -> %s", rec.name, before, new.removeprefix("JOB_STATE_"))
        if state in (JobState.JOB_STATE_QUEUED, JobState.JOB_STATE_CANCELLING):
            self._due.next_tick(rec.name)
        elif state == JobState.JOB_STATE_RUNNING and rec.finish_at is not None:
            self._due.at(rec.name, rec.finish_at)

    def _finish(
        self, rec: BatchRecord, state: int, now: float, code: int | None = None, message: str = ""
    ) -> None:
        if code is not None:
            rec.job.error.code = code
            rec.job.error.message = message
            log.info("BatchPredictionJob %s: %s", rec.name, message)
        rec.job.end_time.CopyFrom(_timestamp(now))
        if rec.started_at is not None:
            hours = (now - rec.started_at) / 3600
            rec.job.resources_consumed.replica_hours = rec.plan.resources.replicas * hours
        self.core.capacity.release(rec.name)
        rec.finish_at = None
        self._set_state(rec, state, now)

    def _start(self, rec: BatchRecord, now: float) -> None:
        rec.started_at = now
        rec.job.start_time.CopyFrom(_timestamp(now))
        plan = rec.plan
        run = plan.run_seconds
        if plan.resources.max_runtime is not None:
            run = min(run, plan.resources.max_runtime)
        rec.finish_at = now + run
        self._set_state(rec, JobState.JOB_STATE_RUNNING, now)

    def _complete(self, rec: BatchRecord, now: float) -> None:
        plan = rec.plan
        max_runtime = plan.resources.max_runtime
        if max_runtime is not None and plan.run_seconds > max_runtime:
            message = (
                f"The flex-start max runtime of {max_runtime:g}s (dedicated_resources.flex_start."
                "max_runtime_duration) was reached before the job finished; it was stopped."
            )
            self._finish(rec, JobState.JOB_STATE_FAILED, now, code_pb2.DEADLINE_EXCEEDED, message)
        elif plan.exit_code != 0:
            message = (
                f"The model server of the batch prediction job exited with a non-zero status of "
                f"{plan.exit_code}. To find out more about why your job exited please check the logs."
            )
            self._finish(rec, JobState.JOB_STATE_FAILED, now, code_pb2.INTERNAL, message)
        else:
            self._set_output(rec)
            self._finish(rec, JobState.JOB_STATE_SUCCEEDED, now)

    @staticmethod
    def _set_output(rec: BatchRecord) -> None:
        """``output_info`` and ``completion_stats`` of a job that succeeded ([aiplatform.v1beta1]
        OutputConfig: a ``prediction-<model display name>-<create time>`` directory, or a
        ``prediction_<model display name>_<create time>`` dataset with a ``predictions`` table).
        Emulator choice: without a model registry, the job's display name stands for the model's."""
        job = rec.job
        stamp = output_stamp(rec.created_at)
        output = job.output_config
        if output.WhichOneof("destination") == "gcs_destination":
            prefix = output.gcs_destination.output_uri_prefix.rstrip("/")
            job.output_info.gcs_output_directory = f"{prefix}/prediction-{job.display_name}-{stamp}"
        else:
            match = BQ_DESTINATION_RE.fullmatch(output.bigquery_destination.output_uri)
            assert match is not None  # validated at create
            project, dataset, table = match.groups()
            if dataset is None:
                dataset = f"prediction_{re.sub(r'[^A-Za-z0-9_]', '_', job.display_name)}_{stamp}"
                table = table or "predictions"
            job.output_info.bigquery_output_dataset = f"bq://{project}.{dataset}"
            job.output_info.bigquery_output_table = table or f"predictions_{stamp}"
        job.completion_stats.successful_count = rec.plan.inputs * INSTANCES_PER_INPUT
        job.completion_stats.failed_count = 0
        job.completion_stats.incomplete_count = 0

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

    def started(self, holder: str, now: float) -> None:
        self._to_start.pop(holder, None)
        rec = self.jobs[holder]
        if rec.state == JobState.JOB_STATE_QUEUED:
            self._set_state(rec, JobState.JOB_STATE_PENDING, now)
        self._start(rec, now)

    def after_advance(self, now: float) -> None:
        to_start, self._to_start = self._to_start, {}
        for name in to_start:
            rec = self.jobs[name]
            if rec.state == JobState.JOB_STATE_PENDING and not self.core.capacity.is_queued(name):
                self._start(rec, now)  # its set was taken at create, or it needs none
        for op_name in self._pending_ops:
            lro.finish(self.core, op_name, DeleteOperationMetadataPb, now, response=empty_pb2.Empty())
        self._pending_ops.clear()

    def forget_operation(self, name: str) -> None:
        if name in self._pending_ops:
            self._pending_ops.remove(name)

    # -- RPCs ------------------------------------------------------------------------------
    def _lookup(self, name: str) -> BatchRecord:
        if not _NAME_RE.fullmatch(name):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid BatchPredictionJob name {name!r}: expected "
                "projects/{project}/locations/{location}/batchPredictionJobs/{batch_prediction_job}.",
            )
        rec = self.jobs.get(name)
        if rec is None or rec.deleted:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"The BatchPredictionJob {name} does not exist.")
        return rec

    @staticmethod
    def _copy(rec: BatchRecord) -> Any:
        out = BatchPredictionJobPb()
        out.CopyFrom(rec.job)
        return out

    def create(self, parent: str, job: Any) -> Any:
        """CreateBatchPredictionJob: validate, name, then queue / take the set / stock out."""
        project, location = parse_parent(parent)
        plan = validate_batch_prediction_job(job, location)
        res = plan.resources
        pool = resolve_pool(self.core.capacity, location, res, "batch_prediction_job.dedicated_resources")
        now = self.core.clock()
        name = f"projects/{project}/locations/{location}/batchPredictionJobs/{self._next_id}"
        self._next_id += 1
        stored = BatchPredictionJobPb()
        stored.CopyFrom(job)
        for output_field in _OUTPUT_ONLY:  # ignored on input, as in the real API
            stored.ClearField(output_field)
        stored.name = name
        stored.create_time.CopyFrom(_timestamp(now))
        rec = BatchRecord(name, project, location, stored, plan, now, pool)
        self.jobs[name] = rec
        log.info(
            "BatchPredictionJob %s (%r) created: %s, accelerators=%s",
            name,
            job.display_name,
            res.strategy,
            f"{res.count} x {res.accelerator}" if pool else "none",
        )
        self._set_state(rec, JobState.JOB_STATE_QUEUED, now)
        if pool is not None and res.flex_start:
            self.core.capacity.enqueue(name, pool, res.count, None)
        elif pool is not None and not self.core.capacity.acquire_now(name, pool, res.count):
            message = (
                f"Resources are insufficient in region: {location}. The requested resources "
                f"({res.count} x {res.accelerator}) are not available right now; try again later "
                "or use dedicated_resources.flex_start."
            )
            self._finish(rec, JobState.JOB_STATE_FAILED, now, code_pb2.RESOURCE_EXHAUSTED, message)
        return self._copy(rec)

    def get(self, name: str) -> Any:
        return self._copy(self._lookup(name))

    def list_jobs(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """ListBatchPredictionJobs, newest first; the page token is the last job's id (a cursor)."""
        project, location = parse_parent(parent)
        size = page_size_of(page_size)
        try:
            predicate = compile_job_filter(filter_text, STATE_NAMES)
        except FilterError as exc:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter {filter_text!r}: {exc}"
            ) from None
        if page_token and not page_token.isdigit():
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}.")
        cursor = int(page_token) if page_token else None
        matches: list[BatchRecord] = []
        for rec in reversed(self.jobs.values()):
            if rec.deleted or rec.project != project or rec.location != location:
                continue
            if cursor is not None and rec.job_id >= cursor:
                continue
            if predicate(self._filter_record(rec)):
                matches.append(rec)
                if len(matches) > size:
                    break
        page = matches[:size]
        token = str(page[-1].job_id) if len(matches) > size else ""
        return [self._copy(rec) for rec in page], token

    @staticmethod
    def _filter_record(rec: BatchRecord) -> dict[str, Any]:
        return {
            "state": JobState(rec.state).name,
            "display_name": rec.job.display_name,
            "labels": dict(rec.job.labels),
            "create_time": rec.created_at,
        }

    def cancel(self, name: str) -> None:
        rec = self._lookup(name)
        if rec.terminal:
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cannot cancel BatchPredictionJob {name} because it is in state {JobState(rec.state).name}.",
            )
        if rec.state == JobState.JOB_STATE_CANCELLING:
            return
        # Released now, so the next request in the queue need not wait for CANCELLED.
        self.core.capacity.release(name)
        rec.finish_at = None
        self._to_start.pop(name, None)
        self._set_state(rec, JobState.JOB_STATE_CANCELLING, self.core.clock())

    def delete(self, name: str) -> operations_pb2.Operation:
        """DeleteBatchPredictionJob of a job in a final state; the operation is done on the next tick."""
        rec = self._lookup(name)
        if not rec.terminal:
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"BatchPredictionJob {name} is in state {JobState(rec.state).name}; only jobs in a final "
                "state can be deleted. Cancel it first.",
            )
        now = self.core.clock()
        rec.deleted = True
        rec.history.append(("DELETED", now))
        log.info("BatchPredictionJob %s (%r): deleted", name, rec.job.display_name)
        op = lro.start(self.core, name, DeleteOperationMetadataPb, now)
        self._pending_ops.append(op.name)
        return op

    # -- control ---------------------------------------------------------------------------
    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        """Every BatchPredictionJob ever created (deleted ones included), with its create time."""
        return [(rec.created_at, self.record(rec)) for rec in self.jobs.values()]

    @staticmethod
    def record(rec: BatchRecord) -> dict[str, Any]:
        """The control API's record of one job (the keys every request record has, and its own)."""
        job, res = rec.job, rec.plan.resources
        return {
            "name": rec.name,
            "kind": "BatchPredictionJob",
            "display_name": job.display_name,
            "project": rec.project,
            "location": rec.location,
            "labels": dict(job.labels),
            "model": job.model or None,
            "strategy": res.strategy,
            "machine_type": res.machine_type or None,
            "replicas": res.replicas,
            "accelerator_type": res.accelerator if rec.pool else None,
            "accelerator_count": res.count if rec.pool else 0,
            "pool": str(rec.pool) if rec.pool else None,
            "max_runtime_seconds": res.max_runtime,
            "state": JobState(rec.state).name,
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "start_time": iso(rec.started_at),
            "end_time": iso(job.end_time.ToNanoseconds() / 1e9) if job.HasField("end_time") else None,
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": {"code": job.error.code, "message": job.error.message}
            if job.HasField("error")
            else None,
        }
