"""The cluster behind the Kubernetes API: node pools, queued provisioning, flex-start, pods and Jobs, Kueue.

One GKE cluster (location ``us-central1``) with queued and flex-start node pools per accelerator
(:mod:`.nodepools`) on the shared capacity model, the provisioning controller
(:mod:`.provisioning`), the flex-start autoscaler (:mod:`.flexstart`), pods and the Job
controller (:mod:`.pods`), admission (:mod:`.validation`),
and :attr:`Cluster.controllers` (Kueue) that are handed every change and every tick.

Store changes are handled one at a time in the order they happened: a controller's write made
while another change is handled is queued, so every controller sees ADDED before MODIFIED.
Namespaces ``default`` and ``kube-system`` exist from the start.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from ..core.clock import Schedule
from ..core.errors import EmulatorError
from ..defaults import DEFAULT_BOOKING_SECONDS, DEFAULT_KUBE_FLEX_START_POOLS, DEFAULT_KUBE_NODE_POOLS
from . import kueue_versions
from .flexstart import FlexStartController
from .nodepools import MAX_RUN_SECONDS, NodePools, default_queued_pools, parse_flex_pool, parse_node_pool
from .pods import JobController, PodController
from .provisioning import ProvisioningController
from .store import KINDS, Event, Kind
from .validation import admit as validate
from .validation import default_job_at_create

if TYPE_CHECKING:
    from ..core.api import Core
    from .store import KubeStore

log = logging.getLogger("dws_emulator")

#: ``admit(operation, kind, namespace, obj, old)``: called by the routes before an API write
#: (``operation`` is ``CREATE`` or ``UPDATE``; ``old`` the stored object for an update). It may
#: default fields of ``obj`` in place, or raise :class:`~.store.KubeError` (422 Invalid) to refuse.
Admit = Callable[[str, Kind, str, dict[str, Any], "dict[str, Any] | None"], None]

NAMESPACE = KINDS["namespaces"]
SEEDED_NAMESPACES = ("default", "kube-system")


class Controller(Protocol):
    """What the cluster calls on a controller of its own (Kueue)."""

    def changed(self, event: Event) -> None: ...

    def due(self, now: float) -> None: ...


class Cluster:
    """One GKE cluster. Every method runs under the core's lock."""

    def __init__(self, core: Core, store: KubeStore) -> None:
        self.core = core
        self.store = store
        #: Admission (validation and defaulting) of writes from clients, in order.
        self.admission: list[Admit] = [validate]
        #: More controllers (Kueue): each gets every change (after the cluster's own) and every tick.
        self.controllers: list[Controller] = []
        #: How long a Provisioned request keeps its nodes for pods that have not started yet.
        self.booking_seconds = DEFAULT_BOOKING_SECONDS
        self.node_pools = NodePools(
            default_queued_pools(DEFAULT_KUBE_NODE_POOLS),
            [parse_flex_pool(spec) for spec in DEFAULT_KUBE_FLEX_START_POOLS],
        )
        #: The Kueue API versions served, newest first: Kueue's main branch serves v1beta2 and
        #: v1beta1; ``("v1beta1",)`` is a Kueue before 0.15 (``--kueue-versions``).
        self.kueue_versions: tuple[str, ...] = kueue_versions.VERSIONS
        self.schedule = Schedule()
        self.provisioning = ProvisioningController(self)
        self.pods = PodController(self)
        self.jobs = JobController(self)
        self.flex_start = FlexStartController(self)
        self._pending: deque[Event] = deque()
        self._handling = False
        self.store.defaulters.append(default_job_at_create)
        self.store.listen(self.changed)
        for name in SEEDED_NAMESPACES:
            self._seed_namespace(name)
        # Kueue with the queues of GKE's guide; its admission runs after validation, so the
        # suspend it sets on a queued Job wins over the Job defaults.
        from .kueue import Kueue
        from .kueue_queues import seed

        kueue = Kueue(self)
        self.controllers.append(kueue)
        self.admission.append(kueue.admit)
        seed(self.store)

    def _seed_namespace(self, name: str) -> None:
        if self.store.find(NAMESPACE, "", name) is not None:
            return
        self.store.create(
            NAMESPACE,
            "",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
            },
        )
        self.store.update(
            NAMESPACE, "", name, lambda o: o.__setitem__("status", {"phase": "Active"}), status=True
        )

    def admit(
        self, operation: str, kind: Kind, namespace: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Run every admission step on a client's write (the routes call it before storing)."""
        for step in self.admission:
            step(operation, kind, namespace, obj, old)

    def changed(self, event: Event) -> None:
        """A stored object changed (from a client or a controller): handled in order, one at a time."""
        self._pending.append(event)
        if self._handling:
            return
        self._handling = True
        try:
            while self._pending:
                self._handle(self._pending.popleft())
        finally:
            self._handling = False

    def _handle(self, event: Event) -> None:
        now = self.core.clock()
        key, obj = event.kind.key, event.obj
        meta = obj.get("metadata") or {}
        if key == "provisioningrequests.autoscaling.x-k8s.io":
            if event.type == "ADDED":
                self.provisioning.added(obj, now)
            elif event.type == "DELETED":
                self.provisioning.deleted(obj, now)
        elif key == "pods":
            if event.type == "ADDED":
                if self.flex_start.claims(obj):
                    self.flex_start.added(obj, now)
                else:
                    self.pods.added(obj, now)
            elif event.type == "MODIFIED":
                self.flex_start.modified(obj, now)
            elif event.type == "DELETED":
                self.pods.deleted(obj, now)
                self.flex_start.deleted(obj, now)
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
                    self.jobs.sync(event.namespace, ref.get("name", ""), now)
        elif key == "jobs.batch" and event.type != "DELETED":
            self.jobs.sync(event.namespace, meta.get("name", ""), now)
        for controller in self.controllers:
            controller.changed(event)

    def serves(self, kind: Kind, version: str) -> bool:
        """Whether ``kind`` is served at ``version`` now (the routes answer 404 when it is not)."""
        return kind.group != kueue_versions.GROUP or version in self.kueue_versions

    def pod_log(self, namespace: str, name: str, container: str | None) -> str:
        """The text of a pod's log (what ``/log`` answers); 404 / 400 as the API server."""
        return self.pods.log(namespace, name, container)

    # -- the Api's tick hooks and control API --------------------------------------------------
    def owns(self, holder: str) -> bool:
        return holder in self.provisioning.records or holder in self.flex_start.requests

    def before_advance(self, now: float) -> None:
        """Due transitions (booking expiry, run-duration end, pods ending, flex-start nodes' max
        run and scale-down, Kueue retries)."""
        for name in self.schedule.due(now):
            what, _, key = name.partition(":")
            if what == "pr":
                self.provisioning.due(key, now)
            elif what == "pod":
                self.pods.due(key, now)
            elif what == "flex":
                self.flex_start.due(key, now)
            elif what == "job":
                self.jobs.due(key, now)
        self.flex_start.retry_stuck(now)
        for controller in self.controllers:
            controller.due(now)

    def started(self, holder: str, now: float) -> None:
        """The capacity model gave a ProvisioningRequest its whole set, or a flex-start node its GPUs."""
        if holder in self.flex_start.requests:
            self.flex_start.started(holder, now)
        else:
            self.provisioning.started(holder, now)

    def expired(self, holder: str, now: float) -> None:
        """A queued holder's wait ended without capacity (never: ProvisioningRequests and flex-start
        node requests wait until withdrawn)."""

    def after_advance(self, now: float) -> None:
        """Transitions that follow the capacity model in the same tick (none yet)."""

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        provisioning = [
            (rec.created_at, self.provisioning.record(rec)) for rec in self.provisioning.records.values()
        ]
        return provisioning + self.flex_start.records()

    # -- control -------------------------------------------------------------------------------
    def set_node_pools(self, specs: list[str], replace: bool = False) -> None:
        """Add (or with ``replace``, set) queued node pools from ``ACCELERATOR`` / ``NAME=ACCELERATOR``."""
        self.node_pools.replace([parse_node_pool(spec) for spec in specs], replace)

    def set_flex_start_pools(self, specs: list[str], replace: bool = False) -> None:
        """Add (or with ``replace``, set) flex-start node pools (:func:`.nodepools.parse_flex_pool`)."""
        self.node_pools.replace_flex([parse_flex_pool(spec) for spec in specs], replace)

    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "SetKubeBookingWindow": self._control_booking,
            "FailProvisioningRequest": self._control_fail,
            "RevokeProvisioningRequest": self._control_revoke,
            "GetKubeNodePools": self._control_get_pools,
            "SetKubeNodePools": self._control_set_pools,
            "SetKubeFlexStart": self._control_flex_set,
            "GetKubeFlexStartNodes": self._control_flex_get,
            "ExpireFlexStartNode": self._control_flex_expire,
        }

    def _settings(self) -> dict[str, Any]:
        return {
            "booking_seconds": self.booking_seconds,
            "node_pools": self.node_pools.to_json(),
            "flex_start_node_pools": [p.to_json() for p in self.node_pools.flex_pools()],
            "flex_start_scale_down_seconds": self.flex_start.scale_down_seconds,
        }

    def _control_booking(self, body: dict[str, Any]) -> Any:
        seconds = body.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, 'expected {"seconds": S >= 0}')
        with self.core.lock:
            self.core.tick()
            self.booking_seconds = float(seconds)
            log.info("GKE booking window set to %gs", seconds)
            return self._settings()

    def _request(self, body: dict[str, Any]) -> Any:
        name, namespace = body.get("name"), body.get("namespace", "default")
        if not isinstance(name, str) or not name or not isinstance(namespace, str):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, 'expected {"name": "REQUEST", "namespace": "default"}'
            )
        rec = self.provisioning.get(namespace, name)
        if rec is None:
            raise EmulatorError(
                grpc.StatusCode.NOT_FOUND, f"ProvisioningRequest {namespace}/{name} does not exist."
            )
        return rec

    def _control_fail(self, body: dict[str, Any]) -> Any:
        with self.core.lock:
            self.core.tick()
            rec = self._request(body)
            now = self.core.clock()
            reason = str(body.get("reason") or "FailedToBookCapacity")
            message = str(body.get("message") or "Failed by the emulator's control API")
            self.provisioning.fail(rec, reason, message, now)
            self.core.tick()
            return {"provisioning_request": self.provisioning.record(rec)}

    def _control_revoke(self, body: dict[str, Any]) -> Any:
        with self.core.lock:
            self.core.tick()
            rec = self._request(body)
            if rec.state != "PROVISIONED":
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"ProvisioningRequest {rec.namespace}/{rec.name} is {rec.state}, not PROVISIONED.",
                )
            why = str(body.get("message") or "the nodes were reclaimed (emulator control API)")
            self.provisioning.revoke(rec, self.core.clock(), why)
            self.core.tick()
            return {"provisioning_request": self.provisioning.record(rec)}

    def _control_get_pools(self, body: dict[str, Any]) -> Any:
        with self.core.lock:
            return self._settings()

    def _control_set_pools(self, body: dict[str, Any]) -> Any:
        specs, flex = body.get("node_pools"), body.get("flex_start", False)
        if (
            not isinstance(specs, list)
            or not all(isinstance(s, str) for s in specs)
            or not isinstance(flex, bool)
        ):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                'expected {"node_pools": ["ACCELERATOR", "NAME=ACCELERATOR" or "NAME=ACCELERATOR@LOCATION"], '
                '"replace": false, "flex_start": false} (a flex-start TPU pool: "tpu-v5-lite-podslice:2x4")',
            )
        with self.core.lock:
            try:
                if flex:
                    self.set_flex_start_pools(specs, bool(body.get("replace")))
                else:
                    self.set_node_pools(specs, bool(body.get("replace")))
            except ValueError as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            if flex:
                log.info(
                    "GKE flex-start node pools: %s", ", ".join(p.name for p in self.node_pools.flex_pools())
                )
            else:
                log.info("GKE queued node pools: %s", ", ".join(sorted(self.node_pools.by_accelerator)))
            return self._settings()

    def _control_flex_get(self, body: dict[str, Any]) -> Any:
        with self.core.lock:
            self.core.tick()
            return self.flex_start.report()

    def _control_flex_set(self, body: dict[str, Any]) -> Any:
        usage = 'expected {"scale_down_seconds": S >= 0, "max_run_seconds": 1 <= S <= 604800} (one or both)'
        down, run = body.get("scale_down_seconds"), body.get("max_run_seconds")
        if set(body) - {"scale_down_seconds", "max_run_seconds"} or (down is None and run is None):
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, usage)
        if down is not None and (isinstance(down, bool) or not isinstance(down, (int, float)) or down < 0):
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, usage)
        if run is not None and (
            isinstance(run, bool) or not isinstance(run, int) or not 1 <= run <= MAX_RUN_SECONDS
        ):
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, usage)
        with self.core.lock:
            self.core.tick()
            self.flex_start.configure(down, run)
            self.core.tick()
            return self.flex_start.report()

    def _control_flex_expire(self, body: dict[str, Any]) -> Any:
        node = body.get("node")
        if not isinstance(node, str) or not node:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, 'expected {"node": "NODE NAME"}')
        with self.core.lock:
            self.core.tick()
            rec = self.flex_start.nodes.get(node)
            if rec is None:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Flex-start node {node} is not up.")
            self.flex_start.expire(
                rec, self.core.clock(), "ended by the emulator's control API, as at its max run"
            )
            self.core.tick()
            return {"node": self.flex_start.record(rec)}
