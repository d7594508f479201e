"""Ask DWS for a Cloud TPU slice through a queued resource, and give it back."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, cast

from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import (
    NetworkConfig,
    Node,
    QueuedResource,
    SchedulingConfig,
    ServiceAccount,
)
from google.protobuf.timestamp_pb2 import Timestamp
from google.type.interval_pb2 import Interval

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.tpu import (
    TpuQueuedResourceBackend,
    node_summary,
    queued_resource_status,
    tpu_chips,
)
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
)
from airflow_provider_dws.links.tpu import TPUQueuedResourceLink
from airflow_provider_dws.operators.base import DwsBaseOperator
from airflow_provider_dws.scheduling.budget import DEFAULT_MAX_WAIT, MAX_WAIT_LIMIT, check_duration
from airflow_provider_dws.scheduling.identity import QUEUED_RESOURCE_ID_RE
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Smallest slice of each TPU family (the accelerator type suffix is a power of two from there).
TPU_FAMILIES: dict[str, tuple[int, int]] = {
    "v2": (8, 512),
    "v3": (8, 2048),
    "v4": (8, 8192),
    "v5p": (8, 12288),
    "v5litepod": (1, 256),
    "v6e": (1, 256),
}
MAX_SLICES = 256
_ZONE_RE = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+-[a-z]$")
_ACCEL_RE = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<size>[0-9]+)$")
_RESERVATION_RE = re.compile(r"^projects/[^/\s]+/locations/[^/\s]+/reservations/[^/\s]+$")


def _timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _check_zone(op: DwsBaseOperator, zone: Any) -> None:
    if not isinstance(zone, str) or not _ZONE_RE.fullmatch(zone):
        raise op.fail(f"zone must be a Cloud TPU zone such as 'us-west4-a', got {zone!r}")


def _check_queued_resource_id(op: DwsBaseOperator, value: Any) -> None:
    if not isinstance(value, str) or not QUEUED_RESOURCE_ID_RE.fullmatch(value):
        raise op.fail(
            "queued_resource_id must start with a lowercase letter, use only lowercase letters, digits "
            f"and '-', not end with '-', and have at most 63 characters, got {value!r}"
        )


class TPUQueuedResourceOperator(DwsBaseOperator):
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
    :param deferrable: wait in the triggerer (default) or in the worker.
    :param cancel_on_kill: delete the request when a user kills the waiting task (default True).
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
        deferrable: bool = True,
        cancel_on_kill: bool = True,
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
            raise self.fail(str(err)) from None
        self._check_static()
        self._check_templated(rendered=False)

    # -- validation ----------------------------------------------------------------------------

    def _check_static(self) -> None:
        if isinstance(self.node_count, bool) or not isinstance(self.node_count, int):
            raise self.fail(f"node_count must be an integer from 1 to {MAX_SLICES}, got {self.node_count!r}")
        if not 1 <= self.node_count <= MAX_SLICES:
            raise self.fail(f"node_count must be an integer from 1 to {MAX_SLICES}, got {self.node_count}")
        for flag in ("spot", "guaranteed", "enable_external_ips"):
            if not isinstance(getattr(self, flag), bool):
                raise self.fail(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.spot and self.guaranteed:
            raise self.fail("choose at most one tier: spot=True or guaranteed=True, not both")
        if self.spot and self.reservation_name:
            raise self.fail(
                "a reservation is not spot capacity: pass reservation_name or spot=True, not both"
            )

    def _check_templated(self, *, rendered: bool) -> None:
        self.check_common(rendered=rendered, static=not rendered)
        skip = self.skipper(rendered)
        if not skip(self.zone):
            _check_zone(self, self.zone)
        if not skip(self.accelerator_type):
            self._check_accelerator(self.accelerator_type)
        if not skip(self.runtime_version):
            if not isinstance(self.runtime_version, str) or not self.runtime_version.strip():
                raise self.fail(
                    f"runtime_version must name a TPU software version such as 'v2-alpha-tpuv5-lite', "
                    f"got {self.runtime_version!r}"
                )
        if self.queued_resource_id is not None and not skip(self.queued_resource_id):
            _check_queued_resource_id(self, self.queued_resource_id)
        if self.reservation_name is not None and not skip(self.reservation_name):
            if not isinstance(self.reservation_name, str) or not _RESERVATION_RE.fullmatch(
                self.reservation_name
            ):
                raise self.fail(
                    "reservation_name must look like 'projects/<project>/locations/<zone>/reservations/<name>', "
                    f"got {self.reservation_name!r}"
                )
        for field in ("network", "subnetwork"):
            value = getattr(self, field)
            if value is not None and not skip(value) and (not isinstance(value, str) or not value):
                raise self.fail(f"{field} must be a non-empty string, got {value!r}")

    def _check_accelerator(self, value: Any) -> None:
        families = ", ".join(f"{f}-N" for f in TPU_FAMILIES)
        match = _ACCEL_RE.fullmatch(value) if isinstance(value, str) else None
        if not match or match["family"] not in TPU_FAMILIES:
            raise self.fail(
                f"accelerator_type must be one of {families} (e.g. 'v5litepod-16'), got {value!r}"
            )
        low, high = TPU_FAMILIES[match["family"]]
        size = int(match["size"])
        power_of_two = size & (size - 1) == 0
        # v4 and v5p slices above one cube (64 chips = 128 TensorCores) come in whole cubes.
        cubes = match["family"] in ("v4", "v5p") and size > 128 and size % 128 == 0
        if size < low or size > high or not (power_of_two or cubes):
            shape = "a power of two" + (" or a multiple of 128" if match["family"] in ("v4", "v5p") else "")
            raise self.fail(
                f"accelerator_type {value!r}: the size of a {match['family']} slice must be {shape} "
                f"from {low} to {high}"
            )

    # -- building the request ------------------------------------------------------------------

    def build_queued_resource(
        self, identity_labels: Mapping[str, str], parent: str, node_id: str
    ) -> QueuedResource:
        """The ``QueuedResource`` to create: one node spec (or multislice), tier and queueing policy."""
        node = Node(
            accelerator_type=self.accelerator_type,
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
        if self.spot:
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
                    start_time=_timestamp(start), end_time=_timestamp(start + self.max_wait)
                )
            )
        else:
            policy = QueuedResource.QueueingPolicy(valid_until_duration=self.max_wait)
        qr = QueuedResource(tpu=QueuedResource.Tpu(node_spec=[spec]), queueing_policy=policy)
        if self.spot:
            qr.spot = QueuedResource.Spot()
        elif self.guaranteed:
            qr.guaranteed = QueuedResource.Guaranteed()
        if self.reservation_name:
            qr.reservation_name = self.reservation_name
        return qr

    # -- execution -----------------------------------------------------------------------------

    def _backend(self) -> TpuQueuedResourceBackend:
        return TpuQueuedResourceBackend(
            self.resolve_project(), self.zone, self.gcp_conn_id, self.impersonation_chain
        )

    def execute(self, context: Context) -> Any:
        """Find or create the queued resource, then wait until it is ACTIVE (deferred by default)."""
        self._check_templated(rendered=True)
        identity = self.identity(context)
        backend = self._backend()
        qr_id = self.queued_resource_id or identity.queued_resource_id()
        name = backend.name_of(qr_id)
        existing = backend.get(name)
        if existing is not None:
            status = queued_resource_status(existing)
            if status.phase.live:
                self.log.info("Reattaching to %s (%s, %s)", name, status.state, status.description)
            else:
                self.log.warning(
                    "An earlier request %s ended %s; deleting it before asking again", name, status.state
                )
                backend.delete(name, force=True)
                existing = None
        if existing is None:
            try:
                qr, created = backend.create(
                    qr_id, self.build_queued_resource(identity.labels(), backend.parent, qr_id)
                )
            except (gexc.InvalidArgument, gexc.FailedPrecondition, gexc.PermissionDenied) as err:
                raise BadRequestError(
                    f"Cloud TPU refused the queued resource {name}: {err.message}"
                ) from None
            self.log.info(
                "%s queued resource %s: %s, %s tier, may wait up to %s for capacity%s",
                "Created" if created else "Adopted",
                name,
                queued_resource_status(qr).description,
                "spot" if self.spot else "guaranteed" if self.guaranteed else "on-demand",
                self.max_wait,
                f" after a delay of {self.valid_after}" if self.valid_after else "",
            )
        else:
            qr = existing
        context["ti"].xcom_push(key="queued_resource_name", value=name)
        url = TPUQueuedResourceLink.persist(context, backend.project_id, self.zone, qr_id)
        self.log.info("Console: %s", url)
        status = queued_resource_status(qr)
        if status.phase.terminal or status.phase is Phase.RUNNING:
            return self.execute_complete(context, status.to_event())
        created_at = cast("datetime | None", qr.create_time) or datetime.now(timezone.utc)
        trigger = CapacityRequestTrigger(
            kind=backend.kind,
            backend_spec=backend.spec(),
            request_name=name,
            poll_interval=float(self.poll_interval),
            wait_deadline=(created_at + (self.valid_after or timedelta(0)) + self.max_wait).isoformat(),
            cancel_on_kill=self.cancel_on_kill,
            target="running",
        )
        if self.deferrable:
            self.log.info("Deferring: the request waits in the DWS queue without holding a worker slot")
            self.defer(trigger=trigger, method_name="execute_complete")
        self.log.info("deferrable=False: waiting in this worker")
        return self.execute_complete(context, asyncio.run(first_event(trigger)))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume: return the slice's nodes once ACTIVE; otherwise delete what is left and raise."""
        status = RequestStatus.from_event(event)
        backend = self._backend()
        ti = context["ti"]
        wait_s = status.timings.wait_seconds
        ti.xcom_push(key="wait_seconds", value=wait_s)
        ti.xcom_push(key="dws_request", value=event)
        if status.phase is Phase.RUNNING:
            qr = backend.get(status.name)
            if qr is None:
                raise RequestCancelledError(f"{status.name} disappeared right after it became ACTIVE")
            nodes = [node_summary(n) for n in backend.nodes(qr)]
            self.log.info(
                "%s is ACTIVE after waiting %s: %d node(s) %s; it is billed until it is deleted",
                status.name,
                timedelta(seconds=round(wait_s or 0)),
                len(nodes),
                ", ".join(f"{n['node_id']} {n['ip_addresses']}" for n in nodes),
            )
            _, _, qr_id = status.name.rpartition("/")
            return {
                "queued_resource": status.name,
                "queued_resource_id": qr_id,
                "project_id": backend.project_id,
                "zone": self.zone,
                "accelerator_type": self.accelerator_type,
                "runtime_version": self.runtime_version,
                "chips": tpu_chips(self.accelerator_type) * self.node_count,
                "node_count": self.node_count,
                "nodes": nodes,
                "ip_addresses": [ip for n in nodes for ip in n["ip_addresses"]],
                "wait_seconds": wait_s,
            }
        # Ended without (or after losing) capacity: nothing should stay behind, not even a FAILED record.
        self.log.info("Deleting %s (%s) so nothing is left behind", status.name, status.state)
        backend.delete(status.name, force=True)
        raise self._error(status)

    def _error(self, status: RequestStatus) -> Exception:
        message = status.outcome.message
        detail = f" ({status.name}{': ' + message if message else ''})"
        what = status.description.rsplit(" in ", 1)[0] if status.description else self.accelerator_type
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no TPU capacity within max wait {self.max_wait} in {self.zone} for {what}{detail}"
            )
        if status.outcome.failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the TPU slice {what} in {self.zone} was preempted{detail}")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Cloud TPU refused the queued resource{detail}")
        return RequestCancelledError(f"the queued resource was deleted before it became ACTIVE{detail}")


class DeleteTPUQueuedResourceOperator(DwsBaseOperator):
    """Release a TPU slice: delete its queued resource (and nodes) and wait until it is gone.

    Already gone is success. Meant as the teardown of a :class:`TPUQueuedResourceOperator`::

        ask = TPUQueuedResourceOperator(task_id="ask_for_tpu", ...)
        release = DeleteTPUQueuedResourceOperator(task_id="release_tpu", zone=..., setup_task_id="ask_for_tpu")
        ask >> work >> release.as_teardown(setups=ask)

    :param zone: Cloud TPU zone (templated).
    :param setup_task_id: the creating task; its deterministic queued resource id is derived for
        the same run and map index, so no XCom is needed (works even if that task's worker died).
    :param queued_resource_id: an explicit id instead (templated). Exactly one of the two.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param force: also delete the nodes (default True; without it the API refuses while nodes exist).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate.
    """

    template_fields: Sequence[str] = ("project_id", "zone", "queued_resource_id", "impersonation_chain")
    operator_extra_links = (TPUQueuedResourceLink(),)
    ui_color = "#fce8b2"

    def __init__(
        self,
        *,
        zone: str,
        setup_task_id: str | None = None,
        queued_resource_id: str | None = None,
        project_id: str | None = None,
        force: bool = True,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zone = zone
        self.setup_task_id = setup_task_id
        self.queued_resource_id = queued_resource_id
        self.project_id = project_id
        self.force = force
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        # Shared checks expect these; deleting is short and needs none of them.
        self.labels = None
        self.service_account = None
        self.poll_interval = 1.0
        self.deferrable = False
        self.cancel_on_kill = False
        if (setup_task_id is None) == (queued_resource_id is None):
            raise self.fail("pass exactly one of setup_task_id and queued_resource_id")
        if setup_task_id is not None and (not isinstance(setup_task_id, str) or not setup_task_id):
            raise self.fail(f"setup_task_id must be a task id, got {setup_task_id!r}")
        if not isinstance(force, bool):
            raise self.fail(f"force must be True or False, got {force!r}")
        self._check(rendered=False)

    def _check(self, *, rendered: bool) -> None:
        self.check_common(rendered=rendered, static=not rendered)
        skip = self.skipper(rendered)
        if not skip(self.zone):
            _check_zone(self, self.zone)
        if self.queued_resource_id is not None and not skip(self.queued_resource_id):
            _check_queued_resource_id(self, self.queued_resource_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Delete the queued resource and wait until it no longer exists."""
        self._check(rendered=True)
        qr_id = (
            self.queued_resource_id or self.identity(context, task_id=self.setup_task_id).queued_resource_id()
        )
        backend = TpuQueuedResourceBackend(
            self.resolve_project(), self.zone, self.gcp_conn_id, self.impersonation_chain
        )
        name = backend.name_of(qr_id)
        TPUQueuedResourceLink.persist(context, backend.project_id, self.zone, qr_id)
        existing = backend.get(name)
        if existing is None:
            self.log.info("%s does not exist (never created, or already released): nothing to do", name)
            return {"queued_resource": name, "deleted": False}
        state = queued_resource_status(existing).state
        self.log.info("Releasing %s (%s)%s", name, state, " with its nodes" if self.force else "")
        try:
            deleted = backend.delete(name, force=self.force)
        except gexc.FailedPrecondition as err:
            raise BadRequestError(f"Cloud TPU refused to delete {name}: {err.message}") from None
        self.log.info("%s is gone; the slice is no longer billed", name)
        return {"queued_resource": name, "deleted": deleted, "state_before": state}
