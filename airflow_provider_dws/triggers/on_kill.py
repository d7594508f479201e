"""A trigger stopped by Airflow: cancel its request if a user stopped the task, not if it moved.

Airflow 3.3 calls a trigger's ``on_kill`` when a user marks the deferred task failed or success or
clears it, and also when a trigger it moved to another triggerer is dropped by the one that ran it
before; the task instance is then still deferred (:func:`still_deferred`), and the request is
left to the new triggerer.

Airflow 3.1 and 3.2 call no ``on_kill``: they cancel the trigger's run and await its ``cleanup``,
the same for a kill, a move and the triggerer's own shutdown.
:func:`stopped_without_on_kill` reads the task's state and cancels only for a task that is no
longer deferred; where that state cannot be read (a triggerer shutting down no longer answers),
the request is kept, since a triggerer restart must never lose a place in the queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import Any

from airflow_provider_dws.triggers.give_up import HeldRequest

#: Bound on the cancel call made when a user kills the task.
CANCEL_TIMEOUT_SECONDS = 60.0
#: Bound on reading the task's state when a trigger stops without ``on_kill``: a 3.2 triggerer
#: that is shutting down never answers, and its runner is killed 20 s after it starts stopping.
STATE_TIMEOUT_SECONDS = 10.0
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
        state = await task_state(ti)
    except Exception:
        # Without an answer, cancelling is the safe side: a task a user stopped keeps no
        # capacity, and a task that is still waiting finds its request cancelled and says so.
        log.warning("Could not read the task state; treating the kill as a user's", exc_info=True)
        return False
    return state == "deferred"


async def task_state(ti: Any) -> str | None:
    """The task instance ``ti``'s state now, from the Airflow API (``None``: it has none)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    # Through a thread: on 3.1 the call may not be made from the event loop's thread.
    states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
        dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id]
    )
    map_index = getattr(ti, "map_index", -1)
    key = ti.task_id if map_index is None or map_index < 0 else f"{ti.task_id}_{map_index}"
    state = (states.get(ti.run_id) or {}).get(key)
    return None if state is None else str(getattr(state, "value", state))


async def stopped_without_on_kill(trigger: Any) -> None:
    """A trigger stopped before it reported, on an Airflow that calls no ``on_kill`` (3.1, 3.2):
    a kill if the task is no longer deferred, and then handled as ``on_kill`` handles one."""
    ti, log, name = getattr(trigger, "task_instance", None), trigger.log, trigger.request_name
    timeout_after = getattr(trigger, "timeout_after", None)
    if isinstance(timeout_after, datetime) and timeout_after.tzinfo is None:
        timeout_after = timeout_after.replace(tzinfo=timezone.utc)  # Airflow's times are UTC
    if ti is None or (timeout_after is not None and timeout_after < datetime.now(timezone.utc)):
        return  # run outside a triggerer, or Airflow's trigger timeout: not a user's kill
    try:
        state = await asyncio.wait_for(task_state(ti), STATE_TIMEOUT_SECONDS)
    except Exception:
        log.info("Trigger stopped and the task's state could not be read; %s keeps waiting", name)
        return
    if state == "deferred":
        log.info("Trigger stopped but the task is still deferred; leaving %s alone", name)
        return
    log.info("Trigger stopped and the task is %s: the task was stopped by a user", state)
    await trigger.on_kill()
