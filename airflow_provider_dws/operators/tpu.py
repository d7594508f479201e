"""Ask DWS for a Cloud TPU slice through a queued resource (the release is in :mod:`.tpu_release`)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_dws import catalog
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
)
from airflow_provider_dws.links.tpu import TPUQueuedResourceLink
from airflow_provider_dws.operators.base import (
    API_REFUSED,
    CONNECTION_CHECKS,
    WAIT_CHECKS,
)

__all__ = ["CreateTPUQueuedResourceOperator", "DeleteTPUQueuedResourceOperator", "TPUQueuedResourceOperator"]
from airflow_provider_dws.operators.checks import (
    Check,
    flag,
    int_in,
    matches,
    non_empty_str,
)
from airflow_provider_dws.operators.request import DwsRequestOperator
from airflow_provider_dws.operators.tpu_release import (
    QUEUED_RESOURCE_ID_CHECK,
    ZONE_CHECK,
    DeleteTPUQueuedResourceOperator,
    _backends,
    _zone_of,
)
from airflow_provider_dws.scheduling.budget import DEFAULT_MAX_WAIT, MAX_WAIT_LIMIT, check_duration
from airflow_provider_dws.scheduling.identity import (
    RequestIdentity,
    parse_attempt_name,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.tpu_v2 import QueuedResource

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet
    from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

MAX_SLICES = catalog.MAX_SLICES
_RESERVATION_RE = re.compile(r"^projects/[^/\s]+/locations/[^/\s]+/reservations/[^/\s]+$")


def _timestamp(stamp_class: Any, moment: datetime) -> Any:
    stamp = stamp_class()
    stamp.FromDatetime(moment)
    return stamp


def _by_zone(placements: Sequence[Placement]) -> list[Placement]:
    """The first placement of each zone, in order (one list per zone finds every attempt there)."""
    zones: dict[str, Placement] = {}
    for placement in placements:
        zones.setdefault(placement.location, placement)
    return list(zones.values())


def _check_accelerator(op: Any, value: Any, is_unrendered: Any = lambda _: False) -> None:
    """A TPU type and a slice size Cloud TPU offers (the catalog's table)."""
    if is_unrendered(value):
        return
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


class CreateTPUQueuedResourceOperator(DwsRequestOperator):
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
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param queued_resource_id: id of the request; default ``dws-<task>-<hash of the task
        instance>`` (templated). A custom id must be unique per task instance.
    :param node_count: slices; more than 1 makes a multislice request (1 to 256).
    :param spot: ask for spot capacity (cheaper, can be preempted).
    :param guaranteed: ask for guaranteed capacity. At most one of ``spot``/``guaranteed``.
    :param reservation_name: ``projects/P/locations/ZONE/reservations/NAME`` to consume.
    :param max_wait: how long the request may wait for capacity (valid-until; default 24 h, at
        most 7 days), counted from when it becomes valid (see ``valid_after``).
    :param valid_after: do not provision before this long after creation (e.g. an off-peak start).
    :param network: VPC network; :param subnetwork: subnetwork; :param enable_external_ips:
        give the nodes external IP addresses.
    :param service_account: service account email for the nodes.
    :param labels: extra node labels (the ``dws_*`` keys are reserved for identity).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate.
    :param poll_interval: seconds between status reads (default 30).
    :param deferrable: wait in the triggerer (``True``) or in the worker. The default is the
        deployment's ``[operators] default_deferrable``, as for every Airflow provider; Airflow
        ships it as ``false``, so pass ``deferrable=True`` (or set it) to keep worker slots free
        while the request waits in the DWS queue.
    :param cancel_on_kill: delete the request when a user kills the waiting task (default True).
    :param window: only let the slice arrive inside this off-peak window (``OffPeakWindow``,
        ``WindowSet`` or a spec string); outside it the task defers until it opens.
    :param deadline: nothing is submitted, and no wait extends, past it.
    :param capacity_retry: resubmit after capacity was not obtained or the slice was preempted
        (``CapacityRetry`` or a number of retries); each attempt has its own id (``-a<N>``).
    :param failover: other zones (optionally with another accelerator type or tier) to try in order.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "zone",
        "accelerator_type",
        "runtime_version",
        "queued_resource_id",
        "reservation_name",
        "network",
        "subnetwork",
        "service_account",
        "labels",
        "impersonation_chain",
    )
    template_fields_renderers = {"labels": "json"}
    operator_extra_links = (TPUQueuedResourceLink(),)
    ui_color = "#fce8b2"
    CHECKS = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        ZONE_CHECK,
        Check("accelerator_type", templated=True, validate=_check_accelerator),
        Check(
            "runtime_version",
            non_empty_str,
            "must name a TPU software version such as 'v2-alpha-tpuv5-lite'",
            templated=True,
        ),
        QUEUED_RESOURCE_ID_CHECK,
        Check(
            "reservation_name",
            matches(_RESERVATION_RE),
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
    )

    def __init__(
        self,
        *,
        zone: str,
        accelerator_type: str,
        runtime_version: str,
        project_id: str | None = None,
        queued_resource_id: str | None = None,
        node_count: int = 1,
        spot: bool = False,
        guaranteed: bool = False,
        reservation_name: str | None = None,
        max_wait: timedelta | int | float = DEFAULT_MAX_WAIT,
        valid_after: timedelta | int | float | None = None,
        network: str | None = None,
        subnetwork: str | None = None,
        enable_external_ips: bool = False,
        service_account: str | None = None,
        labels: Mapping[str, str] | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        window: OffPeakWindow | WindowSet | str | None = None,
        deadline: Deadline | timedelta | datetime | None = None,
        capacity_retry: CapacityRetry | int | None = None,
        failover: Failover | Sequence[str | Placement] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zone = zone
        self.accelerator_type = accelerator_type
        self.runtime_version = runtime_version
        self.project_id = project_id
        self.queued_resource_id = queued_resource_id
        self.node_count = node_count
        self.spot = spot
        self.guaranteed = guaranteed
        self.reservation_name = reservation_name
        self.network = network
        self.subnetwork = subnetwork
        self.enable_external_ips = enable_external_ips
        self.service_account = service_account
        self.labels = labels
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        try:
            self.max_wait = check_duration("max_wait", max_wait, MAX_WAIT_LIMIT)
            self.valid_after = (
                None if valid_after is None else check_duration("valid_after", valid_after, MAX_WAIT_LIMIT)
            )
        except (TypeError, ValueError, OverflowError) as err:
            raise self._param_error(str(err)) from None
        self.check_parameters(rendered=False)
        self._check_tier()
        self.init_policies(window, deadline, capacity_retry, failover)
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

    def _check_accelerator(self, value: Any) -> None:
        _check_accelerator(self, value)

    # -- building the request ------------------------------------------------------------------

    def build_queued_resource(
        self,
        identity_labels: Mapping[str, str],
        parent: str,
        node_id: str,
        placement: Placement | None = None,
        max_wait: timedelta | None = None,
    ) -> QueuedResource:
        """The ``QueuedResource`` to create: one node spec (or multislice), tier and queueing policy.

        A failover ``placement`` may change the accelerator type and the tier; ``max_wait`` is the
        effective wait decided by the scheduling core (default: ``max_wait``).
        """
        from google.cloud.tpu_v2 import NetworkConfig, Node, QueuedResource, SchedulingConfig, ServiceAccount
        from google.protobuf.timestamp_pb2 import Timestamp
        from google.type.interval_pb2 import Interval

        accelerator_type = (placement.accelerator_type if placement else None) or self.accelerator_type
        tier = placement.tier if placement and placement.tier else None
        spot = tier == "spot" if tier else self.spot
        guaranteed = tier == "guaranteed" if tier else self.guaranteed
        max_wait = max_wait or self.max_wait
        node = Node(
            accelerator_type=accelerator_type,
            runtime_version=self.runtime_version,
            labels={**(self.labels or {}), **identity_labels},
            network_config=NetworkConfig(
                network=self.network or "",
                subnetwork=self.subnetwork or "",
                enable_external_ips=self.enable_external_ips,
            ),
        )
        if self.service_account:
            node.service_account = ServiceAccount(email=self.service_account)
        if spot:
            node.scheduling_config = SchedulingConfig(spot=True)
        spec = QueuedResource.Tpu.NodeSpec(parent=parent, node=node)
        if self.node_count > 1:
            spec.multislice_params = QueuedResource.Tpu.NodeSpec.MultisliceParams(
                node_count=self.node_count, node_id_prefix=node_id
            )
        else:
            spec.node_id = node_id
        # valid_until_* and valid_after_* are one oneof in the API: a delayed start with a deadline
        # has to be spelled as an interval of absolute times.
        if self.valid_after:
            start = datetime.now(timezone.utc) + self.valid_after
            policy = QueuedResource.QueueingPolicy(
                valid_interval=Interval(
                    start_time=_timestamp(Timestamp, start), end_time=_timestamp(Timestamp, start + max_wait)
                )
            )
        else:
            policy = QueuedResource.QueueingPolicy(valid_until_duration=max_wait)
        qr = QueuedResource(tpu=QueuedResource.Tpu(node_spec=[spec]), queueing_policy=policy)
        if spot:
            qr.spot = QueuedResource.Spot()
        elif guaranteed:
            qr.guaranteed = QueuedResource.Guaranteed()
        home_zone = placement is None or placement.location == self.zone
        if self.reservation_name and not spot and home_zone:
            # A reservation lives in one zone; a failover elsewhere asks without it.
            qr.reservation_name = self.reservation_name
        return qr

    # -- execution: the steps of the attempt loop ------------------------------------------------

    def _backend(self, zone: str | None = None) -> TpuQueuedResourceBackend:
        from airflow_provider_dws.backends.base import BackendCache

        cache: BackendCache = self.__dict__.setdefault("_dws_backends", BackendCache())
        return cache.get(
            _backends().TpuQueuedResourceBackend,
            self.resolve_project(),
            zone or self.zone,
            self.gcp_conn_id,
            self.impersonation_chain,
        )

    def queued_resource_base(self, identity: RequestIdentity) -> str:
        """What every submission's id starts with: ``queued_resource_id``, or the derived base."""
        return self.queued_resource_id or identity.queued_resource_base()

    def queued_resource_id_for(self, identity: RequestIdentity) -> str:
        """This submission's id: the base plus ``-t<try>-a<attempt>`` (always, so it parses back)."""
        return identity.queued_resource_id(self.queued_resource_base(identity))

    def check_placement(self, placement: Placement) -> None:
        """Failover placements must be TPU zones, with a valid accelerator type and tier."""
        if not catalog.ZONE_RE.fullmatch(placement.location):
            raise self._param_error(
                f"failover location {placement.location!r} is not a Cloud TPU zone such as 'us-east5-a'"
            )
        if placement.accelerator_type:
            self._check_accelerator(placement.accelerator_type)
        if placement.tier not in (None, "spot", "guaranteed", "on-demand"):
            raise self._param_error(
                f"failover placement {placement}: tier must be 'spot', 'guaranteed' or 'on-demand'"
            )
        if placement.machine_type:
            raise self._param_error(f"failover placement {placement}: TPU slices have no machine_type")

    def home_placement(self) -> Placement:
        """The operator's own zone."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.zone)

    def find_existing(
        self, context: Context, identity: RequestIdentity
    ) -> tuple[RequestStatus, Placement, int] | None:
        """The newest live or ACTIVE queued resource of any try and attempt of this task instance.

        One list per zone the task may have used finds every submission (by the identity label on
        its nodes); the ones found ended are deleted by :meth:`delete_ended`, not here.
        """
        found: tuple[tuple[int, int], RequestStatus, Placement, TpuQueuedResourceBackend] | None = None
        self._ended = []
        for placement, backend, status in self._submissions(identity):
            if not status.phase.live:
                self._ended.append((backend, status))
                continue
            parsed = parse_attempt_name(status.name.rsplit("/", 1)[-1])
            order = (parsed[1], parsed[2]) if parsed else (0, int(status.details.get("attempt") or 1))
            if found is None or order > found[0]:
                found = (order, status, placement, backend)
        if found is None:
            return None
        (_, attempt), status, placement, backend = found
        self._remember(context, backend, status.name)
        return status, placement, max(attempt, 1)

    def _submissions(
        self, identity: RequestIdentity
    ) -> list[tuple[Placement, TpuQueuedResourceBackend, RequestStatus]]:
        return [
            (placement, backend, status)
            for placement in _by_zone(self.placements())
            for backend in [self._backend(placement.location)]
            for status in backend.find(identity)
        ]

    _ended: list[tuple[TpuQueuedResourceBackend, RequestStatus]] = []

    def delete_ended(self) -> None:
        """Delete the ended queued resources the last :meth:`find_existing` saw (FAILED, SUSPENDED):
        an ended request holds nothing, but it stays listed until deleted."""
        for backend, status in self._ended:
            self.log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
            backend.release(status.name)
        self._ended = []

    def _remember(self, context: Context, backend: TpuQueuedResourceBackend, name: str) -> None:
        context["ti"].xcom_push(key="queued_resource_name", value=name)
        url = TPUQueuedResourceLink.persist(
            context, backend.project_id, backend.zone, name.rsplit("/", 1)[-1]
        )
        self.log.info("Console: %s", url)

    def submit_attempt(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create the queued resource of this attempt in the placement's zone (ALREADY_EXISTS: adopt)."""
        backend = self._backend(placement.location)
        qr_id = self.queued_resource_id_for(identity)
        name = backend.name_of(qr_id)
        existing = backend.get_status(name)
        if existing is not None and existing.phase.terminal:
            self.log.warning("An earlier request %s ended; deleting it before asking again", name)
            backend.release(name, wait=True)
        request = self.build_queued_resource(identity.labels(), backend.parent, qr_id, placement, max_wait)
        try:
            status, created = backend.submit(request, identity, qr_id)
        except API_REFUSED as err:
            raise BadRequestError(f"Cloud TPU refused the queued resource {name}: {err.message}") from None
        tier = placement.tier or ("spot" if self.spot else "guaranteed" if self.guaranteed else "on-demand")
        self.log.info(
            "%s queued resource %s (attempt %d): %s, %s tier, may wait up to %s for capacity%s",
            "Created" if created else "Adopted",
            name,
            identity.attempt,
            status.description,
            tier,
            max_wait,
            f" after a delay of {self.valid_after}" if self.valid_after else "",
        )
        self._remember(context, backend, name)
        return status

    def make_trigger(
        self,
        status: RequestStatus,
        placement: Placement,
        max_wait: timedelta,
        echo: dict[str, Any],
        task_deadline: datetime | None = None,
    ) -> CapacityRequestTrigger:
        """Wait on the queued resource until it is ACTIVE (or ends without getting there)."""
        from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

        backend = self._backend(placement.location)
        created_at = status.timings.submitted or datetime.now(timezone.utc)
        return CapacityRequestTrigger(
            kind=backend.kind,
            backend_spec=backend.spec(),
            request_name=status.name,
            poll_interval=float(self.poll_interval),
            wait_deadline=(created_at + (self.valid_after or timedelta(0)) + max_wait).isoformat(),
            cancel_on_kill=self.cancel_on_kill,
            target="running",
            echo=echo,
            task_deadline=task_deadline.isoformat() if task_deadline else None,
        )

    def cancel_request(self, name: str) -> None:
        """Delete the queued resource (and any nodes) and wait until it is gone."""
        self._backend(_zone_of(name)).release(name, wait=True)

    def is_done(self, status: RequestStatus) -> bool:
        """The wait ends when the slice is ACTIVE, or when the request ends without it."""
        from airflow_provider_dws.scheduling.phases import Phase

        return status.phase.terminal or status.phase is Phase.RUNNING

    def is_success(self, status: RequestStatus) -> bool:
        """An ACTIVE slice is what the task asked for."""
        from airflow_provider_dws.scheduling.phases import Phase

        return status.phase is Phase.RUNNING

    def execute(self, context: Context) -> Any:
        """Find or create the queued resource, then wait until it is ACTIVE (deferred by default)."""
        self.check_parameters(rendered=True)
        return self.run_attempts(context)

    def complete_attempt(
        self, context: Context, event: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Record how long the request waited, then let the attempt loop decide."""
        if not event:
            return super().complete_attempt(context, event, *args, **kwargs)
        from airflow_provider_dws.backends.base import RequestStatus

        status = RequestStatus.from_event(event)
        context["ti"].xcom_push(key="wait_seconds", value=status.timings.wait_seconds)
        return super().complete_attempt(context, event, *args, **kwargs)

    #: Resume point of tasks deferred by earlier releases of the provider.
    execute_complete = complete_attempt

    def finish_success(self, context: Context, status: RequestStatus) -> Any:
        """The slice's nodes, IP addresses and accelerator details (the task's XCom return value)."""
        _, zone, qr_id = _backends().parse_queued_resource_name(status.name)
        backend = self._backend(zone)
        qr = backend.get(status.name)
        if qr is None:
            raise RequestCancelledError(f"{status.name} disappeared right after it became ACTIVE")
        wait_s = status.timings.wait_seconds
        nodes = [_backends().node_summary(n) for n in backend.nodes(qr)]
        self.log.info(
            "%s is ACTIVE after waiting %s: %d node(s) %s; it is billed until it is deleted",
            status.name,
            timedelta(seconds=round(wait_s or 0)),
            len(nodes),
            ", ".join(f"{n['node_id']} {n['ip_addresses']}" for n in nodes),
        )
        spec = qr.tpu.node_spec[0]
        accelerator_type = spec.node.accelerator_type
        slices = spec.multislice_params.node_count or 1
        return {
            "queued_resource": status.name,
            "queued_resource_id": qr_id,
            "project_id": backend.project_id,
            "zone": zone,
            "accelerator_type": accelerator_type,
            "runtime_version": spec.node.runtime_version,
            "chips": catalog.tpu_chips(accelerator_type) * slices,
            "node_count": slices,
            "nodes": nodes,
            "ip_addresses": [ip for n in nodes for ip in n["ip_addresses"]],
            "wait_seconds": wait_s,
        }

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Ended without (or after losing) capacity: delete it, so not even a FAILED record stays."""
        self.log.info("Deleting %s (%s) so nothing is left behind", status.name, status.state)
        self._backend(_zone_of(status.name)).release(status.name)

    def error_for(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without success."""
        message = status.outcome.message
        zone = placement.location
        detail = f" ({status.name}{': ' + message if message else ''})"
        what = status.description.rsplit(" in ", 1)[0] if status.description else self.accelerator_type
        from airflow_provider_dws.scheduling.phases import FailureKind

        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no TPU capacity within max wait {max_wait} in {zone} for {what}{detail}"
            )
        if status.outcome.failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the TPU slice {what} in {zone} was preempted{detail}")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Cloud TPU refused the queued resource{detail}")
        return RequestCancelledError(f"the queued resource was deleted before it became ACTIVE{detail}")


class TPUQueuedResourceOperator(CreateTPUQueuedResourceOperator):
    """Deprecated: the earlier name of :class:`CreateTPUQueuedResourceOperator` (same parameters)."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "TPUQueuedResourceOperator is renamed CreateTPUQueuedResourceOperator; the old name will be removed",
            AirflowProviderDeprecationWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)
