"""The attempt loop's request records (:mod:`airflow_provider_dws.records`) and request metrics.

One :class:`Recorder` per task run writes the record of each request the loop submits or adopts
into the task instance's ``dws_requests`` XCom: ``waiting`` before the task defers, the final phase
when the attempt ends. What differs per API comes from the adapter's ``record_facts``. The XCom
value is read back once per task run (a resumed deferral is a new run) and kept in memory, so
every capacity attempt of the try accumulates. :func:`record_release` does the same for what a
release task gives back, each release saying how its API's requests are recorded
(:class:`ReleasedApi`). A record or a metric that cannot be written is logged, never raised: it
describes the work, it is not the work.

No read here asks the API server for one task instance's XCom that may not exist: the task SDK's
supervisor logs each such absence as an error ("XCom not found") in the task's log, and a healthy
first try has no records yet. A task's own records are read back from its task state store, which
holds the same list; another task's with the SDK's sequence read, which answers an absence with an
empty list.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.console import is_first_run
from airflow_provider_dws.metrics import attempt_metrics, end_metrics
from airflow_provider_dws.records import (
    LIVE_PHASES,
    RECORDS,
    TASK_ENDED,
    XCOM_KEY,
    RequestRecord,
    end_record,
    iso,
    parse_time,
    phase_of,
    read_records,
    upsert,
)
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.wait_history import observe

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.runtime.loop import AttemptLoop
    from airflow_provider_dws.runtime.state import AttemptState

log = logging.getLogger(__name__)

#: Beside the records in the task state store: the request a deferred try waits on, and which try
#: (``{"request": name, "try": n}``), written with the record it waits on, in the same call.
WAITING = "waiting"


def stored(records: list[dict[str, Any]], waiting: dict[str, Any] | None = None) -> Any:
    """The task state store's value: the records, with the request waited on while deferred."""
    return {RECORDS: records, WAITING: waiting} if waiting else records


def stored_records(value: Any) -> Any:
    """The records of the task state store's value (the list :func:`stored` kept)."""
    return value.get(RECORDS) if isinstance(value, dict) else value


def stored_waiting(value: Any) -> Any:
    """The request a deferred try waited on, from the task state store's value (``None``: none)."""
    return value.get(WAITING) if isinstance(value, dict) else None


#: The record fields ``record_facts`` may set besides ``api`` and ``kind``.
_FACT_FIELDS = (
    "accelerator_type",
    "accelerator_count",
    "machine_type",
    "pricing_model",
    "console_url",
    "reservation",
    "held_until",
)


def pull_records(context: Context, task_id: str | None = None) -> list[RequestRecord]:
    """The records in the ``dws_requests`` XCom of this task instance, or of task ``task_id`` of the
    same run; none when there are none or they cannot be read.

    This task instance's XCom is read for its own map index, and only where it is known to exist or
    no task state store can stand in for it (:meth:`Recorder._known`). Another task's is read for
    every map index at once (the SDK's sequence read: an absent XCom is an empty list, where a read
    of one map index logs an error): a record names its request, whose name is its own, so a reader
    takes the records of the requests it looks for (a release, its setup's) by name.
    """
    ti = context["ti"]
    pull = getattr(ti, "xcom_pull", None)
    if pull is None:  # a stand-in task instance without XCom reads
        return []
    try:
        if task_id is None or task_id == ti.task_id:
            value = pull(key=XCOM_KEY, task_ids=ti.task_id, map_indexes=ti.map_index)
            return read_records(value)
        # A list of task ids and no map index: one list of values, every map index's (or a None).
        values = pull(key=XCOM_KEY, task_ids=[task_id])
    except Exception:
        log.warning("Could not read the %s XCom; starting a new list", XCOM_KEY, exc_info=True)
        return []
    return [record for value in values or () for record in read_records(value)]


def _try_number(context: Context) -> int:
    number = getattr(context["ti"], "try_number", 1)
    return number if isinstance(number, int) and not isinstance(number, bool) and number >= 1 else 1


def record_phase(status: RequestStatus) -> str:
    """The record's phase of a status (:func:`~airflow_provider_dws.records.phase_of`)."""
    return phase_of(status.phase.value)


def _project(op: Any, facts: dict[str, Any]) -> str:
    """The request's project: the operator's or its connection's; on a Kubernetes connection, which
    may name none, the adapter's fallback (``facts["project"]``)."""
    if "project" not in facts:
        return resolve_project(op)
    try:
        return resolve_project(op)
    except Exception:  # no Google connection, or one without a project: not needed to reach the cluster
        return str(facts["project"])


class Recorder:
    """Writes one task run's request records and their end-of-attempt metrics."""

    def __init__(self, loop: AttemptLoop) -> None:
        self.loop = loop
        self._records: list[RequestRecord] | None = None
        # The store's "waiting" entry as last read or written (see `WAITING`).
        self._waiting: Any = None
        # The task run's context, for a kill handled in this worker (``on_kill`` gets none).
        self._context: Context | None = None

    def start_empty(self) -> None:
        """The first run of a task instance's first try: no record exists yet, none is read."""
        self._records = []

    def _listed(self) -> list[dict[str, Any]]:
        return [record.to_dict() for record in self._records or ()]

    def carried(self) -> dict[str, Any]:
        """What a deferral's ``resume`` carries of the task run's records (:data:`RECORDS`)."""
        return {RECORDS: self._listed()}

    def resume_from(self, resume: Mapping[str, Any]) -> None:
        """A resumed run: the records its deferral carried, the ones the store holds (nothing
        else writes them while the try is deferred), so they are not read again."""
        records = resume.get(RECORDS)
        if isinstance(records, list):
            self._records = read_records(records)
            # The deferral wrote this try's "waiting" beside them: `forget_waiting` must clear it.
            self._waiting = True

    def waiting_before(self, context: Context) -> Any:
        """What the task state store says a try was deferred on (``None``: nothing, or no store)."""
        self._known(context)
        return self._waiting

    def forget_waiting(self, context: Context) -> None:
        """No try waits on a request any more (an earlier try's was given up or adopted, or this
        try's wait failed and a next try adopts it): the store keeps the records alone."""
        store = context.get("task_state_store")
        if store is None or not self.waiting_before(context):
            return
        try:
            store.set(XCOM_KEY, stored(self._listed()))
            self._waiting = None
        except Exception:
            self.loop.log.warning("task_state_store could not be written", exc_info=True)

    def _known(self, context: Context) -> list[RequestRecord]:
        if self._records is None:
            # The task state store holds the list every push wrote to the XCom too: this try's
            # records (a resumed run) and the earlier tries'. The XCom is read only without a store:
            # on a try's first run Airflow has just deleted it, and that read would log an error.
            if context.get("task_state_store") is None:
                # Airflow 3.1, 3.2: a try's first run starts with its XComs deleted, and reading
                # the absent XCom would log an error; a resumed run reads what it pushed.
                self._records = [] if is_first_run(context["ti"]) else pull_records(context)
            else:
                self._records = self._earlier_tries(context)
        return self._records

    def _earlier_tries(self, context: Context) -> list[RequestRecord]:
        """The records of this try and the earlier ones, from the task state store (a new try
        starts with its XComs cleared by Airflow, the store keeps them). A request an earlier try
        still waited on when it ended is recorded cancelled: it was, unless this try adopts it,
        which writes it live again."""
        store = context.get("task_state_store")
        if store is None:
            return []
        try:
            value = store.get(XCOM_KEY)
        except Exception:
            self.loop.log.warning(
                "task_state_store could not be read; relying on identity labels alone", exc_info=True
            )
            return []
        self._waiting = stored_waiting(value)
        value = stored_records(value)
        current, now = _try_number(context), iso(datetime.now(timezone.utc))
        out = []
        for record in read_records(value):
            if record.try_number < current and record.phase in LIVE_PHASES and not record.holds:
                record = replace(
                    record,
                    phase="cancelled",
                    outcome=TASK_ENDED,
                    ended=record.ended or now,
                    message=f"try {record.try_number} ended while waiting on it",
                )
            out.append(record)
        return out

    def _find(self, context: Context, name: str) -> RequestRecord | None:
        return next((r for r in self._known(context) if r.request_name == name), None)

    def _push(self, context: Context, record: RequestRecord, waiting: dict[str, Any] | None = None) -> None:
        """Write ``record`` into the XCom and the task state store; ``waiting``: this try defers on
        it (any later write of the same run, after the resume, drops that)."""
        self._context = context
        value = upsert(self._known(context), record)
        context["ti"].xcom_push(key=XCOM_KEY, value=value)
        self._records = read_records(value)
        store: Any = context.get("task_state_store")
        if store is not None:
            try:
                store.set(XCOM_KEY, stored(value, waiting))  # for the next try (see _earlier_tries)
                self._waiting = waiting
            except Exception:
                self.loop.log.warning("Could not keep the request records for a next try", exc_info=True)

    def _base(self, context: Context, status: RequestStatus, state: AttemptState) -> RequestRecord:
        """A new record of ``status``: what was asked, where, and its time limits."""
        loop = self.loop
        op, adapter = loop.op, loop.adapter
        placement = state.placement
        try:
            location = adapter.location_of(status.name)
        except ValueError:
            location = placement.location
        try:
            facts = adapter.record_facts(status, placement)
        except Exception:
            # A record without its shape is still worth more than none.
            loop.log.warning("Could not describe %s for its request record", status.name, exc_info=True)
            facts = {}
        max_wait = state.max_wait(op.max_wait)
        limits = [t for t in (loop.deadline_at(context), loop.timeout_at(context)) if t is not None]
        api = str(facts.get("api") or type(adapter).__name__)
        return RequestRecord(
            api=api,
            kind=str(facts.get("kind") or api),
            project=_project(op, facts),
            location=location,
            request_name=status.name,
            phase=record_phase(status),
            attempt=state.attempt,
            try_number=_try_number(context),
            submitted=iso(status.timings.submitted or datetime.now(timezone.utc)),
            started=iso(status.timings.started),
            max_wait_seconds=max_wait.total_seconds(),
            wait_deadline=iso(adapter.wait_deadline(status, max_wait)),
            deadline=iso(min(limits)) if limits else None,
            window=str(op.window) if op.window is not None else None,
            **{k: v for k, v in facts.items() if k in _FACT_FIELDS},  # type: ignore[arg-type]
        )

    def _new(self, context: Context, status: RequestStatus, state: AttemptState) -> RequestRecord:
        """The first record of a request this try submits or adopts: what it can expect is logged
        and the forecast it was given kept (:mod:`.outlook`)."""
        record = self._base(context, status, state)
        from airflow_provider_dws.runtime.outlook import at_submit

        try:
            return at_submit(self.loop, record, state.placement)
        except Exception:
            self.loop.log.warning("Could not work out what %s can expect", status.name, exc_info=True)
            return record

    def submitted(
        self, context: Context, status: RequestStatus, state: AttemptState, *, deferring: bool = False
    ) -> None:
        """The request was submitted or adopted and is about to be waited on (``deferring``: by
        this try, deferred, which the store remembers for a later try: see :data:`WAITING`)."""
        try:
            record = self._find(context, status.name) or self._new(context, status, state)
            # An adopted request of an earlier try is live again (and not ended), and this try waits on
            # it: the page tells a request its task abandoned by the try that last waited on it.
            live = replace(
                record,
                phase=record_phase(status),
                ended=None,
                outcome=None,
                message="",
                try_number=max(record.try_number, _try_number(context)),
            )
            waiting = {"request": status.name, "try": _try_number(context)} if deferring else None
            self._push(context, replace(live, started=iso(status.timings.started) or record.started), waiting)
        except Exception:
            self.loop.log.warning("Could not write the request record of %s", status.name, exc_info=True)

    def made(self, context: Context, pending: str, status: RequestStatus, state: AttemptState) -> None:
        """The trigger made (or adopted) ``status`` for the request recorded as ``pending`` (its
        provisional name): the record takes the request's name, console link, submit time and
        wait deadline, once."""
        try:
            known = self._known(context)
            if any(r.request_name == status.name for r in known):
                self._records = [r for r in known if r.request_name != pending]
                return
            adapter = self.loop.adapter
            url = adapter.record_facts(status, state.placement).get("console_url")
            submitted = status.timings.submitted
            deadline = adapter.wait_deadline(status, state.max_wait(self.loop.op.max_wait))
            self._records = [
                replace(
                    r,
                    request_name=status.name,
                    console_url=url or r.console_url,
                    submitted=iso(submitted) or r.submitted,
                    wait_deadline=iso(deadline) if submitted else r.wait_deadline,
                )
                if r.request_name == pending
                else r
                for r in known
            ]
        except Exception:
            self.loop.log.warning("Could not rename the request record of %s", status.name, exc_info=True)

    def ended(self, context: Context, status: RequestStatus, state: AttemptState, success: bool) -> None:
        """The attempt ended (or reached what the task waits for): the final record, the metrics."""
        try:
            known = self._find(context, status.name)
            record = known or self._base(context, status, state)
            # A rerun that takes a request already recorded ended (or held) counts it once.
            counted = known is not None and known.outcome is not None and known.phase == record_phase(status)
            record = status.ended_record(record, success=success, target=self.loop.adapter.target)
            promised = success and status.phase is Phase.PROVISIONING
            self._push(context, record)
        except Exception:
            self.loop.log.warning("Could not write the request record of %s", status.name, exc_info=True)
            return
        if not (counted or promised):
            attempt_metrics(record, status.timings)
            observe(record)

    def settled(self, context: Context, waited_try: int, status: RequestStatus) -> None:
        """An earlier try's request found succeeded: that try's trigger ended the task with it
        (the trigger cannot write the task state store, which still says the try waited on it).
        Its record, marked cancelled by :meth:`_earlier_tries`, takes its true end."""
        from airflow_provider_dws.triggers.submit import is_pending, renamed

        adapter = self.loop.adapter
        try:
            known = self._known(context)
            record = next(
                (
                    r
                    for r in known
                    if r.request_name == status.name
                    or (r.try_number == waited_try and is_pending(r.request_name))
                ),
                None,
            )
            if record is None:
                return
            url = adapter.record_facts(status, self.loop.op.home_placement()).get("console_url")
            ended = status.ended_record(renamed(record, status, url), success=True, target=adapter.target)
            self._records = [r for r in known if r is not record]
            self._push(context, ended)
        except Exception:
            self.loop.log.warning("Could not write the request record of %s", status.name, exc_info=True)

    def killed(self, name: str, message: str) -> None:
        """The worker was killed or timed out while ``name`` was live (the loop cancelled it): its
        record ends here, since the task will not come back to write it."""
        context = self._context
        record = self._find(context, name) if context is not None else None
        if context is None or record is None or not record.live:
            return
        try:
            self._push(
                context, end_record(record, phase="cancelled", message=message, at=datetime.now(timezone.utc))
            )
        except Exception:
            self.loop.log.warning("Could not write the request record of %s", name, exc_info=True)


@dataclass(frozen=True)
class ReleasedApi:
    """How a release task's records describe its API's requests (given by each release).

    :param api: the record's ``api`` for a request its setup left no record of.
    :param kind: the record's ``kind`` for such a request.
    :param location_of: a request's region or zone, from its name.
    :param held_states: the API states in which a request holds capacity.
    """

    api: str
    kind: str
    location_of: Callable[[str], str]
    held_states: Collection[str]


def _unknown_window(name: str) -> tuple[datetime | None, datetime | None]:
    return None, None


@dataclass(frozen=True)
class Released:
    """What one release task gave back.

    :param requests: (name, state before the release) of each request.
    :param records_of: the tasks whose records describe the requests (``None``: the setup; a later
        one's record wins: a wait that saw a calendar block delivered after its reserve).
    :param held_between: when the API says a request began and stopped holding capacity (a
        calendar block's start, and its end if that came before the release), ``None`` where it
        does not know.
    :param kept: those of ``requests`` the API would not let go (a delivered calendar block, until
        its end): recorded as held since they began, so the page shows them held, not released.
    """

    requests: Sequence[tuple[str, str]]
    records_of: Sequence[str] | None = None
    held_between: Callable[[str], tuple[datetime | None, datetime | None]] = _unknown_window
    kept: Collection[str] = ()


def record_release(op: Any, context: Context, api: ReleasedApi, released: Released) -> None:
    """Records of the capacity a release task gave back (TPU slices, flex-start VMs, calendar
    blocks, GKE nodes), in the release task's own ``dws_requests``.

    Each is the setup's record of that request (same ``request_name``) with ``holds=False``, its
    ``released`` time and a final phase; a reader merges both, the latest write winning.
    """
    if not released.requests:
        return
    try:
        sources = released.records_of
        if sources is None:
            sources = [op.setup_task_id] if op.setup_task_id else []
        known = {r.request_name: r for task_id in sources for r in pull_records(context, task_id)}
        # A release never defers: its try began with its XComs deleted, so it has no records yet.
        own: list[RequestRecord] = []
        released_at = datetime.now(timezone.utc)
        for name, state in released.requests:
            began, until = released.held_between(name)
            record = known.get(name) or RequestRecord(
                api=api.api,
                kind=api.kind,
                project=resolve_project(op),
                location=api.location_of(name),
                request_name=name,
                phase="running" if state in api.held_states else "waiting",
                try_number=_try_number(context),
            )
            holds_now = state in api.held_states
            if name in released.kept:
                record = _kept(record, holds_now, began, until)
            else:
                record = _given_back(
                    record, holds_now, began, min(released_at, until) if until is not None else released_at
                )
            own = read_records(upsert(own, record))
        context["ti"].xcom_push(key=XCOM_KEY, value=[r.to_dict() for r in own])
    except Exception:
        op.log.warning("Could not write the request records of the released capacity", exc_info=True)


def _kept(
    record: RequestRecord, holds_now: bool, began: datetime | None, until: datetime | None
) -> RequestRecord:
    """A request the API would not let go: held (since it began) until ``until``, not released."""
    held_from = iso(began) if began is not None else record.held_since
    return replace(
        record,
        phase="running" if holds_now else record.phase,
        holds=holds_now,
        started=record.started or held_from,
        held_since=record.held_since or held_from,
        ended=None,
        released=None,
        # Kept until its end: held there no more, whoever releases it.
        held_until=iso(until) if until is not None else record.held_until,
    )


def _given_back(
    record: RequestRecord, holds_now: bool, began: datetime | None, now: datetime
) -> RequestRecord:
    """A request released ``now``: succeeded if it held capacity, else cancelled; and its metrics."""
    held = record.holds or record.phase == "running" or holds_now
    if held and began is not None:
        record = replace(
            record,
            started=record.started or iso(began),
            held_since=record.held_since or iso(began),
            ended=None,
        )
    record = replace(
        record,
        phase="succeeded" if held else ("cancelled" if record.phase == "waiting" else record.phase),
        outcome=record.outcome or ("succeeded" if held else "cancelled"),
        holds=False,
        ended=record.ended or iso(now),
        released=iso(now),
    )
    since = parse_time(record.held_since)
    if held and since is not None:
        end_metrics(record, None, max(0.0, (now - since) / timedelta(seconds=1)))
    elif record.phase == "cancelled":
        end_metrics(record, None, None)
    return record
