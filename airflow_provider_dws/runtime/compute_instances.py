"""Standalone flex-start VMs in the attempt loop: a set of VMs per attempt, all or nothing; and the
release that deletes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts
from airflow_provider_dws.backends import compute_groups as groups
from airflow_provider_dws.backends.base import RESULT, BackendCache
from airflow_provider_dws.backends.compute_instances import (
    LABEL_SET,
    LABEL_SET_SIZE,
    ComputeInstanceSetBackend,
    member_names,
    parse_set_name,
    set_name,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError, CapacityNotObtainedError, RequestCancelledError
from airflow_provider_dws.links import ComputeFlexStartInstancesLink
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.compute import vm_spec
from airflow_provider_dws.runtime.task import pulled, resolve_project, task_identity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.roles import task_in_role
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
    from airflow_provider_dws.operators.compute_instances_release import (
        DeleteComputeFlexStartInstancesOperator,
    )
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: The XCom key of the set a setup waits on (the release reads it).
NAME_KEY = roles.INSTANCE_SET_NAME_KEY


def vm_console_url(project_id: str, zone: str, name: str) -> str:
    """The console page of one VM."""
    return f"{CONSOLE}/compute/instancesDetail/zones/{zone}/instances/{name}?project={project_id}"


class ComputeInstancesAdapter(
    RequestAdapter["CreateComputeFlexStartInstancesOperator", ComputeInstanceSetBackend]
):
    """A set of ``count`` standalone flex-start VMs per attempt, named ``<base>-t<try>-a<attempt>``
    (its VMs ``...-<i>``); the wait ends when all of them are RUNNING. Compute Engine keeps the
    wait (``requestValidForDuration``) and deletes a VM not obtained in it; a set that ends with
    some VMs and not others is deleted whole (:meth:`release_failed`)."""

    name_key = NAME_KEY
    submits_in_trigger = True
    target = "running"
    #: What the request is, in the task log.
    label = "flex-start"
    #: ``requestValidForDuration`` is 90 s to 2 h: a longer max wait asks again (the loop).
    api_max_wait = facts.COMPUTE_VM_MAX_WAIT
    min_wait = facts.COMPUTE_VM_MIN_WAIT
    op: CreateComputeFlexStartInstancesOperator

    def backend(self, location: str | None = None) -> ComputeInstanceSetBackend:
        """The backend of ``location`` (default: the operator's zone)."""
        return self.cached_backend(ComputeInstanceSetBackend, location or str(self.op.zone))

    def location_of(self, name: str) -> str:
        """The zone of a set."""
        return parse_set_name(name)[1]

    def spec_for(self, placement: Placement | None) -> groups.VmSpec:
        """The VMs of a placement (a failover machine type swaps the machine and its GPUs); their
        labels are the request's (:meth:`request_spec`)."""
        machine = (placement.machine_type if placement else None) or self.op.machine_type
        return vm_spec(self.op, machine, placement, None)

    def advise(self, placements: Sequence[Placement]) -> list[tuple[Placement, float]] | None:
        """Capacity advice for ``count`` VMs of each placement's machine type."""
        from airflow_provider_dws.backends.compute_advice import rank_placements

        return rank_placements(
            placements, self.backend, lambda p: self.spec_for(p).machine_type, self.op.count
        )

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The set of this attempt as JSON: its name, size, VMs, run and wait, and every VM's labels
        (the task instance's, the set's, the user's)."""
        op = self.op
        name = set_name(identity)
        # The API takes 90 s to 2 h; a window or deadline may leave less, which the trigger keeps.
        wait = min(max(max_wait or op.max_wait, facts.COMPUTE_VM_MIN_WAIT), facts.COMPUTE_VM_MAX_WAIT)
        vms = asdict(self.spec_for(placement))
        vms["metadata"] = dict(vms["metadata"]) if vms.get("metadata") else None
        return {
            "name": name,
            "count": op.count,
            "vms": vms,
            "termination_action": op.termination_action,
            "max_run_seconds": int(op.max_run.total_seconds()),
            "wait_seconds": int(wait.total_seconds()),
            "labels": {
                **dict(op.labels or {}),
                **identity.labels(),
                LABEL_SET: name,
                LABEL_SET_SIZE: str(op.count),
            },
            "description": f"airflow-provider-dws {identity.dag_id}.{identity.task_id} try "
            f"{identity.try_number} attempt {identity.attempt}: VM set {name}",
        }

    def announce(self) -> dict[str, Any]:
        """The set's name under its key, its first VM's console page under the link's key."""
        link = vm_console_url(resolve_project(self.op), "{location}", "{id}-0")
        return {"name_key": self.name_key, "link_key": ComputeFlexStartInstancesLink.key, "link": link}

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The first VM's console page."""
        project, zone, short = parse_set_name(status.name)
        return push_url(
            context, ComputeFlexStartInstancesLink.key, vm_console_url(project, zone, f"{short}-0")
        )

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's VMs from the worker (``deferrable=False``); its own are adopted."""
        backend = self.backend(placement.location)
        try:
            status, created = backend.submit_spec(self.request_spec(identity, placement, max_wait), identity)
        except _REFUSED as err:
            raise BadRequestError(
                f"Compute Engine refused the flex-start VMs {set_name(identity)}: {err.message}"
            ) from None
        self.log.info(
            "%s %s VM set %s (attempt %d): %s; they wait up to %s for capacity",
            "Created" if created else "Adopted",
            self.label,
            status.name,
            identity.attempt,
            status.description,
            max_wait,
        )
        self.remember(context, status)
        return status

    def release_or_keep(self, name: str) -> None:
        """Delete every VM of the set."""
        self.backend(self.location_of(name)).release(name)

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """All or nothing: the VMs of a set that did not all run are deleted, waiting or running."""
        backend = self.backend(self.location_of(status.name))
        deleted = backend.delete_members(status.name)
        if deleted:
            self.log.info(
                "Deleted the %d VM(s) left of %s (%s): all or nothing, no GPU is paid for a set that "
                "cannot start",
                deleted,
                status.name,
                status.state,
            )

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The VMs of the set: names, zones, internal IPs, machine type and GPUs."""
        result = status.details.get(RESULT)
        if not isinstance(result, dict):
            current = self.backend(self.location_of(status.name)).get_status(status.name)
            result = current.details.get(RESULT) if current is not None else None
            if not isinstance(result, dict):
                raise RequestCancelledError(f"the VMs of {status.name} were gone right after they all ran")
        backend = self.backend(self.location_of(status.name))
        self.log.info("%s", backend.result_line(status) or status.name)
        return result

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The GPUs over every VM of the set, the machine type and the first VM's console page."""
        spec = self.spec_for(placement)
        gpus = spec.gpus()
        url = None
        if not is_pending(status.name):
            project, zone, short = parse_set_name(status.name)
            url = vm_console_url(project, zone, member_names(short, 1)[0])
        return {
            "api": ComputeInstanceSetBackend.kind,
            "kind": "Compute Engine flex-start VMs (no MIG)",
            "accelerator_type": gpus[0] if gpus else None,
            "accelerator_count": gpus[1] * self.op.count if gpus else 0,
            "machine_type": spec.machine_type,
            "pricing_model": "flex_start",
            "console_url": url,
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a set that did not all run."""
        message = status.outcome.message
        detail = f"{status.name}{': ' + message if message else ''}"
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"not all {self.op.count} VMs got capacity within max wait {max_wait} in {placement.location} "
                f"({detail})"
            )
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Compute Engine refused the flex-start VMs ({detail})")
        return RequestCancelledError(f"the flex-start VMs were deleted before they all ran ({detail})")


# -- the release (DeleteComputeFlexStartInstancesOperator) -------------------------------------------


def _rendered(
    setup: CreateComputeFlexStartInstancesOperator, context: Context
) -> CreateComputeFlexStartInstancesOperator:
    """A copy of the setup with its zone rendered (it may be a template, as in ``{{ params.zone }}``)."""
    import copy

    from airflow_provider_dws.specs.templates import has_template

    rendered = copy.copy(setup)
    if has_template(setup.zone):
        rendered.zone = setup.render_template(setup.zone, context)
    return rendered


def release_instances(op: DeleteComputeFlexStartInstancesOperator, context: Context) -> dict[str, Any]:
    """Delete every VM of every set the setup's task instance made (its pushed set, and those found by
    its labels in every zone it may have used), waiting or running. Already gone is success."""
    project = resolve_project(op)
    identity = task_identity(context, task_id=op.setup_task_id)
    setup: CreateComputeFlexStartInstancesOperator | None = task_in_role(
        op, op.setup_task_id, roles.COMPUTE_INSTANCE_SET
    )
    backends = BackendCache()
    names: list[str] = []
    pushed = pulled(context, op.setup_task_id, NAME_KEY)
    if isinstance(pushed, str) and pushed and not is_pending(pushed):
        names.append(pushed)
    zones = {parse_set_name(n)[1] for n in names}
    if setup is not None:
        zones |= {p.location for p in _rendered(setup, context).placements()}
    for zone in sorted(zones):
        backend = backends.get(
            ComputeInstanceSetBackend, project, zone, op.gcp_conn_id, op.impersonation_chain
        )
        names += [s.name for s in backend.find(identity)]
    released: list[tuple[str, str]] = []
    deleted: list[str] = []
    for name in dict.fromkeys(names):
        where_project, zone, _ = parse_set_name(name)
        backend = backends.get(
            ComputeInstanceSetBackend, where_project, zone, op.gcp_conn_id, op.impersonation_chain
        )
        status = backend.get_status(name)
        if status is None:
            op.log.info("%s is already gone", name)
            continue
        push_url(
            context,
            ComputeFlexStartInstancesLink.key,
            vm_console_url(where_project, zone, f"{name.rsplit('/', 1)[-1]}-0"),
        )
        vms = [vm["name"] for vm in (status.details.get(RESULT) or {}).get("instances", ())]
        try:
            count = backend.delete_members(name)
        except _REFUSED as err:
            raise BadRequestError(
                f"Compute Engine refused to delete the VMs of {name}: {err.message}"
            ) from None
        op.log.info(
            "Deleted the %d VM(s) of %s (%s): nothing of it is billed any more", count, name, status.state
        )
        deleted += vms
        released.append((name, status.state))
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release

    api = ReleasedApi(
        ComputeInstanceSetBackend.kind,
        "Compute Engine flex-start VMs (no MIG)",
        lambda n: parse_set_name(n)[1],
        ("RUNNING",),
    )
    record_release(op, context, api, Released(released))
    if not released:
        op.log.info("No VM of task %r (never created, or already released): nothing to do", op.setup_task_id)
    return {
        "released": [n for n, _ in released],
        "deleted_instances": deleted,
        "states_before": [s for _, s in released],
    }
