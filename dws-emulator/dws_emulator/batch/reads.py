"""Cloud Batch reads: job lookup, ListJobs (filter, order_by, pages), the tasks of a job's group.

Tasks are derived from their job's state, all moving together (the emulator runs a job's tasks as
one workload): PENDING until it runs, then the first ``parallelism`` RUNNING and the rest PENDING,
then all SUCCEEDED or FAILED; the tasks of a job that ended without running (stock-out, 2-day
expiry, cancelled while queued) are UNEXECUTED, those cut short by a cancel FAILED / UNEXECUTED.
"""

from __future__ import annotations

import re
from typing import Any

import grpc
from google.cloud.batch_v1.types import job as gcb_job
from google.cloud.batch_v1.types import task as gcb_task

from ..core.api import Core
from ..core.clock import timestamp
from ..core.errors import EmulatorError
from ..core.filters import FilterError, compile_job_filter
from ..core.state import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from .validation import batch_error, parse_parent

State = gcb_job.JobStatus.State
TaskPb = gcb_task.Task.pb()
STATE_NAMES = frozenset(State.__members__)
TASK_STATE_NAMES = frozenset(gcb_task.TaskStatus.State.__members__)
ORDER_KEYS = ("create_time", "name")

_JOB_NAME_RE = re.compile(r"projects/[^/]+/locations/[^/]+/jobs/[^/]+")
_GROUP_RE = re.compile(r"(projects/[^/]+/locations/[^/]+/jobs/[^/]+)/taskGroups/([^/]+)")
_TASK_RE = re.compile(r"(projects/[^/]+/locations/[^/]+/jobs/[^/]+/taskGroups/[^/]+)/tasks/(\d+)")


def _page(page_size: int, page_token: str) -> tuple[int, int]:
    if page_size < 0:
        raise batch_error("page_size", "Must not be negative.")
    if page_token and not page_token.isdigit():
        raise batch_error("page_token", f"Invalid page token {page_token!r}.")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE), int(page_token or 0)


def _order(order_by: str) -> list[tuple[str, bool]]:
    """``"create_time desc, name"`` -> [("create_time", True), ("name", False)]."""
    keys: list[tuple[str, bool]] = []
    for part in filter(None, (p.strip() for p in order_by.split(","))):
        words = part.split()
        if (
            words[0] not in ORDER_KEYS
            or len(words) > 2
            or (len(words) == 2 and words[1] not in ("asc", "desc"))
        ):
            raise batch_error(
                "order_by", f"Unsupported order {part!r}; order by {' or '.join(ORDER_KEYS)} [asc|desc]."
            )
        keys.append((words[0], len(words) == 2 and words[1] == "desc"))
    return keys


class BatchReads:
    """The read half of :class:`~.state.BatchState` (which provides ``core``, ``jobs``, ``_copy``)."""

    core: Core
    jobs: dict[str, Any]

    def _copy(self, rec: Any) -> Any:
        raise NotImplementedError

    def lookup(self, name: str) -> Any:
        if not _JOB_NAME_RE.fullmatch(name):
            raise batch_error(
                "name", f"{name!r} must look like projects/{{project}}/locations/{{location}}/jobs/{{job}}."
            )
        rec = self.jobs.get(name)
        if rec is None or rec.deleted:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Job {name} does not exist.")
        return rec

    def list_jobs(
        self, parent: str, filter_text: str = "", order_by: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """Oldest first unless ``order_by`` says otherwise; the page token is an offset."""
        with self.core.lock:
            self.core.tick()
            project, location = parse_parent(parent)
            size, start = _page(page_size, page_token)
            keys = _order(order_by)
            try:
                predicate = compile_job_filter(
                    filter_text, STATE_NAMES, state_field="status.state", fields=("labels", "create_time")
                )
            except FilterError as exc:
                raise batch_error("filter", f"{filter_text!r}: {exc}") from None
            matches = [
                rec
                for rec in self.jobs.values()
                if not rec.deleted
                and rec.project == project
                and rec.location == location
                and predicate(
                    {
                        "state": State(rec.state).name,
                        "labels": dict(rec.job.labels),
                        "create_time": rec.created_at,
                    }
                )
            ]
            matches.sort(key=lambda rec: rec.seq)
            for key, desc in reversed(keys):  # stable sorts, last key first
                matches.sort(
                    key=(lambda r: r.created_at) if key == "create_time" else (lambda r: r.name), reverse=desc
                )
            page = matches[start : start + size]
            token = str(start + size) if start + size < len(matches) else ""
            return [self._copy(rec) for rec in page], token

    # -- tasks -----------------------------------------------------------------------------
    @staticmethod
    def task_states(rec: Any) -> list[str]:
        """The state name of each task of ``rec``'s group, by index."""
        n, running = rec.plan.task_count, rec.plan.parallelism
        state = rec.state
        if rec.started_at is None:
            return ["UNEXECUTED" if state in (State.FAILED, State.CANCELLED) else "PENDING"] * n
        if state == State.RUNNING:
            return ["RUNNING"] * running + ["PENDING"] * (n - running)
        if state in (State.SUCCEEDED, State.FAILED):
            return [State(state).name] * n
        return ["FAILED"] * running + ["UNEXECUTED"] * (n - running)

    def _task(self, rec: Any, group: str, index: int, state: str) -> Any:
        task = TaskPb(name=f"{group}/tasks/{index}")
        task.status.state = gcb_task.TaskStatus.State.__members__[state]
        when = rec.ended_at or rec.started_at or rec.created_at
        event = task.status.status_events.add(
            type_="STATUS_CHANGED", description=f"Task state is set to {state}.", task_state=task.status.state
        )
        event.event_time.CopyFrom(timestamp(when))
        return task

    def _group(self, parent: str) -> tuple[Any, str]:
        match = _GROUP_RE.fullmatch(parent)
        if not match:
            raise batch_error(
                "parent",
                f"{parent!r} must look like projects/{{project}}/locations/{{location}}/jobs/{{job}}/taskGroups/group0.",
            )
        rec = self.lookup(match.group(1))
        if match.group(2) != "group0":
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Task group {parent} does not exist.")
        return rec, parent

    def list_tasks(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """The group's tasks by index; ``filter`` on ``status.state`` (``status.state="RUNNING"``)."""
        with self.core.lock:
            self.core.tick()
            rec, group = self._group(parent)
            size, start = _page(page_size, page_token)
            try:
                predicate = compile_job_filter(
                    filter_text, TASK_STATE_NAMES, state_field="status.state", fields=()
                )
            except FilterError as exc:
                raise batch_error("filter", f"{filter_text!r}: {exc}") from None
            indexed = [(i, s) for i, s in enumerate(self.task_states(rec)) if predicate({"state": s})]
            page = indexed[start : start + size]
            token = str(start + size) if start + size < len(indexed) else ""
            return [self._task(rec, group, i, s) for i, s in page], token

    def get_task(self, name: str) -> Any:
        with self.core.lock:
            self.core.tick()
            match = _TASK_RE.fullmatch(name)
            if not match:
                raise batch_error(
                    "name", f"{name!r} must look like .../jobs/{{job}}/taskGroups/group0/tasks/{{index}}."
                )
            rec, group = self._group(match.group(1))
            states = self.task_states(rec)
            index = int(match.group(2))
            if index >= len(states):
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Task {name} does not exist.")
            return self._task(rec, group, index, states[index])
