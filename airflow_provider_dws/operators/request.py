"""The attempt loop every capacity-requesting operator shares.

The operator asks ``scheduling/`` the questions and carries out the answers: may I submit now, or
when (off-peak window, deadline)? What max wait do I request? The request came back without
capacity: retry here, fail over elsewhere, wait for the next window, or give up? Waiting, between
attempts as well as for capacity, happens in the triggerer.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.operators.base import DwsBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.state import AttemptState
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet

#: A submit time this close to now is "now" (no point deferring for it).
_NOW_SLACK = timedelta(seconds=1)
#: task_state_store key: the request a deferred try waits on, and which try that is.
WAITING_KEY = "dws_waiting"


class DwsRequestOperator(DwsBaseOperator):
    """Base of operators that obtain capacity through a DWS request, one attempt at a time.

    Subclasses provide the API-specific steps (find, submit, trigger, success, release, error);
    this class runs the loop with the scheduling policies: ``window``, ``deadline``,
    ``capacity_retry`` and ``failover``.
    """

    max_wait: timedelta
    cancel_on_kill: bool
    deferrable: bool
    window: OffPeakWindow | WindowSet | None
    deadline: Deadline | None
    capacity_retry: CapacityRetry | None
    failover: Failover | None

    # -- policies ------------------------------------------------------------------------------

    def init_policies(
        self,
        window: OffPeakWindow | WindowSet | str | None,
        deadline: Deadline | timedelta | datetime | None,
        capacity_retry: CapacityRetry | int | None,
        failover: Failover | Sequence[str | Placement] | None,
    ) -> None:
        """Accept the policies (or their short forms) and check them at DAG-parse time."""
        self.window = self.deadline = self.capacity_retry = self.failover = None
        if window is None and deadline is None and capacity_retry is None and failover is None:
            return
        # The policy classes load only for a DAG file that gives a policy.
        from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement

        window_types: tuple[type, ...] = ()
        if window is not None:
            # The window classes (and their cron parser) load only for a DAG that gives a window.
            from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet, parse_window

            window_types = (OffPeakWindow, WindowSet)
        try:
            if isinstance(window, str):
                window = parse_window(window)
            if isinstance(deadline, timedelta):
                deadline = Deadline(after_data_interval_end=deadline)
            elif isinstance(deadline, datetime):
                deadline = Deadline(at=deadline)
            if isinstance(capacity_retry, int) and not isinstance(capacity_retry, bool):
                if capacity_retry < 0:
                    raise ValueError(f"capacity_retry must be a number of retries >= 0, got {capacity_retry}")
                capacity_retry = CapacityRetry(attempts=capacity_retry + 1)
            if failover is not None and not isinstance(failover, Failover):
                if isinstance(failover, (str, Placement)):
                    failover = [failover]
                failover = Failover(placements=tuple(failover))
        except (TypeError, ValueError) as err:
            raise self._param_error(str(err)) from None
        for name, value, types in (
            ("window", window, window_types),
            ("deadline", deadline, (Deadline,)),
            ("capacity_retry", capacity_retry, (CapacityRetry,)),
            ("failover", failover, (Failover,)),
        ):
            if value is not None and not isinstance(value, types):
                allowed = " or ".join(t.__name__ for t in types)
                article = "an" if allowed[0] in "AEIOU" else "a"
                raise self._param_error(
                    f"{name} must be {article} {allowed} (or None), got {type(value).__name__}"
                )
        self.window = window  # type: ignore[assignment]
        self.deadline = deadline  # type: ignore[assignment]
        self.capacity_retry = capacity_retry  # type: ignore[assignment]
        self.failover = failover  # type: ignore[assignment]
        if self.failover is not None:
            for placement in self.failover.placements:
                self.check_placement(placement)
            if self.capacity_retry is None or self.capacity_retry.attempts < 2:
                # Failover happens on a retry: without one the placements would never be tried.
                raise self._param_error(
                    f"failover ({self.failover}) needs capacity_retry with at least 2 attempts, "
                    f"got {self.capacity_retry or 'no capacity_retry'}"
                )

    def check_placement(self, placement: Placement) -> None:
        """Subclasses refuse placements their API cannot use (raise ``self._param_error(...)``)."""

    def placements(self) -> list[Placement]:
        """The home placement, then the failover placements, in order."""
        return [self.home_placement(), *(self.failover.placements if self.failover else ())]

    def _deadline_at(self, context: Context) -> datetime | None:
        if self.deadline is None:
            return None
        end = context.get("data_interval_end")
        dag_run = context.get("dag_run")
        run_after = getattr(dag_run, "run_after", None)
        manual = str(getattr(dag_run, "run_type", "")).lower().endswith("manual")
        if end is None or (manual and run_after is not None and run_after > end):
            # A manual run's inferred interval is the last window, often hours ago: its deadline
            # counts from when it was triggered instead.
            end = run_after or getattr(dag_run, "logical_date", None)
        return self.deadline.resolve(end)

    # -- API-specific steps, provided by subclasses --------------------------------------------

    def home_placement(self) -> Placement:
        """Where the operator asks first (its region or zone)."""
        raise NotImplementedError

    def find_existing(
        self, context: Context, identity: RequestIdentity
    ) -> tuple[RequestStatus, Placement, int] | None:
        """A live or succeeded request of any attempt of this task instance, to adopt."""
        raise NotImplementedError

    def delete_ended(self) -> None:
        """Garbage-collect what the last :meth:`find_existing` found ended (default: nothing)."""

    def submit_attempt(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create (or adopt) the request for this attempt; ``identity`` carries the attempt number."""
        raise NotImplementedError

    def make_trigger(
        self,
        status: RequestStatus,
        placement: Placement,
        max_wait: timedelta,
        echo: dict[str, Any],
        task_deadline: datetime | None = None,
    ) -> BaseTrigger:
        """The trigger that waits on the request; it must hand ``echo`` (the :class:`AttemptState`
        as a dict) back in its event and give up at ``task_deadline`` (the end of the task's
        ``execution_timeout``)."""
        raise NotImplementedError

    def cancel_request(self, name: str) -> None:
        """Cancel (or release) one request by name, from the worker; an ended or gone one is fine."""
        raise NotImplementedError

    def is_done(self, status: RequestStatus) -> bool:
        """Whether the wait is over (Vertex: the job ended; TPU: the slice is ACTIVE or ended)."""
        return status.phase.terminal

    def is_success(self, status: RequestStatus) -> bool:
        """Whether the request gave what the task needs."""
        from airflow_provider_dws.scheduling.phases import Phase

        return status.phase is Phase.SUCCEEDED

    def finish_success(self, context: Context, status: RequestStatus) -> Any:
        """The task's return value after success."""
        raise NotImplementedError

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Leave nothing behind after an attempt that ended without success (default: nothing to do)."""

    def error_for(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without success."""
        raise NotImplementedError

    def failure_error(
        self, status: RequestStatus, placement: Placement, max_wait: timedelta, summary: str
    ) -> Exception:
        """The classified error, with every attempt when there were several."""
        error = self.error_for(status, placement, max_wait)
        if summary:
            error.args = (f"{error.args[0]}; attempts:\n{summary}",)
        return error

    # -- the loop ------------------------------------------------------------------------------

    def run_attempts(self, context: Context) -> Any:
        """Adopt this task instance's live or finished request, or plan the first attempt.

        A request an earlier try was deferred on when that try ended is not adopted: a try ends
        while deferred only when a user clears or marks the task (or Airflow times it out), which
        means "stop waiting on that one". It is cancelled here, in case the trigger's ``on_kill``
        has not done it yet, and a new request is made. Every other live request of this task
        instance (a worker died before deferring, a triggerer died) is adopted.
        """
        from airflow_provider_dws.operators.state import AttemptState

        identity = self.identity(context)
        abandoned = self.cancel_abandoned_request(context)
        found = self.find_existing(context, identity)
        self.delete_ended()
        if found is not None and found[0].name == abandoned:
            found = None
        if found is not None:
            status, placement, number = found
            state = AttemptState(placement=placement, attempt=number)
            if self.is_done(status) and self.is_success(status):
                self.log.info(
                    "%s (attempt %d) already succeeded: taking it as the result", status.name, number
                )
                return self.complete_attempt(context, status.to_event(), **state.to_dict())
            if status.phase.live:
                self.log.info(
                    "Reattaching to live request %s (attempt %d in %s)", status.name, number, placement
                )
                max_wait_s = status.details.get("max_wait_seconds")
                max_wait = timedelta(seconds=max_wait_s) if max_wait_s else self.max_wait
                return self._wait(context, status, state.submitted(placement, max_wait))
        return self.plan_attempt(context, AttemptState(placement=self.home_placement()))

    def cancel_abandoned_request(self, context: Context) -> str | None:
        """Cancel the request an earlier try was still deferred on when it ended, and name it."""
        store = context.get("task_state_store")
        if store is None:
            return None
        try:
            record = store.get(WAITING_KEY)
        except Exception:
            self.log.warning(
                "task_state_store could not be read; relying on identity labels alone", exc_info=True
            )
            return None
        try_number = getattr(context["ti"], "try_number", None)
        if not isinstance(record, dict) or not isinstance(try_number, int):
            return None
        name, waited_try = record.get("request"), record.get("try")
        if not isinstance(name, str) or not isinstance(waited_try, int) or waited_try >= try_number:
            return None
        if not self.cancel_on_kill:
            self.log.info(
                "Try %d ended while deferred on %s; cancel_on_kill=False, so it is kept and adopted",
                waited_try,
                name,
            )
            self._forget_waiting(context)
            return None
        self.log.warning(
            "Try %d ended while deferred on %s (the task was cleared, marked or timed out): cancelling "
            "that request and starting a new one",
            waited_try,
            name,
        )
        self.cancel_request(name)
        self._forget_waiting(context)
        return name

    def _remember_waiting(self, context: Context, name: str) -> None:
        store = context.get("task_state_store")
        try_number = getattr(context["ti"], "try_number", None)
        if store is None or not isinstance(try_number, int):
            return
        try:
            store.set(WAITING_KEY, {"request": name, "try": try_number})
        except Exception:
            self.log.warning(
                "task_state_store could not be written; relying on identity labels alone", exc_info=True
            )

    def _forget_waiting(self, context: Context) -> None:
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.delete(WAITING_KEY)
        except Exception:
            self.log.warning("task_state_store could not be written", exc_info=True)

    def timeout_at(self, context: Context) -> datetime | None:
        """When the task's ``execution_timeout`` ends (Airflow keeps the start date across deferrals)."""
        if not self.execution_timeout:
            return None
        start = getattr(context["ti"], "start_date", None)
        if not isinstance(start, datetime):
            start = datetime.now(timezone.utc)
        if start.tzinfo is None:
            start = start.replace(tzinfo=timezone.utc)
        return start + self.execution_timeout

    def plan_attempt(self, context: Context, state: AttemptState) -> Any:
        """Submit now if the window and deadline allow, or wait (deferred) until they do."""
        from airflow_provider_dws.scheduling.decisions import next_submit
        from airflow_provider_dws.triggers.resume_at import ResumeAtTrigger

        now = datetime.now(timezone.utc)
        decision = next_submit(now, self.max_wait, self.window, self._deadline_at(context), state.earliest())
        if decision.at is None or decision.max_wait is None:
            raise self._gave_up_error(state.history, decision.reason)
        if decision.at > now + _NOW_SLACK:
            self.log.info("%s", decision.reason)
            waiting = state.waiting_until(decision.at)
            if self.deferrable:
                timeout_at = self.timeout_at(context)
                self.defer(
                    trigger=ResumeAtTrigger(
                        decision.at.isoformat(), echo=waiting.to_dict(), reason=decision.reason
                    ),
                    method_name="resume_attempt",
                    kwargs=waiting.to_dict(),
                    # No request exists while waiting for the window, so Airflow's own trigger
                    # timeout (which cancels nothing) is the right way to honour execution_timeout.
                    timeout=timeout_at - datetime.now(timezone.utc) if timeout_at else None,
                )
            time.sleep(max(0.0, (decision.at - datetime.now(timezone.utc)).total_seconds()))
            return self.plan_attempt(context, waiting)
        if decision.max_wait < self.max_wait:
            self.log.info("%s", decision.reason)
        identity = self.identity(context).with_attempt(state.attempt)
        status = self.submit_attempt(context, identity, state.placement, decision.max_wait)
        return self._wait(context, status, state.submitted(state.placement, decision.max_wait))

    def resume_attempt(self, context: Context, event: Any = None, **kwargs: Any) -> Any:
        """Back from a wait for the window (or a backoff): plan the attempt again."""
        from airflow_provider_dws.operators.state import AttemptState

        return self.plan_attempt(context, AttemptState.from_resume(event, kwargs, self.home_placement()))

    def _wait(self, context: Context, status: RequestStatus, state: AttemptState) -> Any:
        if self.is_done(status):
            return self.complete_attempt(context, status.to_event(), **state.to_dict())
        max_wait = state.max_wait(self.max_wait)
        deadline = self.timeout_at(context)
        trigger = self.make_trigger(status, state.placement, max_wait, state.to_dict(), deadline)
        if deadline is not None:
            self.log.info(
                "execution_timeout ends at %s; the wait will be cancelled then", deadline.isoformat()
            )
        if self.deferrable:
            self._remember_waiting(context, status.name)
            self.log.info("Deferring: the request waits in the DWS queue without holding a worker slot")
            # No defer timeout: the trigger enforces execution_timeout itself and cancels the request
            # first, whereas Airflow's trigger timeout would stop the wait without cancelling it.
            self.defer(trigger=trigger, method_name="complete_attempt", kwargs=state.to_dict())
        from airflow_provider_dws.triggers.capacity_request import first_event

        self.log.info("deferrable=False: waiting in this worker")
        self._waiting_on = status.name
        try:
            event = asyncio.run(first_event(trigger))
        finally:
            self._waiting_on = None
        return self.complete_attempt(context, event, **state.to_dict())

    _waiting_on: str | None = None

    def on_kill(self) -> None:
        """``deferrable=False`` only: the worker is being killed (or timed out) while it waits."""
        name = self._waiting_on
        if name and self.cancel_on_kill:
            self.log.warning("Task killed while waiting on %s; cancelling it", name)
            try:
                self.cancel_request(name)
            except Exception:
                self.log.exception("Could not cancel %s; cancel it by hand", name)

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """An attempt ended (or reached its target): succeed, or decide the next step."""
        if not event:
            # Resumed without a trigger event (e.g. a deferred task run again by hand): look the
            # request up again rather than guess; the identity finds it.
            self.log.warning("Resumed without a trigger event; looking for this task's request again")
            return self.run_attempts(context)
        from airflow_provider_dws.operators.state import AttemptState

        self._forget_waiting(context)
        return self._attempt_ended(
            context, event, AttemptState.from_resume(event, kwargs, self.home_placement())
        )

    def _attempt_ended(self, context: Context, event: dict[str, Any], state: AttemptState) -> Any:
        # What the loop decides with loads when an attempt ends, not when a DAG file is parsed.
        from airflow.sdk.exceptions import AirflowTaskTimeout

        from airflow_provider_dws.backends.base import RequestStatus
        from airflow_provider_dws.scheduling.decisions import Attempt, next_step
        from airflow_provider_dws.scheduling.phases import FailureKind

        status = RequestStatus.from_event(event)
        max_wait = state.max_wait(self.max_wait)
        now = datetime.now(timezone.utc)
        record = Attempt(
            number=state.attempt,
            placement=state.placement,
            submitted=status.timings.submitted or now,
            ended=status.timings.finished or status.timings.started or now,
            max_wait=max_wait,
            outcome=status.phase,
            failure=status.outcome.failure,
            request_name=status.name,
        )
        state = state.ended(record.to_dict())
        history = [dict(h) for h in state.history]
        ti = context["ti"]
        ti.xcom_push(key="dws_attempts", value=history)
        ti.xcom_push(key="dws_request", value=event)
        if self.is_success(status):
            return self.finish_success(context, status)
        self.release_failed(status, state.placement)
        failure = status.outcome.failure
        if failure is FailureKind.TIMED_OUT:
            raise AirflowTaskTimeout(
                f"execution_timeout {self.execution_timeout} passed: {status.outcome.message}"
            )
        if (
            failure in (FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.PREEMPTED)
            and self.capacity_retry is not None
        ):
            attempts = [Attempt.from_dict(a) for a in history]
            rng = random.Random(f"{self.identity(context).key}:{state.attempt}")
            step = next_step(
                attempts,
                now,
                home=self.home_placement(),
                max_wait=self.max_wait,
                retry=self.capacity_retry,
                failover=self.failover,
                window=self.window,
                deadline=self._deadline_at(context),
                rng=rng,
            )
            self.log.info("%s", step.reason)
            if step.action == "submit" and step.attempt and step.placement:
                return self.plan_attempt(context, state.next(step.attempt, step.placement, step.at))
            raise self.failure_error(status, state.placement, max_wait, f"{step.reason}\n{step.summary}")
        summary = "\n".join(Attempt.from_dict(a).describe() for a in history)
        raise self.failure_error(status, state.placement, max_wait, summary if len(history) > 1 else "")

    def _gave_up_error(self, history: Sequence[Mapping[str, Any]], reason: str) -> Exception:
        """Nothing more can be tried (the deadline passes first): the error, with every attempt so far."""
        from airflow_provider_dws.exceptions import CapacityNotObtainedError
        from airflow_provider_dws.scheduling.decisions import Attempt

        lines = [Attempt.from_dict(dict(a)).describe() for a in history]
        summary = ("; attempts: " + "; ".join(lines)) if lines else "; no request was submitted"
        return CapacityNotObtainedError(f"giving up: {reason}{summary}")
