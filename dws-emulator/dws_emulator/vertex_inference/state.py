"""Vertex AI inference as one API of the shared core: :class:`VertexInferenceState`.

It hosts the BatchPredictionJobs (:mod:`.batch`) and the Endpoints with their deployments
(:mod:`.endpoints`, :mod:`.deployments`), routes the core's tick hooks to them, and serves the two
v1beta1 gRPC services and its control methods:

* ``GetVertexDeployments``: ``{"endpoints": [{"name", "display_name", "project", "location",
  "labels", "traffic_split", "deployed_models": [records], "waiting": [records]}]}`` for every
  endpoint not deleted; a record (``kind`` ModelDeployment, also in ``ListRequests``) has its state,
  replicas, accelerators, pool, request (``create_time``) and expiry (``expire_time``) times.
* ``ExpireVertexDeployment`` ``{"endpoint", "deployed_model_id"}``: end a flex-start deployment now,
  as at its max runtime (a deployed model is undeployed, a waiting one dropped);
  ``{"deployment": record}``. NOT_FOUND for no such live deployment, FAILED_PRECONDITION for one
  without flex-start.

Every public method takes the core's lock and ticks first.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import grpc
from google.longrunning import operations_pb2

from ..core.api import Api, Core
from ..core.errors import EmulatorError
from . import ENDPOINT_METHODS, ENDPOINT_SERVICE, JOB_METHODS, JOB_SERVICE
from .batch import BatchPredictionJobs
from .endpoints import Endpoints
from .records import EndpointRecord
from .service import BatchPredictionServicer, EndpointServicer


class VertexInferenceState(Api):
    """v1beta1 ``JobService`` BatchPredictionJobs and ``EndpointService``; runs under ``core.lock``."""

    name = "vertex_inference"
    services = {JOB_SERVICE: JOB_METHODS, ENDPOINT_SERVICE: ENDPOINT_METHODS}

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        # A stream of its own, seeded through the first CustomJob id (itself from the seed): drawing
        # from the core's id generator would shift the ids every other API hands out.
        ids = random.Random(f"dws-emulator-vertex-inference:{core.first_job_id()}")
        first_job, first_endpoint, first_model = (ids.randrange(10**18, 5 * 10**18) for _ in range(3))
        self.batch = BatchPredictionJobs(core, first_job)
        self.endpoints = Endpoints(core, first_endpoint, first_model)

    def _locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self.core.lock:
            self.core.tick()
            return fn(*args)

    # -- core hooks ------------------------------------------------------------------------
    def owns(self, holder: str) -> bool:
        return self.batch.owns(holder) or self.endpoints.deployments.owns(holder)

    def before_advance(self, now: float) -> None:
        self.batch.before_advance(now)
        self.endpoints.deployments.before_advance(now)

    def started(self, holder: str, now: float) -> None:
        if self.batch.owns(holder):
            self.batch.started(holder, now)
        else:
            self.endpoints.deployments.started(holder, now)

    def after_advance(self, now: float) -> None:
        self.batch.after_advance(now)
        self.endpoints.after_advance(now)

    def handlers(self) -> list[tuple[str, Any]]:
        return [
            (JOB_SERVICE, BatchPredictionServicer(self).handler()),
            (ENDPOINT_SERVICE, EndpointServicer(self).handler()),
        ]

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return [*self.batch.requests(), *self.endpoints.deployments.records()]

    def forget_operation(self, name: str) -> None:
        self.batch.forget_operation(name)
        self.endpoints.forget_operation(name)

    def cancel_operation(self, name: str, now: float) -> bool:
        return self.endpoints.deployments.cancel_operation(name, now)

    # -- JobService ------------------------------------------------------------------------
    def create_batch_prediction_job(self, parent: str, job: Any) -> Any:
        return self._locked(self.batch.create, parent, job)

    def get_batch_prediction_job(self, name: str) -> Any:
        return self._locked(self.batch.get, name)

    def list_batch_prediction_jobs(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        return self._locked(self.batch.list_jobs, parent, filter_text, page_size, page_token)

    def cancel_batch_prediction_job(self, name: str) -> None:
        self._locked(self.batch.cancel, name)

    def delete_batch_prediction_job(self, name: str) -> operations_pb2.Operation:
        return self._locked(self.batch.delete, name)

    # -- EndpointService -------------------------------------------------------------------
    def create_endpoint(self, parent: str, endpoint: Any, endpoint_id: str = "") -> operations_pb2.Operation:
        return self._locked(self.endpoints.create, parent, endpoint, endpoint_id)

    def get_endpoint(self, name: str) -> Any:
        return self._locked(self.endpoints.get, name)

    def list_endpoints(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        return self._locked(self.endpoints.list_endpoints, parent, filter_text, page_size, page_token)

    def delete_endpoint(self, name: str) -> operations_pb2.Operation:
        return self._locked(self.endpoints.delete, name)

    def deploy_model(self, request: Any) -> operations_pb2.Operation:
        return self._locked(self.endpoints.deploy_model, request)

    def undeploy_model(
        self, endpoint: str, deployed_model_id: str, traffic_split: Any
    ) -> operations_pb2.Operation:
        return self._locked(self.endpoints.undeploy_model, endpoint, deployed_model_id, traffic_split)

    # -- control ---------------------------------------------------------------------------
    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "GetVertexDeployments": self._control_deployments,
            "ExpireVertexDeployment": self._control_expire,
        }

    def _control_deployments(self, body: dict[str, Any]) -> Any:
        def report() -> dict[str, Any]:
            live = (rec for rec in self.endpoints.endpoints.values() if not rec.deleted)
            return {"endpoints": [self._endpoint_report(rec) for rec in live]}

        return self._locked(report)

    @staticmethod
    def _endpoint_report(rec: EndpointRecord) -> dict[str, Any]:
        return {
            "name": rec.name,
            "display_name": rec.endpoint.display_name,
            "project": rec.project,
            "location": rec.location,
            "labels": dict(rec.endpoint.labels),
            "traffic_split": dict(rec.endpoint.traffic_split),
            "deployed_models": [dep.record() for dep in rec.deployed.values()],
            "waiting": [dep.record() for dep in rec.pending.values()],
        }

    def _control_expire(self, body: dict[str, Any]) -> Any:
        endpoint, model_id = body.get("endpoint"), body.get("deployed_model_id")
        if not isinstance(endpoint, str) or not isinstance(model_id, str) or not endpoint or not model_id:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                'expected {"endpoint": "projects/P/locations/L/endpoints/E", "deployed_model_id": "ID"}',
            )

        def expire() -> dict[str, Any]:
            rec = self.endpoints.lookup(endpoint)
            dep = rec.deployed.get(model_id) or rec.pending.get(model_id)
            if dep is None:
                raise EmulatorError(
                    grpc.StatusCode.NOT_FOUND,
                    f"No DeployedModel {model_id} deployed or being deployed on {endpoint}.",
                )
            if not dep.resources.flex_start:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"DeployedModel {model_id} on {endpoint} has no flex-start max runtime to end.",
                )
            why = "ended by the emulator's control API, as at its flex-start max runtime"
            self.endpoints.deployments.expire(dep, self.core.clock(), why)
            self.core.tick()
            return {"deployment": dep.record()}

        return self._locked(expire)
