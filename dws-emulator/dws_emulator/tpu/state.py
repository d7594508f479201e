"""Cloud TPU v2 queued resources and nodes, sharing the core's lock, clock, operations and
capacity model (holders are queued-resource names, pools are ``ZONE/FAMILY[@RESERVATION]``).

Life cycle (``QueuedResourceState.State``), driven by the core's tick; each tick visits only
the resources its schedule says are due (a state that moves on at the next tick, a valid-after or
valid-until time, the end of PROVISIONING or DELETING):

* create: CREATING (initiator USER). Unless ``valid_after`` lies in the future, the request joins
  its pool's FIFO queue at once, so arrival order is kept across GPU and TPU holders alike.
* next tick: ACCEPTED; if the chips are free it is started in the same tick (PROVISIONING),
  otherwise it becomes WAITING_FOR_RESOURCES. A ``valid_after`` request joins the queue only once
  its time has come (it waits in ACCEPTED / WAITING_FOR_RESOURCES until then).
* PROVISIONING lasts :data:`PROVISION_SECONDS`, its node(s) CREATING, then ACTIVE with them READY
  (``Node.State`` has CREATING before READY; a node that never got ready is gone with a FAILED
  request).
* not ACTIVE by ``valid_until`` (including while PROVISIONING): FAILED with
  ``failed_data.error`` = RESOURCE_EXHAUSTED, capacity released.
* delete (``force`` needed while nodes exist: ACTIVE, SUSPENDING, SUSPENDED): DELETING (USER),
  capacity released and nodes DELETING at once; :attr:`TpuState.delete_seconds` later (default 0:
  on the next tick; ``DWS_EMULATOR_TPU_DELETE_SECONDS``) the resource and its nodes are gone and
  the delete operation is done. A second delete while DELETING is refused with
  FAILED_PRECONDITION "already being deleted", as the real API answers.
* preempt (control API, Spot only, ACTIVE only): SUSPENDING, nodes PREEMPTED and capacity
  released at once; SUSPENDED on the next tick.
* on a calendar-mode reservation, see :mod:`.reserved`: when it ends, ACTIVE -> SUSPENDING ->
  SUSPENDED (nodes PREEMPTED, ``health_description`` says why); not yet ACTIVE: FAILED.

Every state other than CREATING and DELETING is recorded with state_initiator SERVICE.

Network endpoints: one per host (see :mod:`.tpu`), port 8470, private IPs handed out from
10.128.0.2 upwards in activation order, so they are deterministic for a given sequence of
requests.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ..core.api import Api, Core
from ..core.clock import Schedule, iso
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from ..core.operations import finish_operation, start_operation
from ..core.reservations import Reservation
from . import METHODS as TPU_METHODS
from . import TPU_SERVICE
from .flex import REST_SERVICE, FlexRun, check_family, flex_routes
from .reserved import calendar_reservation
from .service import TpuServicer
from .validation import TPU_PORT, QueuedResourcePlan, parse_parent, validate_queued_resource

log = logging.getLogger("dws_emulator")

QueuedResourcePb = cloud_tpu.QueuedResource.pb()
NodePb = cloud_tpu.Node.pb()
OperationMetadataPb = cloud_tpu.OperationMetadata.pb()
QrState = cloud_tpu.QueuedResourceState.State
Initiator = cloud_tpu.QueuedResourceState.StateInitiator
NodeState = cloud_tpu.Node.State

PROVISION_SECONDS = 0.5
#: Environment variable: how long a queued resource stays DELETING (seconds; default 0).
DELETE_SECONDS_ENV = "DWS_EMULATOR_TPU_DELETE_SECONDS"
FIRST_IP = ipaddress.IPv4Address("10.128.0.2")
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

WAITING_STATES = frozenset({QrState.CREATING, QrState.ACCEPTED, QrState.WAITING_FOR_RESOURCES})
STATES_WITH_NODES = frozenset({QrState.ACTIVE, QrState.SUSPENDING, QrState.SUSPENDED})
_STATE_DATA = {
    QrState.CREATING: "creating_data",
    QrState.ACCEPTED: "accepted_data",
    QrState.PROVISIONING: "provisioning_data",
    QrState.FAILED: "failed_data",
    QrState.DELETING: "deleting_data",
    QrState.ACTIVE: "active_data",
    QrState.SUSPENDING: "suspending_data",
    QrState.SUSPENDED: "suspended_data",
}


@dataclass
class QueuedResourceRecord:
    """One QueuedResource ever created."""

    name: str
    seq: int
    qr: Any  # raw QueuedResource protobuf
    plan: QueuedResourcePlan
    created_at: float
    history: list[tuple[str, float, str]] = field(default_factory=list)  # state, time, initiator
    enqueued: bool = False
    provisioned_at: float | None = None  # when PROVISIONING ends
    nodes: list[str] = field(default_factory=list)  # node names, once ACTIVE
    deleted: bool = False
    deleting_until: float | None = None  # when DELETING ends
    flex: FlexRun | None = None  # made through v2alpha1: its provisioning model and run (:mod:`.flex`)
    run_until: float | None = None  # a flex-start run's end, once ACTIVE

    @property
    def state(self) -> int:
        return int(self.qr.state.state)

    @property
    def valid_until(self) -> float | None:
        """When a request not yet ACTIVE fails: its valid-until time, or a flex-start termination
        time that comes first (nothing would run)."""
        terminate_at = self.flex.terminate_at if self.flex is not None else None
        ends = [t for t in (self.plan.valid_until, terminate_at) if t is not None]
        return min(ends) if ends else None


@dataclass
class _TpuOperation:
    name: str
    verb: str  # "create" or "delete"
    target: QueuedResourceRecord


class TpuState(Api):
    """Queued resources, nodes and their operations; every method runs under ``core.lock``."""

    name = "tpu"
    services = {TPU_SERVICE: TPU_METHODS}
    rest_service = REST_SERVICE

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._due = Schedule()
        self._accepted: dict[str, None] = {}  # ACCEPTED now: WAITING_FOR_RESOURCES after the advance
        self.resources: dict[str, QueuedResourceRecord] = {}  # by name: the latest with that name
        self.all_records: list[QueuedResourceRecord] = []  # every one ever created, oldest first
        self.nodes: dict[str, Any] = {}  # node name -> raw Node protobuf
        self._node_seq: dict[str, int] = {}
        self._next_seq = 0
        self._next_host = 0
        self._next_node_id = 1000
        self._pending: list[_TpuOperation] = []
        #: How long DELETING lasts, in seconds of the emulator's clock (0: until the next tick).
        self.delete_seconds = float(os.environ.get(DELETE_SECONDS_ENV, "0") or 0)

    # -- helpers ---------------------------------------------------------------------------
    def _set_state(
        self, rec: QueuedResourceRecord, state: int, now: float, initiator: int = Initiator.SERVICE
    ) -> None:
        old = QrState(rec.state).name
        st = rec.qr.state
        st.state = state
        st.state_initiator = initiator
        data_field = _STATE_DATA.get(QrState(state))
        if data_field is None:
            st.ClearField("state_data")
        else:
            # FAILED keeps the error set by ``_fail`` (setting it already selected failed_data).
            getattr(st, data_field).SetInParent()
        new = QrState(state).name
        rec.history.append((new, now, Initiator(initiator).name))
        before = "new" if old == "STATE_UNSPECIFIED" else old
        log.info("QueuedResource %s: %s -> %s", rec.name, before, new)
        if state == QrState.ACCEPTED:
            self._accepted[rec.name] = None
        self._schedule(rec)

    def _schedule(self, rec: QueuedResourceRecord) -> None:
        """Put ``rec`` on the agenda its state needs; waiting in the capacity queue needs none."""
        if rec.deleted:
            return
        state, name, due = rec.state, rec.name, self._due
        until = rec.valid_until
        if state == QrState.ACTIVE and rec.run_until is not None:
            due.at(name, rec.run_until)
        elif state in (QrState.CREATING, QrState.SUSPENDING):
            due.next_tick(name)
        elif state == QrState.DELETING:
            if rec.deleting_until is None:
                due.next_tick(name)
            else:
                due.at(name, rec.deleting_until)
        elif state == QrState.PROVISIONING and rec.provisioned_at is not None:
            due.at(name, rec.provisioned_at)
            if until is not None:
                due.at(name, until)
        elif state in WAITING_STATES and not rec.enqueued:
            after = rec.plan.valid_after
            if after is None and until is None:
                due.next_tick(name)
            if after is not None:
                due.at(name, after)
            if until is not None:
                due.at(name, until)

    def _fail(self, rec: QueuedResourceRecord, now: float, message: str) -> None:
        self.core.capacity.release(rec.name)
        rec.enqueued = False
        rec.provisioned_at = None
        self._drop_nodes(rec)
        rec.qr.state.failed_data.error.code = code_pb2.RESOURCE_EXHAUSTED
        rec.qr.state.failed_data.error.message = message
        self._set_state(rec, QrState.FAILED, now)
        log.info("QueuedResource %s: %s", rec.name, message)

    def _expiry_message(self, rec: QueuedResourceRecord) -> str:
        plan = rec.plan
        where = f"reservation {plan.reservation}" if plan.reservation else plan.zone
        if rec.flex is not None and rec.valid_until == rec.flex.terminate_at:
            return (
                f"The flex-start queued resource's termination time ({iso(rec.flex.terminate_at)}) "
                f"passed before {plan.chips} {plan.shape.family} chips were available in {where}."
            )
        return (
            f"The queued resource could not be provisioned before its valid-until time "
            f"({iso(plan.valid_until)}): {plan.chips} {plan.shape.family} chips "
            f"({plan.node_count} x {plan.shape.accelerator_type}) were not available in {where}."
        )

    def _enqueue(self, rec: QueuedResourceRecord, now: float) -> None:
        until = rec.valid_until
        max_wait = None if until is None else max(0.0, until - now)
        self.core.capacity.enqueue(rec.name, rec.plan.pool, rec.plan.chips, max_wait)
        rec.enqueued = True

    def _new_operation(self, verb: str, rec: QueuedResourceRecord, now: float) -> operations_pb2.Operation:
        parent = f"projects/{rec.plan.project}/locations/{rec.plan.zone}"
        op = start_operation(self.core, parent, OperationMetadataPb, rec.name, verb, "v2", now)
        self._pending.append(_TpuOperation(op.name, verb, rec))
        return op

    def _complete_operation(self, pending: _TpuOperation, response: Any, now: float) -> None:
        finish_operation(self.core, pending.name, OperationMetadataPb, response, now)

    def _make_nodes(self, rec: QueuedResourceRecord, now: float) -> None:
        plan = rec.plan
        template = rec.qr.tpu.node_spec[0].node
        for node_id in plan.node_ids:
            node = NodePb()
            node.CopyFrom(template)
            name = f"projects/{plan.project}/locations/{plan.zone}/nodes/{node_id}"
            node.name = name
            node.state = NodeState.CREATING
            node.health = cloud_tpu.Node.Health.HEALTHY
            # The API version the node was made through (a flex-start request: v2alpha1).
            alpha = rec.flex is not None
            node.api_version = cloud_tpu.Node.ApiVersion.V2_ALPHA1 if alpha else cloud_tpu.Node.ApiVersion.V2
            node.create_time.CopyFrom(_timestamp(now))
            node.id = self._next_node_id
            self._next_node_id += 1
            node.queued_resource = rec.name
            node.multislice_node = plan.multislice
            if not node.network_config.network:
                node.network_config.network = "default"
            if not node.network_config.subnetwork:
                node.network_config.subnetwork = "default"
            if plan.tier == "spot":
                node.scheduling_config.spot = True
            if plan.reservation:
                node.scheduling_config.reserved = True
            del node.network_endpoints[:]
            for _ in range(plan.shape.hosts):
                ip = FIRST_IP + self._next_host
                self._next_host += 1
                node.network_endpoints.add(ip_address=str(ip), port=TPU_PORT)
            self.nodes[name] = node
            self._node_seq[name] = self._next_seq
            self._next_seq += 1
            rec.nodes.append(name)
            log.info(
                "Node %s: CREATING (%s, %d host(s): %s)",
                name,
                plan.shape.accelerator_type,
                plan.shape.hosts,
                ", ".join(e.ip_address for e in node.network_endpoints),
            )

    def _drop_nodes(self, rec: QueuedResourceRecord) -> None:
        """The nodes of a request that failed before it was ACTIVE are gone with it."""
        for name in rec.nodes:
            self.nodes.pop(name, None)
            self._node_seq.pop(name, None)
        rec.nodes.clear()

    def _set_node_states(self, rec: QueuedResourceRecord, state: int) -> None:
        for name in rec.nodes:
            node = self.nodes.get(name)
            if node is not None:
                node.state = state

    # -- tick ------------------------------------------------------------------------------
    def owns(self, holder: str) -> bool:
        return holder in self.resources

    def handlers(self) -> list[tuple[str, Any]]:
        return [(TPU_SERVICE, TpuServicer(self).handler())]

    def rest_routes(self) -> list[Any]:
        return flex_routes(self)

    def control_methods(self) -> dict[str, Any]:
        return {"Preempt": self._control_preempt}

    def _control_preempt(self, body: dict[str, Any]) -> Any:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, 'expected {"name": "projects/.../queuedResources/ID"}'
            )
        return {"queued_resource": self.preempt(name)}

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return [(qr.created_at, self.record(qr)) for qr in self.all_records]

    def before_advance(self, now: float) -> None:
        """Transitions that precede the capacity model's ``advance`` in one tick."""
        for name in self._due.due(now):
            rec = self.resources.get(name)
            if rec is None or rec.deleted:
                continue
            before = (rec.state, rec.enqueued)
            self._visit(rec, now)
            if (rec.state, rec.enqueued) == before:
                self._schedule(rec)  # visited early (a stale entry): keep what is still due

    def _visit(self, rec: QueuedResourceRecord, now: float) -> None:
        state = rec.state
        until = rec.valid_until
        if state == QrState.ACTIVE and rec.run_until is not None:
            if now >= rec.run_until:
                self._end_run(rec, now)
        elif state == QrState.PROVISIONING and rec.provisioned_at is not None:
            if now >= rec.provisioned_at and (until is None or rec.provisioned_at <= until):
                rec.provisioned_at = None
                self._set_node_states(rec, NodeState.READY)
                log.info("QueuedResource %s: node(s) READY", rec.name)
                if rec.flex is not None and rec.flex.model == "FLEX_START":
                    rec.run_until = rec.flex.ends_at(now)
                self._set_state(rec, QrState.ACTIVE, now)
            elif until is not None and now >= until:
                self._fail(rec, now, self._expiry_message(rec))
        elif state == QrState.DELETING:
            if rec.deleting_until is not None and now < rec.deleting_until:
                return
            rec.deleted = True
            for name in rec.nodes:
                self.nodes.pop(name, None)
                self._node_seq.pop(name, None)
            rec.history.append(("DELETED", now, "USER"))
            log.info("QueuedResource %s: deleted", rec.name)
        elif state == QrState.SUSPENDING:
            self._set_state(rec, QrState.SUSPENDED, now)
        elif state in WAITING_STATES:
            if state == QrState.CREATING:
                self._set_state(rec, QrState.ACCEPTED, now)
            if not rec.enqueued:
                if until is not None and now >= until:
                    self._fail(rec, now, self._expiry_message(rec))
                elif rec.plan.valid_after is None or now >= rec.plan.valid_after:
                    self._enqueue(rec, now)

    def expired(self, holder: str, now: float) -> None:
        rec = self.resources[holder]
        rec.enqueued = False
        self._fail(rec, now, self._expiry_message(rec))

    def started(self, holder: str, now: float) -> None:
        rec = self.resources[holder]
        rec.provisioned_at = now + PROVISION_SECONDS
        self._make_nodes(rec, now)
        self._set_state(rec, QrState.PROVISIONING, now)

    def after_advance(self, now: float) -> None:
        """Waiting transitions and operation completion, after the capacity model's ``advance``."""
        accepted, self._accepted = self._accepted, {}
        for name in accepted:
            rec = self.resources.get(name)
            if rec is not None and not rec.deleted and rec.state == QrState.ACCEPTED:
                self._set_state(rec, QrState.WAITING_FOR_RESOURCES, now)
        still: list[_TpuOperation] = []
        for pending in self._pending:
            rec = pending.target
            if pending.verb == "create" and rec.state != QrState.CREATING:
                self._complete_operation(pending, self._copy(rec), now)
            elif pending.verb == "delete" and rec.deleted:
                self._complete_operation(pending, empty_pb2.Empty(), now)
            else:
                still.append(pending)
        self._pending = still

    def forget_operation(self, name: str) -> None:
        self._pending = [p for p in self._pending if p.name != name]

    # -- QueuedResource RPCs ---------------------------------------------------------------
    @staticmethod
    def _copy(rec: QueuedResourceRecord) -> Any:
        out = QueuedResourcePb()
        out.CopyFrom(rec.qr)
        return out

    def _lookup(self, name: str) -> QueuedResourceRecord:
        parts = name.split("/")
        if (
            len(parts) != 6
            or parts[0] != "projects"
            or parts[2] != "locations"
            or parts[4] != "queuedResources"
        ):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid QueuedResource name {name!r}: expected "
                "projects/{project}/locations/{zone}/queuedResources/{queued_resource}.",
            )
        rec = self.resources.get(name)
        if rec is None or rec.deleted:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"QueuedResource {name} does not exist.")
        return rec

    def create(
        self,
        parent: str,
        queued_resource_id: str,
        qr: Any,
        both_tiers: bool = False,
        flex: FlexRun | None = None,
    ) -> operations_pb2.Operation:
        core = self.core
        with core.lock:
            core.tick()
            now = core.clock()
            plan = validate_queued_resource(parent, queued_resource_id, qr, now, both_tiers)
            check_family(flex, plan.shape.family)
            capacity = core.capacity
            reservation = calendar_reservation(core.reservations, plan)
            if not capacity.has_pool(plan.pool):
                if plan.reservation:
                    raise EmulatorError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"Invalid value for field 'queued_resource.reservation_name': reservation "
                        f"{plan.reservation} does not exist or has no {plan.shape.family} capacity in "
                        f"{plan.zone}.",
                    )
                elsewhere = capacity.locations_for(plan.shape.family)
                hint = f" Available in: {', '.join(elsewhere)}." if elsewhere else ""
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "Invalid value for field 'queued_resource.tpu.node_spec[0].node.accelerator_type': "
                    f"accelerator type {plan.shape.accelerator_type} is not available in {plan.zone}.{hint}",
                )
            name = f"{parent}/queuedResources/{queued_resource_id}"
            existing = self.resources.get(name)
            if existing is not None and not existing.deleted:
                raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"QueuedResource {name} already exists.")
            wanted = {f"projects/{plan.project}/locations/{plan.zone}/nodes/{n}" for n in plan.node_ids}
            for other in self.resources.values():
                if other.deleted or other.state == QrState.FAILED:
                    continue  # a failed request never got nodes, so its node ids are free
                taken = {
                    f"projects/{other.plan.project}/locations/{other.plan.zone}/nodes/{n}"
                    for n in other.plan.node_ids
                }
                clash = sorted(wanted & taken)
                if clash:
                    raise EmulatorError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"Node {clash[0]} already exists (requested by QueuedResource {other.name}).",
                    )
            stored = QueuedResourcePb()
            stored.CopyFrom(qr)
            stored.name = name
            stored.ClearField("state")
            stored.create_time.CopyFrom(_timestamp(now))
            rec = QueuedResourceRecord(name, self._next_seq, stored, plan, now, flex=flex)
            self._next_seq += 1
            self.resources.pop(name, None)  # a deleted one with the same id makes way (kept in all_records)
            self.resources[name] = rec
            self.all_records.append(rec)
            if reservation is not None:
                core.reservations.consume(name, reservation, "QueuedResource")
            log.info(
                "QueuedResource %s created: %d x %s (%d chips) tier=%s%s",
                name,
                plan.node_count,
                plan.shape.accelerator_type,
                plan.chips,
                plan.tier,
                f" reservation={plan.reservation}" if plan.reservation else "",
            )
            self._set_state(rec, QrState.CREATING, now, Initiator.USER)
            if plan.valid_after is None or now >= plan.valid_after:
                self._enqueue(rec, now)
            return self._new_operation("create", rec, now)

    def reservation_ended(self, holder: str, reservation: Reservation, message: str, now: float) -> None:
        rec = self.resources.get(holder)
        if rec is None or rec.deleted or rec.plan.reservation is None:
            return
        if rec.state == QrState.ACTIVE:
            self._suspend(rec, now, message)
            log.info("QueuedResource %s: suspended, its reservation ended", holder)
        elif rec.state in WAITING_STATES or rec.state == QrState.PROVISIONING:
            self._fail(rec, now, message)

    def _suspend(self, rec: QueuedResourceRecord, now: float, why: str = "") -> None:
        """ACTIVE -> SUSPENDING: chips released, nodes PREEMPTED (``why`` in their health description)."""
        self.core.capacity.release(rec.name)
        rec.enqueued = False
        self._set_node_states(rec, NodeState.PREEMPTED)
        for node in filter(None, (self.nodes.get(n) for n in rec.nodes)):
            node.health_description = why or node.health_description
        self._set_state(rec, QrState.SUSPENDING, now)

    def _end_run(self, rec: QueuedResourceRecord, now: float) -> None:
        """A flex-start run's end: the chips go back, the TPU VMs are deleted, SUSPENDING."""
        self.core.capacity.release(rec.name)
        rec.run_until = None
        log.info("QueuedResource %s: its flex-start run ended; node(s) deleted", rec.name)
        self._drop_nodes(rec)
        self._set_state(rec, QrState.SUSPENDING, now)

    def get(self, name: str) -> Any:
        with self.core.lock:
            self.core.tick()
            return self._copy(self._lookup(name))

    @staticmethod
    def _page(page_size: int, page_token: str) -> tuple[int, int]:
        if page_size < 0:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative.")
        if page_token and not page_token.isdigit():
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}.")
        return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE), int(page_token) if page_token else -1

    def list_resources(self, parent: str, page_size: int = 0, page_token: str = "") -> tuple[list[Any], str]:
        """Oldest first; the page token is the creation sequence number of the last one returned."""
        with self.core.lock:
            self.core.tick()
            project, zone = parse_parent(parent)
            size, cursor = self._page(page_size, page_token)
            matches = [
                rec
                for rec in self.resources.values()
                if not rec.deleted
                and rec.plan.project == project
                and rec.plan.zone == zone
                and rec.seq > cursor
            ]
            page = matches[:size]
            token = str(page[-1].seq) if len(matches) > size else ""
            return [self._copy(rec) for rec in page], token

    def delete(self, name: str, force: bool = False) -> operations_pb2.Operation:
        with self.core.lock:
            self.core.tick()
            rec = self._lookup(name)
            state = QrState(rec.state)
            if state == QrState.DELETING:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"QueuedResource {name} is already being deleted."
                )
            if state in STATES_WITH_NODES and rec.nodes and not force:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Cannot delete QueuedResource {name} in state {state.name}: it still has node(s) "
                    f"({', '.join(n.rsplit('/', 1)[1] for n in rec.nodes)}). Delete the node(s) first, "
                    "or set force=true to delete them together with the queued resource.",
                )
            now = self.core.clock()
            self.core.capacity.release(name)
            rec.enqueued = False
            rec.provisioned_at = None
            self._set_node_states(rec, NodeState.DELETING)
            rec.deleting_until = now + self.delete_seconds
            self._set_state(rec, QrState.DELETING, now, Initiator.USER)
            return self._new_operation("delete", rec, now)

    def preempt(self, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            rec = self._lookup(name)
            if rec.plan.tier != "spot":
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"QueuedResource {name} is not a Spot ({rec.plan.tier}) queued resource; only Spot "
                    "TPUs can be preempted.",
                )
            if rec.state != QrState.ACTIVE:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"QueuedResource {name} is in state {QrState(rec.state).name}; only an ACTIVE one "
                    "can be preempted.",
                )
            self._suspend(rec, self.core.clock())
            log.info("QueuedResource %s: preempted (Spot capacity reclaimed)", name)
            return self.record(rec)

    # -- Node RPCs -------------------------------------------------------------------------
    def get_node(self, name: str) -> Any:
        with self.core.lock:
            self.core.tick()
            parts = name.split("/")
            if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "nodes":
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Invalid Node name {name!r}: expected projects/{{project}}/locations/{{zone}}/nodes/{{node}}.",
                )
            node = self.nodes.get(name)
            if node is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Node {name} does not exist.")
            out = NodePb()
            out.CopyFrom(node)
            return out

    def list_nodes(self, parent: str, page_size: int = 0, page_token: str = "") -> tuple[list[Any], str]:
        with self.core.lock:
            self.core.tick()
            parse_parent(parent)
            size, cursor = self._page(page_size, page_token)
            prefix = f"{parent}/nodes/"
            matches = [n for n in self.nodes if n.startswith(prefix) and self._node_seq[n] > cursor]
            page = matches[:size]
            token = str(self._node_seq[page[-1]]) if len(matches) > size else ""
            out = []
            for name in page:
                node = NodePb()
                node.CopyFrom(self.nodes[name])
                out.append(node)
            return out, token

    # -- control ---------------------------------------------------------------------------
    def record(self, rec: QueuedResourceRecord) -> dict[str, Any]:
        plan = rec.plan
        error = rec.qr.state.failed_data.error if rec.qr.state.HasField("failed_data") else None
        return {
            "kind": "QueuedResource",
            "name": rec.name,
            "project": plan.project,
            "location": plan.zone,
            "accelerator_type": plan.shape.accelerator_type,
            "chips": plan.chips,
            "node_count": plan.node_count,
            "tier": plan.tier,
            "reservation": plan.reservation,
            "pool": str(plan.pool),
            "labels": dict(rec.qr.tpu.node_spec[0].node.labels),
            "state": QrState(rec.state).name,
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "history": [{"state": s, "time": iso(t), "initiator": i} for s, t, i in rec.history],
            "error": {"code": error.code, "message": error.message} if error is not None else None,
            "nodes": list(rec.nodes),
            "provisioning_model": rec.flex.model if rec.flex else None,
            "max_run_seconds": rec.flex.max_run if rec.flex else None,
            "termination_time": iso(rec.flex.terminate_at) if rec.flex and rec.flex.terminate_at else None,
        }
