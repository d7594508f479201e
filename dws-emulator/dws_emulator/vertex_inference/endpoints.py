"""Endpoints (``google.cloud.aiplatform.v1beta1.EndpointService``): create, get, list, delete,
and the entry points of DeployModel and UndeployModel (the deployments' life cycle is
:mod:`.deployments`).

* CreateEndpoint: an operation under the new endpoint (``CreateEndpointOperationMetadata``), done
  on the next tick with the Endpoint; the endpoint is readable at once. ``endpoint_id`` as the proto
  documents it, else a 19-digit id from the emulator; an id in use is ALREADY_EXISTS.
* ListEndpoints: oldest first, ``page_size`` / ``page_token`` (a cursor); ``filter`` takes
  ``endpoint`` (the id, ``=`` / ``!=``), ``display_name`` and ``labels.*`` joined by AND, OR, NOT
  ([proto] ListEndpointsRequest.filter; camelCase names and ``base_model_name`` are not served).
* DeleteEndpoint: refused with FAILED_PRECONDITION while a model is deployed or on its way (named);
  otherwise gone at once (NOT_FOUND), its operation (``DeleteOperationMetadata``) done on the
  next tick. A deleted endpoint's id may be used again.
* UndeployModel: the model is taken off at once (capacity released), its operation
  (``UndeployModelOperationMetadata``) done on the next tick with ``UndeployModelResponse``. A model
  with traffic is undeployed only if it is the last one or the request's ``traffic_split`` takes
  its traffic away ([aiplatform.v1beta1] UndeployModelRequest.traffic_split), else
  FAILED_PRECONDITION. An id not deployed is NOT_FOUND; one still on its way is withdrawn.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import grpc
from google.cloud.aiplatform_v1beta1.types import endpoint as gca_endpoint
from google.cloud.aiplatform_v1beta1.types import endpoint_service
from google.cloud.aiplatform_v1beta1.types import operation as gca_operation
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from ..core.api import Core
from ..core.clock import timestamp as _timestamp
from ..core.errors import EmulatorError
from ..core.filters import FilterError, compile_job_filter
from . import lro
from .deployments import Deployments
from .records import UNDEPLOYED, EndpointRecord
from .validation import check_traffic_split, invalid, page_size_of, parse_parent, validate_endpoint

log = logging.getLogger("dws_emulator")

EndpointPb = gca_endpoint.Endpoint.pb()
CreateMetadataPb = endpoint_service.CreateEndpointOperationMetadata.pb()
UndeployMetadataPb = endpoint_service.UndeployModelOperationMetadata.pb()
UndeployModelResponsePb = endpoint_service.UndeployModelResponse.pb()
DeleteMetadataPb = gca_operation.DeleteOperationMetadata.pb()
_NAME_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)/endpoints/([^/]+)")
_OUTPUT_ONLY = (
    "name",
    "deployed_models",
    "create_time",
    "update_time",
    "model_deployment_monitoring_job",
    "dedicated_endpoint_dns",
    "satisfies_pzs",
    "satisfies_pzi",
)
_FILTER_FIELDS = ("endpoint", "display_name", "labels")


class Endpoints:
    """The Endpoints of one emulator and their deployments; every method runs under ``core.lock``."""

    def __init__(self, core: Core, first_endpoint_id: int, first_model_id: int) -> None:
        self.core = core
        self._next_id = first_endpoint_id
        self._seq = 0
        self.endpoints: dict[str, EndpointRecord] = {}  # by name: the latest with that name
        self.deployments = Deployments(core, first_model_id)
        # Operations done on the next tick: (name, metadata class, response).
        self._pending_ops: list[tuple[str, Any, Any]] = []

    # -- helpers ---------------------------------------------------------------------------
    def lookup(self, name: str) -> EndpointRecord:
        """A live endpoint by name: INVALID_ARGUMENT for a malformed name, NOT_FOUND for another."""
        if not _NAME_RE.fullmatch(name):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid Endpoint name {name!r}: expected projects/{{project}}/locations/{{location}}/"
                "endpoints/{endpoint}.",
            )
        rec = self.endpoints.get(name)
        if rec is None or rec.deleted:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Endpoint {name} does not exist.")
        return rec

    @staticmethod
    def _copy(rec: EndpointRecord) -> Any:
        out = EndpointPb()
        out.CopyFrom(rec.endpoint)
        return out

    def _later(self, op: operations_pb2.Operation, metadata: Any, response: Any) -> operations_pb2.Operation:
        self._pending_ops.append((op.name, metadata, response))
        return op

    def after_advance(self, now: float) -> None:
        """Operations that are done one tick after their request."""
        pending, self._pending_ops = self._pending_ops, []
        for name, metadata, response in pending:
            lro.finish(self.core, name, metadata, now, response=response)

    def forget_operation(self, name: str) -> None:
        self._pending_ops = [p for p in self._pending_ops if p[0] != name]

    # -- RPCs ------------------------------------------------------------------------------
    def create(self, parent: str, endpoint: Any, endpoint_id: str) -> operations_pb2.Operation:
        """CreateEndpoint: the endpoint exists at once; its operation is done on the next tick."""
        project, location = parse_parent(parent)
        validate_endpoint(endpoint, endpoint_id)
        if not endpoint_id:
            endpoint_id = str(self._next_id)
            self._next_id += 1
        name = f"{parent}/endpoints/{endpoint_id}"
        existing = self.endpoints.get(name)
        if existing is not None and not existing.deleted:
            raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"Endpoint {name} already exists.")
        now = self.core.clock()
        stored = EndpointPb()
        stored.CopyFrom(endpoint)
        for output_field in _OUTPUT_ONLY:  # ignored on input, as in the real API
            stored.ClearField(output_field)
        stored.name = name
        stored.create_time.CopyFrom(_timestamp(now))
        stored.update_time.CopyFrom(_timestamp(now))
        self.endpoints[name] = EndpointRecord(name, project, location, stored, self._seq, now)
        self._seq += 1
        log.info("Endpoint %s (%r) created", name, endpoint.display_name)
        op = lro.start(self.core, name, CreateMetadataPb, now)
        return self._later(op, CreateMetadataPb, self._copy(self.endpoints[name]))

    def get(self, name: str) -> Any:
        return self._copy(self.lookup(name))

    def list_endpoints(
        self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]:
        """ListEndpoints, oldest first; the page token is the last endpoint's creation number."""
        project, location = parse_parent(parent)
        size = page_size_of(page_size)
        try:
            # Endpoints have no state: an empty state field makes ``state`` an unsupported field.
            predicate = compile_job_filter(
                filter_text, (), state_field="", fields=_FILTER_FIELDS, id_fields=("endpoint",)
            )
        except FilterError as exc:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter {filter_text!r}: {exc}"
            ) from None
        if page_token and not page_token.isdigit():
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token {page_token!r}.")
        cursor = int(page_token) if page_token else -1
        matches = [
            rec
            for rec in self.endpoints.values()
            if not rec.deleted
            and rec.project == project
            and rec.location == location
            and rec.seq > cursor
            and predicate(self._filter_record(rec))
        ]
        matches.sort(key=lambda rec: rec.seq)
        page = matches[:size]
        token = str(page[-1].seq) if len(matches) > size else ""
        return [self._copy(rec) for rec in page], token

    @staticmethod
    def _filter_record(rec: EndpointRecord) -> dict[str, Any]:
        return {
            "endpoint": rec.endpoint_id,
            "display_name": rec.endpoint.display_name,
            "labels": dict(rec.endpoint.labels),
        }

    def delete(self, name: str) -> operations_pb2.Operation:
        """DeleteEndpoint of an endpoint with no model deployed or on its way."""
        rec = self.lookup(name)
        if rec.deployed or rec.pending:
            busy = [f"deployed: {', '.join(rec.deployed)}"] if rec.deployed else []
            busy += [f"being deployed: {', '.join(rec.pending)}"] if rec.pending else []
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Endpoint {name} still has DeployedModels ({'; '.join(busy)}); undeploy them first.",
            )
        now = self.core.clock()
        rec.deleted = True
        log.info("Endpoint %s (%r): deleted", name, rec.endpoint.display_name)
        op = lro.start(self.core, name, DeleteMetadataPb, now)
        return self._later(op, DeleteMetadataPb, empty_pb2.Empty())

    def deploy_model(self, request: Any) -> operations_pb2.Operation:
        """DeployModel on a live endpoint (:mod:`.deployments`)."""
        return self.deployments.submit(self.lookup(request.endpoint), request)

    def undeploy_model(
        self, endpoint: str, deployed_model_id: str, traffic_split: Any
    ) -> operations_pb2.Operation:
        """UndeployModel: off the endpoint at once, the operation done on the next tick."""
        rec = self.lookup(endpoint)
        if not deployed_model_id:
            raise invalid("deployed_model_id", "Required field is not set.")
        now = self.core.clock()
        waiting = rec.pending.get(deployed_model_id)
        if waiting is not None:
            self.deployments.withdraw(waiting, now, "UndeployModel was called for it")
        else:
            dep = rec.deployed.get(deployed_model_id)
            if dep is None:
                raise EmulatorError(
                    grpc.StatusCode.NOT_FOUND,
                    f"DeployedModel {deployed_model_id} does not exist in endpoint {endpoint}.",
                )
            split = self._split_after_undeploy(rec, deployed_model_id, dict(traffic_split))
            self.deployments.undeploy(dep, UNDEPLOYED, now, split)
        op = lro.start(self.core, endpoint, UndeployMetadataPb, now)
        return self._later(op, UndeployMetadataPb, UndeployModelResponsePb())

    @staticmethod
    def _split_after_undeploy(
        rec: EndpointRecord, model_id: str, asked: dict[str, int]
    ) -> dict[str, int] | None:
        """The split to apply (None: the endpoint's, without the model) or FAILED_PRECONDITION for a
        model that would keep traffic [aiplatform.v1beta1] UndeployModelRequest.traffic_split."""
        if asked:
            check_traffic_split(asked, "traffic_split", rec.deployed.keys())
            if asked.get(model_id, 0):
                raise invalid(
                    "traffic_split",
                    f"Must not give traffic to DeployedModel {model_id}, which is undeployed.",
                )
            return {k: v for k, v in asked.items() if k != model_id}
        share = rec.endpoint.traffic_split.get(model_id, 0)
        if share and len(rec.deployed) > 1:
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"DeployedModel {model_id} has {share}% of endpoint {rec.name}'s traffic; give it to the "
                "other models (traffic_split) to undeploy it.",
            )
        return None
