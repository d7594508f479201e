"""The final request record a trigger writes when it, not the task, ends a request.

The attempt loop writes every record it can (``runtime/recording.py``), but a kill handled in the
triggerer (a user marks the deferred task failed or success, or clears it) ends the request where
no task code runs afterwards: the task never resumes. Without this, its ``dws_requests`` XCom would
say ``waiting`` forever and the DWS page would count its wait as still growing.

The write goes through the Task SDK's XCom (the triggerer forwards it to the API server, as it does
a connection or a variable); an Airflow whose triggerer cannot forward it gets a warning here and a
page that settles the record from the task instance's state instead (``plugins/web/data.settle``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dws.records import XCOM_KEY, end_record, read_records

log = logging.getLogger(__name__)


def ended_value(
    value: Any, request_name: str, phase: str, message: str, at: datetime
) -> list[dict[str, Any]] | None:
    """The XCom value with ``request_name``'s live record ended at ``at``; ``None`` when there is
    nothing to change (no such record, or it already ended)."""
    records = read_records(value)
    changed = False
    out = []
    for record in records:
        if record.request_name == request_name and record.live:
            record = end_record(record, phase=phase, message=message, at=at)
            changed = True
        out.append(record.to_dict())
    return out if changed else None


def write_final_record(ti: Any, request_name: str, phase: str, message: str) -> bool:
    """End ``request_name``'s record in ``ti``'s ``dws_requests`` XCom (blocking: run it in a
    thread). Whether it was written; never raises (a record describes the work, it is not it)."""
    try:
        from airflow.sdk.execution_time.xcom import XCom

        from airflow_provider_dws.triggers.submit import xcom_where

        where = xcom_where(ti)
        value = XCom.get_one(key=XCOM_KEY, **where)
        new = ended_value(value, request_name, phase, message, datetime.now(timezone.utc))
        if new is None:
            return False
        XCom.set(XCOM_KEY, new, **where)
    except Exception:
        log.warning("Could not write the final record of %s", request_name, exc_info=True)
        return False
    return True


async def awrite_final_record(ti: Any, request_name: str, phase: str, message: str) -> bool:
    """:func:`write_final_record` for a trigger's task instance ``ti``, off the event loop."""
    if ti is None or not getattr(ti, "dag_id", None):
        return False
    from asgiref.sync import sync_to_async

    try:
        written = bool(await sync_to_async(write_final_record)(ti, request_name, phase, message))
    except BaseException as err:  # cancelled with the trigger: say so, then let it go on
        log.warning("Writing the final record of %s was interrupted (%r)", request_name, err)
        raise
    if written:
        log.info("Wrote the end of %s in the task's %s record", request_name, XCOM_KEY)
    return written
