"""The Kubernetes API as one :class:`~..core.api.Api` of the emulator: the store, its routes, its cluster.

``KubeState`` is the glue: the object store (:mod:`.store`), the REST routes that serve it
(:mod:`.routes`), and the cluster behind it (:class:`~.cluster.Cluster`: node pools, the
provisioning controller, pods and Jobs, Kueue), which receives the tick hooks.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ..core.api import Api, Core
from ..core.rest import RestRoute
from . import KUBE_METHODS, KUBE_SERVICE
from .cluster import Cluster
from .store import KubeStore


class KubeState(Api):
    """The emulated GKE cluster's API server: ``state.kube``."""

    name = "kube"
    services = {KUBE_SERVICE: KUBE_METHODS}
    rest_service = KUBE_SERVICE

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        # Its own seeded stream, so uids never shift the other APIs' ids.
        self.store = KubeStore(core.clock, random.Random(f"dws-emulator-kube:{core.id_rng.random()}"))
        self.cluster = Cluster(self.core, self.store)

    def rest_routes(self) -> list[RestRoute]:
        from .routes import kube_routes

        return kube_routes(self)

    # -- the cluster answers the tick and the control API ----------------------------------------
    def owns(self, holder: str) -> bool:
        return self.cluster.owns(holder)

    def before_advance(self, now: float) -> None:
        self.cluster.before_advance(now)

    def started(self, holder: str, now: float) -> None:
        self.cluster.started(holder, now)

    def expired(self, holder: str, now: float) -> None:
        self.cluster.expired(holder, now)

    def after_advance(self, now: float) -> None:
        self.cluster.after_advance(now)

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return self.cluster.requests()

    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return self.cluster.control_methods()
