"""A successful wait its trigger ends: what the resumed task would write, written from the triggerer.

A deferred task that resumes in a worker only to write its request's end (the final record, the
attempt's XComs, its return value) costs a whole task process: as much CPU again as its deferral,
and twice a stock task's resume (``docs/scale.md``). When the attempt loop hands the trigger a
:data:`FINISH` entry in the ``resume`` state, and the wait ends in what the task waits for, the
trigger pushes those XComs itself (:func:`push_xcoms`) and yields Airflow's ``TaskSuccessEvent``:
the triggerer marks the task succeeded, and no worker runs again.

The values are the ones the worker writes (``runtime/loop.py``, ``runtime/recording.py``), built
from the same functions: the attempt's history (:class:`~..scheduling.decisions.Attempt`), the
record's end (:func:`~..records.attempt_end`), the metrics (:func:`~..metrics.end_metrics`).
What the trigger cannot write is the task state store; a later try of the same task instance (a
user clears it) finds the request there as still waited on, looks it up, and settles its record
(``AttemptLoop._cancel_made_by_trigger``).

The trigger ends the task only in Airflow's triggerer (``trigger_id`` is set): ``airflow dags
test`` and a ``deferrable=False`` wait run the trigger themselves and resume the task with its
event, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import FINISH, RESULT, RESUME, RequestStatus

if TYPE_CHECKING:
    from airflow_provider_dws.records import RequestRecord


@dataclass(frozen=True)
class Ending:
    """A task's end its trigger writes: the XComs the resumed task would push, the lines it would
    log, and the record whose end the metrics count (``None``: counted already, or only promised)."""

    xcoms: dict[str, Any]
    lines: list[str]
    counted: RequestRecord | None

    def count(self, status: RequestStatus) -> None:
        """Send the end metrics, as the worker's :meth:`Recorder.ended` would."""
        if self.counted is not None:
            from airflow_provider_dws.metrics import attempt_metrics

            attempt_metrics(self.counted, status.timings)


def task_end(trigger: Any, status: RequestStatus, payload: dict[str, Any]) -> Ending | None:
    """What ``trigger`` writes when it ends its task with ``status`` (its event's ``payload``);
    ``None`` when the task must resume in a worker (no :data:`FINISH`, not in a triggerer, not a
    success, or a return value the trigger has not read)."""
    from airflow_provider_dws.scheduling.phases import succeeded_for

    resume = trigger.resume or {}
    spec = resume.get(FINISH)
    if not isinstance(spec, Mapping) or getattr(trigger, "trigger_id", None) is None:
        return None
    if not succeeded_for(trigger.target, status.phase):
        return None
    if (spec.get("push_return") or spec.get("result_keys")) and RESULT not in status.details:
        return None
    now = datetime.now(timezone.utc)
    xcoms, counted = _attempt_xcoms(trigger, status, payload, now)
    result = status.details.get(RESULT)
    if spec.get("push_return") and result is not None:
        xcoms["return_value"] = result
    if isinstance(result, Mapping):
        for key in spec.get("result_keys") or ():
            xcoms[str(key)] = result[key]
    xcoms.update(_announced(trigger, status))
    lines = [status.end_line()]
    describe = getattr(trigger.backend, "result_line", None)
    line = describe(status) if describe is not None else None
    if line:
        lines.append(line)
    lines.append("The task ends here, in the triggerer: no worker needs to run again to finish it")
    return Ending(xcoms, lines, counted)


def push_xcoms(ti: Any, xcoms: Mapping[str, Any]) -> bool:
    """Push ``xcoms`` for the task instance ``ti`` through the Task SDK (blocking: run it in a
    thread); whether all were written. Never raises: a task whose XComs cannot be written here
    resumes in a worker, which writes them.

    Not the ``xcoms`` of Airflow's ``TaskSuccessEvent``: Airflow 3.3 stores those JSON-encoded
    once more than the Task SDK reads them, so a dict comes back to a downstream task as a string.
    """
    import logging

    from airflow_provider_dws.triggers.submit import set_xcoms

    if ti is None or not getattr(ti, "dag_id", None):
        return False
    try:
        set_xcoms(ti, xcoms)
    except Exception:
        logging.getLogger(__name__).warning(
            "Could not write the task's XComs from the triggerer; it resumes in a worker", exc_info=True
        )
        return False
    return True


def _attempt_xcoms(
    trigger: Any, status: RequestStatus, payload: dict[str, Any], now: datetime
) -> tuple[dict[str, Any], RequestRecord | None]:
    """What the attempt loop pushes at the end of an attempt: the event, the attempts, the wait
    (and run) seconds, and the request records with this one's end; and that record, if its end
    is to be counted in the metrics."""
    from airflow_provider_dws.records import XCOM_KEY

    resume = trigger.resume
    timings = status.timings
    xcoms: dict[str, Any] = {
        "dws_request": {key: value for key, value in payload.items() if key != RESUME},
        "dws_attempts": [*resume.get("history", ()), _attempt(resume, status, now)],
        "wait_seconds": timings.wait_seconds,
    }
    if trigger.target == "end":
        xcoms["run_seconds"] = timings.run_seconds
    records, ended = _records(trigger, status)
    if records is not None:
        xcoms[XCOM_KEY] = records
    return xcoms, ended


def _attempt(resume: Mapping[str, Any], status: RequestStatus, now: datetime) -> dict[str, Any]:
    """This attempt's entry of the ``dws_attempts`` history."""
    from airflow_provider_dws.scheduling.decisions import Attempt
    from airflow_provider_dws.scheduling.policies import Placement

    timings = status.timings
    return Attempt(
        number=int(resume.get("attempt") or 1),
        placement=Placement.from_dict(dict(resume["placement"])),
        submitted=timings.submitted or now,
        ended=timings.finished or timings.started or now,
        max_wait=timedelta(seconds=float(resume.get("max_wait_seconds") or 0)),
        outcome=status.phase,
        failure=status.outcome.failure,
        request_name=status.name,
    ).to_dict()


def _records(trigger: Any, status: RequestStatus) -> tuple[list[dict[str, Any]] | None, RequestRecord | None]:
    """The task's records (carried in ``resume``) with this request's end, renamed from its
    provisional name, and that record unless it was recorded ended already or is only promised
    (not counted again). ``None``: no record of it was carried (the DWS page then settles it from
    the task's state)."""
    from airflow_provider_dws.records import RECORDS, iso, phase_of, read_records, upsert
    from airflow_provider_dws.triggers.submit import link_of, renamed

    resume = trigger.resume
    records = read_records(resume.get(RECORDS))
    pending = resume.get("pending")
    record = next((r for r in records if r.request_name == status.name), None)
    if record is not None:
        # A request already recorded (an earlier try's success, taken again): the provisional
        # record of this try's own is dropped, as the worker's `Recorder.made` drops it.
        records = [r for r in records if not pending or r.request_name != pending]
    else:
        record = next((r for r in records if pending and r.request_name == pending), None)
    if record is None:
        return None, None
    counted = record.outcome is not None and record.phase == phase_of(status.phase.value)
    announce = trigger.submission.announce if trigger.submission is not None else {}
    deadline = trigger.limits.wait_deadline
    named = renamed(record, status, link_of(status.name, announce))
    if deadline is not None:
        named = replace(named, wait_deadline=iso(deadline))
    ended = status.ended_record(named, success=True, target=trigger.target)
    value = upsert([r for r in records if r is not record], ended)
    return value, None if counted or ended.phase == "waiting" else ended


def _announced(trigger: Any, status: RequestStatus) -> dict[str, Any]:
    """The request's name and console links, where the trigger could not push them when it made
    the request (``announced`` failed): the worker's resume would have pushed them."""
    from airflow_provider_dws.triggers.submit import ANNOUNCED, announcement

    if trigger.submission is None or (trigger.resume or {}).get(ANNOUNCED):
        return {}
    return announcement(status, trigger.submission.announce)
