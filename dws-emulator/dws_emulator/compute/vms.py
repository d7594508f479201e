"""The VMs of the MIGs: creation by a resize request, deletion (run duration, ``deleteInstances``,
MIG delete) giving their GPUs back, and their reads (``instances.get``, ``listManagedInstances``)."""

from __future__ import annotations

import logging
import string
from typing import TYPE_CHECKING, Any

from ..core.clock import iso
from ..core.rest import not_found
from .records import Mig, ResizeRecord, Vm
from .resources import (
    DeleteInstancesPb,
    InstancePb,
    ManagedInstancePb,
    invalid,
    link,
    page,
    parse_body,
    strip_link,
    to_json,
)

if TYPE_CHECKING:
    from .validation import VmPlan

log = logging.getLogger("dws_emulator")

_SUFFIX_CHARS = string.ascii_lowercase + string.digits


class ComputeVms:
    """Mixed into :class:`~.state.ComputeState`; every method runs under ``core.lock``."""

    core: Any

    def __init__(self) -> None:
        self.instances: dict[str, Vm] = {}  # live VMs by path
        self._ips = 0

    # -- life cycle ------------------------------------------------------------------------
    def create_vm(
        self, mig: Mig, rec: ResizeRecord, template: Any, plan: VmPlan, now: float, zone: str | None = None
    ) -> Vm:
        """A RUNNING VM of ``mig`` for ``rec``, in ``zone`` (a reservation's) or the MIG's next zone;
        the MIG's target size grows."""
        rng = self.core.id_rng
        policy = mig.pb.distribution_policy
        if zone is None:
            zone = (
                mig.zones[0]
                if policy.target_shape == "ANY_SINGLE_ZONE"
                else mig.zones[mig.pb.target_size % len(mig.zones)]
            )
        while True:
            name = f"{mig.pb.base_instance_name}-{''.join(rng.choice(_SUFFIX_CHARS) for _ in range(4))}"
            if (
                name not in mig.vms
                and f"projects/{mig.project}/zones/{zone}/instances/{name}" not in self.instances
            ):
                break
        path = f"projects/{mig.project}/zones/{zone}/instances/{name}"
        self._ips += 1
        ip = f"10.128.{self._ips // 250}.{self._ips % 250 + 2}"
        props = template.properties
        vm = InstancePb(
            kind="compute#instance",
            id=rng.getrandbits(63),
            name=name,
            zone=link(f"projects/{mig.project}/zones/{zone}"),
            machine_type=link(f"projects/{mig.project}/zones/{zone}/machineTypes/{plan.machine_type}"),
            status="RUNNING",
            creation_timestamp=iso(now),
            last_start_timestamp=iso(now),
            self_link=link(path),
            cpu_platform="Intel Sapphire Rapids",
        )
        vm.scheduling.CopyFrom(props.scheduling)
        if props.HasField("reservation_affinity"):
            vm.reservation_affinity.CopyFrom(props.reservation_affinity)
        vm.labels.update(props.labels)
        vm.metadata.CopyFrom(props.metadata)
        vm.metadata.kind = "compute#metadata"
        vm.metadata.items.add(key="created-by", value=mig.path)
        network = strip_link(props.network_interfaces[0].network) if props.network_interfaces else ""
        network = network or "global/networks/default"
        vm.network_interfaces.add(
            kind="compute#networkInterface",
            name="nic0",
            network=link(network if network.startswith("projects/") else f"projects/{mig.project}/{network}"),
            network_i_p=ip,
            stack_type="IPV4_ONLY",
        )
        if plan.accelerator is not None:
            vm.guest_accelerators.add(
                accelerator_type=link(
                    f"projects/{mig.project}/zones/{zone}/acceleratorTypes/{plan.compute_accelerator}"
                ),
                accelerator_count=plan.gpus_per_vm,
            )
        record = Vm(name, zone, path, vm, mig, rec, plan.gpus_per_vm, ip, now)
        mig.vms[name] = record
        mig.pb.target_size += 1
        self.instances[path] = record
        log.info("Compute VM %s created (%s, %s)", path, plan.machine_type, ip)
        return record

    def delete_vms(self, vms: list[Vm], now: float) -> None:
        """Delete live VMs: their GPUs go back to the pool, their MIG's target size shrinks."""
        for vm in vms:
            if vm.deleted_at is not None:
                continue
            vm.deleted_at = now
            vm.pb.status = "TERMINATED"
            self.instances.pop(vm.path, None)
            if vm.mig.vms.pop(vm.name, None) is not None:
                vm.mig.pb.target_size -= 1
            log.info("Compute VM %s deleted", vm.path)
            rec = vm.request
            if rec is None:
                continue
            if vm.gpus:
                self.core.capacity.shrink(rec.holder, vm.gpus)
            if all(other.deleted_at is not None for other in rec.vms):
                rec.ended_at = now  # the last of its VMs is gone: nothing of it is held or billed
                rec.history.append(("VMS_DELETED", now))

    # -- reads and deleteInstances ---------------------------------------------------------
    def get_instance(self, project: str, zone: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            path = f"projects/{project}/zones/{zone}/instances/{name}"
            vm = self.instances.get(path)
            if vm is None:
                standalone = self.standalone_json(path)  # type: ignore[attr-defined]
                if standalone is None:
                    raise not_found(path)
                return standalone
            return to_json(vm.pb)

    def list_managed(self, scope_path: str, mig_name: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            mig = self._mig(scope_path, mig_name)  # type: ignore[attr-defined]
            vms = sorted(mig.vms.values(), key=lambda v: v.name)
            chunk, token = page(vms, query)
            items = [
                to_json(
                    ManagedInstancePb(
                        instance=vm.pb.self_link,
                        id=vm.pb.id,
                        name=vm.name,
                        instance_status=vm.pb.status,
                        current_action="NONE",
                    )
                )
                for vm in chunk
            ]
            out: dict[str, Any] = {"managedInstances": items} if items else {}
            if token:
                out["nextPageToken"] = token
            return out

    def delete_instances(self, scope_path: str, mig_name: str, body: Any, request_id: str) -> dict[str, Any]:
        """``deleteInstances``: the named VMs of the MIG are deleted (and their GPUs freed) at once."""
        project = scope_path.split("/")[1]
        with self.core.lock:
            self.core.tick()
            replayed = self._replayed(project, request_id)  # type: ignore[attr-defined]
            if replayed is not None:
                return replayed
            mig = self._mig(scope_path, mig_name)  # type: ignore[attr-defined]
            request = parse_body(
                body, DeleteInstancesPb, "instanceGroupManagersDeleteInstancesRequestResource"
            )
            chosen: list[Vm] = []
            for i, ref in enumerate(request.instances):
                path = strip_link(ref)
                if path.startswith("zones/"):
                    path = f"projects/{project}/{path}"
                name = path.rsplit("/", 1)[-1]
                vm = mig.vms.get(name)
                if vm is None or vm.path != path:
                    if request.skip_instances_on_validation_error:
                        continue
                    raise invalid(
                        f"instanceGroupManagersDeleteInstancesRequestResource.instances[{i}]",
                        ref,
                        f"The instance is not a member of the managed instance group '{mig.path}'.",
                    )
                chosen.append(vm)
            now = self.core.clock()
            self.delete_vms(chosen, now)
            op = self._operation(scope_path, "deleteInstances", mig.path, mig.pb.id, now)  # type: ignore[attr-defined]
            return self._reply(project, request_id, op)  # type: ignore[attr-defined]

    def vm_record(self, vm: Vm) -> dict[str, Any]:
        """A VM in the control API's request records."""
        return {
            "name": vm.name,
            "zone": vm.zone,
            "self_link": vm.path,
            "internal_ip": vm.internal_ip,
            "create_time": iso(vm.created_at),
            "deleted": vm.deleted_at is not None,
            "delete_time": iso(vm.deleted_at),
        }
