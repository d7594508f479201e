"""Compute Engine flex-start VMs in the attempt loop: the MIG (made or given), the resize request, the
VMs it created; and the release that deletes exactly those VMs, then the request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.backends import compute_groups as groups
from airflow_provider_dws.backends.base import RESULT, BackendCache
from airflow_provider_dws.backends.compute import (
    ComputeResizeRequestBackend,
    ResizeAsk,
    parse_resize_request_name,
    request_vms,
    resize_request_from_spec,
    succeeded_line,
    vms_result,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError, CapacityNotObtainedError, RequestCancelledError
from airflow_provider_dws.links import ComputeFlexStartMIGLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.task import pulled, resolve_project, task_identity
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.roles import task_in_role
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.compute_v1 import InstanceGroupManagerResizeRequest

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
    from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: The XCom key of the request a setup waits on (the release reads it).
NAME_KEY = roles.RESIZE_REQUEST_NAME_KEY


def mig_console_url(project_id: str, location: str, instance_group_manager: str) -> str:
    """The console page of a managed instance group (zonal or regional: the path is the same)."""
    return (
        f"{CONSOLE}/compute/instanceGroups/details/{location}/{instance_group_manager}?project={project_id}"
    )


def vm_spec(
    op: Any, machine: str, placement: Placement | None, labels: Mapping[str, str] | None
) -> groups.VmSpec:
    """The VMs a Compute Engine operator (MIG or standalone) makes in a placement: its machine and
    GPUs (a failover machine type brings its own GPUs, or keeps the operator's on an N1 machine),
    boot disk, network, service account, ``labels`` and metadata."""
    accelerator, count = op.accelerator_type, op.accelerator_count
    if placement is not None and placement.machine_type and placement.machine_type != op.machine_type:
        accelerator, count = (
            placement.accelerator_type or (None if catalog.batch_machine_gpus(machine) else accelerator),
            None,
        )
    return groups.VmSpec(
        machine_type=machine,
        accelerator_type=accelerator,
        accelerator_count=count,
        image=op.image or groups.DEFAULT_IMAGE,
        boot_disk_size_gb=op.boot_disk_size_gb,
        boot_disk_type=op.boot_disk_type,
        network=op.network,
        subnetwork=op.subnetwork,
        service_account=op.service_account,
        labels=labels,
        metadata=op.metadata,
    )


class ComputeFlexStartAdapter(
    RequestAdapter["CreateComputeFlexStartVMsOperator", ComputeResizeRequestBackend]
):
    """A resize request per attempt, named ``<base>-t<try>-a<attempt>``; the wait ends when it
    SUCCEEDED (the VMs are held). The API has no max wait: the trigger cancels at ``max_wait`` with
    no grace, and an attempt that ends without VMs is cancelled and deleted."""

    name_key = NAME_KEY
    submits_in_trigger = True

    target = "running"
    wait_grace = timedelta(0)
    #: What the request is, in the task log.
    label = "flex-start"
    op: CreateComputeFlexStartVMsOperator

    def __init__(self, operator: CreateComputeFlexStartVMsOperator) -> None:
        super().__init__(operator)
        self._ended: list[RequestStatus] = []

    def backend(self, location: str | None = None) -> ComputeResizeRequestBackend:
        """The backend of ``location`` (default: the operator's zone or region)."""
        return self.cached_backend(
            ComputeResizeRequestBackend, location or str(self.op.zone or self.op.region)
        )

    def location_of(self, name: str) -> str:
        """The zone or region of a resize request."""
        return parse_resize_request_name(name).location

    def machine_of(self, placement: Placement | None) -> str | None:
        """The machine type of a placement's VMs where the operator makes the MIG (else ``None``)."""
        if self.op.instance_group_manager:
            return None
        return (placement.machine_type if placement else None) or self.op.machine_type

    def mig_for(self, identity: RequestIdentity, placement: Placement | None) -> str:
        """The MIG of a placement: the given one, or the one made for this task instance (one per
        machine type: another machine type needs another template)."""
        if self.op.instance_group_manager:
            return str(self.op.instance_group_manager)
        machine = self.machine_of(placement)
        return identity.group_name(None if machine == self.op.machine_type else machine)

    def spec_for(self, placement: Placement | None) -> groups.VmSpec:
        """The VMs of a placement (a failover machine type swaps the machine and its GPUs)."""
        return vm_spec(self.op, self.machine_of(placement) or "", placement, self.op.labels)

    def build(
        self, identity: RequestIdentity, max_wait: timedelta | None = None
    ) -> InstanceGroupManagerResizeRequest:
        """The resize request of this attempt (:meth:`resize_request_json`) as the client's message."""
        return resize_request_from_spec(self.resize_request_json(identity, max_wait))

    def resize_request_json(
        self, identity: RequestIdentity, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The resize request of this attempt as JSON: its name from the identity, ``resize_by``, the
        run duration, and the max wait the provider enforces in its description (it has no labels)."""
        wait = max_wait or self.op.max_wait
        run = self.op.max_run
        return {
            "name": identity.resize_request_name(),
            "resize_by": self.op.resize_by,
            "requested_run_duration": {"seconds": int(run.total_seconds())} if run else None,
            "description": (
                f"airflow-provider-dws {identity.dag_id}.{identity.task_id} try {identity.try_number} "
                f"attempt {identity.attempt}; max_wait={round(wait.total_seconds())}s"
            ),
        }

    def advise(self, placements: Sequence[Placement]) -> list[tuple[Placement, float]] | None:
        """Capacity advice for ``resize_by`` VMs of each placement's machine type (where the
        operator makes the MIG: a given MIG's machine type is its template's, not read here)."""
        from airflow_provider_dws.backends.compute_advice import rank_placements

        if self.op.instance_group_manager:
            return None
        return rank_placements(
            placements, self.backend, lambda p: self.machine_of(p) or "", self.op.resize_by
        )

    def template_for(self, name: str, placement: Placement) -> Any:
        """The instance template the operator makes for a placement's MIG (flex-start VMs)."""
        return groups.flex_start_template(name, self.spec_for(placement))

    def ensure_group(self, identity: RequestIdentity, placement: Placement) -> str:
        """The MIG to grow: the given one, or the flex-start template and MIG of this task instance,
        created at target size 0 (or adopted when an earlier try made them)."""
        mig = self.mig_for(identity, placement)
        if self.op.instance_group_manager:
            return mig
        backend = self.backend(placement.location)
        template = self.template_for(mig, placement)
        try:
            url = groups.ensure_template(backend, template)
            groups.ensure_group(backend, mig, url)
        except _REFUSED as err:
            raise BadRequestError(
                f"Compute Engine refused the flex-start template or MIG {mig}: {err.message}"
            ) from None
        return mig

    def _searched(self, identity: RequestIdentity) -> list[tuple[Placement, str]]:
        seen: dict[tuple[str, str], Placement] = {}
        for placement in self.op.placements():
            seen.setdefault((placement.location, self.mig_for(identity, placement)), placement)
        return [(placement, mig) for (_, mig), placement in seen.items()]

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The newest live (waiting or SUCCEEDED) request of any try and attempt of this task
        instance, in every MIG it may have used: one list per MIG. Ended ones are deleted later."""
        found: dict[str, tuple[RequestStatus, Placement]] = {}
        self._ended = []
        for placement, mig in self._searched(identity):
            for status in self.backend(placement.location).find(identity, mig):
                found[status.name] = (status, placement)
                if status.phase.terminal:
                    self._ended.append(status)
        decision = choose_existing(
            [Candidate(n, s.phase, s.timings.submitted) for n, (s, _) in found.items()]
        )
        self.log.info("%s", decision.describe(identity.describe()))
        if decision.name is None:
            return None
        status, placement = found[decision.name]
        self.remember(context, status)
        return Found(status, placement, int(status.details.get("attempt") or 1))

    def delete_ended(self) -> None:
        """Delete the ended requests (FAILED, CANCELLED) the last :meth:`find` saw: they hold nothing
        but stay listed until deleted."""
        for status in self._ended:
            self.log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
            self.backend(self.location_of(status.name)).delete(status.name)
        self._ended = []

    def makes_in_trigger(self) -> bool:
        """The trigger makes the request when the operator makes the MIG; a MIG the DAG gives is
        grown from the worker, whose record reads the MIG's template for its machine and GPUs."""
        return self.submits_in_trigger and not self.op.instance_group_manager

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The MIG to grow, the VMs of the template made for it, and the resize request of this
        attempt (:meth:`resize_request_json`), as JSON."""
        from dataclasses import asdict

        vms = None if self.op.instance_group_manager else asdict(self.spec_for(placement))
        return {
            "instance_group_manager": self.mig_for(identity, placement),
            "vms": {k: dict(v) if isinstance(v, Mapping) else v for k, v in vms.items()} if vms else None,
            "resize_request": self.resize_request_json(identity, max_wait),
        }

    def lookup(self, context: Context, identity: RequestIdentity, first: Placement) -> list[dict[str, Any]]:
        """Every MIG the task instance may have grown (one per location and machine type), the
        placement's own first: resize requests are listed per MIG."""
        entries: dict[tuple[str, str], dict[str, Any]] = {}
        for placement, mig in [(first, self.mig_for(identity, first)), *self._searched(identity)]:
            entries.setdefault(
                (placement.location, mig),
                {
                    "backend_spec": self.backend(placement.location).spec(),
                    "placement": placement.to_dict(),
                    "find": {"mig": mig},
                },
            )
        return list(entries.values())

    def announce(self) -> dict[str, Any]:
        """The request's name under its key, its MIG's console page under the link's key."""
        link = mig_console_url(resolve_project(self.op), "{location}", "{parent}")
        return {"name_key": self.name_key, "link_key": ComputeFlexStartMIGLink.key, "link": link}

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The MIG's console page."""
        where = parse_resize_request_name(status.name)
        return push_url(
            context,
            ComputeFlexStartMIGLink.key,
            mig_console_url(where.project, where.location, where.instance_group_manager),
        )

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's resize request in the placement's MIG (made first if needed; a
        request of that name already there is adopted)."""
        mig = self.ensure_group(identity, placement)
        backend = self.backend(placement.location)
        ask = ResizeAsk(mig, self.build(identity, max_wait))
        try:
            status, created = backend.submit(ask, identity, identity.request_uuid())
        except _REFUSED as err:
            raise BadRequestError(
                f"Compute Engine refused the resize request {identity.resize_request_name()} of MIG {mig}: {err.message}"
            ) from None
        self.log.info(
            "%s %s resize request %s (attempt %d): %s of %s; the provider cancels it if it still waits for "
            "capacity after %s",
            "Created" if created else "Adopted",
            self.label,
            status.name,
            identity.attempt,
            status.description,
            self.machine_of(placement) or "the MIG's machine type",
            max_wait,
        )
        self.remember(context, status)
        return status

    def release_or_keep(self, name: str) -> None:
        """Cancel the request if it still waits, then delete it (a SUCCEEDED one is the teardown's)."""
        self.backend(self.location_of(name)).discard(name)

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Ended without VMs (or given up at max wait, or at the task's timeout): cancel it if it
        still waits, then delete it. One that SUCCEEDED just as it was given up has VMs nobody
        will use (and no teardown runs after a failed setup): they are deleted first."""
        backend = self.backend(self.location_of(status.name))
        current = backend.get_status(status.name)
        if current is not None and current.state == "SUCCEEDED":
            vms = request_vms(backend, current)
            self.log.warning(
                "%s SUCCEEDED as it was given up: deleting its %d VM(s), which no task will use",
                status.name,
                len(vms),
            )
            mig = parse_resize_request_name(status.name).instance_group_manager
            groups.delete_instances(backend, mig, [vm["self_link"] for vm in vms])
            backend.delete(status.name)
            return
        self.log.info("Deleting %s (%s) so nothing is left behind", status.name, status.state)
        backend.discard(status.name)

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The VMs the request created: names, zones, internal IPs, machine type and GPUs (read by
        the trigger with the request's SUCCEEDED status, else here)."""
        result = status.details.get(RESULT)
        if not isinstance(result, dict):
            backend = self.backend(self.location_of(status.name))
            current = backend.get_status(status.name)
            if current is None:
                raise RequestCancelledError(f"{status.name} disappeared right after it SUCCEEDED")
            vms = request_vms(backend, current)
            result = vms_result(replace(current, timings=status.timings), vms, self.machine_of(None))
        if len(result["instances"]) > self.op.resize_by:
            self.log.warning(
                "%d VMs found for a request of %d: another request grows the MIG too",
                len(result["instances"]),
                self.op.resize_by,
            )
        self.log.info("%s", succeeded_line(status, result))
        return result

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The GPUs over every VM of the request, the machine type and the MIG's console page (none
        yet under a provisional name: the trigger that makes the request links it)."""
        where = None if is_pending(status.name) else parse_resize_request_name(status.name)
        machine = self.machine_of(placement)
        if machine:
            gpus = self.spec_for(placement).gpus()
        elif where is not None:  # an existing MIG: its template says what its VMs are
            machine, gpus = self._template_shape(where.location, where.instance_group_manager)
        else:
            gpus = None
        return {
            "api": ComputeResizeRequestBackend.kind,
            "kind": "Compute Engine flex-start VMs",
            "accelerator_type": gpus[0] if gpus else None,
            "accelerator_count": gpus[1] * self.op.resize_by if gpus else 0,
            "machine_type": machine,
            "pricing_model": "flex_start",
            "console_url": where
            and mig_console_url(resolve_project(self.op), where.location, where.instance_group_manager),
        }

    def _template_shape(self, location: str, mig: str) -> tuple[str | None, tuple[str, int] | None]:
        """The machine type and GPUs per VM of an existing MIG's template (read once per MIG; what
        cannot be read is unknown: the record is a description, never a reason to fail)."""
        cache: dict[tuple[str, str], Any] = self.__dict__.setdefault("_shapes", {})
        if (location, mig) not in cache:
            try:
                cache[location, mig] = groups.template_shape(self.backend(location), mig)
            except Exception as err:
                self.log.warning("Could not read the template of MIG %s (%s)", mig, err)
                cache[location, mig] = (None, None)
        return cache[location, mig]  # type: ignore[no-any-return]

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without its VMs."""
        message = status.outcome.message
        detail = f"{status.name}{': ' + message if message else ''}"
        what = (
            status.description.rsplit(" in MIG ", 1)[0] if status.description else f"{self.op.resize_by} VMs"
        )
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in {placement.location} for {what} ({detail})"
            )
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Compute Engine refused the resize request ({detail})")
        return RequestCancelledError(
            f"the resize request was cancelled before its VMs were created ({detail})"
        )


# -- the release (DeleteComputeFlexStartVMsOperator) ------------------------------------------------


def _rendered(
    setup: CreateComputeFlexStartVMsOperator, context: Context, project: str
) -> CreateComputeFlexStartVMsOperator:
    """A copy of the setup with its location and MIG rendered (they may be templates)."""
    import copy

    from airflow_provider_dws.specs.templates import has_template

    rendered = copy.copy(setup)
    for name in ("zone", "region", "instance_group_manager"):
        value = getattr(setup, name)
        if has_template(value):
            setattr(rendered, name, setup.render_template(value, context))
    rendered.project_id = project
    return rendered


def release_vms(op: DeleteComputeFlexStartVMsOperator, context: Context) -> dict[str, Any]:
    """Delete the VMs the setup's request created (the URLs of its result, or what the request's MIG
    holds that it created), then the request itself; every request of the setup's task instance
    still waiting is cancelled and deleted too. Already gone is success."""
    project = resolve_project(op)
    identity = task_identity(context, task_id=op.setup_task_id)
    result = pulled(context, op.setup_task_id)
    result = result if isinstance(result, dict) else {}
    setup: CreateComputeFlexStartVMsOperator | None = task_in_role(
        op, op.setup_task_id, roles.COMPUTE_FLEX_START_VMS
    )
    # One backend (hook, connection lookup, clients) per location, whatever the number of requests.
    backends = BackendCache()
    names: list[str] = []
    pushed = result.get("resize_request") or pulled(context, op.setup_task_id, NAME_KEY)
    if isinstance(pushed, str) and pushed:
        names.append(pushed)
    if setup is not None:
        setup = _rendered(setup, context, project)
        for placement, mig in ComputeFlexStartAdapter(setup)._searched(identity):
            backend = backends.get(
                ComputeResizeRequestBackend,
                project,
                placement.location,
                op.gcp_conn_id,
                op.impersonation_chain,
            )
            names += [s.name for s in backend.find(identity, mig)]
    elif not names:
        op.log.warning(
            "Task %r is not a CreateComputeFlexStartVMsOperator of this DAG and left no request",
            op.setup_task_id,
        )
    released: list[tuple[str, str]] = []
    deleted_vms: list[str] = []
    for name in dict.fromkeys(names):
        where = parse_resize_request_name(name)
        backend = backends.get(
            ComputeResizeRequestBackend, where.project, where.location, op.gcp_conn_id, op.impersonation_chain
        )
        status = backend.get_status(name)
        if status is None:
            op.log.info("%s is already gone", name)
            continue
        push_url(
            context,
            ComputeFlexStartMIGLink.key,
            mig_console_url(where.project, where.location, where.instance_group_manager),
        )
        if status.state == "SUCCEEDED":
            urls = (
                [u for u in result.get("instance_urls") or () if isinstance(u, str)] if name == pushed else []
            )
            if not urls:
                urls = [vm["self_link"] for vm in request_vms(backend, status)]
            op.log.info(
                "Deleting the %d VM(s) of %s: %s",
                len(urls),
                name,
                ", ".join(u.rsplit("/", 1)[-1] for u in urls),
            )
            try:
                groups.delete_instances(backend, where.instance_group_manager, urls)
            except _REFUSED as err:
                raise BadRequestError(
                    f"Compute Engine refused to delete the VMs of {name}: {err.message}"
                ) from None
            deleted_vms += urls
            backend.delete(name)
        else:
            backend.discard(name)
        op.log.info("%s (%s) is released: nothing of it is billed any more", name, status.state)
        released.append((name, status.state))
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release

    vms = ReleasedApi(
        ComputeResizeRequestBackend.kind,
        "Compute Engine flex-start VMs",
        lambda n: parse_resize_request_name(n).location,
        ("SUCCEEDED",),
    )
    record_release(op, context, vms, Released(released))
    if not released:
        op.log.info(
            "No resize request of task %r (never created, or already released): nothing to do",
            op.setup_task_id,
        )
    return {
        "released": [name for name, _ in released],
        "deleted_instances": deleted_vms,
        "states_before": [state for _, state in released],
    }
