"""One generic trigger that waits on any DWS capacity request through its backend.

The trigger follows the request and logs what it sees. What ends a wait without the request is
decided in :mod:`.wait_limits` (the max wait, the task's deadline) and done in :mod:`.give_up`; a
kill is :mod:`.on_kill`'s; the statuses and the event it reports are :mod:`.outcomes`'.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_dws.registry import BACKENDS, backend_from_spec
from airflow_provider_dws.scheduling.phases import WAIT_TARGETS, Phase, reached
from airflow_provider_dws.triggers.status_line import DEFAULT_HEARTBEAT
from airflow_provider_dws.triggers.submit import ANNOUNCED, Submission, is_pending
from airflow_provider_dws.triggers.wait_limits import WaitLimits, aware

# A task process builds this trigger only to serialize it, on every deferral: what the wait runs in
# the triggerer (the poller, the give-up and kill paths, the log writer, the outcomes) is imported
# where it runs, so a deferral does not pay for it.
if TYPE_CHECKING:
    from airflow_provider_dws.backends.base import AsyncRequestBackend, RequestStatus
    from airflow_provider_dws.triggers.give_up import HeldRequest
    from airflow_provider_dws.triggers.poller import Subscription
    from airflow_provider_dws.triggers.submit import Submitted

#: How long past its max wait a request may still be waiting before the provider cancels it itself.
#: The API expires Flex Start requests on its own; this is the belt to that pair of braces.
WAIT_DEADLINE_GRACE = timedelta(minutes=2)
TARGETS = WAIT_TARGETS


def _check(
    kind: str,
    backend_spec: Any,
    request_name: Any,
    poll_interval: Any,
    target: str,
    resume: Any,
    wait_grace: Any,
    releases: Any,
) -> None:
    """Refuse arguments the trigger cannot wait with, naming the argument."""
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
    if resume is not None and not isinstance(resume, dict):
        raise TypeError(f"resume must be a dict, got {type(resume).__name__}")


@dataclass
class _Seen:
    """What one wait has seen: the last status, the state last logged and when, the poller's note."""

    logged_at: datetime
    status: RequestStatus | None = None
    state: tuple[Phase, str] | None = None
    note: str | None = None


class CapacityRequestTrigger(BaseTrigger):
    """Wait, in the triggerer, until a DWS capacity request ends; then yield one event.

    The event payload is :meth:`RequestStatus.to_event`, a few hundred bytes: request name, API
    state, phase, classified failure reason and message, what was asked for, and timings
    (submitted, started, finished, wait and run seconds), plus ``resume``. Transient API errors are
    retried with backoff and never end the wait.

    :param kind: backend kind (see ``registry.BACKENDS``), e.g. ``"vertex_custom_job"``.
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
    :param submit: the request to make first (:class:`~.submit.Submission`'s dict), when the task
        hands the submission to the trigger; ``request_name`` is then its provisional name
        (:func:`~.submit.pending_name`) until the trigger has found or made the request.
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
        submit: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        _check(kind, backend_spec, request_name, poll_interval, target, resume, wait_grace, releases)
        self.kind = kind
        self.backend_spec = backend_spec
        self.request_name = request_name
        self.poll_interval = float(poll_interval)
        self.wait_deadline = wait_deadline
        self.cancel_on_kill = cancel_on_kill
        self.target = target
        self.resume = resume
        self.task_deadline = task_deadline
        self.wait_grace = wait_grace
        self.releases = releases
        self.limits = WaitLimits(
            wait_deadline=aware("wait_deadline", wait_deadline),
            grace=WAIT_DEADLINE_GRACE if wait_grace is None else timedelta(seconds=wait_grace),
            task_deadline=aware("task_deadline", task_deadline),
            started=datetime.now(timezone.utc),
            heartbeat=DEFAULT_HEARTBEAT,  # read from the config in ``run``
        )
        self._backend: AsyncRequestBackend | None = None
        self.submit = submit
        self.submission = Submission.from_dict(submit) if submit is not None else None
        #: The find-or-create in flight (awaited by ``on_kill``: what it makes is then cancelled).
        self._making: asyncio.Future[Any] | None = None
        #: Whether Airflow cancelled ``run`` before it reported the wait's end (see ``cleanup``).
        self._stopped = False

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
        if self.wait_grace is not None:  # written only where it differs from the default
            kwargs["wait_grace"] = self.wait_grace
        if not self.releases:
            kwargs["releases"] = False
        if self.submit is not None:
            kwargs["submit"] = self.submit
        return "airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger", kwargs

    @property
    def backend(self) -> AsyncRequestBackend:
        """The backend: in an event loop, the one its shared poller uses (one set of clients)."""
        if self._backend is None:
            from airflow_provider_dws.triggers.poller import shared_backend

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return backend_from_spec(self.kind, self.backend_spec)
            self._backend = shared_backend(self.kind, self.backend_spec)
        return self._backend

    def held(self) -> HeldRequest:
        """The request as the give-up and kill paths see it."""
        from airflow_provider_dws.triggers.give_up import HeldRequest

        return HeldRequest(
            self.request_name, lambda: self.backend, self.log, self.releases, self.cancel_on_kill
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Follow the request until it ends (or a limit ends the wait), then yield one event.

        Its status comes from the event loop's shared poller (see :mod:`.poller`): one paged list
        per interval serves every waiting trigger of the same API, project and location.
        """
        events = self._follow()
        try:
            async for event in events:
                yield event
        except asyncio.CancelledError:
            self._stopped = True
            raise
        finally:
            # Closed with this generator, so a wait leaves the shared poller at once.
            await events.aclose()

    async def _follow(self) -> AsyncGenerator[TriggerEvent, None]:
        """:meth:`run`'s wait: make the request if the task handed it over, then follow it."""
        from airflow_provider_dws.triggers.log_lines import log_info
        from airflow_provider_dws.triggers.outcomes import event_payload, wait_failed
        from airflow_provider_dws.triggers.poller import shared_poller
        from airflow_provider_dws.triggers.status_line import log_heartbeat

        if self.submission is not None and is_pending(self.request_name):
            made = await self._make()
            if made is not None:  # refused, failed, or already at its end
                yield made
                return
        # Not waited for: the wait joins the shared poller at once, with the others created with it.
        await log_info(
            self.log,
            "Waiting on %s every %.0fs through the %s backend",
            self.request_name,
            self.poll_interval,
            self.kind,
            wait=False,
        )
        self.limits.started = datetime.now(timezone.utc)
        self.limits.heartbeat = log_heartbeat()
        sub = shared_poller(self.kind, self.backend_spec, self.request_name).subscribe(
            self.request_name, self.poll_interval
        )
        seen = _Seen(logged_at=datetime.now(timezone.utc))
        try:
            final = None
            while final is None:
                final = await self._look(sub, seen)
        except Exception as err:
            # An answer that ends the wait (permission denied, a bug): a trigger that raised would
            # fail the task with no word to the operator, and a request still queued would stay
            # queued for nobody. The event lets the task decide: a try that has a retry leaves it
            # to be adopted; the last one cancels it (RequestAdapter.wait_failed).
            self.log.exception("Waiting on %s failed", self.request_name)
            failed = wait_failed(self.request_name, seen.status, err)
            yield TriggerEvent(event_payload(failed, self.resume, wait_error=err))
            return
        finally:
            sub.close()
        yield await self._event(final)

    async def _event(self, status: RequestStatus) -> TriggerEvent:
        """The event of the wait's end: the task's own end when the trigger may write it
        (:mod:`.finish`: a success, no worker resumes the task), else the one it resumes with."""
        from airflow_provider_dws.triggers import finish
        from airflow_provider_dws.triggers.log_lines import log_info
        from airflow_provider_dws.triggers.outcomes import event_payload

        payload = event_payload(status, self.resume)
        try:
            ending = finish.task_end(self, status, payload)
        except Exception:
            self.log.warning(
                "Could not end the task from the triggerer; it resumes in a worker", exc_info=True
            )
            ending = None
        if ending is None:
            return TriggerEvent(payload)
        from asgiref.sync import sync_to_async

        if not await sync_to_async(finish.push_xcoms)(getattr(self, "task_instance", None), ending.xcoms):
            return TriggerEvent(payload)
        from airflow.triggers.base import TaskSuccessEvent

        ending.count(status)
        if ending.counted is not None:
            from airflow_provider_dws.wait_history import observe

            # The wait joins the history next forecasts read, as the worker's end would add it.
            # Not thread-sensitive: its read-back pause must not hold the triggerer's shared thread.
            await sync_to_async(observe, thread_sensitive=False)(ending.counted)
        for line in ending.lines:
            await log_info(self.log, "%s", line, wait=False)
        return TaskSuccessEvent()

    async def _make(self) -> TriggerEvent | None:
        """Find or create the request (:mod:`.submit`) and wait on it from now on; the event to
        yield at once instead when the create was refused or failed, or the request found ended."""
        from airflow_provider_dws.records import RECORDS
        from airflow_provider_dws.triggers.log_lines import log_info
        from airflow_provider_dws.triggers.outcomes import event_payload, wait_failed
        from airflow_provider_dws.triggers.submit import announced, find_or_submit, is_refusal, refused

        assert self.submission is not None
        pending = self.request_name
        self._making = asyncio.ensure_future(find_or_submit(self.kind, self.submission))
        try:
            made = await asyncio.shield(self._making)
        except Exception as err:
            if is_refusal(err):
                self.log.error("Creating the request was refused: %s", err)
                return TriggerEvent(event_payload(refused(pending, err), self.resume))
            self.log.exception("Creating the request failed")
            return TriggerEvent(event_payload(wait_failed(pending, None, err), self.resume, wait_error=err))
        self._adopt(made)
        await log_info(self.log, "%s", made.line, wait=False)
        if made.warning:
            self.log.warning("%s", made.warning)
        status = made.status
        what = {"created": "Submitted", "adopted": "Adopted", "succeeded": "Found succeeded"}[made.how]
        await log_info(self.log, "%s %s (%s)", what, status.name, status.description, wait=False)
        ti = getattr(self, "task_instance", None)
        if ti is not None and getattr(ti, "dag_id", None):
            from asgiref.sync import sync_to_async

            carried = (self.resume or {}).get(RECORDS)
            if await sync_to_async(announced)(ti, pending, status, self.submission.announce, carried):
                self.resume = {**(self.resume or {}), ANNOUNCED: True}
        if reached(self.target, status.phase):
            return await self._event(await self._ended(status))
        return None

    def _adopt(self, made: Submitted) -> None:
        """Wait on the request found or made: its name, its location's backend, its attempt and
        placement in the state handed back, its max wait from its submission."""
        assert self.submission is not None
        status = made.status
        self.request_name = status.name
        self.backend_spec = made.backend_spec
        self._backend = None
        resume = dict(self.resume or {})
        if made.how != "created":
            resume["attempt"] = int(status.details.get("attempt") or resume.get("attempt") or 1)
        resume["placement"] = made.placement or resume.get("placement")
        max_wait = status.details.get("max_wait_seconds") or self.submission.max_wait_seconds
        resume["max_wait_seconds"] = max_wait
        self.resume = resume
        if self.limits.wait_deadline is None and max_wait:
            submitted = status.timings.submitted or datetime.now(timezone.utc)
            self.limits.wait_deadline = submitted + timedelta(seconds=max_wait)
            self.wait_deadline = self.limits.wait_deadline.isoformat()

    async def _look(self, sub: Subscription, seen: _Seen) -> RequestStatus | None:
        """Take the request's next status (or wake for a limit) and log it: the status to report
        when the wait ends, else ``None``."""
        from airflow_provider_dws.errors import RequestNotFoundError
        from airflow_provider_dws.triggers.outcomes import gone

        try:
            fresh = await sub.next(
                self.limits.wake_in(seen.status, seen.logged_at, datetime.now(timezone.utc))
            )
        except RequestNotFoundError:
            self.log.error("%s no longer exists (deleted outside this task)", self.request_name)
            return gone(self.request_name)
        self._note(sub.note(), seen)
        now = datetime.now(timezone.utc)
        status = seen.status = fresh or seen.status
        if status is None:
            return await self._timed_out(None, now)
        done = reached(self.target, status.phase)
        self._note_requeue(status)
        # A line on every change of the request's state (the API's, not only its phase: a job
        # QUEUED then PENDING has moved on), and while it does not change, one per heartbeat. The
        # last line before the event is not waited for: the event goes out at once.
        if (status.phase, status.state) != seen.state or self.limits.heartbeat_due(now, seen.logged_at):
            await self._log_status(status, seen, now, wait=not done)
        if done:
            return await self._ended(status)
        self.limits.saw(status)
        if self.limits.gives_up(status, now):
            ended, status = await self.held().give_up(status, self.wait_deadline, self.limits.grace)
            seen.status = status
            if ended:
                return status
            # It moved on just before the give-up (a block approved): not given up.
            await self._log_status(status, seen, now, wait=False)
            if reached(self.target, status.phase):
                return await self._ended(status)
        return await self._timed_out(status, now)

    async def _timed_out(self, status: RequestStatus | None, now: datetime) -> RequestStatus | None:
        """The status to report when the task's ``execution_timeout`` has ended the wait."""
        from airflow_provider_dws.triggers.outcomes import unknown

        if not self.limits.timed_out(status, now):
            return None
        return await self.held().time_out(status or unknown(self.request_name), self.task_deadline)

    async def _ended(self, status: RequestStatus) -> RequestStatus:
        """The status to report, as the backend refines it (TPU: when the slice became ACTIVE)."""
        refine = getattr(self.backend, "aended", None)
        return status if refine is None else await refine(status)

    def _describe(self, status: RequestStatus) -> str:
        """The status line (:func:`.status_line.status_line`): state, wait, max wait, when this wait
        gives up, then the request's name."""
        from airflow_provider_dws.triggers.status_line import status_line

        return status_line(
            status,
            self.request_name,
            now=datetime.now(timezone.utc),
            max_wait_seconds=self.limits.max_wait_seconds(status),
            gives_up_at=self.limits.gives_up_at(status),
        )

    async def _log_status(self, status: RequestStatus, seen: _Seen, now: datetime, *, wait: bool) -> None:
        from airflow_provider_dws.triggers.log_lines import log_info

        await log_info(self.log, "%s", self._describe(status), wait=wait)
        seen.state, seen.logged_at = (status.phase, status.state), now

    def _note(self, note: str | None, seen: _Seen) -> None:
        """What the poller had to say about this request alone, once per change."""
        if note != seen.note:
            if note is not None:
                self.log.warning("%s: %s", self.request_name, note)
            seen.note = note

    def _note_requeue(self, status: RequestStatus) -> None:
        requeue = self.limits.new_requeue(status)
        if requeue is not None:
            self.log.info(
                "%s got capacity, then was queued again at %s: it may wait its max wait again, until %s",
                self.request_name,
                requeue[0],
                requeue[1].isoformat(),
            )

    async def on_kill(self) -> None:
        """A user killed the task: cancel the request so it stops waiting (and billing), unless the
        task is still deferred (the trigger moved); see :mod:`.on_kill`."""
        from airflow_provider_dws.triggers.on_kill import cancel_for_kill, shielded

        ti = getattr(self, "task_instance", None)
        making = self._making
        if making is not None and is_pending(self.request_name):
            # Killed while its request was being found or made: what that makes is cancelled.
            await shielded(self._cancel_made(making, ti), self.log, self.request_name)
            return
        if is_pending(self.request_name):
            self.log.info("Task killed before its request was made; nothing to cancel")
            return
        await shielded(cancel_for_kill(self.held(), ti), self.log, self.request_name)

    async def cleanup(self) -> None:
        """Airflow 3.1 and 3.2 never call ``on_kill``: a trigger stopped before it reported is
        cancelled like any other, so a stop there is a kill unless the task is still deferred (see
        :func:`.on_kill.stopped_without_on_kill`). From 3.3 ``on_kill`` does that job."""
        from airflow_provider_dws.compat import TRIGGERER_CALLS_ON_KILL

        if TRIGGERER_CALLS_ON_KILL or not self._stopped:
            return
        from airflow_provider_dws.triggers.on_kill import shielded, stopped_without_on_kill

        await shielded(stopped_without_on_kill(self), self.log, self.request_name)

    async def _cancel_made(self, making: asyncio.Future[Any], ti: Any) -> None:
        from airflow_provider_dws.triggers.on_kill import cancel_for_kill

        try:
            made = await making
        except Exception:
            self.log.info("Task killed while its request was being made, and none was made")
            return
        self._adopt(made)
        await cancel_for_kill(self.held(), ti)


async def first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """Run a trigger to its first event (used by ``deferrable=False``: same code, in the worker)."""
    from airflow_provider_dws.triggers.log_lines import LINES

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
