"""The DWS page's data: the ``dws_requests`` XComs of the DAGs a user may read, joined to their task instances.

Runs in the api-server only (the web app imports it when it builds its routes). It reads Airflow's
metadata database through Airflow's own ORM models (``XComModel``, ``TaskInstance``), which is not a
public interface: the callers authorize (see ``app.py``) and pass the readable DAG ids in.

Queries are bounded: XComs written in a time range (default :data:`DEFAULT_DAYS` days) plus those
of task instances still live (a request can wait longer than the range without being rewritten),
at most ``limit`` rows, newest first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_provider_dws.records import (
    BLOCK_PRICING,
    XCOM_KEY,
    RequestRecord,
    api_name,
    end_record,
    iso,
    parse_time,
    read_records,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: The time range a listing covers unless asked otherwise.
DEFAULT_DAYS = 7
#: XCom rows read at most per listing (each holds one task instance's records), and the cap a caller may ask.
DEFAULT_LIMIT = 2000
MAX_LIMIT = 10000
#: Task-instance states in which a request may still be waiting or holding: read whatever their XCom's age.
LIVE_TI_STATES = (
    "deferred",
    "running",
    "queued",
    "scheduled",
    "up_for_retry",
    "up_for_reschedule",
    "restarting",
)
#: Task-instance states after which a task no longer uses what it holds.
FINISHED_TI_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")
#: Task-instance states in which the try that wrote a record is over (the request's waiter gone).
_TRY_OVER_STATES = ("failed", "skipped", "upstream_failed", "removed", "up_for_retry", "success")


@dataclass(frozen=True)
class Filters:
    """What a listing is narrowed to; ``None`` means any."""

    dag_id: str | None = None
    api: str | None = None
    location: str | None = None
    phase: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT

    def window(self, now: datetime) -> tuple[datetime, datetime | None]:
        """The XCom write-time range: ``since`` (default ``now`` - :data:`DEFAULT_DAYS` days) to ``until``."""
        return self.since or now - timedelta(days=DEFAULT_DAYS), self.until


@dataclass(frozen=True)
class TaskRef:
    """One task instance that wrote a record, as the page links to it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str | None
    try_number: int
    start_date: datetime | None
    end_date: datetime | None


@dataclass(frozen=True)
class Row:
    """One request as the page shows it: the (merged) record and the task instance that made it."""

    record: RequestRecord
    ti: TaskRef
    written: datetime
    #: Other task instances that wrote a record of the same request (a slice deleted by another task).
    also: tuple[TaskRef, ...] = field(default=())
    #: Why the page ended a record its task left live (:func:`settle`), and the phase it was written in.
    settled: str | None = None
    written_phase: str | None = None

    @property
    def section(self) -> str:
        """``waiting``, ``running`` (running or holding capacity) or ``ended``."""
        if self.record.phase == "waiting":
            return "waiting"
        if self.record.phase == "running" or self.record.holds:
            return "running"
        return "ended"

    def waited_seconds(self, now: datetime) -> float | None:
        """Submitted to started (or ended, or now)."""
        submitted = parse_time(self.record.submitted)
        if submitted is None:
            return None
        end = parse_time(self.record.started) or parse_time(self.record.ended) or now
        return max(0.0, (end - submitted).total_seconds())

    def run_seconds(self, now: datetime) -> float | None:
        """Started to ended (or now); ``None`` if it never started."""
        started = parse_time(self.record.started)
        if started is None:
            return None
        end = parse_time(self.record.ended) or now
        return max(0.0, (end - started).total_seconds())

    def idle_since(self) -> datetime | None:
        """For a hold: when the last task that wrote it finished, if none of them still runs."""
        if not self.record.holds:
            return None
        refs = (self.ti, *self.also)
        if any(ref.state not in FINISHED_TI_STATES for ref in refs):
            return None
        ends = [ref.end_date for ref in refs if ref.end_date is not None]
        return max(ends) if ends else None


def ti_path(ref: TaskRef) -> str:
    """The task-instance page of the Airflow 3 UI, relative to its base (``dags/.../tasks/...``)."""
    path = f"dags/{quote(ref.dag_id, safe='')}/runs/{quote(ref.run_id, safe='')}/tasks/{quote(ref.task_id, safe='')}"
    if ref.map_index >= 0:
        path += f"/mapped/{ref.map_index}"
    return path


def log_path(ref: TaskRef) -> str:
    """The task instance's log (the UI's task-instance page opens on its Logs tab) for its latest try."""
    return f"{ti_path(ref)}?try_number={max(ref.try_number, 1)}"


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def query_rows(
    session: Session,
    dag_ids: Collection[str],
    filters: Filters,
    now: datetime,
    *,
    ti: tuple[str, str, str, int] | None = None,
) -> list[Row]:
    """The requests of the readable ``dag_ids`` under ``filters`` (or of one task instance ``ti``)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import and_, or_, select

    if not dag_ids:
        return []
    join = and_(
        TaskInstance.dag_id == XComModel.dag_id,
        TaskInstance.run_id == XComModel.run_id,
        TaskInstance.task_id == XComModel.task_id,
        TaskInstance.map_index == XComModel.map_index,
    )
    stmt = (
        select(
            XComModel.value,
            XComModel.timestamp,
            XComModel.dag_id,
            XComModel.run_id,
            XComModel.task_id,
            XComModel.map_index,
            TaskInstance.state,
            TaskInstance.try_number,
            TaskInstance.start_date,
            TaskInstance.end_date,
        )
        .join(TaskInstance, join)
        .where(XComModel.key == XCOM_KEY, XComModel.dag_id.in_(list(dag_ids)))
    )
    if ti is not None:
        dag_id, run_id, task_id, map_index = ti
        stmt = stmt.where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == task_id,
            XComModel.map_index == map_index,
        )
    else:
        if filters.dag_id:
            stmt = stmt.where(XComModel.dag_id == filters.dag_id)
        since, until = filters.window(now)
        recent = XComModel.timestamp >= since
        if until is not None:
            recent = and_(recent, XComModel.timestamp <= until)
            stmt = stmt.where(recent)
        else:
            stmt = stmt.where(or_(recent, TaskInstance.state.in_(LIVE_TI_STATES)))
    limit = max(1, min(filters.limit, MAX_LIMIT))
    stmt = stmt.order_by(XComModel.timestamp.desc()).limit(limit)
    rows = _rows(session.execute(stmt).all(), XComModel.deserialize_value, now)
    return [row for row in rows if matches(row.record, filters)]


def _rows(results: Sequence[Any], deserialize: Any, now: datetime) -> list[Row]:
    written: list[tuple[RequestRecord, TaskRef, datetime]] = []
    for result in results:
        ref = TaskRef(
            dag_id=result.dag_id,
            run_id=result.run_id,
            task_id=result.task_id,
            map_index=int(result.map_index),
            state=str(result.state) if result.state is not None else None,
            try_number=int(result.try_number or 0),
            start_date=_aware(result.start_date),
            end_date=_aware(result.end_date),
        )
        stamp = _aware(result.timestamp) or datetime.now(timezone.utc)
        written.extend((record, ref, stamp) for record in read_records(deserialize(result)))
    return [settle(row, now) for row in merge(written)]


def merge(written: Iterable[tuple[RequestRecord, TaskRef, datetime]]) -> list[Row]:
    """One row per request: records of the same request written by several task instances merge.

    The row keeps the record and task instance that submitted the request (the earliest
    ``submitted``), and takes phase, holds and released from the record written last (and its
    ended and outcome when it has them).
    Rows come newest write first.
    """
    groups: dict[tuple[str, str, str, str], list[tuple[RequestRecord, TaskRef, datetime]]] = {}
    for item in written:
        record = item[0]
        groups.setdefault((record.api, record.project, record.location, record.request_name), []).append(item)
    rows = []
    for items in groups.values():
        latest = max(items, key=lambda item: item[2])
        first = min(items, key=lambda item: (item[0].submitted or "~", item[2]))
        last = latest[0]
        record = replace(
            first[0],
            phase=last.phase,
            holds=last.holds,
            released=last.released,
            # A release that ends the request (the slice deleted by another task) also says when and how.
            ended=last.ended or first[0].ended,
            outcome=last.outcome or first[0].outcome,
        )
        others = tuple(
            dict.fromkeys(ref for _, ref, _ in items if ref != first[1])  # unique, in order
        )
        rows.append(Row(record=record, ti=first[1], written=latest[2], also=others))
    rows.sort(key=lambda row: row.written, reverse=True)
    return rows


def _why_over(record: RequestRecord, ti: TaskRef) -> str | None:
    """Why the try that wrote ``record`` no longer waits on it, or ``None`` while it may."""
    doing = "while waiting" if record.phase == "waiting" else "while the request ran"
    if ti.try_number > record.try_number:
        return f"superseded by try {ti.try_number} (try {record.try_number} ended {doing})"
    if ti.state is None:
        return f"task cleared {doing}"
    if ti.state == "up_for_retry":
        return (
            f"try {record.try_number} failed {doing}; the next try adopts the request if it is still "
            "queued, else submits a new one"
        )
    if ti.state == "success":
        return f"task marked success {doing}"
    if ti.state in _TRY_OVER_STATES:
        return f"task {ti.state.replace('_', ' ')} {doing}"
    return None


def settle(row: Row, now: datetime) -> Row:
    """``row`` as it truly stands: a record its task left live after that task's try ended (killed,
    marked failed, timed out, cleared, superseded: paths where no code of the provider ran to
    write the end) is shown ended at the task's end with the reason, and a hold past the time it
    ends by itself (``held_until``: a calendar block's end) as ended there. Nothing is counted as
    waited, run or held past either."""
    record = row.record
    until = parse_time(record.held_until)
    if record.live and until is not None and until <= now:
        ended = replace(
            record,
            phase="succeeded" if record.phase == "running" or record.holds else "cancelled",
            outcome=record.outcome or ("succeeded" if record.holds else None),
            ended=record.ended or iso(until),
            holds=False,
            released=record.released or (iso(until) if record.holds else None),
        )
        at_end = f"ended at {until.strftime('%Y-%m-%d %H:%M:%SZ')}, the end of its block"
        return replace(row, record=ended, settled=at_end, written_phase=record.phase)
    # Capacity that outlives its task by design (a slice, VMs, a block) is its release task's; a
    # calendar block's record may stay waiting after its task succeeds (approved, delivered later).
    if not record.live or record.holds or record.pricing_model == BLOCK_PRICING:
        return row
    reason = _why_over(record, row.ti)
    if reason is None:
        return row
    at = _task_end(row)
    return replace(
        row,
        record=end_record(record, phase="cancelled", message=reason, at=at),
        settled=reason,
        written_phase=record.phase,
    )


def _task_end(row: Row) -> datetime:
    """When the try that wrote the row's record ended: the task's end, else the record's last write
    (never before its submit, and never later than the later try's start)."""
    ti, submitted = row.ti, parse_time(row.record.submitted)
    candidates = [ti.end_date] if ti.try_number == row.record.try_number else [ti.start_date, ti.end_date]
    known = [t for t in candidates if t is not None and (submitted is None or t >= submitted)]
    at = min(known) if known else row.written
    return max(at, submitted) if submitted is not None else at


def matches(record: RequestRecord, filters: Filters) -> bool:
    """Whether ``record`` passes the API, location and phase filters (``holding``: holds capacity)."""
    if filters.api and record.api != filters.api:
        return False
    if filters.location and record.location != filters.location:
        return False
    if filters.phase:
        if filters.phase == "holding":
            return record.holds
        if record.phase != filters.phase:
            return False
    return True


def row_json(row: Row, now: datetime, base: str) -> dict[str, Any]:
    """A row as ``/dws/api/requests`` returns it; ``base`` is the Airflow UI's base path (ends in ``/``)."""
    idle = row.idle_since()
    return {
        "api_name": api_name(row.record.api),
        "ended_reason": row.settled,
        "written_phase": row.written_phase or row.record.phase,
        "record": row.record.to_dict(),
        "dag_id": row.ti.dag_id,
        "run_id": row.ti.run_id,
        "task_id": row.ti.task_id,
        "map_index": row.ti.map_index,
        "ti_state": row.ti.state,
        "try_number": row.ti.try_number,
        "section": row.section,
        "written": row.written.isoformat(),
        "waited_seconds": row.waited_seconds(now),
        "run_seconds": row.run_seconds(now),
        "idle_since": idle.isoformat() if idle else None,
        "also_written_by": [
            {"dag_id": r.dag_id, "run_id": r.run_id, "task_id": r.task_id, "map_index": r.map_index}
            for r in row.also
        ],
        "links": {
            "task_instance": base + ti_path(row.ti),
            "log": base + log_path(row.ti),
            "console": row.record.console_url,
        },
    }
