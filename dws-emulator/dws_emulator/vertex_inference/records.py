"""Endpoints and model deployments as the emulator keeps them, and the traffic-split arithmetic.

An :class:`EndpointRecord` holds its raw ``Endpoint`` protobuf, whose ``deployed_models`` and
``traffic_split`` are rewritten from the record (:func:`sync_endpoint`) whenever a model comes or
goes. A :class:`Deployment` is one DeployModel request, from its submission to its end; its
capacity holder id is its operation's name (unique, unlike a DeployedModel id, which may be
deployed again once undeployed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.cloud.aiplatform_v1beta1.types import deployment_stage as gca_deployment_stage

from ..core.capacity import PoolKey
from ..core.clock import iso
from ..core.clock import timestamp as _timestamp
from .validation import Resources

Stage = gca_deployment_stage.DeploymentStage

# A deployment's states (the control API's words; the API itself shows only the operation).
WAITING = "WAITING"  # in its pool's FIFO queue for its whole set
STARTING = "STARTING"  # its set is taken (or it needs none): deployed on the next tick
DEPLOYED = "DEPLOYED"  # listed in the endpoint's deployed_models
UNDEPLOYED = "UNDEPLOYED"  # undeployed by UndeployModel
EXPIRED = "EXPIRED"  # its flex-start max runtime ended it (deployed or not)
CANCELLED = "CANCELLED"  # withdrawn before it was deployed (CancelOperation, UndeployModel)
FAILED = "FAILED"  # a stock-out at submission
LIVE = frozenset({WAITING, STARTING, DEPLOYED})


@dataclass
class EndpointRecord:
    """One Endpoint ever created, with the models deployed on it and those still on their way."""

    name: str
    project: str
    location: str
    endpoint: Any  # raw Endpoint protobuf, returned (copied) to clients
    seq: int  # creation order: the list cursor
    created_at: float
    deployed: dict[str, Deployment] = field(default_factory=dict)  # by DeployedModel id, deploy order
    pending: dict[str, Deployment] = field(default_factory=dict)  # WAITING or STARTING, by id
    deleted: bool = False

    @property
    def endpoint_id(self) -> str:
        return self.name.rsplit("/", 1)[1]


@dataclass
class Deployment:
    """One DeployModel request: its DeployedModel, what it takes from the capacity model, its end."""

    operation: str  # the DeployModel operation's name, also its capacity holder id
    endpoint: EndpointRecord
    model_id: str  # the DeployedModel id (asked for, or assigned at submission)
    deployed_model: Any  # raw DeployedModel protobuf as the endpoint lists it once deployed
    resources: Resources
    traffic_split: dict[str, int]  # as asked ("0": this model); empty: leave the split alone
    requested_at: float
    pool: PoolKey | None
    state: str = WAITING
    stage: int = Stage.STARTING_DEPLOYMENT
    history: list[tuple[str, float]] = field(default_factory=list)
    capacity_at: float | None = None  # when its set was taken
    deployed_at: float | None = None
    ended_at: float | None = None
    error: tuple[int, str] | None = None

    @property
    def expires_at(self) -> float | None:
        """When its flex-start max runtime ends: counted from submission [flex-start inference]."""
        runtime = self.resources.max_runtime
        return None if runtime is None else self.requested_at + runtime

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def record(self) -> dict[str, Any]:
        """The control API's record of this deployment."""
        ep, res = self.endpoint, self.resources
        return {
            "name": self.operation,
            "kind": "ModelDeployment",
            "endpoint": ep.name,
            "deployed_model_id": self.model_id,
            "model": self.deployed_model.model,
            "display_name": self.deployed_model.display_name,
            "project": ep.project,
            "location": ep.location,
            "labels": dict(ep.endpoint.labels),  # a DeployedModel has none: its endpoint's
            "strategy": res.strategy,
            "machine_type": res.machine_type or None,
            "replicas": res.replicas,
            "accelerator_type": res.accelerator if self.pool else None,
            "accelerator_count": res.count if self.pool else 0,
            "pool": str(self.pool) if self.pool else None,
            "max_runtime_seconds": res.max_runtime,
            "state": self.state,
            "deployment_stage": Stage(self.stage).name,
            "deleted": False,
            "create_time": iso(self.requested_at),
            "capacity_time": iso(self.capacity_at),
            "deploy_time": iso(self.deployed_at),
            "expire_time": iso(self.expires_at),
            "end_time": iso(self.ended_at),
            "history": [{"state": s, "time": iso(t)} for s, t in self.history],
            "error": {"code": self.error[0], "message": self.error[1]} if self.error else None,
        }


def sync_endpoint(ep: EndpointRecord, split: dict[str, int], now: float) -> None:
    """Rewrite ``ep``'s deployed models (deploy order) and traffic split; touch its update time."""
    pb = ep.endpoint
    del pb.deployed_models[:]
    pb.deployed_models.extend(d.deployed_model for d in ep.deployed.values())
    pb.traffic_split.clear()
    pb.traffic_split.update(split)
    pb.update_time.CopyFrom(_timestamp(now))


def split_after_deploy(ep: EndpointRecord, dep: Deployment) -> dict[str, int]:
    """The endpoint's traffic split once ``dep`` is deployed (it is in ``ep.deployed`` already).

    A split asked for replaces the endpoint's, "0" naming the new model ([aiplatform.v1beta1]
    DeployModelRequest.traffic_split); without one the split is left alone, except that the
    endpoint's only model gets 100 (emulator choice, as Google's console and SDK deploy a first
    model). Emulator choice: the share of a model undeployed while ``dep`` waited goes to ``dep``.
    """
    if not dep.traffic_split:
        if len(ep.deployed) == 1:
            return {dep.model_id: 100}
        return dict(ep.endpoint.traffic_split)
    split: dict[str, int] = {}
    lost = 0
    for key, share in dep.traffic_split.items():
        target = dep.model_id if key == "0" else key
        if target in ep.deployed:
            split[target] = split.get(target, 0) + share
        else:
            lost += share
    if lost:
        split[dep.model_id] = split.get(dep.model_id, 0) + lost
    return split


def split_without(ep: EndpointRecord, model_id: str) -> dict[str, int]:
    """The traffic split once ``model_id`` is gone (it is out of ``ep.deployed`` already) without a
    new split given: empty when no model is left (or none had traffic), else its share goes to the remaining model with
    the most traffic, the earliest deployed on a tie (emulator choice: an automatic undeploy at the
    flex-start max runtime has no new split to apply, and the split must add up to 100)."""
    current = dict(ep.endpoint.traffic_split)
    if not ep.deployed or not current:
        return {}
    split = {k: v for k, v in current.items() if k != model_id and k in ep.deployed}
    share = 100 - sum(split.values())
    if share > 0:
        heir = max(ep.deployed, key=lambda k: split.get(k, 0))  # max keeps the first on a tie
        split[heir] = split.get(heir, 0) + share
    return split
