"""Client for the emulator's control service (``dws.emulator.v1.Control``, JSON over gRPC)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import grpc

CONTROL_SERVICE = "dws.emulator.v1.Control"


class EmulatorControl:
    """Talks to a running emulator: ``EmulatorControl("127.0.0.1:PORT").requests()``.

    Errors surface as ``grpc.RpcError`` with the emulator's status code and message.
    """

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address)

    def call(self, method: str, body: Mapping[str, Any] | None = None) -> Any:
        """Call any control method by name with a JSON body; returns the decoded JSON reply."""
        stub = self._channel.unary_unary(f"/{CONTROL_SERVICE}/{method}")
        reply = stub(json.dumps(dict(body or {})).encode(), timeout=self.timeout, wait_for_ready=True)
        return json.loads(reply.decode())

    def requests(self) -> list[dict[str, Any]]:
        """Every request ever created (including deleted ones), oldest first."""
        return list(self.call("ListRequests")["requests"])

    def capacity(self) -> dict[str, dict[str, int]]:
        """``{"LOC/ACC": {"total", "in_use", "free", "queued"}}``."""
        return dict(self.call("GetCapacity")["pools"])

    def set_capacity(self, pools: Mapping[str, int]) -> dict[str, dict[str, int]]:
        """Create or resize pools (others unchanged); returns the resulting inventory."""
        return dict(self.call("SetCapacity", {"pools": dict(pools)})["pools"])

    def set_capacity_advice(self, zones: Mapping[str, float]) -> dict[str, float]:
        """Set the capacity advice's factor (0 to 1) of zones; returns every factor set so far."""
        return dict(self.call("SetCapacityAdvice", {"zones": dict(zones)})["zones"])

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt an ACTIVE Spot TPU queued resource (SUSPENDING, then SUSPENDED; nodes PREEMPTED).

        Returns its record (the shape of :meth:`requests` entries). FAILED_PRECONDITION for a
        non-Spot or non-ACTIVE resource, NOT_FOUND for an unknown one.
        """
        return dict(self.call("Preempt", {"name": name})["queued_resource"])

    # -- Vertex AI inference (v1beta1 Endpoints; an endpoint is ``projects/P/locations/L/endpoints/E``) --
    def vertex_deployments(self) -> list[dict[str, Any]]:
        """Every endpoint not deleted: ``{"name", "display_name", "project", "location", "labels",
        "traffic_split", "deployed_models": [records], "waiting": [records]}``. A record (``kind``
        ModelDeployment) has ``deployed_model_id``, ``state``, ``replicas``, ``accelerator_type``,
        ``accelerator_count``, ``create_time`` (the DeployModel request) and ``expire_time``."""
        return list(self.call("GetVertexDeployments")["endpoints"])

    def expire_vertex_deployment(self, endpoint: str, deployed_model_id: str) -> dict[str, Any]:
        """End a flex-start deployment now, as at its max runtime: a deployed model is undeployed, one
        still waiting for capacity is dropped (its DeployModel operation ends DEADLINE_EXCEEDED).
        Returns its record."""
        body = {"endpoint": endpoint, "deployed_model_id": deployed_model_id}
        return dict(self.call("ExpireVertexDeployment", body)["deployment"])

    # -- calendar mode (future reservations; a name is ``projects/P/zones/Z/futureReservations/N``) --
    def approve_future_reservation(self, name: str) -> dict[str, Any]:
        """Approve a PENDING_APPROVAL future reservation now; returns its record.

        FAILED_PRECONDITION in another status, NOT_FOUND for an unknown (or deleted) one.
        """
        return dict(self.call("ApproveFutureReservation", {"name": name})["future_reservation"])

    def decline_future_reservation(self, name: str, reason: str = "") -> dict[str, Any]:
        """Decline a PENDING_APPROVAL future reservation (``reason`` lands in its record's ``error``)."""
        body = {"name": name, "reason": reason} if reason else {"name": name}
        return dict(self.call("DeclineFutureReservation", body)["future_reservation"])

    def partly_fulfil_future_reservation(self, name: str, count: int) -> dict[str, Any]:
        """Deliver only ``count`` VMs (GPU blocks) or chips (TPU blocks) of a request not delivered
        yet: FAILED_PARTIALLY_FULFILLED at its start, or FAILED for 0."""
        return dict(
            self.call("PartlyFulfilFutureReservation", {"name": name, "count": count})["future_reservation"]
        )

    def end_future_reservation(self, name: str) -> dict[str, Any]:
        """End a delivered block now, as if its end time had come (its reservation and consumers too)."""
        return dict(self.call("EndFutureReservation", {"name": name})["future_reservation"])

    def calendar(self) -> dict[str, Any]:
        """``{"settings", "pools", "days", "bookings"}``: calendar mode's settings and free capacity."""
        return dict(self.call("GetCalendar"))

    def set_calendar(
        self,
        *,
        approval_seconds: float | str | None = None,
        min_lead_seconds: float | None = None,
        provision_seconds: float | None = None,
        pools: Mapping[str, int] | None = None,
        days: Mapping[str, Mapping[str, int]] | None = None,
        replace: bool = False,
    ) -> dict[str, Any]:
        """Change calendar mode's settings (those given) and inventory; returns :meth:`calendar`.

        ``approval_seconds``: seconds from submission to the automatic decision, or ``"manual"``
        (only :meth:`approve_future_reservation` / :meth:`decline_future_reservation` decide);
        ``pools``: ``{"ZONE/ACCELERATOR": units per day}`` (``replace`` drops the others first);
        ``days``: ``{"YYYY-MM-DD": {"ZONE/ACCELERATOR": units}}`` for single UTC days.
        """
        body: dict[str, Any] = {"replace": replace}
        for key, value in (
            ("approval_seconds", approval_seconds),
            ("min_lead_seconds", min_lead_seconds),
            ("provision_seconds", provision_seconds),
        ):
            if value is not None:
                body[key] = value
        if pools is not None:
            body["pools"] = dict(pools)
        if days is not None:
            body["days"] = {day: dict(entries) for day, entries in days.items()}
        return dict(self.call("SetCalendar", body))

    # -- the GKE cluster (ProvisioningRequests; ``namespace`` defaults to ``default``) --------------
    def kube_node_pools(self) -> dict[str, Any]:
        """``{"booking_seconds", "node_pools": [{"name", "accelerator", "pool", ...}]}``."""
        return dict(self.call("GetKubeNodePools"))

    def set_kube_node_pools(
        self, node_pools: Iterable[str], *, replace: bool = False, flex_start: bool = False
    ) -> dict[str, Any]:
        """Add queued node pools (``"nvidia-h100-80gb"`` or ``"NAME=nvidia-h100-80gb"``); ``replace``
        drops the others first. Requests already queued keep the pool they were planned on.

        ``flex_start``: flex-start node pools instead (``"tpu-v5-lite-podslice:2x4"`` for a TPU;
        ``"NAME=ACCELERATOR@LOCATION"`` for one selected by name only), listed under
        ``flex_start_node_pools``; node requests already made keep their pool."""
        body = {"node_pools": list(node_pools), "replace": replace, "flex_start": flex_start}
        return dict(self.call("SetKubeNodePools", body))

    def kube_flex_start_nodes(self) -> dict[str, Any]:
        """``{"scale_down_seconds", "node_pools", "nodes": [records up], "waiting": [records]}``: the
        flex-start nodes and the node requests waiting for capacity (``FlexStartNode`` records)."""
        return dict(self.call("GetKubeFlexStartNodes"))

    def set_kube_flex_start(
        self, *, scale_down_seconds: float | None = None, max_run_seconds: int | None = None
    ) -> dict[str, Any]:
        """How long a flex-start node stays empty before it is removed, and every flex-start pool's
        max run duration (1 s to 7 days; nodes already up keep theirs). Returns :meth:`kube_flex_start_nodes`."""
        body: dict[str, Any] = {}
        if scale_down_seconds is not None:
            body["scale_down_seconds"] = scale_down_seconds
        if max_run_seconds is not None:
            body["max_run_seconds"] = max_run_seconds
        return dict(self.call("SetKubeFlexStart", body))

    def expire_flex_start_node(self, node: str) -> dict[str, Any]:
        """End a flex-start node now as at its max run (its pods fail, ``Terminated``); its record."""
        return dict(self.call("ExpireFlexStartNode", {"node": node})["node"])

    def set_kube_booking_window(self, seconds: float) -> dict[str, Any]:
        """How long a Provisioned request keeps its nodes for pods not yet started (BookingExpired after)."""
        return dict(self.call("SetKubeBookingWindow", {"seconds": seconds}))

    def fail_provisioning_request(
        self, name: str, namespace: str = "default", reason: str = "", message: str = ""
    ) -> dict[str, Any]:
        """Set ``Failed`` True on a request not ended yet (capacity released, consuming pods fail)."""
        body = {"name": name, "namespace": namespace, "reason": reason, "message": message}
        return dict(self.call("FailProvisioningRequest", body)["provisioning_request"])

    def revoke_provisioning_request(
        self, name: str, namespace: str = "default", message: str = ""
    ) -> dict[str, Any]:
        """Set ``CapacityRevoked`` True on a Provisioned request (its pods fail, capacity released)."""
        body = {"name": name, "namespace": namespace, "message": message}
        return dict(self.call("RevokeProvisioningRequest", body)["provisioning_request"])

    def set_faults(
        self, specs: Iterable[str | Mapping[str, Any]], *, append: bool = False, seed: int | None = None
    ) -> dict[str, Any]:
        """Install fault rules (spec strings like ``"GetCustomJob=UNAVAILABLE@0.2"`` or rule objects).

        Replaces the current rules unless ``append``; ``seed`` reseeds the fault generator.
        Returns :meth:`faults`. INVALID_ARGUMENT for a rule that does not parse (none is set then).
        """
        body: dict[str, Any] = {
            "faults": [s if isinstance(s, str) else dict(s) for s in specs],
            "append": append,
        }
        if seed is not None:
            body["seed"] = seed
        return dict(self.call("SetFaults", body))

    def faults(self) -> dict[str, Any]:
        """``{"rules", "injected": {METHOD: {CODE: n}}, "total", "history", "outages"}``.

        ``rules`` carry how often each ``fired``; ``injected`` counts every injected error (and
        delays, as code ``LATENCY``) since the start; ``history`` lists the latest ones with times.
        """
        return dict(self.call("GetFaults"))

    def clear_faults(self) -> dict[str, Any]:
        """Remove every fault rule (the record of injected faults stays); returns :meth:`faults`."""
        return dict(self.call("ClearFaults"))

    def outage(self, seconds: float) -> dict[str, Any]:
        """Refuse connections for ``seconds``, then serve the same state on the same port again.

        Returns at once (``{"seconds", "until", "address"}``); control calls made during the
        outage wait for it to end (up to this client's ``timeout``).
        """
        return dict(self.call("Outage", {"seconds": seconds}))

    def stats(self) -> dict[str, Any]:
        """Calls received per emulated method since the last reset.

        ``{"calls": {"google.cloud.aiplatform.v1.JobService/GetCustomJob": n, ...}, "total": n,
        "since": <RFC 3339 time of the last reset (or the start)>, "until": <now>}``. Every call to
        the gRPC services and to the REST routes (``compute.v1/compute.instances.get``) counts on
        arrival (faulted ones too); control calls never do.
        """
        return dict(self.call("GetStats"))

    def reset_stats(self) -> dict[str, Any]:
        """Zero the counters; returns :meth:`stats` as it was at the reset, read atomically with it."""
        return dict(self.call("ResetStats"))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EmulatorControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
