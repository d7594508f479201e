"""A trigger stopped by Airflow: cancel its request if a user stopped the task, not if it moved.

Airflow calls a trigger's ``on_kill`` when a user marks the deferred task failed or success or
clears it, and also when a trigger it moved to another triggerer is dropped by the one that ran it
before; the task instance is then still deferred (:func:`still_deferred`), and the request is
left to the new triggerer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from airflow_provider_dws.triggers.give_up import HeldRequest

#: Bound on the cancel call made when a user kills the task.
CANCEL_TIMEOUT_SECONDS = 60.0
#: Cancels started by on_kill, kept referenced until done (the event loop holds tasks weakly).
KILL_TASKS: set[asyncio.Task[None]] = set()


async def shielded(work: Awaitable[None], log: Any, name: str) -> None:
    """Run ``work`` in a task of its own, shielded from the caller's cancellation.

    Airflow 3.3's triggerer cancels a trigger it is dropping again at every sync (about once a
    second) until it is gone, which would interrupt any ``on_kill`` that takes longer than that
    (one retried UNAVAILABLE, one slow API call).
    """
    task = asyncio.ensure_future(work)
    KILL_TASKS.add(task)
    task.add_done_callback(KILL_TASKS.discard)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            log.info("on_kill interrupted by the triggerer; cancelling %s goes on", name)
        raise


async def cancel_for_kill(request: HeldRequest, ti: Any) -> None:
    """Cancel ``request`` for a task a user stopped, and write the request's end in its record."""
    log, name = request.log, request.name
    if not request.releases:
        log.info("Task killed; leaving %s alone (another task's to give up)", name)
        return
    if not request.cancel_on_kill:
        log.info("Task killed; leaving %s alone (cancel_on_kill=False)", name)
        return
    if await still_deferred(ti, log):
        log.info(
            "Trigger stopped here but the task is still deferred (moved to another triggerer, "
            "or already waiting on its next try); leaving %s alone",
            name,
        )
        return
    log.warning("Task killed by a user; cancelling %s", name)
    try:
        await asyncio.wait_for(request.backend.arelease(name), CANCEL_TIMEOUT_SECONDS)
    except Exception:
        log.exception("Could not cancel %s; cancel it by hand", name)
        return
    log.info("Cancelled %s", name)
    # The task will not resume to write the request's end: the trigger writes it.
    from airflow_provider_dws.triggers.final_record import awrite_final_record

    await awrite_final_record(
        ti,
        name,
        "cancelled",
        "the task was killed while waiting (marked failed or success, or cleared); the provider "
        "cancelled the request",
    )


async def still_deferred(ti: Any, log: Any) -> bool:
    """Whether the task instance ``ti`` is still deferred, as the Airflow API reports it now."""
    if ti is None:
        return False
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
        from asgiref.sync import sync_to_async

        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id]
        )
    except Exception:
        # Without an answer, cancelling is the safe side: a task a user stopped keeps no
        # capacity, and a task that is still waiting finds its request cancelled and says so.
        log.warning("Could not read the task state; treating the kill as a user's", exc_info=True)
        return False
    map_index = getattr(ti, "map_index", -1)
    key = ti.task_id if map_index is None or map_index < 0 else f"{ti.task_id}_{map_index}"
    state = (states.get(ti.run_id) or {}).get(key)
    return str(getattr(state, "value", state)) == "deferred"
