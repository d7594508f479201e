"""Workloads on a calendar block's reservation: the parameters every consumer shares and their checks.

A consumer runs on a delivered calendar block instead of Flex Start: a Vertex AI job
(:class:`~airflow_provider_dws.operators.vertex_ai.CreateVertexAIReservedJobOperator`), a Cloud Batch
job (:class:`~airflow_provider_dws.operators.batch.CreateBatchReservedJobOperator`), Compute Engine VMs
(:class:`~airflow_provider_dws.operators.compute.CreateComputeReservedVMsOperator`) or a TPU slice
(:class:`~airflow_provider_dws.operators.tpu.CreateTPUQueuedResourceOperator` with a block). It names
its block in one of two ways, exactly one:

* ``block_task_id``: a ``ReserveCalendarBlockOperator`` or ``WaitForCalendarBlockOperator`` task of
  the same DAG run (its XCom names the block), the usual way;
* ``reservation`` (templated): a future reservation's full name
  (``projects/P/zones/Z/futureReservations/N``) or its reservation's
  (``projects/P/zones/Z/reservations/R``; Cloud TPU's ``projects/P/locations/Z/reservations/R`` too),
  e.g. from the asset event a WaitFor task emits.

Where it runs follows the reservation (its zone or region: leave the location out, or give the same;
another one is refused at parse time when both are literal, the reservation's zone named by
``reservation`` or by the DAG's block tasks); failover makes no sense on a reservation and is refused. Started before the delivery, it waits for it,
deferred. A workload whose ``max_run`` would carry it past the block's end is refused when it is
submitted (or at parse time, when the block's length is known then), unless
``allow_past_block_end=True``. When the block ends, the service stops what runs on it: the task fails
with :class:`~airflow_provider_dws.exceptions.CapacityRevokedError`, not as a workload failure.
The when-it-runs half is :mod:`airflow_provider_dws.runtime.reserved`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws.operators.checks import (
    Check,
    flag,
    matches,
    non_empty_str,
    run_checks,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.runtime.reserved import Block

#: A reservation's or a future reservation's full name (Compute Engine's spelling, or Cloud TPU's).
RESERVATION_REF = (
    r"projects/[^/\s]+/(?:zones|locations)/[a-z]+(?:-[a-z]+)+[0-9]+-[a-z]/"
    r"(?:reservations|futureReservations)/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
)
BLOCK_CHECKS = (
    Check("block_task_id", non_empty_str, "must be a task id", optional=True),
    Check(
        "reservation",
        matches(RESERVATION_REF),
        "must be a reservation's or a future reservation's full name "
        "('projects/<project>/zones/<zone>/reservations/<name>' or '.../futureReservations/<name>')",
        templated=True,
        optional=True,
    ),
    flag("allow_past_block_end"),
)


def block_checks(checks: tuple[Check, ...], api: str) -> tuple[Check, ...]:
    """A Flex Start operator's ``checks`` for its block-consuming sibling: the region optional (the
    block's reservation decides it), and the block's own checks."""
    from airflow_provider_dws import facts

    region = Check(
        "region",
        matches(facts.REGION_PATTERN),
        f"must be a {api} region such as 'us-central1'",
        templated=True,
        optional=True,
    )
    return (*(c for c in checks if c.name != "region"), region, *BLOCK_CHECKS)


class BlockConsumer:
    """Mixed into a request operator (first among its bases): run it on a calendar block.

    The subclass lists :data:`BLOCK_CHECKS` in its ``CHECKS``, calls :meth:`init_block` at the end
    of ``__init__`` and names the parameter its placement is (:attr:`LOCATION_FIELD`).
    """

    block_task_id: str | None = None
    reservation: str | None = None
    allow_past_block_end: bool = False
    _block: Block | None = None
    #: The parameter that says where the workload runs (``region`` or ``zone``): the block's.
    LOCATION_FIELD: ClassVar[str] = "region"

    # Provided by the operator this is mixed into.
    task_id: str
    _param_error: Any

    @property
    def on_block(self) -> bool:
        """Whether the operator runs on a calendar block."""
        return self.block_task_id is not None or self.reservation is not None

    def init_block(
        self,
        block_task_id: str | None,
        reservation: str | None,
        allow_past_block_end: bool,
        *,
        required: bool = True,
        failover: Any = None,
    ) -> None:
        """Take the block's parameters and check them (and what cannot go with them) at parse time.

        ``failover``: the operator's, when it was kept from its policies to be refused here first."""
        self.block_task_id = block_task_id
        self.reservation = reservation
        self.allow_past_block_end = allow_past_block_end
        if (block_task_id is not None and reservation is not None) or (required and not self.on_block):
            raise self._param_error(
                "pass exactly one of block_task_id (the Reserve or WaitFor task of the block) and "
                "reservation (its full name)"
            )
        run_checks(self, BLOCK_CHECKS, rendered=False)
        if self.on_block:
            # What a block cannot go with loads only for a DAG that names one.
            from airflow_provider_dws.operators.block_params import check_block

            check_block(self, allow_past_block_end, failover)

    def block_run_for(self) -> timedelta | None:
        """How long the workload may run once started (``max_run``), checked against the block's end."""
        run_for = getattr(self, "max_run", None)
        return run_for if isinstance(run_for, timedelta) else None

    def use_block(self, block: Block) -> None:
        """Run on ``block``: the location follows its reservation (given, it must be the same)."""
        from airflow_provider_dws.runtime.reserved import follow_block

        follow_block(self, block)

    # -- entry points -----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """On a block: find it, wait for its delivery if needed, then run on it."""
        if not self.on_block:
            return super().execute(context)  # type: ignore[misc]
        from airflow_provider_dws.runtime.reserved import run_on_block

        self.prepare_for_execution_checks()  # type: ignore[attr-defined]
        self.check_parameters(rendered=True)  # type: ignore[attr-defined]
        return run_on_block(self, context)

    def block_delivered(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Back from the wait for the block's delivery: submit on it, or fail saying why not."""
        from airflow_provider_dws.runtime.reserved import delivered

        return delivered(self, context, event)

    def resume_attempt(self, context: Context, event: Any = None, **kwargs: Any) -> Any:
        """Back from a wait for a window or a backoff: on the same block."""
        self._restore(context)
        return super().resume_attempt(context, event, **kwargs)  # type: ignore[misc]

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The workload ended (or reached its target): on the same block."""
        self._restore(context)
        return super().complete_attempt(context, event, **kwargs)  # type: ignore[misc]

    def _restore(self, context: Context) -> None:
        if self.on_block:
            from airflow_provider_dws.runtime.reserved import restore_block

            restore_block(self, context)
