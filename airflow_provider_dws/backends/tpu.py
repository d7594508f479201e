"""Cloud TPU queued resources as DWS capacity requests."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Container, Sequence
from datetime import datetime, timezone
from typing import Any, cast

import tenacity
from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import (
    DeleteQueuedResourceRequest,
    ListQueuedResourcesRequest,
    Node,
    QueuedResource,
    QueuedResourceState,
)

from airflow_provider_dws.backends.base import RequestStatus, classify_listed
from airflow_provider_dws.backends.retry import operation_result, retry_kwargs
from airflow_provider_dws.catalog import tpu_chips
from airflow_provider_dws.hooks.tpu import DwsTpuAsyncHook, DwsTpuHook
from airflow_provider_dws.scheduling.phases import RequestTimings, classify_tpu_queued_resource

log = logging.getLogger(__name__)

_QR_NAME_RE = re.compile(
    r"^projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)/queuedResources/(?P<qr_id>[^/]+)$"
)
_DELETE_TIMEOUT_SECONDS = 600.0
#: Queued resources per list page (see the Vertex backend's LIST_PAGE_SIZE).
LIST_PAGE_SIZE = 250


def parse_queued_resource_name(name: str) -> tuple[str, str, str]:
    """Split ``projects/P/locations/Z/queuedResources/ID`` into (project, zone, id)."""
    match = _QR_NAME_RE.fullmatch(name)
    if not match:
        raise ValueError(f"not a Cloud TPU queued resource name: {name!r}")
    return match["project"], match["zone"], match["qr_id"]


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


def queued_resource_status(qr: QueuedResource) -> RequestStatus:
    """Classify a ``QueuedResource`` into the shared vocabulary (pure: no API call).

    The API records no start time; ACTIVE is timed when it is first seen, so ``started`` is
    accurate to one poll interval.
    """
    _, zone, _ = parse_queued_resource_name(qr.name) if qr.name else ("", "", "")
    state = QueuedResourceState.State(qr.state.state).name
    error = qr.state.failed_data.error
    outcome = classify_tpu_queued_resource(state, error_code=error.code, error_message=error.message)
    submitted = cast("datetime | None", qr.create_time)
    started = datetime.now(timezone.utc) if state == "ACTIVE" else None
    finished = datetime.now(timezone.utc) if outcome.phase.terminal else None
    policy = qr.queueing_policy
    valid_until = cast("Any", policy.valid_until_duration)
    if not valid_until and QueuedResource.QueueingPolicy.pb(policy).HasField("valid_interval"):
        # proto-plus leaves google.type.Interval as raw protobuf Timestamps.
        start, end = policy.valid_interval.start_time, policy.valid_interval.end_time
        valid_until = end.ToDatetime(timezone.utc) - start.ToDatetime(timezone.utc)
    return RequestStatus(
        name=qr.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(submitted=submitted, started=started, finished=finished),
        description=describe_queued_resource(qr, zone),
        details={
            "zone": zone,
            "max_wait_seconds": valid_until.total_seconds() if valid_until else None,
        },
    )


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


class TpuQueuedResourceBackend:
    """Create, read, list and delete Cloud TPU queued resources through the google client library.

    Sync methods serve the operators (in a worker); ``a*`` methods serve the trigger. Every call
    retries transient errors; a create retried after an unknown outcome checks for the resource
    first, and ALREADY_EXISTS means "reattach", never a second request.
    """

    kind = "tpu_queued_resource"

    def __init__(
        self,
        project_id: str,
        zone: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
    ) -> None:
        self.project_id = project_id
        self.zone = zone
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._hook: DwsTpuHook | None = None
        self._async_hook: DwsTpuAsyncHook | None = None

    @property
    def parent(self) -> str:
        """``projects/P/locations/ZONE``."""
        return f"projects/{self.project_id}/locations/{self.zone}"

    def name_of(self, queued_resource_id: str) -> str:
        """The full resource name of ``queued_resource_id`` in this zone."""
        return f"{self.parent}/queuedResources/{queued_resource_id}"

    def spec(self) -> dict[str, Any]:
        """Constructor arguments, to rebuild the backend in the triggerer."""
        chain = self.impersonation_chain
        return {
            "project_id": self.project_id,
            "zone": self.zone,
            "gcp_conn_id": self.gcp_conn_id,
            "impersonation_chain": list(chain) if isinstance(chain, (list, tuple)) else chain,
        }

    # -- sync (worker) -------------------------------------------------------------------------

    @property
    def hook(self) -> DwsTpuHook:
        """The sync hook, created on first use."""
        if self._hook is None:
            self._hook = DwsTpuHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._hook

    def _client(self) -> Any:
        return self.hook.get_tpu_client()

    def get(self, name: str) -> QueuedResource | None:
        """Read one queued resource; ``None`` when it does not exist."""
        for attempt in tenacity.Retrying(**retry_kwargs(f"get {name}")):
            with attempt:
                try:
                    return self._client().get_queued_resource(name=name)
                except gexc.NotFound:
                    return None
        raise AssertionError("unreachable")  # pragma: no cover

    def create(self, queued_resource_id: str, queued_resource: QueuedResource) -> tuple[QueuedResource, bool]:
        """Create the queued resource, or adopt the existing one of the same id.

        Returns the resource and whether this call created it.
        """
        name = self.name_of(queued_resource_id)
        first = True
        for attempt in tenacity.Retrying(**retry_kwargs(f"create {name}")):
            with attempt:
                if not first:
                    existing = self.get(name)
                    if existing is not None:
                        log.warning("An earlier create call did succeed: adopting %s", name)
                        return existing, False
                first = False
                try:
                    operation = self._client().create_queued_resource(
                        parent=self.parent,
                        queued_resource_id=queued_resource_id,
                        queued_resource=queued_resource,
                    )
                except gexc.AlreadyExists:
                    existing = self.get(name)
                    if existing is None:
                        raise
                    return existing, False
                operation_result(operation, f"create {name}", _DELETE_TIMEOUT_SECONDS, log)
                created = self.get(name)
                if created is None:
                    raise gexc.NotFound(f"{name} vanished right after it was created")
                return created, True
        raise AssertionError("unreachable")  # pragma: no cover

    def delete(self, name: str, *, force: bool = True, wait: bool = True) -> bool:
        """Delete a queued resource (``force`` also deletes its nodes) and, by default, wait until gone.

        Returns False when it was already gone. A delete refused because a delete is already in
        progress is treated as in progress, not as an error.
        """
        for attempt in tenacity.Retrying(**retry_kwargs(f"delete {name}")):
            with attempt:
                try:
                    operation = self._client().delete_queued_resource(
                        request=DeleteQueuedResourceRequest(name=name, force=force)
                    )
                except gexc.NotFound:
                    return False
                if wait:
                    operation_result(operation, f"delete {name}", _DELETE_TIMEOUT_SECONDS, log)
        if wait:
            deadline = time.monotonic() + _DELETE_TIMEOUT_SECONDS
            while self.get(name) is not None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} still exists {_DELETE_TIMEOUT_SECONDS:.0f}s after its delete")
                time.sleep(1.0)
        return True

    def list_all(self) -> list[QueuedResource]:
        """Every queued resource in the zone."""
        for attempt in tenacity.Retrying(**retry_kwargs(f"list queued resources in {self.parent}")):
            with attempt:
                return list(self._client().list_queued_resources(parent=self.parent))
        raise AssertionError("unreachable")  # pragma: no cover

    def nodes(self, qr: QueuedResource) -> list[Node]:
        """The nodes of an ACTIVE queued resource."""
        result = []
        for node_name in node_names(qr):
            for attempt in tenacity.Retrying(**retry_kwargs(f"get {node_name}")):
                with attempt:
                    result.append(self._client().get_node(name=node_name))
        return result

    # -- async (triggerer) ---------------------------------------------------------------------

    @property
    def async_hook(self) -> DwsTpuAsyncHook:
        """The async hook, created on first use."""
        if self._async_hook is None:
            self._async_hook = DwsTpuAsyncHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._async_hook

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one queued resource, classified; one call, errors propagate (the poller retries)."""
        client = await self.async_hook.get_tpu_client()
        qr = await client.get_queued_resource(name=name)
        return queued_resource_status(qr)

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """Every queued resource of the zone (``only``: just these names), classified; paged.

        The API offers no filter, so this is the whole zone, ended requests included until they
        are deleted. Errors propagate.
        """
        client = await self.async_hook.get_tpu_client()
        pager = await client.list_queued_resources(
            request=ListQueuedResourcesRequest(parent=self.parent, page_size=LIST_PAGE_SIZE)
        )
        pages = (page.queued_resources async for page in pager.pages)
        return await classify_listed(pages, only, queued_resource_status)

    async def acancel(self, name: str) -> None:
        """Give the slice back: delete the queued resource and its nodes (``force``); gone is fine."""
        async for attempt in tenacity.AsyncRetrying(**retry_kwargs(f"delete {name}")):
            with attempt:
                client = await self.async_hook.get_tpu_client()
                try:
                    await client.delete_queued_resource(
                        request=DeleteQueuedResourceRequest(name=name, force=True)
                    )
                except gexc.NotFound:
                    log.info("%s is already gone", name)
