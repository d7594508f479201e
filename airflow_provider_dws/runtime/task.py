"""What every step of a running task reads of it: the request identity of its task instance, its
project, and the wait on a trigger (deferred, or in the worker)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.scheduling.identity import RequestIdentity

if TYPE_CHECKING:
    from airflow.sdk import Context


def task_identity(context: Context, task_id: str | None = None) -> RequestIdentity:
    """The identity of the running task instance (or of ``task_id`` in the same run and map index)."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    try_number = getattr(ti, "try_number", 1)
    return RequestIdentity(
        dag_id=ti.dag_id,
        task_id=task_id or ti.task_id,
        run_id=ti.run_id,
        map_index=map_index if isinstance(map_index, int) and map_index >= 0 else -1,
        try_number=try_number
        if isinstance(try_number, int) and not isinstance(try_number, bool) and try_number >= 1
        else 1,
    )


def wait_for_event(op: Any, trigger: Any, method_name: str) -> dict[str, Any]:
    """Wait on ``trigger``: deferred (``op.deferrable``; the task resumes in ``method_name`` and this
    never returns), or in this worker, running the same trigger coroutine to its first event.

    No defer timeout: the trigger enforces ``execution_timeout`` itself (and cancels its request
    first, where it should), whereas Airflow's trigger timeout would stop the wait without that.
    """
    if op.deferrable:
        op.defer(trigger=trigger, method_name=method_name)
    from airflow_provider_dws.triggers.capacity_request import first_event

    op.log.info("deferrable=False: waiting in this worker")
    return asyncio.run(first_event(trigger))


def resolve_project(op: Any) -> str:
    """The operator's ``project_id``, or the project of its connection when it is not set."""
    if op.project_id:
        return str(op.project_id)
    from airflow_provider_dws.hooks.base import DwsBaseHook

    project = DwsBaseHook(gcp_conn_id=op.gcp_conn_id).project_id or None
    if not project:
        raise op._param_error(f"project_id is not set and connection {op.gcp_conn_id!r} names no project")
    op.project_id = project
    return str(project)


def pulled(context: Context, task_id: str, key: str | None = None) -> Any:
    """What task ``task_id`` of this run pushed under ``key`` (default its return value); ``None``
    when it pushed nothing, or no XCom backend is reachable (the caller then falls back on the
    identity)."""
    try:
        return context["ti"].xcom_pull(task_ids=task_id, key=key or "return_value")
    except Exception:  # no XCom backend reachable: fall back on the identity
        return None
