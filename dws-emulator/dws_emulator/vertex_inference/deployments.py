"""Model deployments (``EndpointService.DeployModel``) on the shared capacity model.

A DeployModel request answers with an operation named under its endpoint
(``projects/P/locations/L/endpoints/E/operations/ID``, ``DeployModelOperationMetadata`` at
``deployment_stage`` STARTING_DEPLOYMENT). Then, on the core's ticks:

* its set is ``min_replica_count`` x ``machine_spec.accelerator_count`` accelerators of the pool
  ``LOCATION/ACCELERATOR``. With ``flex_start`` it joins that pool's FIFO queue at submission
  (shared with every other API's requests) and waits, with no max wait of its own, at stage
  ADDING_NODES_TO_CLUSTER from the next tick: the operation is not done and the endpoint does not
  list it. Without ``flex_start`` the whole set is taken at submission, or the operation is done at
  once with RESOURCE_EXHAUSTED (FAILED_TO_DEPLOY); without accelerators there is no pool.
* once its set is taken (STARTING_MODEL_SERVER), on the next tick the DeployedModel is listed in
  the endpoint's ``deployed_models``, the traffic split is updated
  (:func:`.records.split_after_deploy`) and the operation is done with ``DeployModelResponse``
  (SUCCESSFULLY_DEPLOYED).
* ``flex_start.max_runtime_duration`` after submission [flex-start inference] a deployed model is
  undeployed (capacity released, :func:`.records.split_without`). Emulator choice: one still
  waiting then is dropped, its operation done with DEADLINE_EXCEEDED (FAILED_TO_DEPLOY).
* CancelOperation (best effort, AIP-151) withdraws a deployment not deployed yet: its operation is
  done with CANCELLED (DEPLOYMENT_TERMINATED); a deployed one is unaffected. Emulator choice:
  UndeployModel of an id still on its way withdraws it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import grpc
from google.cloud.aiplatform_v1beta1.types import endpoint as gca_endpoint
from google.cloud.aiplatform_v1beta1.types import endpoint_service
from google.longrunning import operations_pb2
from google.rpc import code_pb2

from ..core.api import Core
from ..core.clock import Schedule
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from . import lro
from .records import (
    CANCELLED,
    DEPLOYED,
    EXPIRED,
    FAILED,
    STARTING,
    WAITING,
    Deployment,
    EndpointRecord,
    Stage,
    split_after_deploy,
    split_without,
    sync_endpoint,
)
from .validation import Resources, resolve_pool, validate_deploy_model

log = logging.getLogger("dws_emulator")

DeployedModelPb = gca_endpoint.DeployedModel.pb()
DeployModelResponsePb = endpoint_service.DeployModelResponse.pb()
DeployMetadataPb = endpoint_service.DeployModelOperationMetadata.pb()
_OUTPUT_ONLY = ("create_time", "model_version_id", "private_endpoints", "status")


class Deployments:
    """Every DeployModel request of one emulator; every method runs under ``core.lock``."""

    def __init__(self, core: Core, first_model_id: int) -> None:
        self.core = core
        self._next_model_id = first_model_id
        self.all: dict[str, Deployment] = {}  # by operation name, in submission order
        self._due = Schedule()

    def owns(self, holder: str) -> bool:
        return holder in self.all

    # -- submission ------------------------------------------------------------------------
    def submit(self, ep: EndpointRecord, request: Any) -> operations_pb2.Operation:
        """DeployModel on ``ep``: validate, then queue / take the set / stock out."""
        resources = validate_deploy_model(request, ep.deployed.keys())
        field = "deployed_model.dedicated_resources"
        pool = resolve_pool(self.core.capacity, ep.location, resources, field)
        model_id = request.deployed_model.id or self._new_model_id()
        if model_id in ep.deployed or model_id in ep.pending:
            raise EmulatorError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"DeployedModel {model_id} is already deployed or being deployed on endpoint {ep.name}.",
            )
        now = self.core.clock()
        op = lro.start(self.core, ep.name, DeployMetadataPb, now, Stage.STARTING_DEPLOYMENT)
        deployed_model = self._deployed_model(request.deployed_model, model_id, resources)
        dep = Deployment(
            op.name, ep, model_id, deployed_model, resources, dict(request.traffic_split), now, pool
        )
        self.all[op.name] = dep
        log.info(
            "Deployment %s of %s on %s submitted: %s, accelerators=%s",
            model_id,
            deployed_model.model,
            ep.name,
            resources.strategy,
            f"{resources.count} x {resources.accelerator}" if pool else "none",
        )
        capacity = self.core.capacity
        if pool is not None and resources.flex_start:
            capacity.enqueue(op.name, pool, resources.count, None)
            self._set_state(dep, WAITING, now)
        elif pool is not None and not capacity.acquire_now(op.name, pool, resources.count):
            message = (
                f"Resources are insufficient in region: {ep.location}. The requested resources "
                f"({resources.count} x {resources.accelerator}) are not available right now; try "
                "again later or use dedicated_resources.flex_start."
            )
            self._end(dep, FAILED, now, (code_pb2.RESOURCE_EXHAUSTED, message), Stage.FAILED_TO_DEPLOY)
            return lro.copy(self.core.operations[op.name])
        else:
            dep.capacity_at = now
            self._set_state(dep, STARTING, now)
        ep.pending[model_id] = dep
        self._due.next_tick(op.name)
        if dep.expires_at is not None:
            self._due.at(op.name, dep.expires_at)
        return op

    def _new_model_id(self) -> str:
        # 19 digits, as Vertex AI names them; never one of the 1-10 digit ids a client may choose.
        model_id = str(self._next_model_id)
        self._next_model_id += 1
        return model_id

    @staticmethod
    def _deployed_model(asked: Any, model_id: str, resources: Resources) -> Any:
        """The DeployedModel as the endpoint will list it: output-only fields cleared, defaults filled."""
        out = DeployedModelPb()
        out.CopyFrom(asked)
        for name in _OUTPUT_ONLY:
            out.ClearField(name)
        out.id = model_id
        if not out.display_name:
            # "the Model's display_name is used" [aiplatform.v1beta1]; without a registry, its id.
            out.display_name = out.model.rsplit("/", 1)[-1].split("@", 1)[0]
        if out.WhichOneof("prediction_resources") == "dedicated_resources":
            dedicated = out.dedicated_resources
            dedicated.machine_spec.machine_type = resources.machine_type
            dedicated.max_replica_count = dedicated.max_replica_count or dedicated.min_replica_count
        return out

    # -- life cycle ------------------------------------------------------------------------
    def _set_state(self, dep: Deployment, state: str, now: float) -> None:
        before = dep.history[-1][0] if dep.history else "new"
        dep.state = state
        dep.history.append((state, now))
        log.info("Deployment %s on %s: %s -> %s", dep.model_id, dep.endpoint.name, before, state)

    def _set_stage(self, dep: Deployment, stage: int, now: float) -> None:
        dep.stage = stage
        lro.update(self.core, dep.operation, DeployMetadataPb, now, stage)

    def _end(self, dep: Deployment, state: str, now: float, error: tuple[int, str], stage: int) -> None:
        """End a deployment not deployed: capacity released, its operation done with ``error``."""
        dep.endpoint.pending.pop(dep.model_id, None)
        self.core.capacity.release(dep.operation)
        dep.error, dep.ended_at, dep.stage = error, now, stage
        self._set_state(dep, state, now)
        log.info("Deployment %s on %s: %s", dep.model_id, dep.endpoint.name, error[1])
        lro.finish(self.core, dep.operation, DeployMetadataPb, now, error=error, stage=stage)

    def _deploy(self, dep: Deployment, now: float) -> None:
        ep = dep.endpoint
        ep.pending.pop(dep.model_id, None)
        model = dep.deployed_model
        model.create_time.CopyFrom(_timestamp(now))
        model.status.available_replica_count = dep.resources.replicas
        model.status.last_update_time.CopyFrom(_timestamp(now))
        ep.deployed[dep.model_id] = dep
        dep.deployed_at = now
        self._set_state(dep, DEPLOYED, now)
        sync_endpoint(ep, split_after_deploy(ep, dep), now)
        response = DeployModelResponsePb()
        response.deployed_model.CopyFrom(model)
        dep.stage = Stage.SUCCESSFULLY_DEPLOYED
        lro.finish(self.core, dep.operation, DeployMetadataPb, now, response=response, stage=dep.stage)

    def undeploy(self, dep: Deployment, state: str, now: float, split: dict[str, int] | None = None) -> None:
        """Take a deployed model off its endpoint (capacity released); ``split``: the new traffic
        split (None: :func:`.records.split_without`)."""
        ep = dep.endpoint
        self.core.capacity.release(dep.operation)
        ep.deployed.pop(dep.model_id, None)
        sync_endpoint(ep, split_without(ep, dep.model_id) if split is None else split, now)
        dep.ended_at = now
        self._set_state(dep, state, now)

    def withdraw(self, dep: Deployment, now: float, why: str) -> None:
        """Withdraw a deployment not deployed yet: its operation is done with CANCELLED."""
        message = (
            f"The deployment of DeployedModel {dep.model_id} was cancelled before it was deployed: {why}."
        )
        self._end(dep, CANCELLED, now, (code_pb2.CANCELLED, message), Stage.DEPLOYMENT_TERMINATED)

    def expire(self, dep: Deployment, now: float, why: str = "") -> None:
        """End a live flex-start deployment at its max runtime: undeployed, or dropped while waiting."""
        runtime = dep.resources.max_runtime
        why = why or f"its flex-start max runtime of {runtime:g}s from the DeployModel request passed"
        if dep.state == DEPLOYED:
            log.info("Deployment %s on %s: undeployed, %s", dep.model_id, dep.endpoint.name, why)
            self.undeploy(dep, EXPIRED, now)
            return
        message = (
            f"The flex-start max runtime passed before capacity was obtained ({dep.resources.count} x "
            f"{dep.resources.accelerator} in {dep.endpoint.location}): {why}."
        )
        self._end(dep, EXPIRED, now, (code_pb2.DEADLINE_EXCEEDED, message), Stage.FAILED_TO_DEPLOY)

    # -- tick hooks ------------------------------------------------------------------------
    def before_advance(self, now: float) -> None:
        for name in self._due.due(now):
            dep = self.all[name]
            if not dep.live:
                continue
            expires = dep.expires_at
            if expires is not None and now >= expires:
                self.expire(dep, now)
            elif dep.state == STARTING:
                self._deploy(dep, now)
            elif dep.state == WAITING and dep.stage == Stage.STARTING_DEPLOYMENT:
                self._set_stage(dep, Stage.ADDING_NODES_TO_CLUSTER, now)

    def started(self, holder: str, now: float) -> None:
        dep = self.all[holder]
        dep.capacity_at = now
        self._set_state(dep, STARTING, now)
        self._set_stage(dep, Stage.STARTING_MODEL_SERVER, now)
        self._due.next_tick(holder)

    def cancel_operation(self, name: str, now: float) -> bool:
        dep = self.all.get(name)
        if dep is None:
            return False
        if dep.state in (WAITING, STARTING):
            self.withdraw(dep, now, "its operation was cancelled")
        return True

    def records(self) -> Iterable[tuple[float, dict[str, Any]]]:
        """Every deployment ever submitted, with its submission time."""
        return [(dep.requested_at, dep.record()) for dep in self.all.values()]
