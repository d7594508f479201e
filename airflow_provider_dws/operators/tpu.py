"""Ask DWS for a Cloud TPU slice through a queued resource (the release is in :mod:`.tpu_release`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.facts import MAX_WAIT_LIMIT
from airflow_provider_dws.links import TPUQueuedResourceLink
from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    QUEUED_RESOURCE_ID_CHECK,
    WAIT_CHECKS,
    ZONE_CHECK,
    DwsQueuedRequestOperator,
)
from airflow_provider_dws.operators.checks import Check, duration, flag, int_in, matches, non_empty_str
from airflow_provider_dws.operators.reserved import BLOCK_CHECKS, BlockConsumer

__all__ = ["CreateTPUQueuedResourceOperator"]

from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.reserved import Block
    from airflow_provider_dws.scheduling.policies import Placement

MAX_SLICES = facts.MAX_SLICES
_RESERVATION = r"projects/[^/\s]+/locations/[^/\s]+/reservations/[^/\s]+"


def check_accelerator(op: Any, value: Any, is_unrendered: Any = lambda _: False) -> None:
    """Say why ``value`` is not a TPU type and slice size Cloud TPU offers (the catalog's table)."""
    if is_unrendered(value):
        return
    from airflow_provider_dws import catalog

    split = catalog.split_tpu_type(value)
    if split is None:
        raise op._param_error(
            f"accelerator_type must be one of {catalog.tpu_type_examples()} (e.g. 'v5litepod-16'), got {value!r}"
        )
    family, size = split
    if not family.accepts(size):
        raise op._param_error(
            f"accelerator_type {value!r} is not a {family.name} slice Cloud TPU offers: "
            f"the sizes are {family.describe_sizes()}"
        )


class CreateTPUQueuedResourceOperator(BlockConsumer, DwsQueuedRequestOperator):
    """Ask Dynamic Workload Scheduler for a Cloud TPU slice; finish when it is ACTIVE.

    Creates a queued resource (or reattaches to this task instance's own: its id is derived from
    (dag_id, task_id, run_id, map_index), so a retry or a re-run worker finds it and ALREADY_EXISTS
    never makes a second one), defers while it waits for capacity, and returns the node names,
    IP addresses and accelerator details through XCom once the slice is ACTIVE. The slice is
    billed from then on: release it with :class:`DeleteTPUQueuedResourceOperator` used as an
    Airflow teardown (``setup >> work >> teardown.as_teardown(setups=setup)``), so it is released
    even when the work fails.

    If capacity is not obtained within ``max_wait`` (the queueing policy's valid-until), the
    failed request is deleted, so nothing is left behind, and
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` is raised.

    :param zone: Cloud TPU zone, e.g. ``us-west4-a`` (templated).
    :param accelerator_type: e.g. ``v5litepod-16``, ``v5p-8``, ``v6e-8`` (templated).
    :param runtime_version: TPU software version, e.g. ``v2-alpha-tpuv5-lite`` (templated).
    :param queued_resource_id: id of the request; default ``dws-<task>-<hash of the task
        instance>`` (templated). A custom id must be unique per task instance.
    :param node_count: slices; more than 1 makes a multislice request (1 to 256).
    :param spot: ask for spot capacity (cheaper, can be preempted).
    :param guaranteed: ask for guaranteed capacity. At most one of ``spot``/``guaranteed``.
    :param reservation_name: ``projects/P/locations/ZONE/reservations/NAME`` to consume.
    :param block_task_id: run on a calendar block instead: the Reserve or WaitFor task of the block,
        in this DAG; or :param reservation: the block's future reservation or reservation, by full
        name (templated). Its reservation becomes ``reservation_name``; ``zone`` may then be left out
        (it is the reservation's); a task started before the block is delivered waits for it,
        deferred, then creates the queued resource on it; no spot, no failover. A request stopped by
        the block's end fails with :class:`~airflow_provider_dws.exceptions.CapacityRevokedError`
        (see :mod:`airflow_provider_dws.operators.reserved`).
    :param valid_after: do not provision before this long after creation (e.g. an off-peak start).
    :param provisioning_model: ``"flex_start"`` for Cloud TPU flex-start (Preview, TPU v5e and v6e):
        the slice runs for ``max_run`` (at most 7 days), then Cloud TPU deletes its VMs and the
        queued resource is ``SUSPENDED``; on preemptible quota, with no tier and no reservation.
        Made through the ``v2alpha1`` API (google-api-python-client's client: google-cloud-tpu's
        lacks the fields). ``None`` (default): the ``v2`` queued resource above.
    :param max_run: how long a flex-start slice runs (required with ``provisioning_model``).
    :param network: VPC network; :param subnetwork: subnetwork; :param enable_external_ips:
        give the nodes external IP addresses.
    :param service_account: service account email for the nodes.
    :param failover: other zones (optionally with another accelerator type or tier) to try in order.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    ROLE = roles.TPU_QUEUED_RESOURCE
    template_fields: Sequence[str] = (
        "project_id",
        "zone",
        "accelerator_type",
        "runtime_version",
        "queued_resource_id",
        "reservation_name",
        "reservation",
        "network",
        "subnetwork",
        "service_account",
        "labels",
        "impersonation_chain",
    )
    template_fields_renderers = {"labels": "json"}
    ADAPTER = registry.TPU_ADAPTER
    LOCATION_FIELD = "zone"
    operator_extra_links = (TPUQueuedResourceLink(),)
    ui_color = "#fce8b2"
    CHECKS = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        Check("zone", ZONE_CHECK.ok, ZONE_CHECK.message, templated=True, optional=True),
        *(c for c in BLOCK_CHECKS if c.name != "allow_past_block_end"),  # a slice has no max run
        Check("accelerator_type", facts.tpu_type_offered, templated=True, explain=check_accelerator),
        Check(
            "runtime_version",
            non_empty_str,
            "must name a TPU software version such as 'v2-alpha-tpuv5-lite'",
            templated=True,
        ),
        QUEUED_RESOURCE_ID_CHECK,
        Check(
            "reservation_name",
            matches(_RESERVATION),
            "must look like 'projects/<project>/locations/<zone>/reservations/<name>'",
            templated=True,
            optional=True,
        ),
        Check("network", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("subnetwork", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("node_count", int_in(1, MAX_SLICES), f"must be an integer from 1 to {MAX_SLICES}"),
        flag("spot"),
        flag("guaranteed"),
        flag("enable_external_ips"),
        Check(
            "provisioning_model",
            lambda v: v in ("flex_start",),
            "must be 'flex_start' (Cloud TPU flex-start) or None",
            optional=True,
        ),
    )

    def __init__(
        self,
        *,
        zone: str | None = None,
        accelerator_type: str,
        runtime_version: str,
        block_task_id: str | None = None,
        reservation: str | None = None,
        queued_resource_id: str | None = None,
        node_count: int = 1,
        spot: bool = False,
        guaranteed: bool = False,
        reservation_name: str | None = None,
        valid_after: timedelta | int | float | None = None,
        network: str | None = None,
        subnetwork: str | None = None,
        enable_external_ips: bool = False,
        service_account: str | None = None,
        provisioning_model: str | None = None,
        max_run: timedelta | int | float | None = None,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.get("failover")  # none on a calendar block (init_block)
        super().__init__(**kwargs)
        self.zone = zone
        self.accelerator_type = accelerator_type
        self.runtime_version = runtime_version
        self.queued_resource_id = queued_resource_id
        self.node_count = node_count
        self.spot = spot
        self.guaranteed = guaranteed
        self.reservation_name = reservation_name
        self.network = network
        self.subnetwork = subnetwork
        self.enable_external_ips = enable_external_ips
        self.service_account = service_account
        self.provisioning_model = provisioning_model
        self.max_run = (
            None if max_run is None else duration(self, "max_run", max_run, facts.TPU_FLEX_START_MAX_RUN)
        )
        self.valid_after = (
            None if valid_after is None else duration(self, "valid_after", valid_after, MAX_WAIT_LIMIT)
        )
        self.check_parameters(rendered=False)
        self.init_block(block_task_id, reservation, False, required=False, failover=failover)
        if zone is None and not self.on_block:
            raise self._param_error(
                f"zone {ZONE_CHECK.message}, got None (it may be left out only on a calendar block, whose "
                "zone it takes)"
            )
        self._check_tier()
        if provisioning_model is not None or max_run is not None:
            # Loaded only by a DAG that asks for flex-start: the others parse none of it.
            from airflow_provider_dws.operators.tpu_flex_checks import check_flex_start

            check_flex_start(self)
        self.check_policies()
        if self.valid_after and (self.window is not None or self.deadline is not None):
            # The max wait is cut from the submit time; a delayed start would let capacity arrive
            # after the window closes or the deadline. Use the window to delay instead.
            raise self._param_error(
                "valid_after cannot be combined with window or deadline; use the window to delay the start"
            )

    # -- validation ----------------------------------------------------------------------------

    def _check_tier(self) -> None:
        if self.spot and self.guaranteed:
            raise self._param_error("choose at most one tier: spot=True or guaranteed=True, not both")
        if self.spot and self.reservation_name:
            raise self._param_error(
                "a reservation is not spot capacity: pass reservation_name or spot=True, not both"
            )
        if self.spot and self.on_block:
            raise self._param_error(
                "a calendar block is not spot capacity: pass a block or spot=True, not both"
            )
        if self.reservation_name and self.on_block:
            raise self._param_error(
                "pass reservation_name (a reservation) or a calendar block (block_task_id, reservation), not both"
            )

    @property
    def flex_start(self) -> bool:
        """Whether this is a flex-start slice (``v2alpha1``)."""
        return self.provisioning_model == "flex_start"

    def use_block(self, block: Block) -> None:
        """Run on ``block``: its zone, and its reservation as Cloud TPU names it."""
        super().use_block(block)
        self.reservation_name = block.tpu_reservation

    def check_placement(self, placement: Placement) -> None:
        """Failover placements must be TPU zones, with a valid accelerator type and tier."""
        from airflow_provider_dws import catalog  # loaded only for a DAG that gives failover

        if not catalog.ZONE_RE.fullmatch(placement.location):
            raise self._param_error(
                f"failover location {placement.location!r} is not a Cloud TPU zone such as 'us-east5-a'"
            )
        if placement.accelerator_type:
            check_accelerator(self, placement.accelerator_type)
        if placement.tier not in (None, "spot", "guaranteed", "on-demand"):
            raise self._param_error(
                f"failover placement {placement}: tier must be 'spot', 'guaranteed' or 'on-demand'"
            )
        if placement.machine_type:
            raise self._param_error(f"failover placement {placement}: TPU slices have no machine_type")
        if self.flex_start:
            from airflow_provider_dws.operators.tpu_flex_checks import check_flex_placement

            check_flex_placement(self, placement)

    def home_placement(self) -> Placement:
        """The operator's own zone."""
        from airflow_provider_dws.scheduling.policies import Placement

        if self.zone is None:
            raise self._param_error("the zone is not known yet (it is the block's, found when the task runs)")
        return Placement(location=self.zone)


def __getattr__(name: str) -> Any:
    # The release (its own module) loads only for a DAG file that uses it.
    if name == "DeleteTPUQueuedResourceOperator":
        from airflow_provider_dws.operators.tpu_release import DeleteTPUQueuedResourceOperator

        return DeleteTPUQueuedResourceOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
