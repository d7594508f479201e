"""Workloads on a calendar block's reservation, when the task runs: which block a consumer names,
the wait for its delivery, the end-of-block check, and what every reserved adapter adds to its API's
(the record names the reservation; a revoked reservation is its own error).

A consumer names its block by ``block_task_id`` (a Reserve or WaitFor task of the same DAG run, read
from its XCom) or ``reservation`` (a future reservation's or a reservation's full name). The block
found is kept in the consumer's own XCom (:data:`BLOCK_KEY`), so a resumed task reads it back
without an API call. A block not delivered yet is waited for through the shared trigger on the
calendar backend (one list of the zone per interval for every wait there), with
``cancel_on_kill=False`` and no max wait: a consumer never gives up, nor cancels, its block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.calendar import FutureReservationBackend, future_reservation_status
from airflow_provider_dws.backends.calendar_block import (
    block_shape,
    block_window,
    parse_future_reservation_name,
    parse_reservation_name,
)
from airflow_provider_dws.exceptions import BadRequestError, CapacityRevokedError, RequestCancelledError
from airflow_provider_dws.records import ON_BLOCK_PRICING
from airflow_provider_dws.runtime.task import pulled, resolve_project, wait_for_event
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

#: The consumer's own XCom: the block it runs on (:meth:`Block.to_dict`).
BLOCK_KEY = "dws_block"
#: The method a consumer resumes in once its block is delivered.
DELIVERED_METHOD = "block_delivered"


@dataclass(frozen=True)
class Block:
    """The reservation a consumer runs on, and the calendar block that delivers it (if known)."""

    reservation: str  # projects/P/zones/Z/reservations/R
    future_reservation: str | None = None  # None: a reservation no block of this provider made
    start: str | None = None  # ISO 8601, UTC
    end: str | None = None
    machine_type: str | None = None  # GPU blocks: the machine every VM on it has
    tpu_version: str | None = None  # TPU blocks: v5e, v5p, v6e

    @property
    def project(self) -> str:
        return parse_reservation_name(self.reservation)[0]

    @property
    def zone(self) -> str:
        return parse_reservation_name(self.reservation)[1]

    @property
    def name(self) -> str:
        """The reservation's short name (a Compute Engine template's affinity value)."""
        return parse_reservation_name(self.reservation)[2]

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    @property
    def tpu_reservation(self) -> str:
        """The reservation as Cloud TPU names it (a queued resource's ``reservation_name``)."""
        return f"projects/{self.project}/locations/{self.zone}/reservations/{self.name}"

    @property
    def ends(self) -> datetime | None:
        return datetime.fromisoformat(self.end) if self.end else None

    def describe(self) -> str:
        """``reservation R of block F (until END)``."""
        of = f" of block {self.future_reservation}" if self.future_reservation else ""
        until = f" (until {self.end})" if self.end else ""
        return f"reservation {self.reservation}{of}{until}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Block | None:
        if not isinstance(data, dict) or not isinstance(data.get("reservation"), str):
            return None
        known = {k: data.get(k) for k in cls.__dataclass_fields__}
        return cls(**known)  # type: ignore[arg-type]


def _reservation_path(value: str) -> str:
    """``projects/P/zones/Z/reservations/R`` of any spelling a consumer may give (a URL, TPU's
    ``locations/``)."""
    value = value.split("/compute/v1/", 1)[-1].replace("/locations/", "/zones/", 1)
    project, zone, name = parse_reservation_name(value)
    return f"projects/{project}/zones/{zone}/reservations/{name}"


def _from_future_reservation(fr: Any, name: str) -> Block:
    where = parse_future_reservation_name(name)
    start, end = block_window(fr)
    shape = block_shape(fr)
    delivered = [_reservation_path(r) for r in fr.status.auto_created_reservations]
    reservation = delivered[0] if delivered else None
    if reservation is None:
        # Before delivery the reservation is known by the name the block gives it.
        short = fr.reservation_name or where.future_reservation
        reservation = f"projects/{where.project}/zones/{where.zone}/reservations/{short}"
    return Block(
        reservation=reservation,
        future_reservation=name,
        start=start.isoformat() if start else None,
        end=end.isoformat() if end else None,
        machine_type=shape.machine_type if shape else None,
        tpu_version=shape.tpu_version if shape else None,
    )


def _backend(op: Any, zone: str, project: str | None = None) -> FutureReservationBackend:
    return FutureReservationBackend(
        project or resolve_project(op), zone, op.gcp_conn_id, op.impersonation_chain
    )


def _named_block(op: Any, context: Context) -> str | Block:
    """The future reservation a consumer names (its full name), or the reservation when that is what
    it names (a :class:`Block` without its block, found next)."""
    if op.block_task_id is not None:
        pushed = pulled(context, op.block_task_id)
        name = pushed.get("future_reservation") if isinstance(pushed, dict) else None
        name = name or pulled(context, op.block_task_id, roles.FUTURE_RESERVATION_NAME_KEY)
        if not isinstance(name, str) or not name:
            raise op._param_error(
                f"task {op.block_task_id!r} left no calendar block in this DAG run (block_task_id names a "
                "ReserveCalendarBlockOperator or WaitForCalendarBlockOperator task, upstream of this one)"
            )
        return name
    ref = str(op.reservation)
    if "/futureReservations/" in ref:
        return ref
    return Block(reservation=_reservation_path(ref))


def find_block(op: Any, context: Context) -> tuple[Block, RequestStatus | None]:
    """The consumer's block, read now, and its status (``None``: a reservation no block delivers, or a
    block that is gone)."""
    named = _named_block(op, context)
    if isinstance(named, str):
        where = parse_future_reservation_name(named)
        backend = _backend(op, where.zone, where.project)
        fr = backend.get(named)
        if fr is None:
            raise RequestCancelledError(
                f"the calendar block {named} no longer exists (released, or deleted outside this task): "
                "nothing to run on"
            )
        return _from_future_reservation(fr, named), future_reservation_status(fr, named)
    # A reservation: ReserveCalendarBlockOperator names a block and its reservation alike.
    backend = _backend(op, named.zone, named.project)
    fr = backend.get(backend.name_of(named.name))
    if fr is not None and (fr.reservation_name or named.name) == named.name:
        name = backend.name_of(named.name)
        return _from_future_reservation(fr, name), future_reservation_status(fr, name)
    if backend.get_reservation(named.reservation) is None:
        raise BadRequestError(
            f"the reservation {named.reservation} does not exist, and no calendar block of "
            f"{named.zone} is named after it (name the block: reservation='projects/P/zones/Z/futureReservations/N')"
        )
    op.log.info(
        "%s is not a calendar block's: it is consumed as it is (no wait for delivery, no end check)",
        named.reservation,
    )
    return named, None


def follow_block(op: Any, block: Block) -> None:
    """The consumer's ``use_block``: its location follows the block's reservation (given, it must be
    the same, or the task fails), and the block is the one it runs on."""
    field = op.LOCATION_FIELD
    wanted = block.region if field == "region" else block.zone
    given = getattr(op, field)
    if given is None:
        setattr(op, field, wanted)
    elif given != wanted:
        raise BadRequestError(
            f"{type(op).__name__} {op.task_id!r}: {field} {given!r} is not where its {block.describe()} "
            f"is ({wanted}); a workload runs where its reservation is (leave {field} out to follow it)"
        )
    op._block = block


def use_block(op: Any, context: Context, block: Block) -> None:
    """Run the consumer on ``block``: its placement follows the reservation, and it is kept in the
    consumer's XCom for the task's later steps."""
    op.use_block(block)
    try:
        context["ti"].xcom_push(key=BLOCK_KEY, value=block.to_dict())
    except Exception:  # read again from the API when it cannot be kept
        op.log.warning("Could not keep the block in XCom", exc_info=True)


def restore_block(op: Any, context: Context) -> Block:
    """The block the consumer found earlier in this try (its XCom), else found again."""
    if op._block is not None:
        return op._block
    ti = context["ti"]
    kept = Block.from_dict(pulled(context, ti.task_id, BLOCK_KEY))
    block = kept if kept is not None else find_block(op, context)[0]
    op.use_block(block)
    return block


def run_on_block(op: Any, context: Context) -> Any:
    """Find the block; wait for its delivery if it is not delivered yet; then run the attempt loop,
    which submits the workload on the delivered reservation (or adopts the one a retry left)."""
    block, status = find_block(op, context)
    use_block(op, context, block)
    if status is None or status.phase is Phase.RUNNING:
        if status is not None:
            op.log.info("Running on %s: delivered", block.describe())
        return op.attempt_loop().run(context)
    if status.phase in (Phase.WAITING, Phase.PROVISIONING):
        return _wait_for_delivery(op, context, block, status)
    raise unusable(block, status)


def _wait_for_delivery(op: Any, context: Context, block: Block, status: RequestStatus) -> Any:
    from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

    assert block.future_reservation is not None
    backend = _backend(op, block.zone, block.project)
    timeout_at = op.attempt_loop().timeout_at(context)
    trigger = CapacityRequestTrigger(
        kind=backend.kind,
        backend_spec=backend.spec(),
        request_name=block.future_reservation,
        poll_interval=float(op.poll_interval),
        wait_deadline=None,  # a consumer never gives its block up (the reserve's max wait does)
        cancel_on_kill=False,  # nor cancels it: the block is the reserve's, and other tasks use it
        target="running",
        task_deadline=timeout_at.isoformat() if timeout_at else None,
    )
    op.log.info(
        "%s is %s [%s]: waiting for its delivery (from %s), then this task submits its workload on it",
        block.describe(),
        "approved" if status.phase is Phase.PROVISIONING else "not approved yet",
        status.state,
        block.start or "its start",
    )
    event = wait_for_event(op, trigger, DELIVERED_METHOD)
    return delivered(op, context, event)


def delivered(op: Any, context: Context, event: dict[str, Any] | None) -> Any:
    """Back from the wait for delivery: run on the block, or say why it cannot be used."""
    from airflow_provider_dws.compat import AirflowTaskTimeout

    if not event:
        return run_on_block(op, context)
    status = RequestStatus.from_event(event)
    if status.outcome.failure is FailureKind.TIMED_OUT:
        raise AirflowTaskTimeout(
            f"execution_timeout passed while waiting for the block: {status.outcome.message}"
        )
    if status.phase is not Phase.RUNNING:
        block = restore_block(op, context)
        raise unusable(block, status)
    block, _ = find_block(op, context)  # read again: delivered now, under its delivered name
    use_block(op, context, block)
    op.log.info("%s is delivered: submitting the workload on it", block.describe())
    return op.attempt_loop().run(context)


def unusable(block: Block, status: RequestStatus) -> Exception:
    """Why a workload cannot run on a block that is neither delivered nor coming."""
    if status.phase is Phase.SUCCEEDED:
        return CapacityRevokedError(
            f"the calendar block {status.name} ended at {block.end}: its {block.describe()} and everything "
            "on it were deleted; nothing can run on it"
        )
    from airflow_provider_dws.runtime.calendar import block_error

    return block_error(status, timedelta(0))


def check_fits(op: Any, block: Block, now: datetime | None = None) -> None:
    """Refuse a workload that would run past the block's end (now + its max run), unless
    ``allow_past_block_end``: the service stops it there, so it could not finish."""
    run_for, ends = op.block_run_for(), block.ends
    if run_for is None or ends is None or op.allow_past_block_end:
        return
    now = now or datetime.now(timezone.utc)
    if now + run_for <= ends:
        return
    left = max(ends - now, timedelta(0))
    raise BadRequestError(
        f"{type(op).__name__} {op.task_id!r}: max_run {run_for} from now ends at "
        f"{(now + run_for).replace(microsecond=0).isoformat()}, past the end of its {block.describe()}, "
        f"when the block and everything on it are deleted; {timedelta(seconds=int(left.total_seconds()))} "
        "is left: shorten max_run, or pass allow_past_block_end=True to run it until the block ends"
    )


def check_machine(op: Any, block: Block, machine_type: str | None) -> None:
    """Refuse a GPU workload whose machine type is not the block's (the API would refuse it too)."""
    if block.machine_type and machine_type and machine_type != block.machine_type:
        raise BadRequestError(
            f"{type(op).__name__} {op.task_id!r}: its VMs are {machine_type}, but {block.describe()} holds "
            f"{block.machine_type} VMs: a workload on a reservation uses its machine type"
        )


class ReservedSteps:
    """What a reserved adapter adds to its API's adapter (put it first among the bases): the end
    check before each submit, the reservation in the record, and a revoked reservation's error. An
    operator that names no block (the TPU operator's ordinary use) passes through unchanged."""

    op: Any

    @property
    def block(self) -> Block | None:
        """The block the operator runs on (``None``: none named)."""
        return self.op._block if self.op.on_block else None

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Check the block's end first (a capacity retry is checked again, later)."""
        if self.block is not None:
            check_fits(self.op, self.block)
        return super().submit(context, identity, placement, max_wait)  # type: ignore[misc,no-any-return]

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The API's facts, with the reservation it runs on and its pricing: ``reservation`` (the block,
        priced as ``calendar`` in its own record, pays for these hours)."""
        facts: dict[str, Any] = super().record_facts(status, placement)  # type: ignore[misc]
        if self.block is not None:
            facts.update(pricing_model=ON_BLOCK_PRICING, reservation=self.block.reservation)
        return facts

    def over(self) -> bool:
        """Whether the block's end has passed (its reservation is gone, or going)."""
        ends = self.block.ends if self.block is not None else None
        return ends is not None and datetime.now(timezone.utc) >= ends

    def no_retry(self, status: RequestStatus) -> str | None:
        """No new request on a block that ended: it could only wait on a reservation that is gone.
        Told by the error's words (PREEMPTED) or, since Google documents no error code for it, by
        the block's end time alone."""
        block = self.block
        if block is not None and (status.outcome.failure is FailureKind.PREEMPTED or self.over()):
            return f"its {block.describe()} has ended; a new request would wait on a reservation that is gone"
        return super().no_retry(status)  # type: ignore[misc,no-any-return]

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """A workload whose reservation ended: capacity revoked, with the block's end (told by the
        error's words, or by a failure without capacity after the block's end)."""
        failure = status.outcome.failure
        if self.block is not None and (
            failure is FailureKind.PREEMPTED or (failure is FailureKind.CAPACITY_NOT_OBTAINED and self.over())
        ):
            message = status.outcome.message
            return CapacityRevokedError(
                f"{status.name} was stopped: its {self.block.describe()} ended (capacity revoked, not a "
                f"workload failure){': ' + message if message else ''}"
            )
        return super().error(status, placement, max_wait)  # type: ignore[misc,no-any-return]
