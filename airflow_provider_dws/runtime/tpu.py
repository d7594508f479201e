"""Cloud TPU queued resources in the attempt loop, and the release that frees every attempt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.tpu import (
    TpuQueuedResourceBackend,
    active_line,
    active_result,
    queued_resource_from_spec,
    zone_of,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    RequestCancelledError,
)
from airflow_provider_dws.links import TPUQueuedResourceLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release
from airflow_provider_dws.runtime.reserved import ReservedSteps
from airflow_provider_dws.runtime.task import resolve_project, task_identity
from airflow_provider_dws.scheduling.identity import is_attempt_of, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.roles import task_in_role
from airflow_provider_dws.specs.vertex_pools import duration

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.tpu_v2 import QueuedResource

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
    from airflow_provider_dws.operators.tpu_release import DeleteTPUQueuedResourceOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

#: What the API answers when it refuses a request (invalid, not allowed, wrong state).
_REFUSED = (InvalidRequestError, PermissionDeniedApiError)


#: How a release records TPU slices: held while ACTIVE.
TPU_SLICES = ReleasedApi(TpuQueuedResourceBackend.kind, "TPU queued resource", zone_of, ("ACTIVE",))


def queued_resource_console_url(project_id: str, zone: str, queued_resource_id: str) -> str:
    """The console's TPU page for the project, scoped to the queued resource's zone and id."""
    return f"{CONSOLE}/compute/tpus?project={project_id}&zone={zone}&queuedResource={queued_resource_id}"


def _rfc3339(moment: datetime) -> str:
    """A time as protobuf's JSON takes a Timestamp (UTC, ``Z``)."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _by_zone(placements: Sequence[Placement]) -> list[Placement]:
    """The first placement of each zone, in order (one list per zone finds every attempt there)."""
    zones: dict[str, Placement] = {}
    for placement in placements:
        zones.setdefault(placement.location, placement)
    return list(zones.values())


def _persist_link(context: Context, backend: TpuQueuedResourceBackend, name: str) -> str:
    return push_url(
        context,
        TPUQueuedResourceLink.key,
        queued_resource_console_url(backend.project_id, backend.zone, name.rsplit("/", 1)[-1]),
    )


class TPUQueuedResourceAdapter(RequestAdapter["CreateTPUQueuedResourceOperator", TpuQueuedResourceBackend]):
    """A queued resource per attempt, named ``<base>-t<try>-a<attempt>``; the wait ends when the
    slice is ACTIVE, and an attempt that ends without it is deleted."""

    name_key = roles.QUEUED_RESOURCE_NAME_KEY

    target = "running"
    submits_in_trigger = True

    def __init__(self, operator: CreateTPUQueuedResourceOperator) -> None:
        super().__init__(operator)
        self._ended: list[tuple[TpuQueuedResourceBackend, RequestStatus]] = []

    def backend(self, location: str | None = None) -> TpuQueuedResourceBackend:
        """The Cloud TPU backend of ``location`` (default: the operator's zone); ``v2alpha1`` for a
        flex-start slice."""
        return self.cached_backend(backend_class(self.op), location or str(self.op.zone))

    def deferral_note(self) -> str:
        """A flex-start slice's run."""
        if not self.op.flex_start:
            return ""
        return f"; a flex-start slice: once ACTIVE it runs {self.op.max_run}, then Cloud TPU deletes its VMs"

    def run_duration(self) -> dict[str, str] | None:
        """A flex-start slice's ``runDuration``; ``None`` for any other."""
        max_run = self.op.max_run
        return {"maxRunDuration": duration(max_run)} if self.op.flex_start and max_run else None

    def location_of(self, name: str) -> str:
        """The zone of a queued resource."""
        return zone_of(name)

    def base_id(self, identity: RequestIdentity) -> str:
        """What every submission's id starts with: ``queued_resource_id``, or the derived base."""
        return self.op.queued_resource_id or identity.queued_resource_base()

    def id_for(self, identity: RequestIdentity) -> str:
        """This submission's id: the base plus ``-t<try>-a<attempt>`` (always, so it parses back)."""
        return identity.queued_resource_id(self.base_id(identity))

    def makes_in_trigger(self) -> bool:
        """The trigger makes the queued resource, unless the operator runs on a calendar block (found,
        and checked against, in the worker first) or starts later (``valid_after``: its max wait
        counts from then, which only the worker's wait deadline knows)."""
        return self.submits_in_trigger and self.block is None and not self.op.valid_after

    @property
    def block(self) -> Any:
        """The calendar block the operator runs on (``None`` here: see the block adapter)."""
        return None

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The queued resource of this attempt as JSON: its id (``queued_resource_id``) and the
        ``QueuedResource`` (``queued_resource``), built without the client library."""
        zone = placement.location if placement is not None else str(self.op.zone)
        parent = f"projects/{resolve_project(self.op)}/locations/{zone}"
        qr_id = self.id_for(identity)
        spec = {
            "queued_resource_id": qr_id,
            "queued_resource": self.queued_resource_json(
                identity.labels(), parent, qr_id, placement, max_wait
            ),
        }
        run = self.run_duration()
        return spec if run is None else {**spec, "run_duration": run}

    def queued_resource_json(
        self,
        identity_labels: Mapping[str, str],
        parent: str,
        node_id: str,
        placement: Placement | None = None,
        max_wait: timedelta | None = None,
    ) -> dict[str, Any]:
        """The ``QueuedResource`` to create, as JSON: one node spec (or multislice), tier and
        queueing policy.

        A failover ``placement`` may change the accelerator type and the tier; ``max_wait`` is the
        effective wait decided by the scheduling core (default: ``max_wait``).
        """
        op = self.op
        accelerator_type = (placement.accelerator_type if placement else None) or op.accelerator_type
        tier = placement.tier if placement and placement.tier else None
        spot = tier == "spot" if tier else op.spot
        guaranteed = tier == "guaranteed" if tier else op.guaranteed
        max_wait = max_wait or op.max_wait
        node: dict[str, Any] = {
            "accelerator_type": accelerator_type,
            "runtime_version": op.runtime_version,
            "labels": {**(op.labels or {}), **identity_labels},
            "network_config": {
                "network": op.network or "",
                "subnetwork": op.subnetwork or "",
                "enable_external_ips": op.enable_external_ips,
            },
        }
        if op.service_account:
            node["service_account"] = {"email": op.service_account}
        if spot:
            node["scheduling_config"] = {"spot": True}
        spec: dict[str, Any] = {"parent": parent, "node": node}
        if op.node_count > 1:
            spec["multislice_params"] = {"node_count": op.node_count, "node_id_prefix": node_id}
        else:
            spec["node_id"] = node_id
        # valid_until_* and valid_after_* are one oneof in the API: a delayed start with a deadline
        # has to be spelled as an interval of absolute times.
        if op.valid_after:
            start = datetime.now(timezone.utc) + op.valid_after
            policy: dict[str, Any] = {
                "valid_interval": {"start_time": _rfc3339(start), "end_time": _rfc3339(start + max_wait)}
            }
        else:
            policy = {"valid_until_duration": duration(max_wait)}
        qr: dict[str, Any] = {"tpu": {"node_spec": [spec]}, "queueing_policy": policy}
        if spot:
            qr["spot"] = {}
        elif guaranteed:
            qr["guaranteed"] = {}
        home_zone = placement is None or placement.location == op.zone
        if op.reservation_name and not spot and home_zone:
            # A reservation lives in one zone; a failover elsewhere asks without it.
            qr["reservation_name"] = op.reservation_name
        return qr

    def build(
        self,
        identity_labels: Mapping[str, str],
        parent: str,
        node_id: str,
        placement: Placement | None = None,
        max_wait: timedelta | None = None,
    ) -> QueuedResource:
        """:meth:`queued_resource_json` as the ``QueuedResource`` message (the worker's own submit)."""
        qr = self.queued_resource_json(identity_labels, parent, node_id, placement, max_wait)
        try:
            return queued_resource_from_spec(qr)
        except ValueError as err:
            raise BadRequestError(f"the queued resource is not valid: {err}") from None

    def announce(self) -> dict[str, Any]:
        """The queued resource's name under its key, its console page under the link's key."""
        link = queued_resource_console_url(resolve_project(self.op), "{location}", "{id}")
        return {"name_key": self.name_key, "link_key": TPUQueuedResourceLink.key, "link": link}

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The newest live or ACTIVE queued resource of any try and attempt of this task instance.

        One list per zone the task may have used finds every submission (by the identity label on
        its nodes); the ones found ended are deleted by :meth:`delete_ended`, not here.
        """
        found: tuple[tuple[int, int], RequestStatus, Placement, TpuQueuedResourceBackend] | None = None
        self._ended = []
        for placement in _by_zone(self.op.placements()):
            backend = self.backend(placement.location)
            for status in backend.find(identity):
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
        self.remember(context, status)
        return Found(status, placement, max(attempt, 1))

    def delete_ended(self) -> None:
        """Delete the ended queued resources the last :meth:`find` saw (FAILED, SUSPENDED): an
        ended request holds nothing, but it stays listed until deleted."""
        for backend, status in self._ended:
            self.log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
            backend.release(status.name)
        self._ended = []

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The queued resource's console page."""
        return _persist_link(context, self.backend(zone_of(status.name)), status.name)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create the queued resource of this attempt in the placement's zone (ALREADY_EXISTS: adopt)."""
        op = self.op
        backend = self.backend(placement.location)
        qr_id = self.id_for(identity)
        name = backend.name_of(qr_id)
        existing = backend.get_status(name)
        if existing is not None and existing.phase.terminal:
            self.log.warning("An earlier request %s ended; deleting it before asking again", name)
            backend.release(name, wait=True)
        request = self.build(identity.labels(), backend.parent, qr_id, placement, max_wait)
        try:
            status, created = backend.submit(request, identity, qr_id, run=self.run_duration())
        except _REFUSED as err:
            raise BadRequestError(f"Cloud TPU refused the queued resource {name}: {err.message}") from None
        tier = placement.tier or ("spot" if op.spot else "guaranteed" if op.guaranteed else "on-demand")
        tier = f"flex-start, runs {op.max_run}" if op.flex_start else f"{tier} tier"
        self.log.info(
            "%s queued resource %s (attempt %d): %s, %s, may wait up to %s for capacity%s",
            "Created" if created else "Adopted",
            name,
            identity.attempt,
            status.description,
            tier,
            max_wait,
            f" after a delay of {op.valid_after}" if op.valid_after else "",
        )
        self.remember(context, status)
        return status

    def wait_deadline(self, status: RequestStatus, max_wait: timedelta) -> datetime:
        """The max wait counts from when the request becomes valid (``valid_after``)."""
        return super().wait_deadline(status, max_wait + (self.op.valid_after or timedelta(0)))

    def release_or_keep(self, name: str) -> None:
        """Delete the queued resource (and any nodes) and wait until it is gone."""
        self.backend(zone_of(name)).release(name, wait=True)

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The slice's nodes, IP addresses and accelerator details (the task's XCom return value)."""
        result = status.details.get(RESULT)
        if result is None:  # not read by the trigger with the slice's status: read it now
            backend = self.backend(zone_of(status.name))
            qr = backend.get(status.name)
            if qr is None:
                raise RequestCancelledError(f"{status.name} disappeared right after it became ACTIVE")
            result = active_result(qr, backend.nodes(qr), status)
        self.log.info("%s", active_line(status, result))
        return result

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The slice's TPU type and chips over every slice, its pricing (``spot``, ``reserved``
        for a reservation or the guaranteed tier, else ``flex_start``) and its console page."""
        project = resolve_project(self.op)
        try:
            zone, qr_id = zone_of(status.name), status.name.rsplit("/", 1)[-1]
        except ValueError:  # recorded before its trigger made it: no page yet
            zone, qr_id = placement.location, ""
        qr = self.queued_resource_json({}, f"projects/{project}/locations/{zone}", "record-facts", placement)
        spec = qr["tpu"]["node_spec"][0]
        accelerator_type = spec["node"]["accelerator_type"]
        try:
            chips = catalog.tpu_chips(accelerator_type) * (
                (spec.get("multislice_params") or {}).get("node_count") or 1
            )
        except ValueError:
            chips = 0
        if "spot" in qr:
            pricing = "spot"
        elif qr.get("reservation_name") or "guaranteed" in qr:
            pricing = "reserved"
        else:
            pricing = "flex_start"
        return {
            "api": TpuQueuedResourceBackend.kind,
            "kind": "TPU flex-start queued resource" if self.op.flex_start else "TPU queued resource",
            "accelerator_type": accelerator_type,
            "accelerator_count": chips,
            "machine_type": None,
            "pricing_model": pricing,
            "console_url": queued_resource_console_url(project, zone, qr_id) if qr_id else None,
        }

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Ended without (or after losing) capacity: delete it, so not even a FAILED record stays."""
        self.log.info("Deleting %s (%s) so nothing is left behind", status.name, status.state)
        self.backend(zone_of(status.name)).release(status.name)

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without an ACTIVE slice."""
        message = status.outcome.message
        zone = placement.location
        detail = f" ({status.name}{': ' + message if message else ''})"
        what = status.description.rsplit(" in ", 1)[0] if status.description else self.op.accelerator_type
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no TPU capacity within max wait {max_wait} in {zone} for {what}{detail}"
            )
        if status.outcome.failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(f"the TPU slice {what} in {zone} was preempted{detail}")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Cloud TPU refused the queued resource{detail}")
        return RequestCancelledError(f"the queued resource was deleted before it became ACTIVE{detail}")


class TPUQueuedResourceBlockAdapter(ReservedSteps, TPUQueuedResourceAdapter):
    """The operator's adapter: a queued resource, on a calendar block's reservation when the operator
    names one (its ``reservation_name`` is then the block's; the record names it, and a request
    stopped by the block's end is capacity revoked)."""


# -- the release (DeleteTPUQueuedResourceOperator) -------------------------------------------------


def backend_class(op: Any) -> type[TpuQueuedResourceBackend]:
    """The backend of a setup's slices: ``v2alpha1`` (:mod:`~.backends.tpu_flex`) for flex-start."""
    if getattr(op, "flex_start", False):
        from airflow_provider_dws.backends.tpu_flex import TpuFlexStartBackend

        return TpuFlexStartBackend
    return TpuQueuedResourceBackend


def _targets(
    op: DeleteTPUQueuedResourceOperator, context: Context, setup: CreateTPUQueuedResourceOperator | None
) -> tuple[RequestIdentity | None, str | None, list[str], list[str]]:
    """Whose submissions to release (the setup's identity, or a base id), where, and names
    released whatever they are (``setup``: the setup task, if it is one of this DAG)."""
    from airflow_provider_dws.specs.templates import has_template

    zones = [op.zone, *op.failover_zones]
    if op.queued_resource_id:
        return None, op.queued_resource_id, zones, []
    if setup is not None:
        home = setup.render_template(setup.zone, context) if has_template(setup.zone) else setup.zone
        # A setup on a calendar block may leave its zone to the block: its pushed name says where.
        zones += [str(home)] if home else []
        zones += [p.location for p in (setup.failover.placements if setup.failover else ())]
    else:
        op.log.warning(
            "Task %r is not a CreateTPUQueuedResourceOperator of this DAG: searching %s only",
            op.setup_task_id,
            ", ".join(zones),
        )
    exact: list[str] = []
    # The setup pushes the name of the submission it waits on; it may be in any zone.
    pushed = context["ti"].xcom_pull(task_ids=op.setup_task_id, key=roles.QUEUED_RESOURCE_NAME_KEY)
    if isinstance(pushed, str) and pushed:
        exact.append(pushed)
        zones.append(zone_of(pushed))
    return task_identity(context, task_id=op.setup_task_id), None, zones, exact


def release_all(op: DeleteTPUQueuedResourceOperator, context: Context) -> dict[str, Any]:
    """Delete every submission of the setup, in every zone it may have used, and wait until gone."""
    setup: CreateTPUQueuedResourceOperator | None = (
        None if op.queued_resource_id else task_in_role(op, op.setup_task_id, roles.TPU_QUEUED_RESOURCE)
    )
    identity, base, zones, exact = _targets(op, context, setup)
    project = resolve_project(op)
    released: list[str] = []
    states: list[str] = []
    backend_type = backend_class(setup)
    for zone in dict.fromkeys(zones):
        backend = backend_type(project, zone, op.gcp_conn_id, op.impersonation_chain)
        if identity is not None:
            # Every submission of the setup's task instance carries its identity label.
            found = backend.find(identity)
        else:
            assert base is not None
            found = [
                status
                for status in backend.find_by_prefix(base)
                if status.name == backend.name_of(base) or is_attempt_of(status.name.rsplit("/", 1)[-1], base)
            ]
        names = {status.name for status in found}
        for name in exact:
            if name not in names and name.startswith(backend.parent + "/"):
                status = backend.get_status(name)
                found += [status] if status is not None else []
        for status in found:
            _persist_link(context, backend, status.name)
            op.log.info(
                "Releasing %s (%s)%s", status.name, status.state, " with its nodes" if op.force else ""
            )
            try:
                backend.delete(status.name, force=op.force)
            except _REFUSED as err:
                raise BadRequestError(f"Cloud TPU refused to delete {status.name}: {err.message}") from None
            op.log.info("%s is gone; the slice is no longer billed", status.name)
            released.append(status.name)
            states.append(status.state)
    record_release(op, context, TPU_SLICES, Released(list(zip(released, states, strict=True))))
    if not released:
        op.log.info(
            "No queued resource of %s in %s (never created, or already released): nothing to do",
            f"task {op.setup_task_id!r}" if identity is not None else repr(base),
            ", ".join(dict.fromkeys(zones)),
        )
    return {
        "queued_resource": released[0] if released else None,
        "released": released,
        "deleted": bool(released),
        "state_before": states[0] if states else None,
    }
