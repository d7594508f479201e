"""The attempt loop every capacity-requesting operator shares.

The loop asks ``scheduling/`` the questions and carries out the answers: may I submit now, or
when (off-peak window, deadline)? What max wait do I request? The request came back without
capacity: retry here, fail over elsewhere, wait for the next window, or give up? Waiting, between
attempts as well as for capacity, happens in the triggerer. What differs per API is the
operator's :class:`~airflow_provider_dws.runtime.adapter.RequestAdapter`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_provider_dws import registry
from airflow_provider_dws.backends.base import WAIT_ERROR, RequestStatus
from airflow_provider_dws.runtime.state import RESUME, AttemptState, asks_again, split_wait
from airflow_provider_dws.runtime.task import task_identity, wait_for_event
from airflow_provider_dws.scheduling.phases import Phase, reached, succeeded_for
from airflow_provider_dws.triggers.submit import ANNOUNCED, is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.operators.base import DwsRequestOperator
    from airflow_provider_dws.runtime.adapter import RequestAdapter
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement
    from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

#: A submit time this close to now is "now" (no point deferring for it).
_NOW_SLACK = timedelta(seconds=1)


def adapter_of(op: DwsRequestOperator) -> RequestAdapter[Any, Any]:
    """The operator's adapter for this task run (its ``ADAPTER``), built on first use."""
    adapter = op.__dict__.get("_dws_adapter")
    if adapter is None:
        cls = op.adapter_entry()
        if isinstance(cls, str):
            cls = registry.load(cls)
        adapter = op.__dict__["_dws_adapter"] = cls(op)
    return adapter  # type: ignore[no-any-return]


def loop_of(op: DwsRequestOperator) -> AttemptLoop:
    """The operator's attempt loop for this task run, built on first use."""
    loop = op.__dict__.get("_dws_loop")
    if loop is None:
        loop = op.__dict__["_dws_loop"] = AttemptLoop(op, adapter_of(op))
    return loop  # type: ignore[no-any-return]


class AttemptLoop:
    """One task run's attempts: adopt or submit, wait (deferred or in the worker), then decide.

    Built once per task run by :meth:`DwsRequestOperator.attempt_loop`; the state that crosses a
    deferral travels as one :class:`~airflow_provider_dws.runtime.state.AttemptState`, in the
    trigger's event.
    """

    def __init__(self, operator: DwsRequestOperator, adapter: RequestAdapter[Any, Any]) -> None:
        self.op = operator
        self.adapter = adapter
        #: The request a ``deferrable=False`` wait is on (cancelled by ``on_kill``).
        self.waiting_on: str | None = None
        #: Requests the trigger must not adopt (an earlier try's, given up by this one).
        self.avoid: list[str] = []
        #: The capacity advice's scores of the placements last ranked (the record keeps its own).
        self.advice: dict[Any, float] = {}
        #: The wait forecasts of the placements last ranked, so the request made next is not read again.
        self.forecasts: dict[Any, Any] = {}
        from airflow_provider_dws.runtime.recording import Recorder

        #: Writes the ``dws_requests`` records and the request metrics.
        self.recorder = Recorder(self)

    @property
    def log(self) -> Any:
        """The task's logger."""
        return self.op.log

    # -- entry points ----------------------------------------------------------------------------

    def run(self, context: Context, *, fresh: bool = False) -> Any:
        """Adopt this task instance's live or finished request, or plan the first attempt.

        ``fresh``: the first run of its try (``execute``); on try 1 no earlier try can have left a
        request waited on or a record, so the task state store is not read for them (each read is
        a call to the API server, and a thousand mapped tasks make a thousand).

        A request an earlier try was deferred on when that try ended is not adopted: a try ends
        while deferred only when a user clears or marks the task (or Airflow times it out), which
        means "stop waiting on that one". It is cancelled here, in case the trigger's ``on_kill``
        has not done it yet, and a new request is made. Every other live request of this task
        instance (a worker died before deferring, a triggerer died) is adopted.
        """
        identity = task_identity(context)
        first = fresh and getattr(context["ti"], "try_number", None) == 1
        if first:
            self.recorder.start_empty()
        abandoned = None if first else self.cancel_abandoned_request(context)
        if self.in_trigger():
            # The trigger looks this task instance's requests up, and adopts one, before it makes one.
            self.avoid = [abandoned] if abandoned else []
            return self.plan(context, AttemptState(placement=self.op.home_placement()))
        found = self.adapter.find(context, identity)
        self.adapter.delete_ended()
        if found is not None and found.status.name == abandoned:
            found = None
        if found is not None:
            status, placement, number = found
            state = AttemptState(placement=placement, attempt=number)
            if is_done(self.adapter, status) and is_success(self.adapter, status):
                self.log.info(
                    "%s (attempt %d) already succeeded: taking it as the result", status.name, number
                )
                return self.attempt_ended(context, status.to_event(), state)
            if status.phase.live:
                self.log.info(
                    "Reattaching to live request %s (attempt %d in %s)", status.name, number, placement
                )
                max_wait_s = status.details.get("max_wait_seconds")
                max_wait = timedelta(seconds=max_wait_s) if max_wait_s else self.op.max_wait
                return self.wait(context, status, state.submitted(placement, max_wait))
        return self.plan(context, AttemptState(placement=self.op.home_placement()))

    def resume(self, context: Context, event: Any, kwargs: Mapping[str, Any]) -> Any:
        """Back from a wait for the window (or a backoff): plan the attempt again."""
        return self.plan(context, AttemptState.from_resume(event, self.op.home_placement()))

    def complete(self, context: Context, event: dict[str, Any] | None, kwargs: Mapping[str, Any]) -> Any:
        """An attempt ended (or reached its target): succeed, or decide the next step."""
        if not event:
            # Resumed without a trigger event (e.g. a deferred task run again by hand): look the
            # request up again rather than guess; the identity finds it.
            self.log.warning("Resumed without a trigger event; looking for this task's request again")
            return self.run(context)
        resume = event.get(RESUME)
        if isinstance(resume, Mapping):
            self.recorder.resume_from(resume)
        state = AttemptState.from_resume(event, self.op.home_placement())
        if state.pending and not is_pending(event.get("name")):
            # The trigger made (or adopted) the request: the task knows its name from now on.
            status = RequestStatus.from_event(event)
            self.recorder.made(context, state.pending, status, state)
            announced = bool(isinstance(resume, Mapping) and resume.get(ANNOUNCED))
            self.adapter.remember(context, status, announced=announced)
        if event.get(WAIT_ERROR):
            self.wait_failed(context, event, state)
        return self.attempt_ended(context, event, state)

    def on_kill(self) -> None:
        """The worker is being killed (or timed out) while it holds a request: between its submit and
        its deferral, or waiting on it in the worker (``deferrable=False``). A deferred wait is the
        trigger's to cancel."""
        name = self.waiting_on
        if name and self.op.cancel_on_kill:
            self.log.warning("Task killed while waiting on %s; cancelling it", name)
            try:
                kept = self.adapter.release_or_keep(name)
                if kept:
                    self.log.warning("%s is kept: %s", name, kept)
            except Exception:
                self.log.exception("Could not cancel %s; cancel it by hand", name)
            else:
                if not kept:
                    self.recorder.killed(
                        name,
                        "the task was killed or timed out in the worker; the provider cancelled the request",
                    )

    # -- an earlier try's request ----------------------------------------------------------------

    def cancel_abandoned_request(self, context: Context) -> str | None:
        """Cancel the request an earlier try was still deferred on when it ended, and name it."""
        if context.get("task_state_store") is None:
            return None
        record = self.recorder.waiting_before(context)
        try_number = getattr(context["ti"], "try_number", None)
        if not isinstance(record, dict) or not isinstance(try_number, int):
            return None
        name, waited_try = record.get("request"), record.get("try")
        if not isinstance(name, str) or not isinstance(waited_try, int) or waited_try >= try_number:
            return None
        if is_pending(name):
            return self._cancel_made_by_trigger(context, waited_try)
        if not self.op.cancel_on_kill:
            self.log.info(
                "Try %d ended while deferred on %s; cancel_on_kill=False, so it is kept and adopted",
                waited_try,
                name,
            )
            self.recorder.forget_waiting(context)
            return None
        self.log.warning(
            "Try %d ended while deferred on %s (the task was cleared, marked or timed out): giving "
            "that request up",
            waited_try,
            name,
        )
        kept = self.adapter.release_or_keep(name)
        self.recorder.forget_waiting(context)
        if kept:
            self.log.info("%s is kept (%s): this try adopts it", name, kept)
            return None
        self.log.info("Cancelled %s; this try starts a new request", name)
        return name

    def _cancel_made_by_trigger(self, context: Context, waited_try: int) -> str | None:
        """An earlier try ended while its trigger made or waited on its request (named only in the
        triggerer): find that try's live request by the task instance's labels and give it up as
        :meth:`cancel_abandoned_request` does; its name (``None``: none, or it is kept)."""
        self.recorder.forget_waiting(context)
        if not self.op.cancel_on_kill:
            return None
        identity = task_identity(context)
        locations = {placement.location for placement in self.op.placements()}
        found = [
            status
            for location in sorted(locations)
            for status in self.adapter.backend(location).find(identity)  # type: ignore[attr-defined]
            if status.details.get("try") == waited_try
        ]
        given_up = None
        for status in found:
            if is_success(self.adapter, status):
                # That try's trigger ended the task with it (it writes no task state): not given
                # up; its record takes its true end, and the lookup adopts it as any success.
                self.recorder.settled(context, waited_try, status)
                continue
            if not status.phase.live:
                continue
            self.log.warning(
                "Try %d ended while deferred on %s (the task was cleared, marked or timed out): giving "
                "that request up",
                waited_try,
                status.name,
            )
            if not self.adapter.release_or_keep(status.name):
                given_up = status.name
        return given_up

    # -- time limits -----------------------------------------------------------------------------

    def timeout_at(self, context: Context) -> datetime | None:
        """When the task's ``execution_timeout`` ends (Airflow keeps the start date across deferrals)."""
        if not self.op.execution_timeout:
            return None
        start = getattr(context["ti"], "start_date", None)
        if not isinstance(start, datetime):
            start = datetime.now(timezone.utc)
        if start.tzinfo is None:
            start = start.replace(tzinfo=timezone.utc)
        return start + self.op.execution_timeout

    def deadline_at(self, context: Context) -> datetime | None:
        """The operator's ``deadline`` for this run, or ``None``."""
        deadline = self.op.deadline
        if deadline is None:
            return None
        end = context.get("data_interval_end")
        dag_run = context.get("dag_run")
        run_after = getattr(dag_run, "run_after", None)
        manual = str(getattr(dag_run, "run_type", "")).lower().endswith("manual")
        if end is None or (manual and run_after is not None and run_after > end):
            # A manual run's inferred interval is the last window, often hours ago: its deadline
            # counts from when it was triggered instead.
            end = run_after or getattr(dag_run, "logical_date", None)
        return deadline.resolve(end)

    # -- one attempt -----------------------------------------------------------------------------

    def plan(self, context: Context, state: AttemptState) -> Any:
        """Submit now if the window and deadline allow, or wait (deferred) until they do."""
        from airflow_provider_dws.scheduling.decisions import next_submit

        op = self.op
        now = datetime.now(timezone.utc)
        ends = state.ends_wait_at()
        wanted = op.max_wait if ends is None else max(ends - now, _NOW_SLACK)
        decision = next_submit(now, wanted, op.window, self.deadline_at(context), state.earliest())
        if decision.at is None or decision.max_wait is None:
            raise self.gave_up_error(state.history, decision.reason)
        if decision.at > now + _NOW_SLACK:
            self.log.info("%s", decision.reason)
            waiting = state.waiting_until(decision.at)
            if op.deferrable:
                from airflow_provider_dws.triggers.resume_at import ResumeAtTrigger

                timeout_at = self.timeout_at(context)
                op.defer(
                    trigger=ResumeAtTrigger(
                        decision.at.isoformat(), resume=waiting.to_dict(), reason=decision.reason
                    ),
                    method_name="resume_attempt",
                    # No request exists while waiting for the window, so Airflow's own trigger
                    # timeout (which cancels nothing) is the right way to honour execution_timeout.
                    timeout=timeout_at - datetime.now(timezone.utc) if timeout_at else None,
                )
            time.sleep(max(0.0, (decision.at - datetime.now(timezone.utc)).total_seconds()))
            return self.plan(context, waiting)
        if decision.max_wait < wanted:
            self.log.info("%s", decision.reason)
        if op.failover is not None and op.failover.ranked and ends is None:
            from airflow_provider_dws.runtime.outlook import rank

            try:
                state = rank(self, state)
            except Exception:
                # The order is an optimisation: never a reason to fail the task or lose its turn.
                self.log.warning("Could not rank the placements; trying %s", state.placement, exc_info=True)
        state, max_wait = split_wait(self.adapter, state, now, decision.max_wait, self.log)
        identity = task_identity(context).with_attempt(state.attempt)
        if self.in_trigger():
            return self.defer_submission(context, identity, state, max_wait)
        status = self.adapter.submit(context, identity, state.placement, max_wait)
        # From here until the deferral a kill or an execution_timeout in this worker cancels it
        # (`on_kill`): no trigger exists yet to do so, and the request would wait for nobody.
        self.waiting_on = status.name
        return self.wait(context, status, state.submitted(state.placement, max_wait))

    def in_trigger(self) -> bool:
        """Whether this task's trigger makes its requests (a deferrable task whose adapter can)."""
        return bool(self.op.deferrable and self.adapter.makes_in_trigger())

    def defer_submission(
        self, context: Context, identity: RequestIdentity, state: AttemptState, max_wait: timedelta
    ) -> Any:
        """Hand the request to the trigger: it looks the task instance's requests up, adopts one
        or makes this one (:mod:`~airflow_provider_dws.triggers.submit`), then waits on it."""
        from airflow_provider_dws.scheduling.phases import Outcome, RequestTimings
        from airflow_provider_dws.triggers.submit import Submission, pending_name

        adapter = self.adapter
        pending = pending_name(identity)
        status = RequestStatus(
            name=pending,
            state="SUBMITTING",
            outcome=Outcome(Phase.WAITING, None, ""),
            timings=RequestTimings(submitted=datetime.now(timezone.utc)),
        )
        submission = Submission(
            request=adapter.request_spec(identity, state.placement, max_wait),
            identity=asdict(identity),
            max_wait_seconds=max_wait.total_seconds(),
            lookup=adapter.lookup(context, identity, state.placement),
            avoid=list(self.avoid),
            announce=adapter.announce(),
        )
        waiting = replace(state.submitted(state.placement, max_wait), pending=pending)
        # Written before deferring, so the request shows as waiting while the trigger makes it.
        self.recorder.submitted(context, status, waiting, deferring=True)
        resume = {**waiting.to_dict(), **self.recorder.carried(), **self.finish_in_trigger()}
        trigger = self.trigger(
            status, state.placement, max_wait, resume, self.timeout_at(context), submit=submission.to_dict()
        )
        self.log.info(
            "Deferring: the request waits in the DWS queue without holding a worker slot; the "
            "triggerer makes it (attempt %d in %s) unless it finds this task instance's own, and it "
            "may wait up to %s for capacity%s",
            state.attempt,
            state.placement,
            max_wait,
            adapter.deferral_note(),
        )
        event = wait_for_event(self.op, trigger, "complete_attempt")
        return self.complete(context, event, {})

    def finish_in_trigger(self) -> dict[str, Any]:
        """What lets the trigger end a successful wait itself, as the ``resume`` entry
        :data:`~airflow_provider_dws.backends.base.FINISH` (empty: the task resumes in a worker).

        The trigger then writes what the resumed task would (the final record, the attempt's
        XComs, the return value) and ends the task, so a success costs no worker process. Not for
        a task with ``outlets``, ``multiple_outputs``, an ``on_success_callback`` or a downstream
        task mapped over its output: Airflow records asset events, splits a return value, runs the
        callback with the task's context and counts what a mapped task expands over only when a
        worker ends the task.
        """
        from airflow_provider_dws.backends.base import FINISH

        op = self.op
        if any(getattr(op, name, None) for name in ("outlets", "multiple_outputs", "on_success_callback")):
            return {}
        if op.has_dag() and next(op.iter_mapped_dependants(), None) is not None:
            return {}
        return {FINISH: {"push_return": bool(op.do_xcom_push), "result_keys": list(self.adapter.result_keys)}}

    def wait(self, context: Context, status: RequestStatus, state: AttemptState) -> Any:
        """Wait on a submitted (or adopted) request: deferred, or in this worker."""
        if is_done(self.adapter, status):
            self.waiting_on = None
            return self.attempt_ended(context, status.to_event(), state)
        self.waiting_on = status.name  # a kill before the deferral cancels it (see `plan`)
        deadline = self.timeout_at(context)
        # Written before deferring, so the request shows as waiting while the trigger waits.
        self.recorder.submitted(context, status, state, deferring=self.op.deferrable)
        # The state travels once, in the trigger's event: Airflow's triggerer hands it back, and
        # `airflow dags test` hands back the event alone (not the deferral's keyword arguments).
        resume = {**state.to_dict(), **self.recorder.carried()}
        trigger = self.trigger(status, state.placement, state.max_wait(self.op.max_wait), resume, deadline)
        if deadline is not None:
            self.log.info(
                "execution_timeout ends at %s; the wait will be cancelled then", deadline.isoformat()
            )
        if self.op.deferrable:
            self.log.info("Deferring: the request waits in the DWS queue without holding a worker slot")
        try:
            event = wait_for_event(self.op, trigger, "complete_attempt")
        finally:
            self.waiting_on = None
        return self.complete(context, event, {})

    def trigger(
        self,
        status: RequestStatus,
        placement: Placement,
        max_wait: timedelta,
        resume: dict[str, Any],
        task_deadline: datetime | None = None,
        submit: dict[str, Any] | None = None,
    ) -> CapacityRequestTrigger:
        """The trigger that waits on the request through the shared poller, as the adapter says (its
        backend, :attr:`~RequestAdapter.target`, max wait deadline and grace, whether it releases);
        it hands ``resume`` back in its event and gives up at ``task_deadline`` (the end of
        ``execution_timeout``)."""
        from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

        adapter = self.adapter
        backend: Any = adapter.backend(placement.location)
        return CapacityRequestTrigger(
            kind=backend.kind,
            backend_spec=backend.spec(),
            request_name=status.name,
            poll_interval=float(self.op.poll_interval),
            # A request the trigger makes counts its max wait from when it is made.
            wait_deadline=None if submit else adapter.wait_deadline(status, max_wait).isoformat(),
            cancel_on_kill=self.op.cancel_on_kill,
            target=adapter.target,
            resume=resume,
            task_deadline=task_deadline.isoformat() if task_deadline else None,
            wait_grace=None if adapter.wait_grace is None else adapter.wait_grace.total_seconds(),
            releases=adapter.releases,
            submit=submit,
        )

    def attempt_ended(self, context: Context, event: dict[str, Any], state: AttemptState) -> Any:
        """Record the attempt, then return the result, submit the next attempt, or raise."""
        from airflow_provider_dws.compat import AirflowTaskTimeout
        from airflow_provider_dws.scheduling.decisions import Attempt, next_number, next_step
        from airflow_provider_dws.scheduling.phases import FailureKind

        op, adapter = self.op, self.adapter
        status = RequestStatus.from_event(event)
        adapter.ended(context, status)
        max_wait = state.max_wait(op.max_wait)
        now = datetime.now(timezone.utc)
        again = asks_again(self.adapter, status, state, now)
        record = Attempt(
            number=state.attempt,
            placement=state.placement,
            submitted=status.timings.submitted or now,
            ended=status.timings.finished or status.timings.started or now,
            max_wait=max_wait,
            outcome=status.phase,
            failure=status.outcome.failure,
            request_name=status.name,
            continued=again,
        )
        state = state.ended(record.to_dict())
        history = [dict(h) for h in state.history]
        ti = context["ti"]
        ti.xcom_push(key="dws_request", value={k: v for k, v in event.items() if k != RESUME})
        ti.xcom_push(key="dws_attempts", value=history)
        ti.xcom_push(key="wait_seconds", value=status.timings.wait_seconds)
        if adapter.target == "end":
            ti.xcom_push(key="run_seconds", value=status.timings.run_seconds)
        self.recorder.ended(context, status, state, is_success(adapter, status))
        if is_success(adapter, status):
            value = adapter.result(context, status)
            # Each result key also under its own XCom key, so a later task templates
            # ``task.output["endpoint"]`` (an XComArg's key is an XCom key, not a key of the value).
            for key in adapter.result_keys:
                ti.xcom_push(key=key, value=value[key])
            return value
        if not is_pending(status.name):  # a create the trigger was refused made nothing to release
            adapter.release_failed(status, state.placement)
        failure = status.outcome.failure
        if failure is FailureKind.TIMED_OUT:
            raise AirflowTaskTimeout(
                f"execution_timeout {op.execution_timeout} passed: {status.outcome.message}"
            )
        if again:
            self.log.info(
                "%s was not obtained in its %s; asking again, the max wait lasts until %s",
                status.name,
                max_wait,
                state.wait_ends,
            )
            return self.plan(context, state.asked_again(next_number([Attempt.from_dict(a) for a in history])))
        stop = adapter.no_retry(status) if op.capacity_retry is not None else None
        if stop is not None:
            self.log.info("Not retrying: %s", stop)
        elif (
            failure in (FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.PREEMPTED)
            and op.capacity_retry is not None
        ):
            attempts = [Attempt.from_dict(a) for a in history]
            rng = random.Random(f"{task_identity(context).key}:{state.attempt}")
            step = next_step(
                attempts,
                now,
                home=op.home_placement(),
                max_wait=op.max_wait,
                retry=op.capacity_retry,
                failover=op.failover,
                window=op.window,
                deadline=self.deadline_at(context),
                rng=rng,
            )
            self.log.info("%s", step.reason)
            if step.action == "submit" and step.attempt and step.placement:
                return self.plan(context, state.next(step.attempt, step.placement, step.at))
            raise self.failure_error(status, state.placement, max_wait, f"{step.reason}\n{step.summary}")
        summary = "\n".join(Attempt.from_dict(a).describe() for a in history)
        raise self.failure_error(status, state.placement, max_wait, summary if len(history) > 1 else "")

    def wait_failed(self, context: Context, event: dict[str, Any], state: AttemptState) -> NoReturn:
        """The trigger's wait ended on an error (``wait_error``) while the request may still wait
        or hold capacity. A try with a retry left keeps it: the next try adopts it, in its place in
        the queue. The last try cancels it, unless the adapter keeps it
        (:meth:`~.adapter.RequestAdapter.kept_after_failed_wait`: a workload that is running, a
        calendar block already approved) or ``cancel_on_kill=False``."""
        from airflow_provider_dws.exceptions import WaitFailedError
        from airflow_provider_dws.scheduling.phases import FailureKind, Outcome

        # No try waits on the request now: a next try adopts it, or this one gives it up.
        self.recorder.forget_waiting(context)
        status = RequestStatus.from_event(event)
        name, error, phase = status.name, event[WAIT_ERROR], status.phase.value
        if is_pending(name):
            # Finding or making the request failed in the trigger: none was made (a create whose
            # reply was lost is found by the next lookup, which a next try makes first).
            raise WaitFailedError(f"making the request failed: {error}")
        ti = context["ti"]
        try_number, max_tries = getattr(ti, "try_number", None), getattr(ti, "max_tries", None)
        if isinstance(try_number, int) and isinstance(max_tries, int) and try_number <= max_tries:
            self.log.warning(
                "Waiting on %s failed (%s); it is left %s for try %d, which adopts it",
                name,
                error,
                phase,
                try_number + 1,
            )
            raise WaitFailedError(f"waiting on {name} failed: {error}; the next try adopts the request")
        kept = self.adapter.kept_after_failed_wait(status)
        if kept or not self.op.cancel_on_kill:
            why = kept or "cancel_on_kill=False"
            self.log.warning(
                "Waiting on %s failed (%s) and no retry is left; leaving it %s (%s)", name, error, phase, why
            )
            raise WaitFailedError(
                f"waiting on {name} failed: {error}; no retry is left, and the request was left {phase} ({why})"
            )
        self.log.warning(
            "Waiting on %s failed (%s) and no retry is left: cancelling it so it cannot take capacity "
            "nobody will use",
            name,
            error,
        )
        cancelled = replace(
            status,
            outcome=Outcome(
                Phase.CANCELLED,
                FailureKind.CANCELLED,
                f"the wait failed ({error}); the provider cancelled it",
            ),
        )
        try:
            kept = self.adapter.release_or_keep(name)
            if not kept:
                self.adapter.release_failed(cancelled, state.placement)
        except Exception:
            self.log.exception("Could not cancel %s; cancel it by hand", name)
            raise WaitFailedError(
                f"waiting on {name} failed: {error}; no retry is left, and cancelling the request failed: "
                "cancel it by hand"
            ) from None
        if kept:
            # A fresher read than the trigger's last one: the request moved on and is kept.
            self.log.warning(
                "Waiting on %s failed (%s) and no retry is left; it is kept (%s)", name, error, kept
            )
            raise WaitFailedError(
                f"waiting on {name} failed: {error}; no retry is left, and the request was kept ({kept})"
            )
        self.recorder.ended(context, cancelled, state, False)
        raise WaitFailedError(
            f"waiting on {name} failed: {error}; no retry is left, so the request was cancelled"
        )

    # -- errors ----------------------------------------------------------------------------------

    def failure_error(
        self, status: RequestStatus, placement: Any, max_wait: timedelta, summary: str
    ) -> Exception:
        """The adapter's classified error, with every attempt when there were several."""
        error = self.adapter.error(status, placement, max_wait)
        if summary:
            error.args = (f"{error.args[0]}; attempts:\n{summary}",)
        return error

    def gave_up_error(self, history: Sequence[Mapping[str, Any]], reason: str) -> Exception:
        """Nothing more can be tried (the deadline passes first): the error, with every attempt so far."""
        from airflow_provider_dws.exceptions import CapacityNotObtainedError
        from airflow_provider_dws.scheduling.decisions import Attempt

        lines = [Attempt.from_dict(dict(a)).describe() for a in history]
        summary = ("; attempts: " + "; ".join(lines)) if lines else "; no request was submitted"
        return CapacityNotObtainedError(f"giving up: {reason}{summary}")


def is_done(adapter: RequestAdapter[Any, Any], status: RequestStatus) -> bool:
    """Whether the wait is over: the request ended, or reached the adapter's target."""
    return reached(adapter.target, status.phase)


def is_success(adapter: RequestAdapter[Any, Any], status: RequestStatus) -> bool:
    """Whether the request gave what the task needs (:func:`~airflow_provider_dws.scheduling.phases.succeeded_for`)."""
    return succeeded_for(adapter.target, status.phase)
