"""Compute Engine flex-start VMs without a MIG: a set of standalone VMs made as one request.

Compute Engine has no resource for "N VMs at once" outside a MIG, so the request is the set: the
VMs ``<set>-0`` ... ``<set>-<N-1>`` of one zone, each an ``instances.insert`` with the FLEX_START
provisioning model, ``params.requestValidForDuration`` (the wait, at most 2 hours),
``scheduling.maxRunDuration`` and ``instanceTerminationAction``, and labels naming the task
instance, the set (:data:`LABEL_SET`) and its size (:data:`LABEL_SET_SIZE`). The set's name is
``projects/P/zones/Z/instances/<set>``: the members' common prefix, not a resource.

What the set is, from its members (:data:`INSTANCE_SET_STATES`), all or nothing:

* ``PENDING``: every member exists, one still waits for capacity (``PENDING``);
* ``STARTING``: every member got capacity, one is not RUNNING yet (PROVISIONING, STAGING);
* ``RUNNING``: all N are RUNNING: the capacity is held (and billed);
* ``INCOMPLETE``: a member is gone, or stopped, before all N ran. Compute Engine deletes a VM whose
  wait ended without capacity, so some VMs obtained and some not is capacity not obtained: the
  adapter deletes the rest (``release_failed``), and the task says how many it had.

The shared poller lists the zone's provider-managed VMs once per interval (one list for every set
waiting there) and groups them by set. google-cloud-compute has no async client: the async half
runs in :mod:`.compute_base`'s one thread pool.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.compute_base import ComputeBackend, _when, in_pool
from airflow_provider_dws.errors import RequestAlreadyExistsError, RequestNotFoundError
from airflow_provider_dws.scheduling.identity import (
    LABEL_KEY,
    LABEL_MANAGED,
    RequestIdentity,
    attempt_name,
    is_attempt_of,
    parse_attempt_name,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings, StateTable

if TYPE_CHECKING:
    from google.cloud.compute_v1 import Instance

log = logging.getLogger(__name__)

#: The label naming a VM's set, and the one saying how many VMs the set has.
LABEL_SET = "dws_vms"
LABEL_SET_SIZE = "dws_vms_size"
#: A set's name is at most this long, leaving room for ``-<index>`` (up to 3 digits) in 63.
SET_NAME_MAX = 59
#: VMs per list page.
LIST_PAGE_SIZE = 500
_CALL_NAMESPACE = uuid.UUID("3d3f8f5e-64a4-4f8e-9f46-8a7b6f1f0c21")

#: A member's status that means it will not run (before all N ran: the set is INCOMPLETE).
_STOPPED = frozenset({"STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED", "REPAIRING"})

INSTANCE_SET_STATE_PHASES: dict[str, Phase] = {
    "PENDING": Phase.WAITING,
    "STARTING": Phase.WAITING,
    "RUNNING": Phase.RUNNING,
    "INCOMPLETE": Phase.NOT_OBTAINED,
}


def classify_instance_set(state: str, *, message: str = "") -> Outcome:
    """A set's state as an outcome: INCOMPLETE is capacity not obtained (all or nothing)."""
    phase = INSTANCE_SET_STATE_PHASES.get(state, Phase.WAITING)
    failure = FailureKind.CAPACITY_NOT_OBTAINED if phase is Phase.NOT_OBTAINED else None
    return Outcome(phase, failure, message)


#: The states of a set of standalone flex-start VMs (see the module's docstring).
INSTANCE_SET_STATES = StateTable("compute_instance_set", INSTANCE_SET_STATE_PHASES, classify_instance_set)


def set_name(identity: RequestIdentity) -> str:
    """The set of this submission: ``dws-<task>-<16 hex>-t<try>-a<attempt>``, at most :data:`SET_NAME_MAX`."""
    return attempt_name(identity.queued_resource_base(), identity.try_number, identity.attempt, SET_NAME_MAX)


def member_names(name: str, count: int) -> list[str]:
    """The VM names of set ``name`` (short or full) of ``count`` VMs."""
    short = name.rsplit("/", 1)[-1]
    return [f"{short}-{i}" for i in range(count)]


def parse_set_name(name: str) -> tuple[str, str, str]:
    """``projects/P/zones/Z/instances/S`` -> ``(P, Z, S)``."""
    parts = name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "zones" or parts[4] != "instances":
        raise ValueError(f"not a Compute Engine VM set name: {name!r}")
    return parts[1], parts[3], parts[5]


def set_status(
    name: str, members: Sequence[Instance], size: int, machine: str | None = None
) -> RequestStatus:
    """What the set ``name`` of ``size`` VMs is, from the members that exist (no API call)."""
    from airflow_provider_dws.backends import compute_groups as groups

    statuses = [str(m.status) for m in members]
    running = statuses.count("RUNNING")
    if members and len(members) == size and running == size:
        state, message = "RUNNING", ""
    elif not members or len(members) < size or any(s in _STOPPED for s in statuses):
        state = "INCOMPLETE"
        message = (
            f"{running} of {size} VMs were running when the others were gone or stopped (Compute Engine "
            "deletes a flex-start VM whose wait ended without capacity); all or nothing: the rest are "
            "deleted"
            if members
            else f"none of {f'the {size}' if size else 'its'} VMs exists: their wait ended without "
            "capacity, or they were deleted"
        )
    else:
        state, message = ("PENDING" if "PENDING" in statuses else "STARTING"), ""
    outcome = INSTANCE_SET_STATES.classify(state, message=message)
    created = [t for t in (_when(m.creation_timestamp) for m in members) if t is not None]
    started = [t for t in (_when(m.last_start_timestamp) for m in members) if t is not None]
    now = datetime.now(timezone.utc)
    summaries = [groups.instance_summary(m) for m in sorted(members, key=lambda m: m.name)]
    parsed = parse_attempt_name(name.rsplit("/", 1)[-1])
    first = members[0] if members else None
    details: dict[str, Any] = {
        "location": parse_set_name(name)[1],
        "count": size,
        "obtained": running,
        "machine_type": summaries[0]["machine_type"] if summaries else machine,
        "run_seconds": _run_seconds(first),
        "max_wait_seconds": _wait_seconds(first),
        "attempt": parsed[2] if parsed else 1,
    }
    if state == "RUNNING":
        details[RESULT] = set_result(name, summaries, details)
    return RequestStatus(
        name=name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=min(created) if created else None,
            started=max(started) if state == "RUNNING" and started else None,
            finished=now if outcome.phase.terminal else None,
        ),
        description=f"{size} x {details['machine_type'] or 'VM'} in {details['location']}",
        details=details,
    )


def _run_seconds(member: Any) -> int | None:
    if member is None or "max_run_duration" not in member.scheduling:
        return None
    return int(member.scheduling.max_run_duration.seconds)


def _wait_seconds(member: Any) -> int | None:
    if member is None or "request_valid_for_duration" not in member.params:
        return None
    return int(member.params.request_valid_for_duration.seconds)


def set_result(name: str, vms: list[dict[str, Any]], details: Mapping[str, Any]) -> dict[str, Any]:
    """What a task whose set is RUNNING returns: the set and its VMs (names, zones, internal IPs,
    machine type, GPUs)."""
    project, zone, _ = parse_set_name(name)
    return {
        "instance_set": name,
        "project_id": project,
        "zone": zone,
        "count": details.get("count"),
        "run_duration_seconds": details.get("run_seconds"),
        "machine_type": vms[0]["machine_type"] if vms else details.get("machine_type"),
        "accelerators": vms[0]["accelerators"] if vms else [],
        "gpus": sum(a["count"] for vm in vms for a in vm["accelerators"]),
        "instances": vms,
        "instance_names": [vm["name"] for vm in vms],
        "instance_urls": [vm["self_link"] for vm in vms],
        "internal_ips": [vm["internal_ip"] for vm in vms if vm["internal_ip"]],
    }


def instances_from_spec(spec: Mapping[str, Any], zone: str) -> list[Instance]:
    """The VMs of a request spec (the adapter's ``request_spec``): one per member name."""
    from google.cloud import compute_v1

    from airflow_provider_dws.backends import compute_groups as groups

    vm = groups.VmSpec(**spec["vms"])
    scheduling = compute_v1.Scheduling(
        provisioning_model="FLEX_START",
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
        instance_termination_action=str(spec["termination_action"]),
        max_run_duration=compute_v1.Duration(seconds=int(spec["max_run_seconds"])),
    )
    props = groups.vm_properties(vm, scheduling, zone)
    made = []
    for member in member_names(str(spec["name"]), int(spec["count"])):
        made.append(
            compute_v1.Instance(
                name=member,
                description=str(spec.get("description") or ""),
                machine_type=props.machine_type,
                disks=list(props.disks),
                network_interfaces=list(props.network_interfaces),
                guest_accelerators=list(props.guest_accelerators),
                service_accounts=list(props.service_accounts),
                metadata=props.metadata if "metadata" in props else None,
                scheduling=scheduling,
                labels={**dict(props.labels), **dict(spec["labels"])},
                params=compute_v1.InstanceParams(
                    request_valid_for_duration=compute_v1.Duration(seconds=int(spec["wait_seconds"]))
                ),
            )
        )
    return made


class ComputeInstanceSetBackend(ComputeBackend):
    """Create, read, list and delete sets of standalone flex-start VMs in one zone."""

    kind = "compute_instance_set"
    location_key = "location"  # a zone
    call_namespace = _CALL_NAMESPACE

    def name_of(self, short: str) -> str:
        """The full name of set ``short`` here."""
        return f"projects/{self.project_id}/zones/{self.location}/instances/{short}"

    def _api(self) -> Any:
        return self.hook.get_instances_client()

    def _list_message(self, label_filter: str) -> Any:
        from google.cloud import compute_v1

        return compute_v1.ListInstancesRequest(
            project=self.project_id, zone=self.location, filter=label_filter, max_results=LIST_PAGE_SIZE
        )

    def _members(self, label_filter: str) -> list[Any]:
        """Every VM of this zone the filter selects (all pages), retried."""
        api = self._api()

        def list_all() -> list[Any]:
            return list(api.list(request=self._list_message(label_filter), timeout=self.rpc_timeout))

        return self._call(f"list the VMs of {self.location} ({label_filter})", list_all)

    @staticmethod
    def _grouped(members: Iterable[Any]) -> dict[str, tuple[list[Any], int]]:
        """Members by set, with each set's size (from its members' labels)."""
        sets: dict[str, tuple[list[Any], int]] = {}
        for vm in members:
            labels = dict(vm.labels)
            short = labels.get(LABEL_SET)
            if not short:
                continue
            size = int(labels.get(LABEL_SET_SIZE) or 0)
            group, known = sets.get(short, ([], 0))
            group.append(vm)
            sets[short] = (group, max(known, size))
        return sets

    def _classify_sets(self, members: Iterable[Any]) -> dict[str, RequestStatus]:
        return {
            self.name_of(short): set_status(self.name_of(short), vms, size)
            for short, (vms, size) in self._grouped(members).items()
        }

    # -- sync (worker, and the trigger that makes the request) ------------------------------------

    def get_status(self, name: str) -> RequestStatus | None:
        """The set, classified; ``None`` when none of its VMs exists."""
        short = parse_set_name(name)[2]
        found = self._classify_sets(self._members(f'labels.{LABEL_SET} = "{short}"'))
        return found.get(name)

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every set of this task instance here (any try and attempt), with one list."""
        base = identity.queued_resource_base()
        found = self._classify_sets(self._members(f'labels.{LABEL_KEY} = "{identity.key}"'))
        return [s for n, s in found.items() if is_attempt_of(parse_set_name(n)[2], base, SET_NAME_MAX)]

    def submit_spec(self, spec: Mapping[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """Create the set's VMs (each with a request id from the identity, so a repeated insert is
        answered once, and one that exists is adopted); on a refusal the VMs made are deleted and
        the error raised. Returns the set and whether this call created any of it."""
        name = self.name_of(str(spec["name"]))
        # Every VM of the set that exists, whatever its status (a set's result lists its VMs only
        # once all run, so it cannot say which of a waiting set's VMs are there).
        present = {vm.name for vm in self._members(f'labels.{LABEL_SET} = "{spec["name"]}"')}
        created = False
        made: list[str] = []
        try:
            for vm in instances_from_spec(spec, self.location):
                if vm.name in present:
                    continue
                created |= self._insert_vm(vm, identity)
                made.append(vm.name)
        except Exception:
            self.delete_members(name, only=made)
            raise
        status = self.get_status(name)
        if status is None:
            raise RequestNotFoundError(f"the VMs of {name} vanished right after they were created")
        return status, created

    def _insert_vm(self, vm: Any, identity: RequestIdentity) -> bool:
        from google.cloud import compute_v1

        token = str(uuid.uuid5(uuid.UUID(identity.request_uuid()), vm.name))
        message = compute_v1.InsertInstanceRequest(
            project=self.project_id, zone=self.location, instance_resource=vm, request_id=token
        )
        try:
            operation = self._rpc(f"create VM {vm.name}", self._api().insert_unary, request=message)
        except RequestAlreadyExistsError:
            log.info("VM %s exists already: adopting it", vm.name)
            return False
        self.wait_operation(operation, f"create VM {vm.name}")
        return True

    def delete_members(self, name: str, only: Sequence[str] | None = None) -> int:
        """Delete the VMs of set ``name`` (or just ``only``), each waited for; gone ones are fine.
        Returns how many were deleted."""
        from google.cloud import compute_v1

        short = parse_set_name(name)[2]
        names = (
            list(only)
            if only is not None
            else [vm.name for vm in self._members(f'labels.{LABEL_SET} = "{short}"')]
        )
        deleted = 0
        for vm in names:
            message = compute_v1.DeleteInstanceRequest(
                project=self.project_id,
                zone=self.location,
                instance=vm,
                request_id=str(uuid.uuid5(self.call_namespace, f"delete:{self.name_of(vm)}")),
            )
            try:
                operation = self._rpc(f"delete VM {vm}", self._api().delete_unary, request=message)
                self.wait_operation(operation, f"delete VM {vm}")
                deleted += 1
            except RequestNotFoundError:
                continue
        return deleted

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give the capacity back: delete every VM of the set, waiting or running. False when none
        was left."""
        return self.delete_members(name) > 0

    def delete_ended(self, found: Sequence[RequestStatus]) -> None:
        """Delete what is left of the sets of ``found`` that are INCOMPLETE (all or nothing)."""
        for status in found:
            if status.state == "INCOMPLETE":
                try:
                    self.delete_members(status.name)
                except Exception:
                    log.warning("Could not delete what is left of %s", status.name, exc_info=True)

    def result_line(self, status: RequestStatus) -> str | None:
        """What a trigger that ends the task logs of its result (its VMs and IPs)."""
        result = status.details.get(RESULT)
        if not isinstance(result, dict):
            return None
        waited = timedelta(seconds=round(status.timings.wait_seconds or 0))
        vms = ", ".join(f"{vm['name']} {vm['internal_ip']}" for vm in result.get("instances") or ())
        run = result.get("run_duration_seconds")
        until = f"at the latest after {timedelta(seconds=run)}" if run else "until released"
        return f"{status.name}: all {result.get('count')} VMs RUNNING after waiting {waited}: {vms}; billed {until}"

    # -- async (triggerer), in the shared pool -----------------------------------------------------

    def _list_once(self, label_filter: str) -> list[Any]:
        from airflow_provider_dws.backends.google import translated

        with translated():
            pager = self._api().list(request=self._list_message(label_filter), timeout=self.rpc_timeout)
            return [vm for page in pager.pages for vm in page.items]

    async def aget_status(self, name: str) -> RequestStatus:
        """The set, from one list of its VMs; none left is INCOMPLETE (not "not found": the API
        deletes a VM whose wait ended)."""
        short = parse_set_name(name)[2]
        members = await in_pool(self._list_once, f'labels.{LABEL_SET} = "{short}"')
        found = self._classify_sets(members)
        return found.get(name) or set_status(name, [], 0)

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every set of this zone's provider-managed VMs (one paged list), classified; sets of
        ``only`` with no VM left are not in it (the poller reads them one by one)."""
        members = await in_pool(self._list_once, f'labels.{LABEL_MANAGED} = "true"')
        found = self._classify_sets(members)
        return found if only is None else {n: s for n, s in found.items() if n in only}

    async def arelease(self, name: str) -> bool:
        """Delete every VM of the set from the event loop (in the pool); False when none was left."""
        return bool(await in_pool(self.delete_members, name))
