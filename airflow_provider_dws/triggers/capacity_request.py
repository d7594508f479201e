"""One generic trigger that waits on any DWS capacity request through its backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_dws.backends.base import (
    BACKENDS,
    EVENT_MESSAGE_LIMIT,
    WAIT_ERROR,
    AsyncRequestBackend,
    GivesUpWaiting,
    RequestStatus,
    backend_from_spec,
)
from airflow_provider_dws.errors import RequestNotFoundError
from airflow_provider_dws.scheduling.phases import (
    WAIT_TARGETS,
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    reached,
)
from airflow_provider_dws.triggers.log_lines import LINES
from airflow_provider_dws.triggers.poller import shared_backend, shared_poller
from airflow_provider_dws.triggers.status_line import DEFAULT_HEARTBEAT, log_heartbeat, status_line

#: How long past its max wait a request may still be waiting before the provider cancels it itself.
#: The API expires Flex Start requests on its own; this is the belt to that pair of braces.
WAIT_DEADLINE_GRACE = timedelta(minutes=2)
#: How long past the task deadline a trigger that has not read its request yet waits for that read.
FIRST_READ_GRACE = timedelta(minutes=1)
#: Bound on the cancel call made when a user kills the task.
CANCEL_TIMEOUT_SECONDS = 60.0
TARGETS = WAIT_TARGETS
#: Cancels started by on_kill, kept referenced until done (the event loop holds tasks weakly).
_KILL_TASKS: set[asyncio.Task[None]] = set()


def _aware(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"{name} must carry a time zone, got {value!r}")
    return parsed.astimezone(timezone.utc)


class CapacityRequestTrigger(BaseTrigger):
    """Wait, in the triggerer, until a DWS capacity request ends; then yield one event.

    The event payload is :meth:`RequestStatus.to_event`, a few hundred bytes: request name, API
    state, phase, classified failure reason and message, what was asked for, and timings
    (submitted, started, finished, wait and run seconds), plus ``resume``. Transient API errors are
    retried with backoff and never end the wait.

    :param kind: backend kind (see ``backends.base.BACKENDS``), e.g. ``"vertex_custom_job"``.
    :param backend_spec: the backend's constructor arguments (``backend.spec()``).
    :param request_name: full resource name of the request.
    :param poll_interval: seconds between reads.
    :param wait_deadline: ISO-8601 UTC time after which a still-waiting request is given up: the
        provider cancels it and reports capacity not obtained. ``None``: rely on the API alone.
    :param cancel_on_kill: cancel the request when a user kills the task (marks it failed or
        success, or clears it) and when ``task_deadline`` passes. A triggerer restart, a graceful
        shutdown or the move of the trigger to another triggerer never cancels.
    :param target: ``"end"`` waits until the request ends (a Vertex job runs its workload to the
        end); ``"running"`` returns as soon as the capacity is held (a TPU slice is ACTIVE and the
        workload runs in later tasks), or earlier if it ends without getting there;
        ``"provisioning"`` as soon as it is promised (a calendar block approved) or held.
    :param task_deadline: ISO-8601 UTC time at which the task's ``execution_timeout`` ends. Airflow
        does not enforce it while a task is deferred, so the trigger does: at that time it cancels
        the request (unless ``cancel_on_kill`` is False) and reports ``timed_out``.
    :param resume: the attempt's state (``AttemptState.to_dict()``: attempt, placement, history,
        max wait), JSON-serializable, handed back in the event under ``"resume"``, so the task
        resumes from it whatever runs the trigger.
    :param wait_grace: seconds a request may still wait past ``wait_deadline`` before the provider
        cancels it: time for an API that expires its requests itself (Vertex AI, Cloud TPU) to do
        so. ``None``: :data:`WAIT_DEADLINE_GRACE`; ``0`` for an API with no max wait of its own
        (Cloud Batch), whose requests the provider gives up exactly at ``wait_deadline``.
    :param releases: whether the trigger may give the request up (on a kill, at ``task_deadline``,
        at ``wait_deadline``). False for a request another task owns (the calendar block a wait
        task follows is its reserve task's): the trigger then only reports, and cancels nothing.
    """

    def __init__(
        self,
        kind: str,
        backend_spec: dict[str, Any],
        request_name: str,
        poll_interval: float = 30.0,
        wait_deadline: str | None = None,
        cancel_on_kill: bool = True,
        target: str = "end",
        resume: dict[str, Any] | None = None,
        task_deadline: str | None = None,
        wait_grace: float | None = None,
        releases: bool = True,
    ) -> None:
        super().__init__()
        if target not in TARGETS:
            raise ValueError(f"target must be one of {sorted(TARGETS)}, got {target!r}")
        if kind not in BACKENDS:
            raise ValueError(f"kind must be one of {sorted(BACKENDS)}, got {kind!r}")
        if not isinstance(backend_spec, dict):
            raise TypeError(f"backend_spec must be a dict, got {type(backend_spec).__name__}")
        if not isinstance(request_name, str) or not request_name:
            raise ValueError(f"request_name must be a non-empty string, got {request_name!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)):
            raise TypeError(f"poll_interval must be a number of seconds, got {type(poll_interval).__name__}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be greater than 0, got {poll_interval}")
        if wait_grace is not None and (
            isinstance(wait_grace, bool) or not isinstance(wait_grace, (int, float)) or wait_grace < 0
        ):
            raise ValueError(f"wait_grace must be a number of seconds >= 0, got {wait_grace!r}")
        if not isinstance(releases, bool):
            raise TypeError(f"releases must be True or False, got {releases!r}")
        self.releases = releases
        self.wait_grace = wait_grace
        self._grace = WAIT_DEADLINE_GRACE if wait_grace is None else timedelta(seconds=wait_grace)
        self._deadline = _aware("wait_deadline", wait_deadline)
        self._task_deadline = _aware("task_deadline", task_deadline)
        self.task_deadline = task_deadline
        self.kind = kind
        self.backend_spec = backend_spec
        self.request_name = request_name
        self.poll_interval = float(poll_interval)
        self.wait_deadline = wait_deadline
        self.cancel_on_kill = cancel_on_kill
        self.target = target
        if resume is not None and not isinstance(resume, dict):
            raise TypeError(f"resume must be a dict, got {type(resume).__name__}")
        self.resume = resume
        self._backend: AsyncRequestBackend | None = None
        self._started = datetime.now(timezone.utc)
        #: Whether this wait saw its request get capacity (see :meth:`_wait_deadline_for`).
        self._ran = False
        self._requeue_logged: str | None = None
        #: How often an unchanged wait is logged (``None``: never); read from the config in ``run``.
        self._heartbeat: timedelta | None = DEFAULT_HEARTBEAT

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments; round-trips through ``__init__``."""
        kwargs: dict[str, Any] = {
            "kind": self.kind,
            "backend_spec": self.backend_spec,
            "request_name": self.request_name,
            "poll_interval": self.poll_interval,
            "wait_deadline": self.wait_deadline,
            "cancel_on_kill": self.cancel_on_kill,
            "target": self.target,
            "resume": self.resume,
            "task_deadline": self.task_deadline,
        }
        if self.wait_grace is not None:  # only where it differs: triggers stored before it stay valid
            kwargs["wait_grace"] = self.wait_grace
        if not self.releases:
            kwargs["releases"] = False
        return "airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger", kwargs

    @property
    def backend(self) -> AsyncRequestBackend:
        """The backend: in an event loop, the one its shared poller uses (one set of clients)."""
        if self._backend is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return backend_from_spec(self.kind, self.backend_spec)
            self._backend = shared_backend(self.kind, self.backend_spec)
        return self._backend

    def _describe(self, status: RequestStatus) -> str:
        """The status line (:func:`.status_line.status_line`): state, wait, max wait, when this wait
        gives up, then the request's name."""
        deadline = self._wait_deadline_for(status)
        budget = status.details.get("max_wait_seconds") if status.details else None
        if not budget and deadline is not None and status.timings.submitted is not None:
            budget = (deadline - status.timings.submitted).total_seconds()  # an API with no max wait
        # The wait ends at its max wait (the API's, or the provider's cancel for an API without one)
        # or at the task's execution_timeout, whichever comes first.
        ends = [t for t in (deadline, self._task_deadline) if t is not None]
        return status_line(
            status,
            self.request_name,
            now=datetime.now(timezone.utc),
            max_wait_seconds=budget if isinstance(budget, (int, float)) else None,
            gives_up_at=min(ends) if ends else None,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Follow the request until it ends, logging every phase change in plain words.

        Its status comes from the event loop's shared poller (see :mod:`.poller`): one paged list
        per interval serves every waiting trigger of the same API, project and location.
        """
        # Not waited for: the wait joins the shared poller at once, with the others created with it.
        await self._info(
            "Waiting on %s every %.0fs through the %s backend",
            self.request_name,
            self.poll_interval,
            self.kind,
            wait=False,
        )
        self._started = datetime.now(timezone.utc)
        self._heartbeat = log_heartbeat()
        poller = shared_poller(self.kind, self.backend_spec, self.request_name)
        sub = poller.subscribe(self.request_name, self.poll_interval)
        status: RequestStatus | None = None
        try:
            # A line on every change of the request's state (the API's, not only its phase: a job
            # QUEUED then PENDING has moved on), and while it does not change, one per heartbeat.
            last_seen: tuple[Phase, str] | None = None
            last_log = datetime.now(timezone.utc)
            last_note: str | None = None
            while True:
                try:
                    fresh = await sub.next(self._wake_in(status, last_log))
                except RequestNotFoundError:
                    self.log.error("%s no longer exists (deleted outside this task)", self.request_name)
                    yield TriggerEvent(self._payload(self._gone()))
                    return
                note = sub.note()
                if note != last_note:  # once per change, in this task's log
                    if note is not None:
                        self.log.warning("%s: %s", self.request_name, note)
                    last_note = note
                now = datetime.now(timezone.utc)
                status = fresh or status
                done = status is not None and reached(self.target, status.phase)
                if status is not None and (
                    (status.phase, status.state) != last_seen or self._heartbeat_due(now, last_log)
                ):
                    # The last line before the event is not waited for: the event goes out at once.
                    await self._info("%s", self._describe(status), wait=not done)
                    last_seen, last_log = (status.phase, status.state), now
                if done:
                    assert status is not None
                    yield TriggerEvent(self._payload(await self._ended(status)))
                    return
                if status is not None and status.phase in (Phase.PROVISIONING, Phase.RUNNING):
                    self._ran = True
                deadline = self._wait_deadline_for(status)
                if (
                    status is not None
                    and deadline is not None
                    and status.phase is Phase.WAITING
                    and now >= deadline + self._grace
                ):
                    ended, status = await self._give_up(status)
                    if ended:
                        yield TriggerEvent(self._payload(status))
                        return
                    # It moved on just before the give-up (a block approved): not given up.
                    await self._info("%s", self._describe(status), wait=False)
                    last_seen, last_log = (status.phase, status.state), now
                    if reached(self.target, status.phase):
                        yield TriggerEvent(self._payload(await self._ended(status)))
                        return
                if self._task_deadline is not None and now >= self._timeout_at(self._task_deadline, status):
                    yield TriggerEvent(self._payload(await self._time_out(status or self._unknown())))
                    return
        except Exception as err:
            # An answer that ends the wait (permission denied, a bug): a trigger that raised would
            # fail the task with no word to the operator, and a request still queued would stay
            # queued for nobody. The event lets the task decide: a try that has a retry leaves it
            # to be adopted; the last one cancels it (RequestAdapter.wait_failed).
            self.log.exception("Waiting on %s failed", self.request_name)
            yield TriggerEvent(self._payload(self._wait_failed(status, err), wait_error=err))
            return
        finally:
            sub.close()

    async def _info(self, message: str, *args: Any, wait: bool = True) -> None:
        """Log a line without writing it from the event loop's thread, as Airflow's own trigger
        lines are (``ainfo``), but through the process's one line writer (:mod:`.log_lines`).

        Hundreds of triggers log at once when capacity arrives for many, while the triggerer's
        supervisor, which reads the log socket, is busy storing their events: a write from the
        loop's thread then waits for it, and every trigger with it (``docs/scale.md``). With
        ``wait=False`` the line is queued (before any later line) and not waited for.
        """
        if getattr(self.log, "ainfo", None) is None:  # a stdlib logger (not in a triggerer or task process)
            self.log.info(message, *args)
            return
        done = LINES.write(self.log.info, message, args, wait=wait)
        if done is not None:
            await done

    def _gone(self) -> RequestStatus:
        return RequestStatus(
            name=self.request_name,
            state="NOT_FOUND",
            outcome=Outcome(
                Phase.CANCELLED, FailureKind.CANCELLED, "the request was deleted outside this task"
            ),
            timings=RequestTimings(),
        )

    def _wait_failed(self, status: RequestStatus | None, error: Exception) -> RequestStatus:
        """The request as last seen (still live, or unknown), when an error ended the wait."""
        last = status or self._unknown()
        return RequestStatus(
            name=self.request_name,
            state=last.state,
            outcome=Outcome(last.phase, None, f"the wait failed: {type(error).__name__}: {error}"),
            timings=last.timings,
            description=last.description,
        )

    def _unknown(self) -> RequestStatus:
        """Before the first status arrived (the API was unreachable so far)."""
        return RequestStatus(
            name=self.request_name,
            state="UNKNOWN",
            outcome=Outcome(Phase.WAITING, None, ""),
            timings=RequestTimings(),
        )

    def _heartbeat_due(self, now: datetime, last_log: datetime) -> bool:
        """Whether an unchanged wait is due another line (never without a heartbeat)."""
        return self._heartbeat is not None and now - last_log >= self._heartbeat

    def _wake_in(self, status: RequestStatus | None, last_log: datetime) -> float | None:
        """Seconds until the trigger must look again even if nothing changed: the next heartbeat
        line, the max wait's give-up, or the task's deadline, whichever comes first; ``None`` when
        there is none of them (no heartbeat, no deadline): only a change wakes it."""
        now = datetime.now(timezone.utc)
        moments = [last_log + self._heartbeat] if self._heartbeat is not None else []
        deadline = self._wait_deadline_for(status)
        if deadline is not None and status is not None and status.phase is Phase.WAITING:
            moments.append(deadline + self._grace)
        if self._task_deadline is not None:
            moments.append(self._timeout_at(self._task_deadline, status))
        return max(0.0, (min(moments) - now).total_seconds()) if moments else None

    def _wait_deadline_for(self, status: RequestStatus | None) -> datetime | None:
        """When a still-waiting ``status`` is given up: ``wait_deadline``, except for a request
        that got capacity in this wait and was queued again since (a Kueue Job evicted after it
        ran and requeued by Kueue, its ``requeued_at``): that new wait may last its max wait anew,
        where deleting it would throw its place in Kueue's queue away."""
        deadline = self._deadline
        if deadline is None or status is None or not self._ran:
            return deadline
        requeued = status.details.get("requeued_at") if status.details else None
        submitted = status.timings.submitted
        if not isinstance(requeued, str) or submitted is None:
            return deadline
        again = _aware("requeued_at", requeued)
        if again is None or again <= submitted:
            return deadline
        later = max(deadline, again + (deadline - submitted))
        if requeued != self._requeue_logged:
            self._requeue_logged = requeued
            self.log.info(
                "%s got capacity, then was queued again at %s: it may wait its max wait again, until %s",
                self.request_name,
                requeued,
                later.isoformat(),
            )
        return later

    def _timeout_at(self, deadline: datetime, status: RequestStatus | None) -> datetime:
        """When the task deadline ends the wait. Before the first read, not blind at once: a
        request read after its deadline (a triggerer restarted late) may have succeeded."""
        if status is not None:
            return deadline
        return max(deadline, self._started) + FIRST_READ_GRACE

    async def _ended(self, status: RequestStatus) -> RequestStatus:
        """The status to report, as the backend refines it (TPU: when the slice became ACTIVE)."""
        refine = getattr(self.backend, "aended", None)
        return status if refine is None else await refine(status)

    async def _time_out(self, status: RequestStatus) -> RequestStatus:
        if not self.releases:
            self.log.warning(
                "The task's execution_timeout ended at %s; leaving %s alone (another task's to give up)",
                self.task_deadline,
                self.request_name,
            )
            note = "the task's execution_timeout passed; the request, another task's, was left as it was"
        elif self.cancel_on_kill:
            self.log.warning(
                "The task's execution_timeout ended at %s while %s was %s; cancelling the request",
                self.task_deadline,
                self.request_name,
                status.phase.value,
            )
            await self.backend.arelease(self.request_name)
            note = "the task's execution_timeout passed; the provider cancelled the request"
        else:
            self.log.warning(
                "The task's execution_timeout ended at %s; leaving %s alone (cancel_on_kill=False)",
                self.task_deadline,
                self.request_name,
            )
            note = (
                "the task's execution_timeout passed; the request was left as it was (cancel_on_kill=False)"
            )
        return RequestStatus(
            name=status.name,
            state=status.state,
            outcome=Outcome(Phase.CANCELLED, FailureKind.TIMED_OUT, note),
            timings=RequestTimings(
                status.timings.submitted, status.timings.started, datetime.now(timezone.utc)
            ),
            description=status.description,
            details=status.details,
        )

    def _payload(self, status: RequestStatus, wait_error: Exception | None = None) -> dict[str, Any]:
        """The event: the status (:meth:`RequestStatus.to_event`) and ``resume``, whose empty values
        (no attempt history yet, most often) are left out to keep it small; with ``wait_error``,
        the error that ended the wait before the request did (``wait_error``: its type and text)."""
        payload = status.to_event()
        if wait_error is not None:
            payload[WAIT_ERROR] = f"{type(wait_error).__name__}: {wait_error}"[:EVENT_MESSAGE_LIMIT]
        if self.resume is not None:
            payload["resume"] = {
                key: value for key, value in self.resume.items() if value not in (None, [], {})
            }
        return payload

    async def _read_again(self) -> RequestStatus | None:
        """The request read now, before it is given up; ``None`` when gone or unreadable (then the
        give-up goes ahead on the status in hand, as the max wait promises)."""
        try:
            return await self.backend.aget_status(self.request_name)
        except RequestNotFoundError:
            return None
        except Exception:
            self.log.warning(
                "Could not read %s again before giving it up; giving it up on its last status",
                self.request_name,
                exc_info=True,
            )
            return None

    async def _give_up(self, status: RequestStatus) -> tuple[bool, RequestStatus]:
        """Give up a request still waiting at its max wait: ``(True, the status to report)``, or
        ``(False, its status now)`` when the backend found it no longer waiting (nothing cancelled)."""
        if not self.releases:
            self.log.warning(
                "%s is still waiting at %s, when this wait gives up; leaving it alone (another task's "
                "to give up)",
                self.request_name,
                self.wait_deadline,
            )
            return True, RequestStatus(
                name=status.name,
                state=status.state,
                outcome=Outcome(
                    Phase.NOT_OBTAINED,
                    FailureKind.CAPACITY_NOT_OBTAINED,
                    "the wait's deadline passed without capacity; the request was left to its owner",
                ),
                timings=RequestTimings(status.timings.submitted, None, datetime.now(timezone.utc)),
                description=status.description,
                details=status.details,
            )
        if self._grace:
            self.log.warning(
                "%s is still waiting %s after its max wait ended (%s); cancelling it so it cannot "
                "take capacity nobody will use",
                self.request_name,
                self._grace,
                self.wait_deadline,
            )
        else:
            self.log.warning(
                "%s has waited its whole max wait (until %s) for capacity; cancelling it so it "
                "cannot take capacity nobody will use",
                self.request_name,
                self.wait_deadline,
            )
        backend = self.backend
        if isinstance(backend, GivesUpWaiting):
            fresh = await backend.agive_up(self.request_name)
        else:
            # The status in hand may be a poll interval old: capacity that came meanwhile (a request
            # Provisioned, a job RUNNING, VMs created) is not thrown away for a stale WAITING.
            fresh = await self._read_again()
            if fresh is None or fresh.phase is Phase.WAITING:
                await backend.arelease(self.request_name)
                fresh = None
        if fresh is not None:
            self.log.info(
                "%s is %s [%s] now: it no longer waits, so it is not given up",
                self.request_name,
                fresh.phase.value,
                fresh.state,
            )
            return False, fresh
        ended = RequestStatus(
            name=status.name,
            state=status.state,
            outcome=Outcome(
                Phase.NOT_OBTAINED,
                FailureKind.CAPACITY_NOT_OBTAINED,
                "max wait passed without capacity; the provider cancelled the request",
            ),
            timings=RequestTimings(status.timings.submitted, None, datetime.now(timezone.utc)),
            description=status.description,
            details=status.details,
        )
        return True, ended

    async def on_kill(self) -> None:
        """A user killed the task: cancel the request so it stops waiting (and billing).

        Airflow also takes this path when a trigger it moved to another triggerer is dropped by
        the one that ran it before; the task instance is then still deferred, and the request is
        left to the new triggerer.

        The work runs in a task of its own, shielded: Airflow 3.3's triggerer cancels a trigger it
        is dropping again at every sync (about once a second) until it is gone, which interrupts
        any ``on_kill`` that takes longer than that (one retried UNAVAILABLE, one slow API call).
        """
        work = asyncio.ensure_future(self._cancel_for_kill())
        _KILL_TASKS.add(work)
        work.add_done_callback(_KILL_TASKS.discard)
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            if not work.done():
                self.log.info(
                    "on_kill interrupted by the triggerer; cancelling %s goes on", self.request_name
                )
            raise

    async def _cancel_for_kill(self) -> None:
        if not self.releases:
            self.log.info("Task killed; leaving %s alone (another task's to give up)", self.request_name)
            return
        if not self.cancel_on_kill:
            self.log.info("Task killed; leaving %s alone (cancel_on_kill=False)", self.request_name)
            return
        if await self._still_deferred():
            self.log.info(
                "Trigger stopped here but the task is still deferred (moved to another triggerer, "
                "or already waiting on its next try); leaving %s alone",
                self.request_name,
            )
            return
        self.log.warning("Task killed by a user; cancelling %s", self.request_name)
        try:
            await asyncio.wait_for(self.backend.arelease(self.request_name), CANCEL_TIMEOUT_SECONDS)
        except Exception:
            self.log.exception("Could not cancel %s; cancel it by hand", self.request_name)
        else:
            self.log.info("Cancelled %s", self.request_name)
            # The task will not resume to write the request's end: the trigger writes it.
            from airflow_provider_dws.triggers.final_record import awrite_final_record

            await awrite_final_record(
                self,
                self.request_name,
                "cancelled",
                "the task was killed while waiting (marked failed or success, or cleared); the provider "
                "cancelled the request",
            )

    async def _still_deferred(self) -> bool:
        """Whether the task instance is still deferred, as the Airflow API reports it now."""
        ti = getattr(self, "task_instance", None)
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
            self.log.warning("Could not read the task state; treating the kill as a user's", exc_info=True)
            return False
        map_index = getattr(ti, "map_index", -1)
        key = ti.task_id if map_index is None or map_index < 0 else f"{ti.task_id}_{map_index}"
        state = (states.get(ti.run_id) or {}).get(key)
        return str(getattr(state, "value", state)) == "deferred"


async def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger to its first event (used by ``deferrable=False``: same code, in the worker)."""
    events = trigger.run()
    try:
        async for event in events:
            payload: dict[str, Any] = event.payload
            return payload
    finally:
        # Close the generator now, so it leaves the shared poller at once (not when collected).
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
        # In a worker the loop ends with this call: the lines not waited for are written first.
        await LINES.flush()
    raise RuntimeError(f"{trigger!r} ended without an event")
