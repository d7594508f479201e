"""Calendar mode: find a block of GPUs or TPUs for future days, reserve it, wait for its delivery, and
give it back (Compute Engine future reservations in CALENDAR mode).

A block is like a hotel room: 1 to 90 days of a fixed set of VMs (A3-or-newer GPU machines, H4D) or
TPU chips (v5e, v5p, v6e), booked ahead, delivered at its start time as a reservation only the
DAG's workloads use, and deleted with everything running on it at its end time. Flex Start is the
other DWS mode: short, unpredictable work that waits for capacity; calendar mode is for long,
predictable work that must not be interrupted::

    find = FindCalendarBlockOperator(task_id="find_block", zones=["us-central1-a", "us-east4-b"],
        machine_type="a3-highgpu-8g", vm_count=8, duration=timedelta(days=7),
        latest_start=timedelta(weeks=4))
    reserve = ReserveCalendarBlockOperator(task_id="reserve_block", find_task_id="find_block")
    wait = WaitForCalendarBlockOperator(task_id="wait_for_block", reserve_task_id="reserve_block")
    release = ReleaseCalendarBlockOperator(task_id="release_block", setup_task_id="reserve_block")
    find >> reserve >> wait >> train >> release.as_teardown(setups=reserve)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf

from airflow_provider_dws import facts, registry
from airflow_provider_dws.links import CalendarBlockLink
from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    WAIT_CHECKS,
    DwsBaseOperator,
    DwsRequestOperator,
)
from airflow_provider_dws.operators.checks import Check, duration, flag, matches, non_empty_str
from airflow_provider_dws.operators.release import DwsSetupReleaseOperator
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.calendar_block import check_search_range, check_start_time
from airflow_provider_dws.specs.templates import is_template

__all__ = [
    "FindCalendarBlockOperator",
    "ReleaseCalendarBlockOperator",
    "ReserveCalendarBlockOperator",
    "WaitForCalendarBlockOperator",
]

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

    from airflow_provider_dws.scheduling.policies import Deadline, Placement

#: The fields that say what a block reserves.
SHAPE_FIELDS = ("machine_type", "vm_count", "tpu_version", "chip_count")
_FR_NAME = (
    r"projects/[^/]+/zones/[a-z]+(?:-[a-z]+)+[0-9]+-[a-z]/futureReservations/[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
)


def _zones_ok(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and len(set(value)) == len(value)
        and all(isinstance(z, str) and re.fullmatch(facts.ZONE_PATTERN, z) for z in value)
    )


def _shape_ok(op: Any) -> bool:
    """Quick: a machine type calendar mode offers and its VM count, or a TPU version and its chips."""
    if op.tpu_version is None:
        most = (
            facts.CALENDAR_MAX_GPU_VMS
            if facts.calendar_gpu_machine(op.machine_type)
            else facts.CALENDAR_MAX_H4D_VMS
        )
        return (
            facts.calendar_machine_offered(op.machine_type)
            and op.chip_count is None
            and type(op.vm_count) is int
            and 1 <= op.vm_count <= most
        )
    chips = (
        facts.CALENDAR_TPU_SERVING_CHIPS
        if (op.tpu_version, op.workload_type) == ("v5e", "SERVING")
        else facts.CALENDAR_TPU_CHIPS
    )
    return (
        op.machine_type is None
        and op.vm_count is None
        and op.tpu_version in facts.CALENDAR_TPU_ROWS
        and op.workload_type in facts.CALENDAR_TPU_WORKLOADS
        and type(op.chip_count) is int
        and op.chip_count in chips
    )


def _check_shape(op: Any) -> None:
    if not _shape_ok(op):
        from airflow_provider_dws.specs.calendar_block import check_shape

        check_shape(op)


def _block_length(op: Any, value: Any) -> timedelta:
    """``value`` as a block length of 1 to 90 days (whole seconds)."""
    length = duration(op, "duration", value, facts.CALENDAR_MAX_BLOCK)
    if length < facts.CALENDAR_MIN_BLOCK:
        raise op._param_error(
            f"duration must be 1 to 90 days (a calendar block's length), got {length}; for shorter work "
            "use Flex Start (the Create...FlexStart... operators)"
        )
    return length


#: Checks of what says what a block reserves (its shape is checked as a whole, see ``_check_shape``).
SHAPE_CHECKS = (
    Check(
        "machine_type",
        matches(facts.MACHINE_TYPE_PATTERN),
        "must be a machine type such as 'a3-highgpu-8g'",
        optional=True,
    ),
    Check(
        "tpu_version",
        lambda v: v in facts.CALENDAR_TPU_ROWS,
        f"must be a TPU version calendar mode offers, one of {sorted(facts.CALENDAR_TPU_ROWS)}",
        optional=True,
    ),
    Check(
        "workload_type",
        lambda v: v in facts.CALENDAR_TPU_WORKLOADS,
        f"must be one of {list(facts.CALENDAR_TPU_WORKLOADS)}",
    ),
)


class _ShapeMixin:
    """The parameters of what a block reserves, given the same way to the Find and Reserve operators."""

    machine_type: str | None
    vm_count: int | None
    tpu_version: str | None
    chip_count: int | None
    workload_type: str

    def _set_shape(
        self,
        machine_type: str | None,
        vm_count: int | None,
        tpu_version: str | None,
        chip_count: int | None,
        workload_type: str,
    ) -> None:
        self.machine_type = machine_type
        self.vm_count = vm_count
        self.tpu_version = tpu_version
        self.chip_count = chip_count
        self.workload_type = workload_type

    def has_shape(self) -> bool:
        """Whether any of the shape's parameters is given."""
        return any(getattr(self, name) is not None for name in SHAPE_FIELDS)


class FindCalendarBlockOperator(_ShapeMixin, DwsBaseOperator):
    """Find a free calendar block: ask Compute Engine's calendar-mode advice where and when ``vm_count``
    x ``machine_type`` (or ``chip_count`` TPU ``tpu_version`` chips) is free for ``duration``, starting
    between ``earliest_start`` and ``latest_start``, in ``zones``; pick one and return it.

    ``order="earliest"`` takes the earliest start (a tie goes to the zone listed first);
    ``order="zone_order"`` the first listed zone that has a block (list the cheapest or nearest
    first). The choice and the alternatives go to the task log and XCom (the return value: ``zone``,
    ``start_time``, ``end_time``, ``duration_seconds``, the shape, and ``alternatives``), which
    :class:`ReserveCalendarBlockOperator` reads with ``find_task_id``. No block: the task fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` saying what each zone answered.

    :param zones: the zones to consider (templated), in order of preference; one advice call per region.
    :param duration: the block's length, 1 to 90 days (a ``timedelta`` or seconds).
    :param latest_start: the latest acceptable start: an aware ``datetime``, an ISO 8601 string
        (templated), or a ``timedelta`` from when the task runs ("any time in the next 4 weeks":
        ``timedelta(weeks=4)``); at most 60 days ahead for VMs, 120 for TPUs.
    :param earliest_start: the earliest acceptable start, the same way (default: when the task runs).
    :param machine_type: an A3-or-newer GPU machine type (``a3-highgpu-8g``) or H4D; :param vm_count:
        how many VMs (1 to 80 GPU VMs, 1 to 256 H4D).
    :param tpu_version: ``v5e``, ``v5p`` or ``v6e``; :param chip_count: how many chips (1, 4, 8, ... 1024);
        :param workload_type: ``BATCH`` (default) or ``SERVING`` (TPUs).
    :param order: ``earliest`` (default) or ``zone_order``.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.
    """

    ROLE = roles.CALENDAR_FIND
    template_fields: Sequence[str] = (
        "project_id",
        "zones",
        "earliest_start",
        "latest_start",
        "impersonation_chain",
    )
    ui_color = "#e6f4ea"
    CHECKS = (
        *CONNECTION_CHECKS,
        *SHAPE_CHECKS,
        Check(
            "zones",
            _zones_ok,
            "must be a list of distinct Compute Engine zones such as ['us-central1-a']",
            templated=True,
        ),
        # No quick test: their form and time zone are checked; the range against the clock when the task runs.
        Check("latest_start", templated=True, explain=check_search_range),
        Check("earliest_start", templated=True, optional=True, explain=check_search_range),
        Check("order", lambda v: v in facts.CALENDAR_ORDERS, f"must be one of {list(facts.CALENDAR_ORDERS)}"),
    )

    def __init__(
        self,
        *,
        zones: Sequence[str],
        duration: timedelta | int,
        latest_start: datetime | timedelta | str,
        earliest_start: datetime | timedelta | str | None = None,
        machine_type: str | None = None,
        vm_count: int | None = None,
        tpu_version: str | None = None,
        chip_count: int | None = None,
        workload_type: str = "BATCH",
        order: str = "earliest",
        project_id: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zones = list(zones) if isinstance(zones, tuple) else zones
        self.duration = _block_length(self, duration)
        self.latest_start = latest_start
        self.earliest_start = earliest_start
        self._set_shape(machine_type, vm_count, tpu_version, chip_count, workload_type)
        self.order = order
        self.project_id = project_id
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.check_parameters(rendered=False)
        _check_shape(self)

    def execute(self, context: Context) -> dict[str, Any]:
        """Ask the advice of each region, pick a block, log the choice and the alternatives."""
        from airflow_provider_dws.runtime.calendar_find import find_block

        self.check_parameters(rendered=True)
        return find_block(self, context)


class ReserveCalendarBlockOperator(_ShapeMixin, DwsRequestOperator):
    """Reserve a calendar block: a future reservation in CALENDAR mode, submitted for approval.

    Give the block (``zone``, ``start_time``, ``duration`` and the shape) or ``find_task_id``, a
    :class:`FindCalendarBlockOperator` of the same DAG whose choice fills what is not given. VMs are
    reserved by ``specific_sku_properties``, TPUs by ``aggregate_reservation``; the reservation it
    creates at the start is named as the request and only VMs that name it can use it; at the end it
    is deleted with everything on it.

    The request is named from the task instance (``dws-<task>-<hash>-t<try>-a<attempt>``) and sent
    with a ``request_id`` derived from the same, so a retried task or a re-run worker adopts its own
    request: a block is never booked twice. The task defers until the request is APPROVED (no worker
    slot) and fails with :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` and the
    reason when it is DECLINED or FAILED (the request is then deleted: nothing is left). A request not
    approved within ``max_wait`` is cancelled. With ``wait_for_delivery=True`` it waits on until the
    block is delivered and ends as :class:`WaitForCalendarBlockOperator` does: it returns the
    reservation(s) too and emits an event of ``asset``.

    Returns the future reservation's full name, zone, start, end and what it reserves. Give it back
    with :class:`ReleaseCalendarBlockOperator` as a teardown.

    :param find_task_id: the Find task whose choice to reserve (what the task does not give itself).
        A start taken from it that has passed when a new block would be booked is found again, once:
        the advice asked as the Find task would ask it then; a second one passed fails the task
        (``CapacityNotObtainedError``). Or give the block:
    :param zone: the block's zone (templated).
    :param start_time: its start: an aware ``datetime`` or an ISO 8601 string (templated); in the future.
    :param duration: its length, 1 to 90 days.
    :param machine_type: what it reserves, as for :class:`FindCalendarBlockOperator` (so are the
        next four).
    :param vm_count: how many VMs of ``machine_type``.
    :param tpu_version: or a TPU block: ``v5e``, ``v5p`` or ``v6e``.
    :param chip_count: how many chips of ``tpu_version``.
    :param workload_type: ``BATCH`` or ``SERVING`` (TPUs).
    :param wait_for_delivery: wait until delivered, not only approved (default False).
    :param asset: with ``wait_for_delivery``, the asset whose event says the block is delivered (an
        ``Asset`` or its URI); default ``x-dws-calendar://<dag_id>/<task_id>``, the one a
        :class:`WaitForCalendarBlockOperator` of this task emits.
    :param max_wait: how long to wait for approval (default 1 hour, at most 7 days).
    :param deadline: nothing is submitted, and no wait extends, past it.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate (templated).
    :param poll_interval: seconds between status reads while waiting (default 30).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param cancel_on_kill: cancel the request when a user kills the waiting task (default True).
    """

    ROLE = roles.CALENDAR_RESERVE
    template_fields: Sequence[str] = ("project_id", "zone", "start_time", "impersonation_chain")
    ADAPTER = registry.CALENDAR_RESERVE_ADAPTER
    operator_extra_links = (CalendarBlockLink(),)
    ui_color = "#e6f4ea"
    CHECKS = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        *SHAPE_CHECKS,
        Check("find_task_id", non_empty_str, "must be a task id", optional=True),
        Check(
            "zone",
            matches(facts.ZONE_PATTERN),
            "must be a Compute Engine zone such as 'us-central1-a'",
            templated=True,
            optional=True,
        ),
        Check("start_time", templated=True, optional=True, explain=check_start_time),
        flag("wait_for_delivery"),
    )

    def __init__(
        self,
        *,
        find_task_id: str | None = None,
        zone: str | None = None,
        start_time: datetime | str | None = None,
        duration: timedelta | int | None = None,
        machine_type: str | None = None,
        vm_count: int | None = None,
        tpu_version: str | None = None,
        chip_count: int | None = None,
        workload_type: str = "BATCH",
        wait_for_delivery: bool = False,
        asset: Asset | str | None = None,
        max_wait: timedelta | int | float = facts.CALENDAR_DEFAULT_APPROVAL_WAIT,
        deadline: Deadline | timedelta | datetime | None = None,
        project_id: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.find_task_id = find_task_id
        self.zone = zone
        self.start_time = start_time
        self.duration = None if duration is None else _block_length(self, duration)
        self._set_shape(machine_type, vm_count, tpu_version, chip_count, workload_type)
        self.wait_for_delivery = wait_for_delivery
        self.max_wait = duration_limit(self, "max_wait", max_wait)
        self.project_id = project_id
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.labels = None
        self.service_account = None
        self.check_parameters(rendered=False)
        if find_task_id is None:
            missing = [n for n in ("zone", "start_time", "duration") if getattr(self, n) is None]
            if missing or not self.has_shape():
                raise self._param_error(
                    "pass find_task_id (a FindCalendarBlockOperator's choice) or the whole block: zone, "
                    f"start_time, duration and machine_type and vm_count (or tpu_version and chip_count); missing {missing or ['the shape']}"
                )
        if self.has_shape():
            _check_shape(self)
        self.asset: Asset | None = None
        if wait_for_delivery is True:
            self.asset = block_asset(self, asset, self.task_id)
            self.outlets = [*self.outlets, self.asset]
        elif asset is not None:
            raise self._param_error("asset is emitted on delivery: pass it with wait_for_delivery=True")
        self.init_policies(None, deadline, None, None)

    def home_placement(self) -> Placement:
        """The block's zone (resolved from the Find task's choice when the task runs)."""
        from airflow_provider_dws.scheduling.policies import Placement

        if self.zone is None or is_template(self.zone):
            raise self._param_error("the block's zone is not known yet (it is resolved when the task runs)")
        return Placement(location=str(self.zone))

    def resolve_block(self, context: Context) -> None:
        """Fill what the Find task chose (zone, start, length, shape) where not given, and check it."""
        from airflow_provider_dws.runtime.calendar import resolve_reserve

        resolve_reserve(self, context)

    def execute(self, context: Context) -> Any:
        """Check the rendered block, then find or submit the request and wait for approval."""
        self.check_parameters(rendered=True)
        self.resolve_block(context)
        return self.attempt_loop().run(context)

    def resume_attempt(self, context: Context, event: Any = None, **kwargs: Any) -> Any:
        """Back from a wait for a deadline's window: plan again."""
        self.resolve_block(context)
        return super().resume_attempt(context, event, **kwargs)

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The request was approved (or delivered) or ended: the result, or the classified error."""
        self.resolve_block(context)
        return super().complete_attempt(context, event, **kwargs)


class WaitForCalendarBlockOperator(DwsRequestOperator):
    """Wait, deferred, until a reserved calendar block is delivered (FULFILLED), then emit an asset event.

    Delivery comes at the block's start time (PROVISIONING may last up to 24 hours past it). Every
    wait of one zone is served by one shared list per poll interval in the triggerer, whether the
    start is an hour or eight weeks away. The task returns the reservation(s) the block created
    (``reservations``: full names; ``reservation_names``), its zone, start and end, and emits an event
    of ``asset`` with the same as extra, so a DAG scheduled on that asset starts when the capacity is
    there. It fails with :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` when the
    block is declined or fails (a part delivered is the release task's to delete) and with
    :class:`~airflow_provider_dws.exceptions.RequestCancelledError` when it was cancelled or has ended.

    :param reserve_task_id: the :class:`ReserveCalendarBlockOperator` of this DAG whose block to wait
        for; or :param future_reservation: its full name (templated). Exactly one.
    :param asset: the asset to emit an event of (an ``Asset`` or its URI); default
        ``x-dws-calendar://<dag_id>/<reserve_task_id>`` (an ``x-`` scheme: Airflow normalizes it
        without loading every provider's asset handlers, which would cost a DAG file's parse seconds).
    :param poll_interval: seconds between the zone's lists (default 300).
    :param cancel_on_kill: has no effect: a wait never cancels the block, which is its reserve task's
        (killed, cleared or timed out, the wait only stops; the release gives the block back).
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate (templated).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    """

    ROLE = roles.CALENDAR_WAIT
    template_fields: Sequence[str] = ("project_id", "future_reservation", "impersonation_chain")
    ADAPTER = registry.CALENDAR_WAIT_ADAPTER
    operator_extra_links = (CalendarBlockLink(),)
    ui_color = "#e6f4ea"
    CHECKS = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        Check("reserve_task_id", non_empty_str, "must be a task id", optional=True),
        Check(
            "future_reservation",
            matches(_FR_NAME),
            "must be a future reservation's full name (projects/P/zones/Z/futureReservations/N)",
            templated=True,
            optional=True,
        ),
    )

    def __init__(
        self,
        *,
        reserve_task_id: str | None = None,
        future_reservation: str | None = None,
        asset: Asset | str | None = None,
        project_id: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 300.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reserve_task_id = reserve_task_id
        self.future_reservation = future_reservation
        self.project_id = project_id
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.labels = None
        self.service_account = None
        self._zone: str | None = None
        # The wait's own give-up is the block's start plus the 24 h PROVISIONING may last (the
        # adapter's ``wait_deadline``); this bounds nothing else.
        self.max_wait = facts.MAX_WAIT_LIMIT
        if (reserve_task_id is None) == (future_reservation is None):
            raise self._param_error("pass exactly one of reserve_task_id and future_reservation")
        self.check_parameters(rendered=False)
        self.asset = block_asset(self, asset, reserve_task_id or "block")
        self.outlets = [*self.outlets, self.asset]
        self.init_policies(None, None, None, None)

    def home_placement(self) -> Placement:
        """The block's zone: from its name (given, or found when the task runs or resumes)."""
        from airflow_provider_dws.scheduling.policies import Placement

        name = self.future_reservation
        zone = name.split("/")[3] if name and not is_template(name) else self._zone
        if zone is None:
            raise self._param_error("the block's zone is not known yet (it is found when the task runs)")
        return Placement(location=zone)

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The block was delivered, or ended: the result (and the asset event), or the classified error."""
        name = event.get("name") if isinstance(event, dict) else None
        if isinstance(name, str) and name.count("/") == 5:
            self._zone = name.split("/")[3]
        return super().complete_attempt(context, event, **kwargs)


class ReleaseCalendarBlockOperator(DwsSetupReleaseOperator):
    """Give a calendar block back: cancel it if it is not delivered, delete its reservations and itself
    if it was delivered (finishing early) or has ended. Already gone is success. Meant as the reserve's
    teardown (``reserve >> ... >> release.as_teardown(setups=reserve)``).

    The block is derived from ``setup_task_id`` (the same run and map index): its name in the
    reserve's XCom, and every request of the reserve's task instance in its zone (found by name, as a
    retried reserve finds it). The log says what it reserved (accelerator-hours booked and delivered)
    and how much of it the workloads of this DAG run recorded on it (requests whose record names the
    block's reservation; work of other DAGs is not counted). Returns what was released.

    :param setup_task_id: the reserve task, in the same DAG.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate (templated).
    """

    operator_extra_links = (CalendarBlockLink(),)
    ui_color = "#e6f4ea"

    def release(self, context: Context) -> Any:
        """Cancel or delete the reserve's block (:func:`~airflow_provider_dws.runtime.calendar_release.release_blocks`)."""
        from airflow_provider_dws.runtime.calendar_release import release_blocks

        return release_blocks(self, context)


def block_asset(op: Any, asset: Asset | str | None, task_id: str) -> Asset:
    """The asset of a block's delivery: ``asset`` (an ``Asset`` or its URI), or
    ``x-dws-calendar://<dag_id>/<task_id>`` (``task_id``: the reserve task's). An ``x-`` scheme: Airflow
    normalizes it without loading every provider's asset handlers, which would cost a DAG file's
    parse seconds (and import the Google provider)."""
    from airflow.sdk import Asset

    if isinstance(asset, Asset):
        return asset
    if isinstance(asset, str) and asset.strip():
        return Asset(asset)
    if asset is not None:
        raise op._param_error(f"asset must be an Asset or its URI, got {asset!r}")
    dag = op.dag_id if op.has_dag() else "any"
    return Asset(f"x-dws-calendar://{dag}/{task_id}")


def duration_limit(op: Any, name: str, value: Any) -> timedelta:
    """A wait of at most 7 days (the provider's limit on any wait)."""
    return duration(op, name, value, facts.MAX_WAIT_LIMIT)
