"""Cloud TPU queued resources as DWS capacity requests."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Container, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_dws.backends.base import RESULT, RequestStatus, classify_listed, clear_ended
from airflow_provider_dws.backends.google import (
    RPC_FAILED_PRECONDITION,
    RPC_INVALID_ARGUMENT,
    RPC_PERMISSION_DENIED,
    GoogleBackend,
    translated,
)
from airflow_provider_dws.catalog import tpu_chips
from airflow_provider_dws.errors import ConflictError, RequestNotFoundError
from airflow_provider_dws.hooks.tpu import DwsTpuAsyncHook, DwsTpuHook
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, LABEL_KEY, LABEL_TRY, RequestIdentity
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    StateTable,
    reservation_outcome,
)

if TYPE_CHECKING:
    from google.cloud.tpu_v2 import Node, QueuedResource

log = logging.getLogger(__name__)

# The one table from Cloud TPU ``QueuedResourceState.State`` names to phases. ACTIVE means the
# slice is provisioned and billing: for a queued resource that is the "running" phase, since the
# workload runs on the nodes. SUSPENDING/SUSPENDED (spot preemption) and FAILED are refined by
# :func:`classify_tpu_queued_resource`.
TPU_QUEUED_RESOURCE_STATE_PHASES: dict[str, Phase] = {
    "STATE_UNSPECIFIED": Phase.WAITING,
    "CREATING": Phase.WAITING,
    "ACCEPTED": Phase.WAITING,
    "WAITING_FOR_RESOURCES": Phase.WAITING,
    "PROVISIONING": Phase.PROVISIONING,
    "ACTIVE": Phase.RUNNING,
    "FAILED": Phase.NOT_OBTAINED,
    "SUSPENDING": Phase.FAILED,
    "SUSPENDED": Phase.FAILED,
    "DELETING": Phase.CANCELLED,
}


def tpu_phase(state_name: str) -> Phase:
    """Map a Cloud TPU ``QueuedResourceState.State`` name to a :class:`Phase` (unknown: WAITING)."""
    return TPU_QUEUED_RESOURCE_STATE_PHASES.get(state_name, Phase.WAITING)


def classify_tpu_queued_resource(state_name: str, *, error_code: int = 0, error_message: str = "") -> Outcome:
    """Classify a queued resource state into a phase and, for failures, a reason.

    A queued resource only reaches FAILED before its slice is provisioned: its valid-until time
    passed, or provisioning was refused. That is capacity not obtained, unless the error says
    the request itself was wrong (INVALID_ARGUMENT, FAILED_PRECONDITION, PERMISSION_DENIED).
    SUSPENDING/SUSPENDED means a spot slice was preempted: the capacity was taken back.
    """
    phase = tpu_phase(state_name)
    if state_name == "FAILED":
        ended = reservation_outcome(error_message)
        if ended is not None:
            return ended
        if error_code in (RPC_INVALID_ARGUMENT, RPC_FAILED_PRECONDITION, RPC_PERMISSION_DENIED):
            return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, error_message)
        return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, error_message)
    if state_name in ("SUSPENDING", "SUSPENDED"):
        return Outcome(Phase.FAILED, FailureKind.PREEMPTED, error_message or "the spot slice was preempted")
    if phase is Phase.CANCELLED:
        return Outcome(
            Phase.CANCELLED, FailureKind.CANCELLED, error_message or "the queued resource is being deleted"
        )
    return Outcome(phase, None, error_message)


#: Cloud TPU queued resources (``QueuedResourceState.State``); facts: ``error_code``, ``error_message``.
TPU_QUEUED_RESOURCE_STATES = StateTable(
    "tpu_queued_resource", TPU_QUEUED_RESOURCE_STATE_PHASES, classify_tpu_queued_resource
)

_DELETE_TIMEOUT_SECONDS = 600.0
#: Queued resources per list page (see the Vertex backend's LIST_PAGE_SIZE).
LIST_PAGE_SIZE = 250


#: ``projects/P/locations/Z/queuedResources/ID``: read here without the client library, so a task
#: that only names its queued resource (its zone, its console link) never imports it.
_QR_NAME = re.compile(r"projects/([^/]+)/locations/([^/]+)/queuedResources/([^/]+)")


def parse_queued_resource_name(name: str) -> tuple[str, str, str]:
    """Split ``projects/P/locations/Z/queuedResources/ID`` into (project, zone, id)."""
    match = _QR_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Cloud TPU queued resource name: {name!r}")
    return match.group(1), match.group(2), match.group(3)


def queued_resource_from_spec(spec: dict[str, Any]) -> QueuedResource:
    """The ``QueuedResource`` message of its JSON (``request_spec``'s ``queued_resource``): field
    names as in the proto or in JSON, durations as ``"3600s"``; an unknown field is refused
    (``ValueError``), as the API would refuse it."""
    from google.cloud.tpu_v2 import QueuedResource as QueuedResourceMessage
    from google.protobuf.json_format import ParseError

    try:
        return QueuedResourceMessage.from_json(json.dumps(spec))
    except ParseError as err:
        raise ValueError(f"not a valid QueuedResource: {err}") from None


def zone_of(name: str) -> str:
    """The zone of ``projects/P/locations/ZONE/queuedResources/ID``."""
    return str(parse_queued_resource_name(name)[1])


def describe_queued_resource(qr: QueuedResource, zone: str) -> str:
    """``v5litepod-16 (16 chips) in us-west4-a`` or ``2 x v5p-8 (8 chips) in ...`` for multislice."""
    if not qr.tpu.node_spec:
        return f"TPU in {zone}"
    spec = qr.tpu.node_spec[0]
    accel = spec.node.accelerator_type
    slices = spec.multislice_params.node_count or 1
    try:
        chips = tpu_chips(accel) * slices
    except ValueError:
        return f"{accel} in {zone}"
    return (
        f"{slices} x {accel} ({chips} chips) in {zone}"
        if slices > 1
        else f"{accel} ({chips} chips) in {zone}"
    )


def _labels(qr: QueuedResource) -> Any:
    return qr.tpu.node_spec[0].node.labels if qr.tpu.node_spec else {}


def queued_resource_status(qr: QueuedResource, *, now: datetime | None = None) -> RequestStatus:
    """Classify a ``QueuedResource`` into the shared vocabulary (no API call).

    The API records no start time on the queued resource; ACTIVE is timed ``now`` (default: the
    clock), accurate to one poll interval. :meth:`TpuQueuedResourceBackend.get_status` times it
    by its nodes instead, which matters when a task finds a slice that has been ACTIVE for hours.
    """
    from google.cloud.tpu_v2 import QueuedResource, QueuedResourceState

    _, zone, _ = parse_queued_resource_name(qr.name) if qr.name else ("", "", "")
    state = QueuedResourceState.State(qr.state.state).name
    error = qr.state.failed_data.error
    outcome = TPU_QUEUED_RESOURCE_STATES.classify(state, error_code=error.code, error_message=error.message)
    submitted = cast("datetime | None", qr.create_time)
    now = now or datetime.now(timezone.utc)
    started = now if state == "ACTIVE" else None
    finished = now if outcome.phase.terminal else None
    policy = qr.queueing_policy
    valid_until = cast("Any", policy.valid_until_duration)
    if not valid_until and QueuedResource.QueueingPolicy.pb(policy).HasField("valid_interval"):
        # proto-plus leaves google.type.Interval as raw protobuf Timestamps.
        start, end = policy.valid_interval.start_time, policy.valid_interval.end_time
        valid_until = end.ToDatetime(timezone.utc) - start.ToDatetime(timezone.utc)
    attempt = _labels(qr).get(LABEL_ATTEMPT, "")
    tried = _labels(qr).get(LABEL_TRY, "")
    return RequestStatus(
        name=qr.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(submitted=submitted, started=started, finished=finished),
        description=describe_queued_resource(qr, zone),
        details={
            "zone": zone,
            "max_wait_seconds": valid_until.total_seconds() if valid_until else None,
            "attempt": int(attempt) if attempt.isdigit() else 1,
            "try": int(tried) if tried.isdigit() else None,
        },
    )


def started_by_nodes(status: RequestStatus, nodes: Sequence[Node]) -> RequestStatus:
    """``status`` with ``started`` set to when its slice's first node was created (if known)."""
    created = [cast("datetime | None", node.create_time) for node in nodes]
    known = [when for when in created if when is not None]
    if not known or status.timings.started is None:
        return status
    timings = dataclasses.replace(status.timings, started=min(known))
    return dataclasses.replace(status, timings=timings)


def node_names(qr: QueuedResource) -> list[str]:
    """The node(s) a queued resource creates when ACTIVE (multislice: ``<prefix>-<i>``)."""
    names: list[str] = []
    for spec in qr.tpu.node_spec:
        if spec.multislice_params.node_count:
            prefix = spec.multislice_params.node_id_prefix or spec.node_id
            names += [f"{spec.parent}/nodes/{prefix}-{i}" for i in range(spec.multislice_params.node_count)]
        else:
            names.append(f"{spec.parent}/nodes/{spec.node_id}")
    return names


def node_summary(node: Node) -> dict[str, Any]:
    """What a workload task needs of a node: name, state, type and IP addresses (JSON-friendly)."""
    from google.cloud.tpu_v2 import Node

    return {
        "name": node.name,
        "node_id": node.name.rsplit("/", 1)[-1],
        "state": Node.State(node.state).name,
        "accelerator_type": node.accelerator_type,
        "runtime_version": node.runtime_version,
        "ip_addresses": [ep.ip_address for ep in node.network_endpoints],
        "external_ip_addresses": [
            ep.access_config.external_ip for ep in node.network_endpoints if ep.access_config.external_ip
        ],
    }


def active_line(status: RequestStatus, result: dict[str, Any]) -> str:
    """The task log's line for a slice that became ACTIVE: its wait, its nodes and their IPs."""
    from datetime import timedelta

    waited = timedelta(seconds=round(status.timings.wait_seconds or 0))
    nodes = ", ".join(f"{node['node_id']} {node['ip_addresses']}" for node in result["nodes"])
    return (
        f"{status.name} is ACTIVE after waiting {waited}: {len(result['nodes'])} node(s) {nodes}; "
        "it is billed until it is deleted"
    )


def active_result(qr: QueuedResource, nodes: Sequence[Node], status: RequestStatus) -> dict[str, Any]:
    """What a task whose slice is ACTIVE returns: the slice's nodes, IP addresses and accelerator
    details (JSON-friendly)."""
    project, zone, qr_id = parse_queued_resource_name(qr.name)
    summaries = [node_summary(n) for n in nodes]
    spec = qr.tpu.node_spec[0]
    accelerator_type = spec.node.accelerator_type
    slices = spec.multislice_params.node_count or 1
    return {
        "queued_resource": qr.name,
        "queued_resource_id": qr_id,
        "project_id": project,
        "zone": zone,
        "accelerator_type": accelerator_type,
        "runtime_version": spec.node.runtime_version,
        "chips": tpu_chips(accelerator_type) * slices,
        "node_count": slices,
        "nodes": summaries,
        "ip_addresses": [ip for n in summaries for ip in n["ip_addresses"]],
        "wait_seconds": status.timings.wait_seconds,
    }


class TpuQueuedResourceBackend(GoogleBackend[DwsTpuHook, DwsTpuAsyncHook]):
    """Create, read, list and delete Cloud TPU queued resources through the google client library.

    Sync methods serve the operators (in a worker); ``a*`` methods serve the trigger. Every call
    retries transient errors; a create retried after an unknown outcome checks for the resource
    first, and ALREADY_EXISTS means "reattach", never a second request. Releasing is deleting
    (with the nodes): gone, or already being deleted, is success.
    """

    kind = "tpu_queued_resource"
    location_key = "zone"
    sync_hook_class = DwsTpuHook
    async_hook_class = DwsTpuAsyncHook

    def __init__(
        self,
        project_id: str,
        zone: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        rpc_timeout: float | None = None,
    ) -> None:
        super().__init__(project_id, zone, gcp_conn_id, impersonation_chain, rpc_timeout)

    @property
    def zone(self) -> str:
        """The Cloud TPU zone."""
        return self.location

    def name_of(self, queued_resource_id: str) -> str:
        """The full resource name of ``queued_resource_id`` in this zone."""
        return f"projects/{self.project_id}/locations/{self.zone}/queuedResources/{queued_resource_id}"

    def _client(self) -> Any:
        return self.hook.get_tpu_client()

    def status_of(self, qr: QueuedResource) -> RequestStatus:
        """A queued resource, classified (:func:`queued_resource_status`)."""
        return queued_resource_status(qr)

    # -- sync (worker) -------------------------------------------------------------------------

    def get(self, name: str) -> QueuedResource | None:
        """Read one queued resource; ``None`` when it does not exist."""
        try:
            return self._rpc(f"get {name}", self._client().get_queued_resource, name=name)
        except RequestNotFoundError:
            return None

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one queued resource, classified, an ACTIVE one timed by its nodes; ``None`` when gone."""
        qr = self.get(name)
        return None if qr is None else self._timed(qr)

    def _list(self, keep: Callable[[QueuedResource], bool]) -> list[RequestStatus]:
        from google.cloud.tpu_v2 import ListQueuedResourcesRequest

        request = ListQueuedResourcesRequest(parent=self.parent, page_size=LIST_PAGE_SIZE)

        def list_all() -> list[QueuedResource]:
            pager = self._client().list_queued_resources(request=request, timeout=self.rpc_timeout)
            return [qr for qr in pager if keep(qr)]

        return [self._timed(qr) for qr in self._call(f"list queued resources in {self.parent}", list_all)]

    def _timed(self, qr: QueuedResource) -> RequestStatus:
        status = self.status_of(qr)
        if status.state != "ACTIVE":
            return status
        try:
            return started_by_nodes(status, self.nodes(qr))
        except RequestNotFoundError:  # a node deleted meanwhile: keep the time it was seen
            return status

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every queued resource of this task instance in the zone (any id, any attempt: the
        identity label on its nodes), with one zone list."""
        return self._list(lambda qr: _labels(qr).get(LABEL_KEY) == identity.key)

    def find_by_prefix(self, prefix: str) -> list[RequestStatus]:
        """Every queued resource of the zone whose id starts with ``prefix``, with one zone list."""
        return self._list(lambda qr: qr.name.rsplit("/", 1)[-1].startswith(prefix))

    def submit(
        self,
        request: QueuedResource,
        identity: RequestIdentity,
        request_id: str | None = None,
        *,
        run: dict[str, str] | None = None,
    ) -> tuple[RequestStatus, bool]:
        """Create the queued resource ``request_id``, or adopt the existing one of that id
        (``run``: a flex-start run duration, ``{"maxRunDuration": "3600s"}``, which only
        :class:`~.tpu_flex.TpuFlexStartBackend` takes).

        Returns its status and whether this call created it.
        """
        if not request_id:
            raise ValueError("a Cloud TPU queued resource needs its id (request_id)")
        name = self.name_of(request_id)

        def create() -> RequestStatus:
            return self._created(self._create_operation(request_id, request, run), name)

        return self._create_named(name, create)

    def _create_operation(self, request_id: str, request: QueuedResource, run: dict[str, str] | None) -> Any:
        """The create call: ``v2`` has no flex-start (see :mod:`.tpu_flex`)."""
        if run is not None:
            raise ValueError("a flex-start run duration needs the v2alpha1 backend (tpu_flex_start)")
        return self._client().create_queued_resource(
            parent=self.parent,
            queued_resource_id=request_id,
            queued_resource=request,
            timeout=self.rpc_timeout,
        )

    def submit_spec(self, spec: dict[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (what a trigger is handed:
        ``{"queued_resource_id": ..., "queued_resource": ...}``). An ended request of the same id
        (which the API keeps listed, and which would be adopted) is deleted first, as the worker's
        own submit does."""
        qr_id = str(spec["queued_resource_id"])
        request = queued_resource_from_spec(spec["queued_resource"])
        name = self.name_of(qr_id)
        existing = self.get_status(name)
        if existing is not None and existing.phase.terminal:
            log.warning("An earlier request %s ended; deleting it before asking again", name)
            self.release(name, wait=True)
        return self.submit(request, identity, qr_id, run=spec.get("run_duration"))

    def delete_ended(self, found: Sequence[RequestStatus]) -> None:
        """Delete the queued resources of ``found`` (a lookup's) that ended without success (FAILED,
        SUSPENDED): an ended request holds nothing, but it stays listed until deleted. A delete that
        fails is logged, not raised."""
        clear_ended(found, self.release)

    def _created(self, operation: Any, name: str) -> RequestStatus:
        self._operation_result(operation, f"create {name}", _DELETE_TIMEOUT_SECONDS)
        created = self.get_status(name)
        if created is None:
            raise RequestNotFoundError(f"{name} vanished right after it was created")
        return created

    def delete(self, name: str, *, force: bool = True, wait: bool = True) -> bool:
        """Delete a queued resource (``force`` also deletes its nodes) and, by default, wait until gone.

        Returns False when it was already gone. A delete refused because a delete is already in
        progress (the resource is DELETING) is treated as in progress, not as an error.
        """
        from google.cloud.tpu_v2 import DeleteQueuedResourceRequest

        request = DeleteQueuedResourceRequest(name=name, force=force)
        try:
            operation = self._rpc(f"delete {name}", self._client().delete_queued_resource, request=request)
        except RequestNotFoundError:
            return False
        except ConflictError:
            if not self._being_deleted(name):
                raise
            log.info("%s is already being deleted", name)
            operation = None
        if wait:
            if operation is not None:
                self._operation_result(operation, f"delete {name}", _DELETE_TIMEOUT_SECONDS)
            deadline = time.monotonic() + _DELETE_TIMEOUT_SECONDS
            while self.get(name) is not None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} still exists {_DELETE_TIMEOUT_SECONDS:.0f}s after its delete")
                time.sleep(1.0)
        return True

    def _being_deleted(self, name: str) -> bool:
        """Whether ``name`` is DELETING, or already gone (a refused delete that raced another)."""
        qr = self.get(name)
        return qr is None or self.status_of(qr).state == "DELETING"

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give the slice back: delete the queued resource with its nodes; gone or DELETING is fine."""
        return self.delete(name, force=True, wait=wait)

    def nodes(self, qr: QueuedResource) -> list[Node]:
        """The nodes of an ACTIVE queued resource."""
        client = self._client()
        return [self._rpc(f"get {node}", client.get_node, name=node) for node in node_names(qr)]

    # -- async (triggerer) ---------------------------------------------------------------------

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one queued resource, classified; one call, errors propagate (the poller retries)."""
        client = await self.async_hook.get_tpu_client()
        return self.status_of(await self._arpc_once(client.get_queued_resource, name=name))

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every queued resource of the zone (``only``: just these names), classified; paged.

        The API offers no filter, so this is the whole zone, ended requests included until they
        are deleted. Errors propagate.
        """
        from google.cloud.tpu_v2 import ListQueuedResourcesRequest

        client = await self.async_hook.get_tpu_client()
        request = ListQueuedResourcesRequest(parent=self.parent, page_size=LIST_PAGE_SIZE)
        pager = await self._arpc_once(client.list_queued_resources, request=request)
        with translated():  # later pages are fetched while iterating
            pages = (page.queued_resources async for page in pager.pages)
            return await classify_listed(pages, only, self.status_of)

    def result_line(self, status: RequestStatus) -> str | None:
        """What a trigger that ends the task logs of its result (:func:`active_line`)."""
        result = status.details.get(RESULT)
        return active_line(status, result) if isinstance(result, dict) else None

    async def aended(self, status: RequestStatus) -> RequestStatus:
        """The status a trigger reports: an ACTIVE slice timed by when its nodes were created (a
        triggerer that restarted, or a wait reattached late, first sees it ACTIVE long after)."""
        if status.state != "ACTIVE":
            return status
        client = await self.async_hook.get_tpu_client()
        try:
            qr = await self._arpc_once(client.get_queued_resource, name=status.name)
            nodes = [await self._arpc_once(client.get_node, name=node) for node in node_names(qr)]
        except Exception as err:  # the time is a nicety: never lose the event over it
            log.warning("Could not read the nodes of %s to time it (%s)", status.name, err)
            return status
        timed = started_by_nodes(status, nodes)
        try:
            # The task's return value, from the messages in hand: the resumed task needs neither
            # the client library nor another call.
            result = active_result(qr, nodes, timed)
        except Exception as err:
            log.warning("Could not summarize %s for its task (%s)", status.name, err)
            return timed
        return dataclasses.replace(timed, details={**timed.details, RESULT: result})

    async def arelease(self, name: str) -> bool:
        """Give the slice back: delete the queued resource and its nodes (``force``); gone or
        already being deleted is fine (False when gone)."""
        from google.cloud.tpu_v2 import DeleteQueuedResourceRequest

        client = await self.async_hook.get_tpu_client()
        request = DeleteQueuedResourceRequest(name=name, force=True)
        try:
            await self._acall(
                f"delete {name}", client.delete_queued_resource, request=request, timeout=self.rpc_timeout
            )
        except RequestNotFoundError:
            log.info("%s is already gone", name)
            return False
        except ConflictError:
            try:
                current = await self._acall(
                    f"get {name}", client.get_queued_resource, name=name, timeout=self.rpc_timeout
                )
            except RequestNotFoundError:
                return False
            if self.status_of(current).state != "DELETING":
                raise
            log.info("%s is already being deleted", name)
        return True
