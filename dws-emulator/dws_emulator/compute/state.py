"""Compute Engine state: templates, MIGs, resize requests, their VMs and operations (see the package doc)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Container
from typing import Any

from ..core.api import Api, Core
from ..core.clock import Schedule, iso
from ..core.reservations import Reservation
from ..core.rest import RestError, RestRoute, not_found
from . import COMPUTE_SERVICE, METHODS
from .instances import ComputeInstances
from .records import Mig, ResizeRecord, Template
from .reserved import RESERVATION_ENDED, bound_reservation
from .resources import (
    InstanceGroupManagerPb,
    InstanceTemplatePb,
    ResizeRequestPb,
    check_name,
    compile_filter,
    copy,
    invalid,
    link,
    list_json,
    page,
    parse_body,
    region_of,
    stamp_parts,
    strip_link,
    to_json,
)
from .routes import compute_routes
from .validation import check_resize_request, check_template, run_seconds, vm_plan
from .vms import ComputeVms

log = logging.getLogger("dws_emulator")

CANCELLABLE = frozenset({"CREATING", "ACCEPTED"})
DELETABLE = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


class ComputeState(Api, ComputeVms, ComputeInstances):
    """The Compute Engine REST API on the shared core; every method runs under ``core.lock``."""

    name = "compute"
    services = {COMPUTE_SERVICE: METHODS}
    rest_service = COMPUTE_SERVICE

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        ComputeVms.__init__(self)
        ComputeInstances.__init__(self)
        self.templates: dict[str, Template] = {}
        self.migs: dict[str, Mig] = {}
        self.resize_requests: dict[str, ResizeRecord] = {}  # by path: the live one with that name
        self.all_requests: list[ResizeRecord] = []
        self._by_holder: dict[str, ResizeRecord] = {}
        self._due = Schedule()
        self._accepted: list[ResizeRecord] = []  # accepted in this tick: did they start at once?
        self.advice_factors: dict[str, float] = {}  # capacity advice: zone -> factor (control API)

    # -- registration ----------------------------------------------------------------------
    def owns(self, holder: str) -> bool:
        return holder in self._by_holder or self.standalone_owns(holder)

    def rest_routes(self) -> list[RestRoute]:
        return compute_routes(self)

    def control_methods(self) -> dict[str, Any]:
        return {"SetCapacityAdvice": self._control_advice}

    def _control_advice(self, body: dict[str, Any]) -> Any:
        zones = body.get("zones")
        if not isinstance(zones, dict) or not all(
            isinstance(v, (int, float)) and 0 <= v <= 1 for v in zones.values()
        ):
            raise invalid(
                "zones", str(zones), 'expected {"zones": {"us-east4-b": 0.8, ...}} with factors 0 to 1'
            )
        with self.core.lock:
            self.advice_factors.update({str(k): float(v) for k, v in zones.items()})
            return {"zones": dict(self.advice_factors)}

    def capacity_advice(self, project: str, region: str, body: Any) -> dict[str, Any]:
        """``regions.advice.capacity`` (:mod:`.advice`)."""
        from .advice import capacity_advice

        with self.core.lock:
            self.core.tick()
            return capacity_advice(self.core, region, body, self.advice_factors)

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return [(rec.created_at, self.record(rec)) for rec in self.all_requests] + [
            (vm.created_at, self.standalone_record(vm)) for vm in self.standalone_all
        ]

    # -- ids and operations (the store is the core's, shared with the other compute.v1 APIs) ------
    def new_id(self) -> int:
        return self.core.gce_operations.new_id()

    def _operation(self, scope_path: str, op_type: str, target: str, target_id: int, now: float) -> Any:
        return self.core.gce_operations.start(scope_path, op_type, target, target_id, now)

    def _reply(self, project: str, request_id: str, op: Any) -> dict[str, Any]:
        return self.core.gce_operations.reply(project, request_id, op)

    def _replayed(self, project: str, request_id: str) -> dict[str, Any] | None:
        return self.core.gce_operations.replayed(project, request_id)

    def get_operation(self, scope_path: str, name: str) -> dict[str, Any]:
        return self.core.gce_operations.get(scope_path, name)

    def wait_operation(self, scope_path: str, name: str, stopping: threading.Event) -> dict[str, Any]:
        """The operation once DONE, or as it is after ``MAX_WAIT_SECONDS`` (real time)."""
        return self.core.gce_operations.wait(scope_path, name, stopping)

    # -- tick hooks ------------------------------------------------------------------------
    def before_advance(self, now: float) -> None:
        self.standalone_due(now)
        for path in self._due.due(now):
            rec = self._by_holder.get(path)
            if rec is None:
                continue
            if rec.state == "CREATING":
                self._accept(rec, now)
            elif rec.run_until is not None and now >= rec.run_until:
                rec.run_until = None
                live = [vm for vm in rec.vms if vm.deleted_at is None]
                if live:
                    log.info("Compute resize request %s: run duration over, deleting its VMs", rec.path)
                    self.delete_vms(live, now)
            elif rec.run_until is not None:
                self._due.at(path, rec.run_until)

    def started(self, holder: str, now: float) -> None:
        if self.standalone_owns(holder):
            self.standalone_started(holder, now)
        else:
            self._succeed(self._by_holder[holder], now)

    def expired(self, holder: str, now: float) -> None:
        self.standalone_expired(holder, now)  # only standalone VMs wait with a deadline

    def after_advance(self, now: float) -> None:
        accepted, self._accepted = self._accepted, []
        for rec in accepted:
            if rec.state == "ACCEPTED":  # waits: its first attempt found too few GPUs, as the API reports it
                zone = f"projects/{rec.mig.project}/zones/{rec.mig.zones[0]}"
                where = f"The zone '{zone}' does not"
                if rec.reservation is not None:
                    where = f"The reservation '{rec.reservation.path}' does not (yet)"
                rec.pb.status.last_attempt.error.errors.add(
                    code="ZONE_RESOURCE_POOL_EXHAUSTED",
                    message=f"{where} have enough resources available to fulfill the "
                    "request. The resize request stays ACCEPTED and is retried until the capacity is "
                    "available or it is cancelled.",
                )

    # -- resize request life cycle ---------------------------------------------------------
    def _set_state(self, rec: ResizeRecord, state: str, now: float) -> None:
        old = rec.state
        rec.pb.state = state
        rec.history.append((state, now))
        log.info("Compute resize request %s: %s -> %s", rec.path, old or "new", state)

    def _fail(self, rec: ResizeRecord, code: str, message: str, now: float) -> None:
        # "The value [lastAttempt] is cleared when ResizeRequest transitions to the final state ...
        # If the final state is FAILED the error describing it will be stored in the "error" field
        # only" (compute v1 discovery, InstanceGroupManagerResizeRequestStatus.lastAttempt).
        rec.error = {"code": code, "message": message}
        rec.pb.status.error.errors.add(code=code, message=message)
        rec.pb.status.ClearField("last_attempt")
        rec.ended_at = now
        self._set_state(rec, "FAILED", now)

    def _accept(self, rec: ResizeRecord, now: float) -> None:
        template = self.templates.get(rec.mig.template_path)
        if template is None:
            self._fail(
                rec, "RESOURCE_NOT_FOUND", f"The resource '{rec.mig.template_path}' was not found", now
            )
            return
        plan = rec.plan = vm_plan(template.pb)
        if plan.not_flex_ready:
            self._fail(
                rec,
                "CONDITION_NOT_MET",
                f"Resize requests need an instance template for flex-start VMs (scheduling.provisioningModel "
                f"FLEX_START, scheduling.onHostMaintenance TERMINATE, scheduling.automaticRestart false) or "
                f"reservation-bound ones (RESERVATION_BOUND, TERMINATE, a specific reservation affinity); "
                f"instance template '{template.path}': {plan.not_flex_ready}.",
                now,
            )
            return
        pool = plan.pool(rec.mig.zones[0])
        if plan.reservation is not None:
            found = bound_reservation(self.core.reservations, rec.mig, plan)
            if isinstance(found, tuple):
                self._fail(rec, *found, now)
                return
            rec.reservation, pool = found, found.pool
            self.core.reservations.consume(rec.holder, found, "ResizeRequest")
        if pool is not None and not self.core.capacity.has_pool(pool):
            accel = f"projects/{rec.mig.project}/zones/{rec.mig.zones[0]}/acceleratorTypes/{plan.compute_accelerator}"
            self._fail(rec, "RESOURCE_NOT_FOUND", f"The resource '{accel}' was not found", now)
            return
        self._set_state(rec, "ACCEPTED", now)
        if pool is None:
            self._succeed(rec, now)  # no GPUs: nothing to wait for
        else:
            self.core.capacity.enqueue(rec.holder, pool, rec.pb.resize_by * plan.gpus_per_vm)
            self._accepted.append(rec)

    def _succeed(self, rec: ResizeRecord, now: float) -> None:
        assert rec.plan is not None
        template = self.templates[rec.mig.template_path]
        zone = rec.reservation.zone if rec.reservation is not None else None
        rec.vms = [
            self.create_vm(rec.mig, rec, template.pb, rec.plan, now, zone) for _ in range(rec.pb.resize_by)
        ]
        rec.pb.status.ClearField("last_attempt")
        rec.started_at = now
        if rec.reservation is None or rec.pb.HasField("requested_run_duration"):
            rec.run_until = now + rec.run_seconds
            self._due.at(rec.holder, rec.run_until)
        # else: reservation-bound VMs without a run duration live until the reservation ends
        self._set_state(rec, "SUCCEEDED", now)

    def reservation_ended(self, holder: str, reservation: Reservation, message: str, now: float) -> None:
        """A reservation-bound request's VMs are deleted (it stays SUCCEEDED and says nothing: its
        status is final); one still waiting for it FAILS with :data:`RESERVATION_ENDED`."""
        rec = self._by_holder.get(holder)
        if rec is None:
            return
        if rec.state in CANCELLABLE:
            self.core.capacity.release(holder)
            self._fail(rec, RESERVATION_ENDED, message, now)
        elif rec.state == "SUCCEEDED":
            rec.run_until = None
            rec.history.append(("RESERVATION_ENDED", now))
            self.delete_vms([vm for vm in rec.vms if vm.deleted_at is None], now)

    def _cancel(self, rec: ResizeRecord, now: float) -> None:
        self.core.capacity.release(rec.holder)
        rec.pb.status.ClearField("last_attempt")  # cleared at a final state, as for FAILED
        rec.ended_at = now
        self._set_state(rec, "CANCELLED", now)

    # -- templates -------------------------------------------------------------------------
    def insert_template(self, project: str, region: str | None, body: Any, request_id: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)
            if replayed is not None:
                return replayed
            template = parse_body(body, InstanceTemplatePb, "resource")
            check_template(template)
            scope = f"projects/{project}/regions/{region}" if region else f"projects/{project}/global"
            path = f"{scope}/instanceTemplates/{template.name}"
            if path in self.templates:
                raise RestError(409, "alreadyExists", f"The resource '{path}' already exists")
            now = self.core.clock()
            self._stamp(template, "compute#instanceTemplate", path, now)
            stamp_parts(template.properties)
            if region:
                template.region = link(f"projects/{project}/regions/{region}")
            self.templates[path] = Template(path, template)
            log.info("Compute instance template %s created", path)
            return self._reply(project, request_id, self._operation(scope, "insert", path, template.id, now))

    def get_template(self, project: str, region: str | None, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            scope = f"projects/{project}/regions/{region}" if region else f"projects/{project}/global"
            path = f"{scope}/instanceTemplates/{name}"
            template = self.templates.get(path)
            if template is None:
                raise not_found(path)
            return to_json(template.pb)

    # -- instance group managers -----------------------------------------------------------
    def _mig(self, scope_path: str, name: str) -> Mig:
        path = f"{scope_path}/instanceGroupManagers/{name}"
        mig = self.migs.get(path)
        if mig is None:
            raise not_found(path)
        return mig

    def _template_path(self, project: str, ref: str) -> str:
        path = strip_link(ref)
        if path.startswith(("global/", "regions/")):
            path = f"projects/{project}/{path}"
        return path

    def insert_mig(
        self, project: str, scope: str, location: str, body: Any, request_id: str
    ) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)
            if replayed is not None:
                return replayed
            mig = parse_body(body, InstanceGroupManagerPb, "resource")
            check_name(mig.name)
            scope_path = f"projects/{project}/{scope}/{location}"
            path = f"{scope_path}/instanceGroupManagers/{mig.name}"
            if path in self.migs:
                raise RestError(409, "alreadyExists", f"The resource '{path}' already exists")
            if not mig.instance_template:
                raise invalid("resource.instanceTemplate", "", "An instance template is required.")
            template_path = self._template_path(project, mig.instance_template)
            if template_path not in self.templates:
                raise not_found(template_path)
            if not mig.HasField("target_size"):  # required by insert (discovery: annotations)
                raise RestError(400, "required", "Required field 'resource.targetSize' not specified")
            if mig.target_size:
                raise invalid(
                    "resource.targetSize",
                    mig.target_size,
                    "The emulator creates MIGs at target size 0; grow them with resize requests.",
                )
            if scope == "zones":
                zones = [location]
            else:
                given = [strip_link(z.zone).rsplit("/", 1)[-1] for z in mig.distribution_policy.zones]
                for zone in given:
                    if region_of(zone) != location:
                        raise invalid("resource.distributionPolicy.zones", zone, f"Not a zone of {location}.")
                zones = given or [f"{location}-{suffix}" for suffix in "abc"]
                del mig.distribution_policy.zones[:]
                for zone in zones:
                    mig.distribution_policy.zones.add(zone=link(f"projects/{project}/zones/{zone}"))
                if not mig.distribution_policy.target_shape:
                    mig.distribution_policy.target_shape = "EVEN"
            now = self.core.clock()
            self._stamp(mig, "compute#instanceGroupManager", path, now)
            mig.instance_template = link(template_path)
            mig.instance_group = link(f"{scope_path}/instanceGroups/{mig.name}")
            mig.base_instance_name = mig.base_instance_name or mig.name
            mig.target_size = 0
            mig.status.is_stable = True
            mig.fingerprint = f"{self.core.id_rng.getrandbits(64):016x}"
            scope_link = link(scope_path)
            if scope == "zones":
                mig.zone = scope_link
            else:
                mig.region = scope_link
            self.migs[path] = Mig(path, project, scope, location, mig, template_path, zones)
            log.info("Compute instance group manager %s created (template %s)", path, template_path)
            return self._reply(project, request_id, self._operation(scope_path, "insert", path, mig.id, now))

    def _mig_json(self, mig: Mig) -> dict[str, Any]:
        out = copy(mig.pb)
        out.current_actions.none = len(mig.vms)
        return to_json(out)

    def get_mig(self, scope_path: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            return self._mig_json(self._mig(scope_path, name))

    def list_migs(self, scope_path: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            matches = compile_filter(query.get("filter", ""), ("name",))
            prefix = f"{scope_path}/instanceGroupManagers/"
            migs = sorted(
                (m for p, m in self.migs.items() if p.startswith(prefix) and matches({"name": m.pb.name})),
                key=lambda m: m.pb.name,
            )
            chunk, token = page(migs, query)
            kind = (
                "regionInstanceGroupManagerList" if "/regions/" in scope_path else "instanceGroupManagerList"
            )
            return list_json(f"compute#{kind}", prefix.rstrip("/"), [self._mig_json(m) for m in chunk], token)

    def delete_mig(self, scope_path: str, name: str, request_id: str) -> dict[str, Any]:
        project = scope_path.split("/")[1]
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)
            if replayed is not None:
                return replayed
            mig = self._mig(scope_path, name)
            now = self.core.clock()
            self.delete_vms(list(mig.vms.values()), now)
            for rec in list(self.resize_requests.values()):
                if rec.mig is mig:
                    if rec.state in CANCELLABLE:
                        self._cancel(rec, now)
                    self._forget(rec, now)
            mig.deleted = True
            del self.migs[mig.path]
            log.info("Compute instance group manager %s deleted", mig.path)
            return self._reply(
                project, request_id, self._operation(scope_path, "delete", mig.path, mig.pb.id, now)
            )

    # -- resize requests -------------------------------------------------------------------
    def insert_resize(self, scope_path: str, mig_name: str, body: Any, request_id: str) -> dict[str, Any]:
        project = scope_path.split("/")[1]
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)
            if replayed is not None:
                return replayed
            mig = self._mig(scope_path, mig_name)
            request = parse_body(body, ResizeRequestPb, "resource")
            check_resize_request(request)
            path = f"{mig.path}/resizeRequests/{request.name}"
            if path in self.resize_requests:
                raise RestError(409, "alreadyExists", f"The resource '{path}' already exists")
            now = self.core.clock()
            self._stamp(request, "compute#instanceGroupManagerResizeRequest", path, now)
            request.self_link_with_id = link(f"{mig.path}/resizeRequests/{request.id}")
            if mig.scope == "zones":
                request.zone = link(mig.scope_path)
            else:
                request.region = link(mig.scope_path)
            request.ClearField("status")
            request.ClearField("state")
            rec = ResizeRecord(path, f"{path}#{request.id}", mig, request, now, run_seconds(request))
            self.resize_requests[path] = rec
            self.all_requests.append(rec)
            self._by_holder[rec.holder] = rec
            self._set_state(rec, "CREATING", now)
            self._due.next_tick(rec.holder)
            op = self._operation(scope_path, "insert", path, request.id, now)
            return self._reply(project, request_id, op)

    def _resize(self, scope_path: str, mig_name: str, name: str) -> ResizeRecord:
        mig = self._mig(scope_path, mig_name)
        path = f"{mig.path}/resizeRequests/{name}"
        rec = self.resize_requests.get(path)
        if rec is None:
            raise not_found(path)
        return rec

    def get_resize(self, scope_path: str, mig_name: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            return to_json(self._resize(scope_path, mig_name, name).pb)

    def list_resize(self, scope_path: str, mig_name: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            mig = self._mig(scope_path, mig_name)
            matches = compile_filter(query.get("filter", ""), ("name", "state"))
            recs = [
                r
                for r in self.resize_requests.values()
                if r.mig is mig and matches({"name": r.pb.name, "state": r.state})
            ]
            recs.sort(key=lambda r: r.pb.name)
            chunk, token = page(recs, query)
            return list_json(
                "compute#regionInstanceGroupManagerResizeRequestList"
                if "/regions/" in mig.path
                else "compute#instanceGroupManagerResizeRequestList",
                f"{mig.path}/resizeRequests",
                [to_json(r.pb) for r in chunk],
                token,
            )

    def _stamp(self, resource: Any, kind: str, path: str, now: float) -> None:
        """The fields the server sets on every resource it creates: kind, id, creation time, link."""
        resource.kind = kind
        resource.id = self.new_id()
        resource.creation_timestamp = iso(now)
        resource.self_link = link(path)

    def cancel_resize(self, scope_path: str, mig_name: str, name: str, request_id: str) -> dict[str, Any]:
        return self._change_resize(
            scope_path,
            mig_name,
            name,
            request_id,
            "cancel",
            CANCELLABLE,
            "in state ACCEPTED or CREATING can be cancelled.",
        )

    def delete_resize(self, scope_path: str, mig_name: str, name: str, request_id: str) -> dict[str, Any]:
        return self._change_resize(
            scope_path,
            mig_name,
            name,
            request_id,
            "delete",
            DELETABLE,
            "in state SUCCEEDED, FAILED or CANCELLED can be deleted (cancel it first).",
        )

    def _change_resize(
        self,
        scope_path: str,
        mig_name: str,
        name: str,
        request_id: str,
        verb: str,
        allowed: Container[str],
        rule: str,
    ) -> dict[str, Any]:
        """Cancel or delete a resize request: ``requestId`` replayed, refused (412) outside ``allowed``."""
        project = scope_path.split("/")[1]
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)
            if replayed is not None:
                return replayed
            rec = self._resize(scope_path, mig_name, name)
            if rec.state not in allowed:
                raise RestError(
                    412,
                    "conditionNotMet",
                    f"The resize request '{rec.path}' is in state {rec.state}; only a resize request {rule}",
                )
            now = self.core.clock()
            (self._cancel if verb == "cancel" else self._forget)(rec, now)
            op = self._operation(scope_path, verb, rec.path, rec.pb.id, now)
            return self._reply(project, request_id, op)

    def _forget(self, rec: ResizeRecord, now: float) -> None:
        """The request is deleted (its VMs live on, until their run duration ends)."""
        rec.deleted = True
        rec.history.append(("DELETED", now))
        if self.resize_requests.get(rec.path) is rec:
            del self.resize_requests[rec.path]
        log.info("Compute resize request %s: deleted", rec.path)

    # -- control ---------------------------------------------------------------------------
    def record(self, rec: ResizeRecord) -> dict[str, Any]:
        """The control API's record: ``start_time`` when its VMs were created, ``end_time`` when it
        ended without VMs (FAILED, CANCELLED) or its last VM was deleted; ``instances`` with each
        VM's zone, IP and deletion; history states plus ``VMS_DELETED`` and ``DELETED``."""
        plan = rec.plan
        mig = rec.mig
        vms_deleted = bool(rec.vms) and all(vm.deleted_at is not None for vm in rec.vms)
        return {
            "kind": "ResizeRequest",
            "name": rec.path,
            "display_name": rec.pb.name,
            "project": mig.project,
            "location": mig.location,
            "labels": {},
            "strategy": "RESERVATION_BOUND" if plan and plan.reservation else "FLEX_START",
            "instance_group_manager": mig.path,
            "instance_template": mig.template_path,
            "machine_type": plan.machine_type if plan else None,
            "accelerator_type": plan.accelerator if plan else None,
            "accelerator_count": rec.pb.resize_by * plan.gpus_per_vm if plan else 0,
            "resize_by": rec.pb.resize_by,
            "requested_run_duration_seconds": rec.run_seconds,
            "pool": str(rec.reservation.pool)
            if rec.reservation is not None
            else (str(plan.pool(mig.zones[0])) if plan and plan.accelerator else None),
            "reservation": rec.reservation.path if rec.reservation is not None else None,
            "state": rec.state,
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "start_time": iso(rec.started_at),
            "end_time": iso(rec.ended_at),
            "instances": [self.vm_record(vm) for vm in rec.vms],
            "vms_deleted": vms_deleted,
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": rec.error,
        }
