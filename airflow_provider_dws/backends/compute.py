"""Compute Engine flex-start VMs as DWS capacity requests: resize requests of a managed instance group.

:func:`request_vms`, :func:`vms_result` and :func:`succeeded_line` are the VMs a SUCCEEDED request
created, what its task returns of them and the line it logs: the worker's result and that of a
trigger that ends the task itself are the same. The calls every Compute Engine backend makes the
same way, and the process's one thread pool for them, are :mod:`.compute_base`'s. The shared
poller lists the resize requests of each managed instance group (MIG) once per interval, one list
serving every waiting request of that MIG (:meth:`ComputeResizeRequestBackend.poll_group`).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_dws.backends.base import RESULT, RequestStatus, classify_listed, clear_ended
from airflow_provider_dws.backends.compute_base import (
    OPERATION_TIMEOUT,
    ComputeBackend,
    _each,
    _when,
    in_pool,
)
from airflow_provider_dws.errors import RequestNotFoundError
from airflow_provider_dws.facts import REGION_PATTERN
from airflow_provider_dws.scheduling.identity import RequestIdentity, is_attempt_of, parse_attempt_name
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    StateTable,
    reservation_outcome,
)

if TYPE_CHECKING:
    from google.cloud.compute_v1 import InstanceGroupManagerResizeRequest

log = logging.getLogger(__name__)

# The one table from Compute Engine resize request states (``InstanceGroupManagerResizeRequest.State``,
# a string on the wire) to phases. A flex-start resize request waits in CREATING then ACCEPTED
# (every provisioning attempt stays ACCEPTED) until all its VMs can be created at once; SUCCEEDED
# means they exist, are held and billed: RUNNING, not an end (the request stays SUCCEEDED after the
# run duration deletes them). FAILED is refined by :func:`classify_compute_resize_request`.
COMPUTE_RESIZE_REQUEST_STATE_PHASES: dict[str, Phase] = {
    "STATE_UNSPECIFIED": Phase.WAITING,
    "CREATING": Phase.WAITING,
    "ACCEPTED": Phase.WAITING,
    "SUCCEEDED": Phase.RUNNING,
    "FAILED": Phase.NOT_OBTAINED,
    "CANCELLED": Phase.CANCELLED,
}

#: Compute Engine error reasons (``status.error.errors[].code``) saying the request itself was wrong,
#: so resubmitting it cannot help. Any other reason of a FAILED request (``ZONE_RESOURCE_POOL_EXHAUSTED``,
#: ``RESOURCE_POOL_EXHAUSTED``, an unknown one) is capacity not obtained, as for Cloud TPU.
COMPUTE_BAD_REQUEST_REASONS = frozenset(
    {
        "BAD_REQUEST",
        "INVALID_ARGUMENT",
        "INVALID_FIELD_VALUE",
        "INVALID_USAGE",
        "INVALID_RESOURCE_USAGE",
        "REQUIRED_FIELD_MISSING",
        "RESOURCE_NOT_FOUND",
        "NOT_FOUND",
        "PERMISSION_DENIED",
        "FORBIDDEN",
        "CONDITION_NOT_MET",
        "UNSUPPORTED_OPERATION",
        "QUOTA_EXCEEDED",
    }
)


def classify_compute_resize_request(
    state_name: str, *, reasons: Sequence[str] = (), message: str = ""
) -> Outcome:
    """Classify a Compute Engine resize request state into a phase and, for failures, a reason.

    :param reasons: the error reasons of the request's ``status.error`` (or its last attempt's),
        e.g. ``["ZONE_RESOURCE_POOL_EXHAUSTED"]``.
    :param message: the error message, kept for the user.

    A FAILED request created no VMs (a partial creation is rolled back): a bad request when a reason
    says the request was wrong (:data:`COMPUTE_BAD_REQUEST_REASONS`: invalid, not found, permission,
    quota), capacity not obtained otherwise.
    """
    phase = COMPUTE_RESIZE_REQUEST_STATE_PHASES.get(state_name, Phase.WAITING)
    if state_name == "FAILED":
        # Google documents no error code for a request whose reservation ended while it waited
        # (compute v1, revision 20261106): only the message can tell it, and one that does not
        # say so is classified by its code. The reserved adapters do not retry either way once
        # the block's end has passed (``runtime/reserved.ReservedSteps.no_retry``).
        ended = reservation_outcome(message)
        if ended is not None and ended.failure is FailureKind.PREEMPTED:
            return Outcome(Phase.FAILED, FailureKind.PREEMPTED, message)
        if ended is not None:
            return ended
        if any(reason.upper() in COMPUTE_BAD_REQUEST_REASONS for reason in reasons):
            return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, message)
        return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, message)
    if phase is Phase.CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, message or "the resize request was cancelled")
    return Outcome(phase, None, "")


#: Compute Engine MIG resize requests (``InstanceGroupManagerResizeRequest.State``); facts:
#: ``reasons``, ``message``.
COMPUTE_RESIZE_REQUEST_STATES = StateTable(
    "compute_resize_request", COMPUTE_RESIZE_REQUEST_STATE_PHASES, classify_compute_resize_request
)

#: Resize requests per list page.
LIST_PAGE_SIZE = 250
#: The states in which a request may still be cancelled (the API refuses elsewhere).
CANCELLABLE = ("CREATING", "ACCEPTED")
#: The states in which a request may be deleted.
DELETABLE = ("SUCCEEDED", "FAILED", "CANCELLED")
#: ``max_wait=<seconds>s`` in a request's description: the max wait the provider enforces (the API
#: has none and resize requests have no labels), so a reattached try keeps the request's own.
MAX_WAIT_RE = re.compile(r"\bmax_wait=(?P<seconds>[0-9]+)s\b")
#: Namespace of the cancel and delete calls' request ids (one per request and verb).
_CALL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws/compute")
_NAME_RE = re.compile(
    r"^projects/(?P<project>[^/]+)/(?P<scope>zones|regions)/(?P<location>[^/]+)"
    r"/instanceGroupManagers/(?P<mig>[^/]+)/resizeRequests/(?P<request>[^/]+)$"
)


class ResizeRequestName(NamedTuple):
    """The parts of ``projects/P/zones/Z/instanceGroupManagers/M/resizeRequests/R`` (or ``regions/R``)."""

    project: str
    scope: str
    location: str
    instance_group_manager: str
    resize_request: str

    @property
    def regional(self) -> bool:
        """True for a regional MIG's request."""
        return self.scope == "regions"

    @property
    def mig_path(self) -> str:
        """``projects/P/zones/Z/instanceGroupManagers/M``: the poller's group."""
        return f"projects/{self.project}/{self.scope}/{self.location}/instanceGroupManagers/{self.instance_group_manager}"


def parse_resize_request_name(name: str) -> ResizeRequestName:
    """Split a resize request's full name (the provider's, or its ``selfLink`` path) into its parts."""
    match = _NAME_RE.fullmatch(name.split("/compute/v1/", 1)[-1])
    if match is None:
        raise ValueError(f"not a Compute Engine resize request name: {name!r}")
    return ResizeRequestName(*match.groups())


def is_region(location: str) -> bool:
    """``us-central1`` is a region, ``us-central1-a`` a zone."""
    return re.fullmatch(REGION_PATTERN, location) is not None


def error_reasons(rr: InstanceGroupManagerResizeRequest) -> tuple[list[str], str]:
    """The error reasons and message of a request (its ``status.error``, else its last attempt's)."""
    for error in (rr.status.error, rr.status.last_attempt.error):
        if error.errors:
            reasons = [e.code for e in error.errors if e.code]
            return reasons, "; ".join(f"{e.code}: {e.message}" if e.code else e.message for e in error.errors)
    return [], ""


def describe_resize_request(rr: InstanceGroupManagerResizeRequest, where: ResizeRequestName) -> str:
    """``4 VMs for 6:00:00 in MIG train-pool (us-central1-a)``: what the request asks for."""
    count = rr.resize_by or len(rr.instances)
    run = rr.requested_run_duration.seconds if "requested_run_duration" in rr else 0
    duration = f" for {run // 3600}:{run % 3600 // 60:02d}:{run % 60:02d}" if run else ""
    vms = f"{count} VM{'s' if count != 1 else ''}"
    return f"{vms}{duration} in MIG {where.instance_group_manager} ({where.location})"


def resize_request_status(
    rr: InstanceGroupManagerResizeRequest, name: str, *, now: datetime | None = None
) -> RequestStatus:
    """Classify a resize request into the shared vocabulary (no API call). ``name`` is its full name
    (the message carries only a ``selfLink`` URL, which the emulator and Google spell alike).

    SUCCEEDED is timed ``now`` (default: the clock): the request records no time for it; the task's
    result reads when its VMs were created.
    """
    where = parse_resize_request_name(name)
    state = rr.state or "STATE_UNSPECIFIED"
    reasons, message = error_reasons(rr)
    outcome = COMPUTE_RESIZE_REQUEST_STATES.classify(state, reasons=reasons, message=message)
    now = now or datetime.now(timezone.utc)
    max_wait = MAX_WAIT_RE.search(rr.description or "")
    parsed = parse_attempt_name(where.resize_request)
    return RequestStatus(
        name=name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=_when(rr.creation_timestamp),
            started=now if state == "SUCCEEDED" else None,
            finished=now if outcome.phase.terminal else None,
        ),
        description=describe_resize_request(rr, where),
        details={
            "location": where.location,
            "instance_group_manager": where.instance_group_manager,
            "resize_by": int(rr.resize_by or len(rr.instances)),
            "run_seconds": int(rr.requested_run_duration.seconds) if "requested_run_duration" in rr else None,
            "max_wait_seconds": int(max_wait["seconds"]) if max_wait else None,
            "attempt": parsed[2] if parsed else 1,
            "reasons": reasons,
        },
    )


def resize_request_from_spec(spec: Mapping[str, Any]) -> InstanceGroupManagerResizeRequest:
    """The ``InstanceGroupManagerResizeRequest`` of its JSON (``request_spec``'s ``resize_request``):
    name, ``resize_by``, run duration (``{"seconds": n}`` or none) and description."""
    from google.cloud.compute_v1 import Duration, InstanceGroupManagerResizeRequest

    run = spec.get("requested_run_duration")
    return InstanceGroupManagerResizeRequest(
        name=str(spec["name"]),
        resize_by=int(spec["resize_by"]),
        requested_run_duration=Duration(seconds=int(run["seconds"])) if run else None,
        description=str(spec.get("description") or ""),
    )


def own_group(where: ResizeRequestName) -> bool:
    """Whether a request's MIG is the one the provider made for its task instance (named from the
    same base as the request: :meth:`RequestIdentity.group_name`), whose VMs are all the request's."""
    parsed = parse_attempt_name(where.resize_request)
    mig = where.instance_group_manager
    return parsed is not None and (mig == parsed[0] or mig.startswith(f"{parsed[0]}-"))


@dataclass(frozen=True)
class ResizeAsk:
    """What :meth:`ComputeResizeRequestBackend.submit` creates: a resize request in a MIG."""

    instance_group_manager: str
    resize_request: InstanceGroupManagerResizeRequest


class ComputeResizeRequestBackend(ComputeBackend):
    """Create, read, list, cancel and delete the resize requests of the MIGs of one zone or region.

    ``location`` is a zone (zonal MIGs) or a region (regional MIGs). A request is known by its full
    name; its MIG is part of it. Releasing a request that waits cancels it; one that ended without
    VMs is deleted (:meth:`discard`); the VMs of a SUCCEEDED one are deleted by the release operator,
    or by the API at the end of the run duration.
    """

    kind = "compute_resize_request"
    location_key = "location"
    call_namespace = _CALL_NAMESPACE
    cancellable = CANCELLABLE

    @property
    def regional(self) -> bool:
        """True when :attr:`location` is a region."""
        return is_region(self.location)

    @property
    def scope(self) -> dict[str, str]:
        """The location keyword of every call: ``{"zone": ...}`` or ``{"region": ...}``."""
        return {"region": self.location} if self.regional else {"zone": self.location}

    def mig_path(self, mig: str) -> str:
        """``projects/P/zones/Z/instanceGroupManagers/M`` (or ``regions/R``)."""
        scope = "regions" if self.regional else "zones"
        return f"projects/{self.project_id}/{scope}/{self.location}/instanceGroupManagers/{mig}"

    def name_of(self, mig: str, request: str) -> str:
        """The full name of resize request ``request`` of ``mig`` here."""
        return f"{self.mig_path(mig)}/resizeRequests/{request}"

    def poll_group(self, name: str) -> str:
        """The shared poller's group of a request: its MIG (one list per MIG serves its waits)."""
        return parse_resize_request_name(name).mig_path

    def _requests(self) -> Any:
        hook = self.hook
        return (
            hook.get_region_resize_requests_client() if self.regional else hook.get_resize_requests_client()
        )

    def _message(self, verb: str, **fields: Any) -> Any:
        """The request message of ``verb`` (``Insert``, ``Cancel``, ``Delete``) for this location's
        kind of MIG: ``request_id`` travels only on a message (the flattened arguments lack it)."""
        from google.cloud import compute_v1

        region = "Region" if self.regional else ""
        return getattr(compute_v1, f"{verb}{region}InstanceGroupManagerResizeRequestRequest")(**fields)

    def _list_message(self, mig: str) -> Any:
        from google.cloud import compute_v1

        region = "Region" if self.regional else ""
        return getattr(compute_v1, f"List{region}InstanceGroupManagerResizeRequestsRequest")(
            project=self.project_id, **self.scope, instance_group_manager=mig, max_results=LIST_PAGE_SIZE
        )

    def _key(self, name: str) -> dict[str, Any]:
        where = parse_resize_request_name(name)
        return {
            "project": where.project,
            **self.scope,
            "instance_group_manager": where.instance_group_manager,
            "resize_request": where.resize_request,
        }

    def _api(self) -> Any:
        return self._requests()

    def _insert(self, request: ResizeAsk, token: str) -> tuple[str, Any]:
        resource = request.resize_request
        message = self._message(
            "Insert",
            project=self.project_id,
            **self.scope,
            instance_group_manager=request.instance_group_manager,
            instance_group_manager_resize_request_resource=resource,
            request_id=token,
        )
        return self.name_of(request.instance_group_manager, resource.name), message

    def _state(self, resource: InstanceGroupManagerResizeRequest) -> str:
        return str(resource.state)

    def _classify(self, resource: InstanceGroupManagerResizeRequest, name: str) -> RequestStatus:
        return resize_request_status(resource, name)

    # -- sync (worker) -----------------------------------------------------------------------------

    def list_mig(self, mig: str) -> list[RequestStatus]:
        """Every resize request of ``mig`` (all pages), classified; a MIG that does not exist has none."""
        requests = self._requests()

        def list_all() -> list[Any]:
            pager = requests.list(request=self._list_message(mig), timeout=self.rpc_timeout)
            return list(pager)

        try:
            items = self._call(f"list resize requests of {self.mig_path(mig)}", list_all)
        except RequestNotFoundError:
            return []
        return [resize_request_status(rr, self.name_of(mig, rr.name)) for rr in items]

    def find(self, identity: RequestIdentity, mig: str | None = None) -> list[RequestStatus]:
        """Every resize request of this task instance in ``mig`` (default: the one made for it): the
        names that are submissions of its base (any try and attempt), with one paged list."""
        base = identity.queued_resource_base()
        return [
            status
            for status in self.list_mig(mig or identity.group_name())
            if is_attempt_of(parse_resize_request_name(status.name).resize_request, base)
        ]

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give the capacity back: cancel a waiting request (and, with ``wait``, delete it once
        cancelled). A SUCCEEDED one is left: its VMs are the release operator's (or the run
        duration's) to delete. False when there was nothing to release."""
        current = self.get(name)
        if current is None:
            return False
        if current.state in DELETABLE:
            log.info("%s is %s: nothing to cancel", name, current.state)
            return False
        cancelled = self.cancel(name)
        if wait:
            self.discard(name)
        return cancelled

    def discard(self, name: str, timeout: float = OPERATION_TIMEOUT) -> bool:
        """Leave nothing of a request that holds no VMs: cancel it if it still waits, then delete it
        (a SUCCEEDED one is kept: deleting it would only hide its VMs). False when it was gone."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.get(name)
            if current is None:
                return False
            if current.state == "SUCCEEDED":
                log.warning("%s SUCCEEDED meanwhile: kept, its VMs are released by the teardown", name)
                return False
            if current.state in DELETABLE:
                return self.delete(name)
            if current.state in CANCELLABLE:
                self.cancel(name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} still {current.state} {timeout:.0f}s after its cancel")
            time.sleep(1.0)

    # -- a request its trigger makes (issue 36) ----------------------------------------------------

    def submit_spec(self, spec: Mapping[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (``request_spec``): the flex-start template and
        MIG made for the task instance first (or adopted, as the worker does), then the request."""
        from airflow_provider_dws.backends import compute_groups as groups

        mig = str(spec["instance_group_manager"])
        if spec.get("vms"):
            template = groups.flex_start_template(mig, groups.VmSpec(**spec["vms"]))
            groups.ensure_group(self, mig, groups.ensure_template(self, template))
        ask = ResizeAsk(mig, resize_request_from_spec(spec["resize_request"]))
        return self.submit(ask, identity, identity.request_uuid())

    def delete_ended(self, found: Sequence[RequestStatus]) -> None:
        """Delete the requests of ``found`` (a lookup's) that ended without VMs (FAILED, CANCELLED):
        they hold nothing, but stay listed until deleted. A delete that fails is logged."""
        clear_ended(found, self.delete)

    def result_line(self, status: RequestStatus) -> str | None:
        """What a trigger that ends the task logs of its result (its VMs and IPs)."""
        result = status.details.get(RESULT)
        return succeeded_line(status, result) if isinstance(result, dict) else None

    async def aended(self, status: RequestStatus) -> RequestStatus:
        """A SUCCEEDED request with what its task returns (:data:`RESULT`: its VMs, read in the
        pool), so the task needs neither the client library nor another call."""
        if status.state != "SUCCEEDED" or RESULT in status.details:
            return status
        try:
            vms = await in_pool(request_vms, self, status)
            result = vms_result(status, vms, None)
        except Exception as err:  # the task reads them itself then: never lose the event over it
            log.warning("Could not read the VMs of %s for its task (%s)", status.name, err)
            return status
        return replace(status, details={**status.details, RESULT: result})

    # -- async (triggerer), in the shared pool -----------------------------------------------------

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The requests of every MIG named in ``only`` (the shared poller's group: one MIG),
        classified, with one paged list per MIG in the pool. Resize requests are listed per MIG, not
        per location, so with ``only=None`` nothing is listed. Ended requests stay listed until
        deleted, classified as such. Errors propagate: the shared poller backs off as a whole."""
        if not isinstance(only, Iterable):
            return {}
        wanted: dict[str, set[str]] = {}
        for name in only:
            where = parse_resize_request_name(name)
            wanted.setdefault(where.instance_group_manager, set()).add(where.resize_request)
        found: dict[str, RequestStatus] = {}
        for mig, names in wanted.items():
            pages = await in_pool(self._pages, self._list_message(mig))
            listed = await classify_listed(
                _each(pages), names, lambda rr, mig=mig: resize_request_status(rr, self.name_of(mig, rr.name))
            )
            found.update({status.name: status for status in listed.values()})
        return found


def _created_after(summaries: list[dict[str, Any]], since: datetime | None) -> list[dict[str, Any]]:
    """The VMs created at or after ``since`` (the request's creation): the ones it created."""
    if since is None:
        return summaries
    return [s for s in summaries if (_when(s.get("creation_timestamp")) or since) >= since]


def request_vms(backend: ComputeResizeRequestBackend, status: RequestStatus) -> list[dict[str, Any]]:
    """The VMs a SUCCEEDED request created, summarized: every VM of a MIG the operator made for this
    task instance (:func:`own_group`, from the request's name, the one rule of the worker, the
    trigger and the release), else those of the MIG created since the request was."""
    from airflow_provider_dws.backends import compute_groups as groups

    where = parse_resize_request_name(status.name)
    whole_group = own_group(where)
    mig = where.instance_group_manager
    summaries = []
    for managed in groups.managed_instances(backend, mig):
        instance = groups.get_instance(backend, managed.instance)
        if instance is not None:
            summaries.append(groups.instance_summary(instance))
    return summaries if whole_group else _created_after(summaries, status.timings.submitted)


def vms_result(status: RequestStatus, vms: list[dict[str, Any]], machine: str | None) -> dict[str, Any]:
    """What a task whose resize request SUCCEEDED returns: the request, its MIG, and its VMs (names,
    zones, internal IPs, machine type and GPUs); ``machine``: the machine type when no VM says."""
    where = parse_resize_request_name(status.name)
    run = status.details.get("run_seconds")
    return {
        "resize_request": status.name,
        "project_id": where.project,
        "location": where.location,
        "instance_group_manager": where.instance_group_manager,
        "resize_by": status.details.get("resize_by"),
        "run_duration_seconds": int(run) if run else None,
        "machine_type": vms[0]["machine_type"] if vms else machine,
        "accelerators": vms[0]["accelerators"] if vms else [],
        "gpus": sum(a["count"] for vm in vms for a in vm["accelerators"]),
        "instances": vms,
        "instance_names": [vm["name"] for vm in vms],
        "instance_urls": [vm["self_link"] for vm in vms],
        "zones": sorted({vm["zone"] for vm in vms}),
        "internal_ips": [vm["internal_ip"] for vm in vms if vm["internal_ip"]],
        "wait_seconds": status.timings.wait_seconds,
    }


def succeeded_line(status: RequestStatus, result: Mapping[str, Any]) -> str:
    """The task log's line for a SUCCEEDED request: its wait, its VMs and their IPs, how long they
    are billed."""
    run = result.get("run_duration_seconds")
    waited = timedelta(seconds=round(status.timings.wait_seconds or 0))
    vms = ", ".join(f"{vm['name']} {vm['internal_ip']}" for vm in result.get("instances") or ())
    until = timedelta(seconds=run) if run else "its reservation's end"
    return (
        f"{status.name} SUCCEEDED after waiting {waited}: {vms or 'no VM found'}; billed until deleted "
        f"(at the latest after {until})"
    )
