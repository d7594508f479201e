"""Standalone Compute Engine VMs (``instances.insert``, ``get``, ``list``, ``delete``): flex-start
VMs without a MIG (GA 2025-09-25), and VMs without GPUs.

From the compute v1 discovery document (revision 20261106) and the flex-start pages:

* a flex-start VM is an ``Instance`` with ``scheduling.provisioningModel`` FLEX_START,
  ``scheduling.maxRunDuration`` (10 minutes to 7 days) and ``scheduling.instanceTerminationAction``
  (STOP or DELETE); ``params.requestValidForDuration`` is how long it may wait for capacity
  (90 s to 2 h, or 0: only if free now). The emulator asks, as for a resize request's template,
  ``onHostMaintenance`` TERMINATE and ``automaticRestart`` false (every documented example sets
  them; that the API insists is not verified), and treats an absent wait as 0.
* While it waits the VM is ``PENDING`` (only with a wait of 90 s or more); with capacity it goes
  PROVISIONING, STAGING, RUNNING (the emulator goes to RUNNING at once and records the three in its
  history). Not obtained by the end of its wait: "Compute Engine deletes the Flex-start VM". With
  a wait of 0 and no capacity the insert's operation ends with an error and no VM is left. The
  operation's outcome for a wait that ends without capacity is not documented: here the insert
  operation is DONE once the PENDING VM exists, and the VM just disappears.
* At the end of ``maxRunDuration``: DELETE deletes the VM; STOP leaves it TERMINATED (its GPUs
  go back). A GPU VM draws from its region's pool of the GPU, the same pools the MIGs' VMs use.

VMs with GPUs other than flex-start are refused (the emulator models no on-demand GPU capacity);
a VM a MIG created is deleted through its MIG (``deleteInstances``), not here. Every method runs
under ``core.lock`` (mixed into :class:`~.state.ComputeState`).
"""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass, field
from typing import Any

from ..core.clock import Schedule, iso
from ..core.rest import RestError, not_found
from ..facts import COMPUTE_NAME, MACHINE_GPUS, VERTEX_NAME
from .resources import (
    InstancePb,
    check_name,
    compile_filter,
    invalid,
    link,
    list_json,
    page,
    parse_body,
    stamp_parts,
    to_json,
)
from .validation import MAX_RUN_SECONDS, MIN_RUN_SECONDS

log = logging.getLogger("dws_emulator")

#: ``params.requestValidForDuration``: 0, or 90 s to 2 h.
MIN_WAIT_SECONDS = 90
MAX_WAIT_SECONDS = 2 * 3600
TERMINATION_ACTIONS = ("STOP", "DELETE")
_LIST_FIELDS = ("name", "status", "labels.*")
_ID_CHARS = string.ascii_lowercase + string.digits


@dataclass
class Standalone:
    """One standalone VM ever inserted (``holder``: its capacity holder id, unique if re-created)."""

    path: str
    holder: str
    project: str
    zone: str
    pb: Any
    accelerator: str | None
    gpus: int
    wait_seconds: float
    run_seconds: float | None
    action: str
    created_at: float
    history: list[tuple[str, float]] = field(default_factory=list)
    started_at: float | None = None
    run_until: float | None = None
    deleted_at: float | None = None
    why_deleted: str = ""


def _seconds(duration: Any) -> float:
    return float(duration.seconds) + duration.nanos / 1e9


def _flex_problems(sched: Any) -> str:
    problems = []
    if sched.on_host_maintenance != "TERMINATE":
        problems.append(
            f"scheduling.onHostMaintenance is {sched.on_host_maintenance or 'unset'}, not TERMINATE"
        )
    if not sched.HasField("automatic_restart") or sched.automatic_restart:
        problems.append("scheduling.automaticRestart is not false")
    return "; ".join(problems)


def check_instance(inst: Any) -> tuple[str, float, float | None, str]:
    """A standalone VM body: its machine type, wait, run duration and termination action."""
    check_name(inst.name)
    machine = inst.machine_type.rsplit("/", 1)[-1]
    if not machine:
        raise RestError(400, "required", "Required field 'resource.machineType' not specified")
    sched = inst.scheduling
    wait = (
        _seconds(inst.params.request_valid_for_duration)
        if inst.params.HasField("request_valid_for_duration")
        else 0.0
    )
    if wait and not MIN_WAIT_SECONDS <= wait <= MAX_WAIT_SECONDS:
        raise invalid(
            "resource.params.requestValidForDuration",
            f"{wait:g}s",
            f"Must be 0 (only if capacity is available now) or between {MIN_WAIT_SECONDS} seconds and "
            f"{MAX_WAIT_SECONDS} seconds (2 hours).",
        )
    if sched.provisioning_model != "FLEX_START":
        if machine in MACHINE_GPUS or inst.guest_accelerators:
            raise invalid(
                "resource.scheduling.provisioningModel",
                sched.provisioning_model or "STANDARD",
                "The emulator creates GPU VMs only as flex-start VMs (FLEX_START).",
            )
        if wait:
            raise invalid(
                "resource.params.requestValidForDuration", f"{wait:g}s", "Only flex-start VMs wait."
            )
        return machine, 0.0, None, ""
    problems = _flex_problems(sched)
    if problems:
        raise RestError(400, "conditionNotMet", f"A flex-start VM needs {problems}.")
    if not sched.HasField("max_run_duration"):
        raise RestError(400, "required", "Flex-start VMs need scheduling.maxRunDuration.")
    run = _seconds(sched.max_run_duration)
    if not MIN_RUN_SECONDS <= run <= MAX_RUN_SECONDS:
        raise invalid(
            "resource.scheduling.maxRunDuration",
            f"{run:g}s",
            f"Must be between {MIN_RUN_SECONDS} seconds (10 minutes) and {MAX_RUN_SECONDS} seconds (7 days).",
        )
    action = sched.instance_termination_action
    if action not in TERMINATION_ACTIONS:
        raise invalid(
            "resource.scheduling.instanceTerminationAction",
            action or "unset",
            "A flex-start VM with a maxRunDuration needs instanceTerminationAction STOP or DELETE.",
        )
    return machine, wait, run, action


def _gpus(machine: str, inst: Any) -> tuple[str | None, int]:
    """The GPUs of a VM: an accelerator-optimized machine's own, else its ``guestAccelerators``."""
    row = MACHINE_GPUS.get(machine)
    if row is not None:
        return row
    if not inst.guest_accelerators:
        return None, 0
    name = inst.guest_accelerators[0].accelerator_type.rsplit("/", 1)[-1]
    if name not in VERTEX_NAME:
        raise invalid(
            "resource.guestAccelerators[0].acceleratorType",
            name,
            f"Unknown accelerator type; expected one of: {', '.join(VERTEX_NAME)}.",
        )
    return VERTEX_NAME[name], sum(a.accelerator_count for a in inst.guest_accelerators)


class ComputeInstances:
    """Mixed into :class:`~.state.ComputeState`, beside the MIGs' VMs (:class:`~.vms.ComputeVms`)."""

    core: Any
    instances: dict[str, Any]  # the MIGs' live VMs by path (ComputeVms)
    _ips: int  # internal IPs handed out (ComputeVms)

    def __init__(self) -> None:
        self.standalone: dict[str, Standalone] = {}  # live standalone VMs by path
        self.standalone_all: list[Standalone] = []
        self._standalone_by_holder: dict[str, Standalone] = {}
        self._standalone_due = Schedule()

    # -- life cycle ------------------------------------------------------------------------
    def _note(self, vm: Standalone, status: str, now: float) -> None:
        vm.history.append((status, now))
        log.info("Compute instance %s: %s", vm.path, status)

    def _run(self, vm: Standalone, now: float) -> None:
        for status in ("PROVISIONING", "STAGING", "RUNNING"):
            self._note(vm, status, now)
        vm.pb.status = "RUNNING"
        vm.pb.last_start_timestamp = iso(now)
        vm.started_at = now
        if vm.run_seconds is not None:
            vm.run_until = now + vm.run_seconds
            vm.pb.scheduling.termination_time = iso(vm.run_until)
            self._standalone_due.at(vm.holder, vm.run_until)

    def _gone(self, vm: Standalone, now: float, why: str) -> None:
        self.core.capacity.release(vm.holder)
        vm.deleted_at, vm.why_deleted = now, why
        vm.pb.status = "TERMINATED"
        self.standalone.pop(vm.path, None)
        self._note(vm, f"DELETED ({why})", now)

    def standalone_owns(self, holder: str) -> bool:
        return holder in self._standalone_by_holder

    def standalone_started(self, holder: str, now: float) -> None:
        self._run(self._standalone_by_holder[holder], now)

    def standalone_expired(self, holder: str, now: float) -> None:
        """Not obtained within ``requestValidForDuration``: the VM is deleted."""
        self._gone(self._standalone_by_holder[holder], now, "no capacity within requestValidForDuration")

    def standalone_due(self, now: float) -> None:
        """Run durations that ended: DELETE deletes the VM, STOP stops it (its GPUs go back)."""
        for holder in self._standalone_due.due(now):
            vm = self._standalone_by_holder.get(holder)
            if vm is None or vm.deleted_at is not None or vm.run_until is None or now < vm.run_until:
                continue
            vm.run_until = None
            if vm.action == "DELETE":
                self._gone(vm, now, "maxRunDuration ended")
            else:
                self.core.capacity.release(vm.holder)
                vm.pb.status = "TERMINATED"
                vm.pb.last_stop_timestamp = iso(now)
                self._note(vm, "TERMINATED (maxRunDuration ended)", now)

    # -- the API ---------------------------------------------------------------------------
    def insert_instance(self, project: str, zone: str, body: Any, request_id: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)  # type: ignore[attr-defined]
            if replayed is not None:
                return replayed
            inst = parse_body(body, InstancePb, "resource")
            machine, wait, run, action = check_instance(inst)
            path = f"projects/{project}/zones/{zone}/instances/{inst.name}"
            if path in self.standalone or path in self.instances:
                raise RestError(409, "alreadyExists", f"The resource '{path}' already exists")
            accelerator, gpus = _gpus(machine, inst)
            now = self.core.clock()
            self._stamp(inst, "compute#instance", path, now)  # type: ignore[attr-defined]
            inst.zone = link(f"projects/{project}/zones/{zone}")
            inst.machine_type = link(f"projects/{project}/zones/{zone}/machineTypes/{machine}")
            self._attach(inst, project, zone, accelerator, gpus)
            holder = f"{path}#{inst.id}"
            vm = Standalone(path, holder, project, zone, inst, accelerator, gpus, wait, run, action, now)
            scope = f"projects/{project}/zones/{zone}"
            pool = None if accelerator is None else f"{zone.rsplit('-', 1)[0]}/{accelerator}"
            if accelerator is not None and not self.core.capacity.has_pool(pool):
                raise not_found(f"{scope}/acceleratorTypes/{COMPUTE_NAME.get(accelerator, accelerator)}")
            op = self._operation(scope, "insert", path, inst.id, now)  # type: ignore[attr-defined]
            if pool is not None and wait < MIN_WAIT_SECONDS:
                if not self.core.capacity.acquire_now(holder, pool, gpus):
                    op.error.errors.add(
                        code="ZONE_RESOURCE_POOL_EXHAUSTED",
                        message=f"The zone '{scope}' does not have enough resources available to fulfill "
                        "the request now, and the request asked not to wait (requestValidForDuration 0).",
                    )
                    return self._reply(project, request_id, op)  # type: ignore[attr-defined]
                pool = None
            self.standalone[path] = vm
            self.standalone_all.append(vm)
            self._standalone_by_holder[holder] = vm
            if pool is None:
                self._run(vm, now)
            else:
                inst.status = "PENDING"
                self._note(vm, "PENDING", now)
                self.core.capacity.enqueue(holder, pool, gpus, max_wait=wait)
            return self._reply(project, request_id, op)  # type: ignore[attr-defined]

    def _attach(self, inst: Any, project: str, zone: str, accelerator: str | None, gpus: int) -> None:
        """What the server fills in: the GPUs of an accelerator-optimized machine, a network
        interface with an internal IP, the kinds of the parts."""
        if accelerator is not None and not inst.guest_accelerators:
            inst.guest_accelerators.add(
                accelerator_type=link(
                    f"projects/{project}/zones/{zone}/acceleratorTypes/{COMPUTE_NAME.get(accelerator, accelerator)}"
                ),
                accelerator_count=gpus,
            )
        if not inst.network_interfaces:
            inst.network_interfaces.add(network=link(f"projects/{project}/global/networks/default"))
        self._ips += 1
        nic = inst.network_interfaces[0]
        nic.name = nic.name or "nic0"
        nic.network_i_p = f"10.128.{self._ips // 250}.{self._ips % 250 + 2}"
        stamp_parts(inst)

    def standalone_json(self, path: str) -> dict[str, Any] | None:
        vm = self.standalone.get(path)
        return None if vm is None else to_json(vm.pb)

    def list_instances(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            matches = compile_filter(query.get("filter", ""), _LIST_FIELDS)
            scope = f"projects/{project}/zones/{zone}/instances/"
            live = [vm.pb for p, vm in self.standalone.items() if p.startswith(scope)]
            live += [vm.pb for p, vm in self.instances.items() if p.startswith(scope)]
            chosen = [
                pb
                for pb in sorted(live, key=lambda pb: pb.name)
                if matches(
                    {"name": pb.name, "status": pb.status, **{f"labels.{k}": v for k, v in pb.labels.items()}}
                )
            ]
            chunk, token = page(chosen, query)
            return list_json("compute#instanceList", scope.rstrip("/"), [to_json(pb) for pb in chunk], token)

    def delete_instance(self, project: str, zone: str, name: str, request_id: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)  # type: ignore[attr-defined]
            if replayed is not None:
                return replayed
            path = f"projects/{project}/zones/{zone}/instances/{name}"
            if path in self.instances:
                raise RestError(
                    400,
                    "resourceInUseByAnotherResource",
                    f"The instance '{path}' is managed by an instance group: delete it with the group's "
                    "deleteInstances.",
                )
            vm = self.standalone.get(path)
            if vm is None:
                raise not_found(path)
            now = self.core.clock()
            self._gone(vm, now, "deleted")
            op = self._operation(f"projects/{project}/zones/{zone}", "delete", path, vm.pb.id, now)  # type: ignore[attr-defined]
            return self._reply(project, request_id, op)  # type: ignore[attr-defined]

    def standalone_record(self, vm: Standalone) -> dict[str, Any]:
        """A standalone VM in the control API's request records."""
        return {
            "kind": "Instance",
            "name": vm.path,
            "display_name": vm.pb.name,
            "project": vm.project,
            "location": vm.zone,
            "labels": dict(vm.pb.labels),
            "strategy": vm.pb.scheduling.provisioning_model or "STANDARD",
            "machine_type": vm.pb.machine_type.rsplit("/", 1)[-1],
            "accelerator_type": vm.accelerator,
            "accelerator_count": vm.gpus,
            "request_valid_for_seconds": vm.wait_seconds,
            "max_run_duration_seconds": vm.run_seconds,
            "termination_action": vm.action or None,
            "state": "DELETED" if vm.deleted_at is not None else vm.pb.status,
            "deleted": vm.deleted_at is not None,
            "why_deleted": vm.why_deleted or None,
            "create_time": iso(vm.created_at),
            "start_time": iso(vm.started_at),
            "end_time": iso(vm.deleted_at),
            "internal_ip": vm.pb.network_interfaces[0].network_i_p if vm.pb.network_interfaces else None,
            "history": [{"state": state, "time": iso(when)} for state, when in vm.history],
        }
