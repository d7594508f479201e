"""What one DWS API adds to the shared attempt loop: its request, its name, its result, its release."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, TypeVar

from airflow_provider_dws.backends.base import BackendCache
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.phases import Phase

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.base import DwsRequestOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

_Op = TypeVar("_Op", bound="DwsRequestOperator")
_Backend = TypeVar("_Backend")


class Found(NamedTuple):
    """A request of this task instance found live or succeeded: adopt it instead of submitting."""

    status: RequestStatus
    placement: Placement
    attempt: int


class RequestAdapter(Generic[_Op, _Backend]):
    """The per-API steps of :class:`~airflow_provider_dws.runtime.loop.AttemptLoop`.

    The loop decides (window, deadline, adopt or submit, retry, fail over, give up); an adapter
    only knows its API: how to find this task instance's requests, build and submit one, what
    the wait waits for (:attr:`target`), what the task returns, how to release, and which
    exception an unsuccessful end is. One adapter is built per task run, holding the operator
    (its parameters, already rendered) and the backends it uses, one per location.
    """

    #: What the wait waits for: ``"end"`` (the workload ran and ended), ``"running"`` (the
    #: capacity is held and handed to later tasks, e.g. a TPU slice) or ``"provisioning"`` (the
    #: capacity is promised for later, e.g. a calendar block approved, or already held).
    target: ClassVar[str] = "end"
    #: How long a request may still wait past its max wait before the trigger cancels it: ``None``
    #: leaves time for an API that expires requests itself (the trigger's default); an API with no
    #: max wait of its own sets ``timedelta(0)``.
    wait_grace: ClassVar[timedelta | None] = None
    #: Whether this task owns its requests, and its trigger may give them up (on a kill, at the
    #: task's deadline, at the max wait); False for a task that follows another task's request.
    releases: ClassVar[bool] = True
    #: The XCom key under which the task pushes the name of the request it adopted or submitted (a
    #: release, a consumer or a later step reads it).
    name_key: ClassVar[str] = "request_name"

    #: Whether a deferrable task hands its request to the trigger to make (:meth:`request_spec`,
    #: the backend's ``submit_spec``): the worker then imports no client library.
    submits_in_trigger: ClassVar[bool] = False
    #: The longest one request may wait in its API (``None``: as long as the user asks). A longer
    #: max wait is kept by the loop: it asks again, within that max wait, when the API gives up.
    api_max_wait: ClassVar[timedelta | None] = None
    #: The shortest wait worth a request (asking again with less left is not done).
    min_wait: ClassVar[timedelta] = timedelta(seconds=1)
    #: Keys of the return value also pushed as XComs of their own (a workload task templates
    #: ``task.output["key"]``); a trigger that ends the task pushes them too.
    result_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, operator: _Op) -> None:
        self.op = operator
        self._backends = BackendCache()

    def deferral_note(self) -> str:
        """What the deferral's log line adds of the request (``"; ..."``), where its trigger makes
        it and the line is all the task log says of it before it ends."""
        return ""

    @property
    def log(self) -> Any:
        """The task's logger (lines land in the task log)."""
        return self.op.log

    # -- provided per API ------------------------------------------------------------------------

    def backend(self, location: str | None = None) -> _Backend:
        """The backend for ``location`` (default: the operator's own), built once per task."""
        raise NotImplementedError

    def location_of(self, name: str) -> str:
        """The region or zone a request's full name lives in."""
        raise NotImplementedError

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's request (``identity`` carries the attempt) or adopt the one a lost
        reply made."""
        raise NotImplementedError

    def makes_in_trigger(self) -> bool:
        """Whether this task's trigger makes its request (default :attr:`submits_in_trigger`; an
        adapter whose operator may need the worker's path for some settings says so here)."""
        return self.submits_in_trigger

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The request of this attempt as JSON, for the trigger to make (with
        :attr:`submits_in_trigger`); built without the client library."""
        raise NotImplementedError

    def lookup(self, context: Context, identity: RequestIdentity, first: Placement) -> list[dict[str, Any]]:
        """Where the trigger that makes the request looks this task instance's requests up: one
        entry per location it may use (its backend's spec and the placement), ``first``'s first,
        where a new request is made."""
        places = {first.location: first}
        for placement in self.op.placements():
            places.setdefault(placement.location, placement)
        return [
            {"backend_spec": self.backend(loc).spec(), "placement": placement.to_dict()}  # type: ignore[attr-defined]
            for loc, placement in places.items()
        ]

    def announce(self) -> dict[str, Any]:
        """What the trigger that makes the request pushes for the task: the XCom key of its name,
        and of its console link with the link's URL (``{location}`` and ``{id}`` left to fill)."""
        return {"name_key": self.name_key}

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The task's return value once the request gave what the task needs."""
        raise NotImplementedError

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without success."""
        raise NotImplementedError

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """What the request record (:class:`~airflow_provider_dws.records.RequestRecord`) says of
        this API's request in ``placement``: ``kind`` (a label such as "Vertex AI custom job"),
        ``accelerator_type``, ``accelerator_count`` (over every replica, VM or chip),
        ``machine_type``, ``pricing_model`` and ``console_url``; the loop adds the rest."""
        raise NotImplementedError

    def persist_link(self, context: Context, status: RequestStatus) -> str | None:
        """Store the request's console link for the task (``links``); its URL, if there is one."""
        return None

    # -- shared defaults -------------------------------------------------------------------------

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The live or succeeded request of any attempt of this task instance, to adopt. Default: one
        list per location the task may have used (its placements), the choice of
        :func:`~airflow_provider_dws.scheduling.reattach.choose_existing` (a live request, newest
        first, else a success); an API that keeps ended requests to delete, or names its requests
        by attempt, finds its own way."""
        from airflow_provider_dws.scheduling.policies import Placement
        from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing

        placements: dict[str, Placement] = {}
        for placement in self.op.placements():
            placements.setdefault(placement.location, placement)
        found: dict[str, RequestStatus] = {}
        for location in placements:
            backend: Any = self.backend(location)
            found.update({status.name: status for status in backend.find(identity)})
        decision = choose_existing([Candidate(n, s.phase, s.timings.submitted) for n, s in found.items()])
        self.log.info("%s", decision.describe(identity.describe()))
        if decision.name is None:
            return None
        status = found[decision.name]
        location = self.location_of(status.name)
        self.remember(context, status)
        placement = placements.get(location) or Placement(location=location)
        return Found(status, placement, int(status.details.get("attempt") or 1))

    def remember(self, context: Context, status: RequestStatus, announced: bool = False) -> None:
        """The request this task now waits on: its name pushed under :attr:`name_key`, its console
        link stored and logged; ``announced``: its trigger pushed both, this run only notes the link."""
        from airflow_provider_dws.console import pushed_by_trigger

        if announced:
            with pushed_by_trigger():
                url = self.persist_link(context, status)
        else:
            context["ti"].xcom_push(key=self.name_key, value=status.name)
            url = self.persist_link(context, status)
        if url:
            self.log.info("Console: %s", url)

    def delete_ended(self) -> None:
        """Delete ended requests the last :meth:`find` saw, if the API keeps them listed."""

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Leave nothing behind after an attempt that ended without success (default: nothing)."""

    def kept_after_failed_wait(self, status: RequestStatus) -> str | None:
        """Why a request whose wait failed on the task's last try is left as it is (``None``: it
        is cancelled, as nobody will use what it waits for or holds). Default: a workload that is
        already running (``target="end"``) goes on, billed as it would have been anyway."""
        if self.target == "end" and status.phase is Phase.RUNNING:
            return "its workload is running"
        return None

    def advise(self, placements: Sequence[Placement]) -> list[tuple[Placement, float]] | None:
        """``placements`` with their capacity-advice scores, most obtainable first (``None``, the
        default: this API gives no advice). Raises what the advice call raises."""
        return None

    def no_retry(self, status: RequestStatus) -> str | None:
        """Why an attempt that ended without capacity must not be retried whatever
        ``capacity_retry`` allows (``None``, the default: the retry policy decides)."""
        return None

    def ended(self, context: Context, status: RequestStatus) -> None:
        """Note an attempt's end in the task log (before the loop decides what comes next)."""
        self.log.info("%s", status.end_line())

    def release_or_keep(self, name: str) -> str | None:
        """Release one request by name from the worker (cancel or delete; an ended or gone one is
        fine), or keep it: returns why it was kept (``None``: released, or nothing left)."""
        self.backend(self.location_of(name)).release(name)  # type: ignore[attr-defined]
        return None

    def wait_deadline(self, status: RequestStatus, max_wait: timedelta) -> datetime:
        """When a request still waiting for capacity is given up (its max wait from submission)."""
        return (status.timings.submitted or datetime.now(timezone.utc)) + max_wait

    def cached_backend(self, cls: type[_Backend], location: str) -> _Backend:
        """``cls(project, location, connection, impersonation chain)``, built once per task."""
        op = self.op
        return self._backends.get(cls, resolve_project(op), location, op.gcp_conn_id, op.impersonation_chain)
