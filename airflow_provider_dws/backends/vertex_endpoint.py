"""A model deployed to a Vertex AI endpoint on flex-start (``aiplatform.v1beta1``), as a DWS request.

The request is the ``DeployModel`` long-running operation
(``projects/P/locations/R/endpoints/E/operations/O``): it stays not done while the deployment
waits for its machines, then ends with the deployed model or an error. The API has no max wait:
the trigger gives a deployment up at the provider's, by cancelling the operation (best effort, as
every long-running operation) and undeploying the model if it came up meanwhile.

Each task instance deploys onto an endpoint of its own (``dws-<hash>``, labelled with its
identity): a deploy operation does not name its deployed model until it is done, so only on an
endpoint no other task deploys to can a lost reply's operation be told apart and adopted. The
deployed model's id is the identity's too (:func:`~..specs.vertex_inference.deployed_model_id`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Container, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, cast

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.google import (
    RPC_FAILED_PRECONDITION,
    RPC_INVALID_ARGUMENT,
    RPC_PERMISSION_DENIED,
    GoogleBackend,
)
from airflow_provider_dws.errors import ConflictError, RequestAlreadyExistsError, RequestNotFoundError
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIBetaHook, DwsVertexAIEndpointsAsyncHook
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings, StateTable
from airflow_provider_dws.scheduling.reattach import Candidate, ReattachDecision, choose_existing
from airflow_provider_dws.specs.vertex_inference import (
    VERTEX_DEPLOYMENT_KIND,
    endpoint_id,
    parse_operation_name,
)

log = logging.getLogger(__name__)

#: google.rpc codes of a deploy operation's error that mean "no capacity" (a stock-out, the max
#: runtime passed while queued, the service unable to place it now).
_NOT_OBTAINED_CODES = frozenset({4, 8, 14})
_BAD_REQUEST_CODES = frozenset({RPC_INVALID_ARGUMENT, RPC_FAILED_PRECONDITION, RPC_PERMISSION_DENIED, 5})
_CANCELLED = 1
#: An operation's state, as this backend names it: waiting (``DEPLOYING``), deployed, undeployed
#: since (its max runtime ended, a teardown, a give-up), or ended without a deployment. An undeployed
#: model is not a success to adopt: its machines are gone (a lookup deploys again, a wait that
#: finds it so fails as capacity taken back).
DEPLOYMENT_PHASES: dict[str, Phase] = {
    "DEPLOYING": Phase.WAITING,
    "DEPLOYED": Phase.RUNNING,
    "UNDEPLOYED": Phase.FAILED,
    "FAILED_TO_DEPLOY": Phase.FAILED,
}
#: How many operations one list page asks for (an endpoint of one task has a handful).
_PAGE = 100
#: How long a give-up waits for a cancelled deploy operation to end (cancel is best effort), and
#: how often it looks.
CANCEL_SETTLE_SECONDS = 60.0
CANCEL_POLL_SECONDS = 2.0


def split_without(endpoint: Any, model_id: str) -> dict[str, int]:
    """The endpoint's traffic split with ``model_id`` taken out, its share given to the model that
    has the most of what is left (empty when no other model stays)."""
    split = {key: share for key, share in endpoint.traffic_split.items() if key != model_id}
    others = [model.id for model in endpoint.deployed_models if model.id != model_id]
    if not others:
        return {}
    freed = endpoint.traffic_split.get(model_id, 0) + sum(v for k, v in split.items() if k not in others)
    split = {key: share for key, share in split.items() if key in others}
    heir = max(others, key=lambda key: (split.get(key, 0), key))
    split[heir] = split.get(heir, 0) + freed
    return split


def classify_deployment(state: str, *, error_code: int = 0, error_message: str = "") -> Outcome:
    """The outcome of a deployment state and, for ``FAILED_TO_DEPLOY``, its error's code."""
    if state == "UNDEPLOYED":
        return Outcome(Phase.FAILED, FailureKind.PREEMPTED, error_message or "the model was undeployed")
    if state != "FAILED_TO_DEPLOY":
        return Outcome(DEPLOYMENT_PHASES.get(state, Phase.WAITING), None, error_message)
    if error_code in _NOT_OBTAINED_CODES:
        return Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, error_message)
    if error_code == _CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, error_message)
    if error_code in _BAD_REQUEST_CODES:
        return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, error_message)
    return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, error_message)


DEPLOYMENT_STATES = StateTable(VERTEX_DEPLOYMENT_KIND, DEPLOYMENT_PHASES, classify_deployment)


@functools.cache
def _stage_names() -> dict[int, str]:
    from google.cloud.aiplatform_v1beta1 import DeploymentStage

    return {member.value: member.name for member in DeploymentStage.__members__.values()}


def _metadata(op: Any) -> Any:
    """The ``DeployModelOperationMetadata`` of a raw operation (``None`` for another kind)."""
    from google.cloud.aiplatform_v1beta1 import DeployModelOperationMetadata

    meta = DeployModelOperationMetadata.pb()()
    return meta if op.metadata.Unpack(meta) else None


def _deployed(op: Any) -> Any:
    """The ``DeployedModel`` of a done operation's response."""
    from google.cloud.aiplatform_v1beta1 import DeployModelResponse

    response = DeployModelResponse.pb()()
    op.response.Unpack(response)
    return response.deployed_model


def _time(stamp: Any) -> datetime | None:
    return stamp.ToDatetime(tzinfo=timezone.utc) if stamp.seconds else None


def deployment_status(op: Any, deployed_ids: Container[str] | None, attempt: int = 1) -> RequestStatus:
    """Classify a raw deploy operation; ``deployed_ids``: the endpoint's deployed models now (``None``
    when not read; a done deployment then counts as deployed)."""
    endpoint, region = parse_operation_name(op.name)
    meta = _metadata(op)
    generic = meta.generic_metadata if meta is not None else None
    submitted = _time(generic.create_time) if generic is not None else None
    details: dict[str, Any] = {
        "endpoint": endpoint,
        "region": region,
        "attempt": attempt,
        "max_wait_seconds": None,
    }
    started = None
    error_code, message = 0, ""
    if not op.done:
        stage = _stage_names().get(meta.deployment_stage, "") if meta is not None else ""
        state, message = "DEPLOYING", stage.replace("_", " ").lower() if stage else ""
    elif op.HasField("error"):
        state, error_code, message = "FAILED_TO_DEPLOY", op.error.code, op.error.message
    else:
        model = _deployed(op)
        started = _time(model.create_time) or (_time(generic.update_time) if generic is not None else None)
        details.update(deployed_model_id=model.id, model=model.model)
        deployed = deployed_ids is None or model.id in deployed_ids
        state = "DEPLOYED" if deployed else "UNDEPLOYED"
        details[RESULT] = {
            "endpoint": endpoint,
            "endpoint_id": endpoint.rsplit("/", 1)[1],
            "deployed_model_id": model.id,
            "model": model.model,
            "region": region,
        }
    outcome = DEPLOYMENT_STATES.classify(state, error_code=error_code, error_message=message)
    return RequestStatus(
        name=op.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(submitted=submitted, started=started),
        description=f"flex-start deployment on endpoint {endpoint.rsplit('/', 1)[1]} in {region}",
        details=details,
    )


class VertexDeploymentBackend(GoogleBackend[DwsVertexAIBetaHook, DwsVertexAIEndpointsAsyncHook]):
    """Deploy, find, read, give up and undeploy flex-start deployments through ``aiplatform_v1beta1``.

    Its requests are listed per endpoint (a :class:`~.base.GroupedLister`): one list of an
    endpoint's operations serves every wait on it.
    """

    kind = VERTEX_DEPLOYMENT_KIND
    location_key = "region"
    sync_hook_class = DwsVertexAIBetaHook
    async_hook_class = DwsVertexAIEndpointsAsyncHook

    def __init__(
        self,
        project_id: str,
        region: str,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        rpc_timeout: float | None = None,
    ) -> None:
        super().__init__(project_id, region, gcp_conn_id, impersonation_chain, rpc_timeout)

    def _client(self) -> Any:
        return self.hook.get_endpoint_service_client(self.location)

    def endpoint_name(self, identity: RequestIdentity) -> str:
        """The full name of the task instance's own endpoint."""
        return f"{self.parent}/endpoints/{endpoint_id(identity.key)}"

    # -- sync (worker) -------------------------------------------------------------------------

    def get_endpoint(self, name: str) -> Any | None:
        """The raw ``Endpoint`` (``None`` when it does not exist)."""
        from google.cloud.aiplatform_v1beta1 import Endpoint

        try:
            return Endpoint.pb(self._rpc(f"get {name}", self._client().get_endpoint, name=name))
        except RequestNotFoundError:
            return None

    def ensure_endpoint(
        self, identity: RequestIdentity, display_name: str, labels: dict[str, str]
    ) -> tuple[str, bool]:
        """The task instance's endpoint, created (and waited for) unless it exists: (name, created)."""
        from google.cloud.aiplatform_v1beta1 import Endpoint

        name = self.endpoint_name(identity)
        if self.get_endpoint(name) is not None:
            return name, False
        endpoint = Endpoint(display_name=display_name[:128], labels=labels)
        try:
            operation = self._rpc(
                f"create {name}",
                self._client().create_endpoint,
                parent=self.parent,
                endpoint=endpoint,
                endpoint_id=name.rsplit("/", 1)[1],
            )
        except RequestAlreadyExistsError:  # a lost reply's create, or a retry's: it is there
            return name, False
        self._operation_result(operation, f"create {name}")
        return name, True

    def operations(self, endpoint: str) -> list[Any]:
        """Every deploy operation of ``endpoint``, oldest first (its create time)."""
        from google.longrunning import operations_pb2

        client, found, token = self._client(), [], ""
        while True:
            request = operations_pb2.ListOperationsRequest(name=endpoint, page_size=_PAGE, page_token=token)
            page = self._rpc(f"list the operations of {endpoint}", client.list_operations, request=request)
            found += [op for op in page.operations if _metadata(op) is not None]
            token = page.next_page_token
            if not token:
                break
        return sorted(
            found, key=lambda op: (_metadata(op).generic_metadata.create_time.ToNanoseconds(), op.name)
        )

    def deployed_ids(self, endpoint: str) -> set[str] | None:
        """The ids of the models deployed on ``endpoint`` now (``None``: no such endpoint)."""
        raw = self.get_endpoint(endpoint)
        return None if raw is None else {model.id for model in raw.deployed_models}

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every deployment on the task instance's endpoint, classified; the attempt of each is its
        place among the endpoint's deploy operations (the first is attempt 1)."""
        endpoint = self.endpoint_name(identity)
        try:
            operations = self.operations(endpoint)
        except RequestNotFoundError:
            return []
        # Read after the list: a deployment done in between is seen deployed, never undeployed.
        deployed = self.deployed_ids(endpoint) or set()
        return [deployment_status(op, deployed, n) for n, op in enumerate(operations, 1)]

    def decide(self, identity: RequestIdentity) -> ReattachDecision:
        """Reattach to a live deployment, take a deployed one, or deploy."""
        return choose_existing([Candidate(s.name, s.phase, s.timings.submitted) for s in self.find(identity)])

    def submit(
        self, request: Any, identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Deploy ``request`` (the endpoint's full name and the ``DeployedModel``), or adopt the
        deployment a lost reply made (looked up again before each retry)."""
        endpoint, deployed_model = request
        client = self._client()

        def adopt() -> RequestStatus | None:
            decision = self.decide(identity)
            return None if decision.name is None else self.get_status(decision.name)

        def create() -> RequestStatus:
            operation = client.deploy_model(
                endpoint=endpoint,
                deployed_model=deployed_model,
                traffic_split={"0": 100},
                timeout=self.rpc_timeout,
            )
            return deployment_status(operation.operation, None, identity.attempt)

        try:
            return self._create(f"deploy a model to {endpoint}", create, adopt)
        except RequestAlreadyExistsError:  # this attempt's model id: a lost reply's deployment
            existing = adopt()
            if existing is None:
                raise
            return existing, False

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one deployment (its operation, and its endpoint once done); ``None`` when gone."""
        from google.longrunning import operations_pb2

        try:
            op = self._rpc(
                f"get {name}",
                self._client().get_operation,
                request=operations_pb2.GetOperationRequest(name=name),
            )
        except RequestNotFoundError:
            return None
        deployed = self.deployed_ids(parse_operation_name(name)[0]) if op.done else None
        return deployment_status(op, deployed if deployed is not None else set())

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give a deployment up: cancel its operation if it still waits, undeploy its model if it is
        deployed. Already ended or gone is fine (False)."""
        status = self.get_status(name)
        if status is None or not status.phase.live:
            return False
        if status.phase is Phase.WAITING:
            self._cancel(name)
            status = self._settled(name, CANCEL_SETTLE_SECONDS if wait else 0.0)
        if status is not None and status.state == "DEPLOYED":
            self.undeploy(status.details["endpoint"], status.details["deployed_model_id"], wait=wait)
        elif status is not None and status.phase is Phase.WAITING:
            log.warning(
                "%s still waits %.0fs after its cancel (best effort): if its model comes up, the "
                "teardown or the task's next try undeploys it",
                name,
                CANCEL_SETTLE_SECONDS,
            )
        return True

    def _settled(self, name: str, within: float) -> RequestStatus | None:
        """The deployment read again until its operation is done, for at most ``within`` seconds:
        a cancelled long-running operation may take a while to end (cancel is best effort)."""
        deadline = time.monotonic() + within
        status = self.get_status(name)
        while status is not None and status.phase is Phase.WAITING and time.monotonic() < deadline:
            time.sleep(CANCEL_POLL_SECONDS)
            status = self.get_status(name)
        return status

    def _cancel(self, name: str) -> None:
        from google.longrunning import operations_pb2

        try:
            self._rpc(
                f"cancel {name}",
                self._client().cancel_operation,
                request=operations_pb2.CancelOperationRequest(name=name),
            )
        except (ConflictError, RequestNotFoundError):
            log.info("Deployment %s had already ended; nothing to cancel", name)

    def undeploy(self, endpoint: str, model_id: str, *, wait: bool = True) -> bool:
        """Undeploy one model from ``endpoint`` (its machines go back), its traffic given to the models
        that stay (Vertex AI refuses to undeploy a model with traffic beside others); not deployed
        is fine (False)."""
        raw = self.get_endpoint(endpoint)
        if raw is None:
            return False
        try:
            operation = self._rpc(
                f"undeploy {model_id} from {endpoint}",
                self._client().undeploy_model,
                endpoint=endpoint,
                deployed_model_id=model_id,
                traffic_split=split_without(raw, model_id),
            )
        except RequestNotFoundError:
            return False
        if wait:
            self._operation_result(operation, f"undeploy {model_id} from {endpoint}")
        return True

    def delete_endpoint(self, endpoint: str) -> bool:
        """Delete an endpoint that holds no model (waited for); gone already is fine (False)."""
        try:
            operation = self._rpc(f"delete {endpoint}", self._client().delete_endpoint, name=endpoint)
        except RequestNotFoundError:
            return False
        self._operation_result(operation, f"delete {endpoint}")
        return True

    # -- async (triggerer) ---------------------------------------------------------------------

    def poll_group(self, name: str) -> str:
        """A deployment is listed with its endpoint's operations."""
        return parse_operation_name(name)[0]

    async def _aclient(self) -> Any:
        return await self.async_hook.get_endpoint_service_client(self.location)

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one deployment: its operation, and once it is done its endpoint. Errors propagate."""
        from google.cloud.aiplatform_v1beta1 import Endpoint
        from google.longrunning import operations_pb2

        client = await self._aclient()
        op = await self._arpc_once(
            client.get_operation, request=operations_pb2.GetOperationRequest(name=name)
        )
        if not op.done or op.HasField("error"):
            return deployment_status(op, None)
        try:
            endpoint = await self._arpc_once(client.get_endpoint, name=parse_operation_name(name)[0])
        except RequestNotFoundError:
            return deployment_status(op, set())
        return deployment_status(op, {model.id for model in Endpoint.pb(endpoint).deployed_models})

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The deployments still waiting among ``only`` (one endpoint's: the poller groups them),
        from one list of that endpoint's operations. A done one is absent: the poller reads it."""
        from google.longrunning import operations_pb2

        names = list(cast("Iterable[str]", only or ()))
        if not names:
            return {}
        client = await self._aclient()
        live: dict[str, RequestStatus] = {}
        token = ""
        while True:
            request = operations_pb2.ListOperationsRequest(
                name=self.poll_group(names[0]), page_size=_PAGE, page_token=token
            )
            page = await self._arpc_once(client.list_operations, request=request)
            for op in page.operations:
                if op.name in names and not op.done:
                    live[op.name] = deployment_status(op, None)
            token = page.next_page_token
            if not token:
                return live

    async def arelease(self, name: str) -> bool:
        """Give a deployment up from the event loop: cancel its operation (best effort, so read it
        again until it ends, for a while), then undeploy its model if it was deployed meanwhile.
        Already ended or gone is fine (False)."""
        from google.cloud.aiplatform_v1beta1 import Endpoint
        from google.longrunning import operations_pb2

        client = await self._aclient()
        try:
            status = await self.aget_status(name)
        except RequestNotFoundError:
            return False
        if status.phase is Phase.WAITING:
            with contextlib.suppress(ConflictError, RequestNotFoundError):
                await self._acall(
                    f"cancel {name}",
                    client.cancel_operation,
                    request=operations_pb2.CancelOperationRequest(name=name),
                    timeout=self.rpc_timeout,
                )
            status = await self._asettled(name)
        if status.state != "DEPLOYED":
            if status.phase is Phase.WAITING:
                log.warning(
                    "%s still waits %.0fs after its cancel (best effort): if its model comes up, the "
                    "teardown or the task's next try undeploys it",
                    name,
                    CANCEL_SETTLE_SECONDS,
                )
            return status.phase is Phase.CANCELLED or status.phase is Phase.WAITING
        endpoint, model_id = status.details["endpoint"], status.details["deployed_model_id"]
        raw = Endpoint.pb(await self._arpc_once(client.get_endpoint, name=endpoint))
        try:
            await self._acall(
                f"undeploy {model_id} from {endpoint}",
                client.undeploy_model,
                endpoint=endpoint,
                deployed_model_id=model_id,
                traffic_split=split_without(raw, model_id),
                timeout=self.rpc_timeout,
            )
        except RequestNotFoundError:
            return False
        log.info("Undeploying %s from %s: its machines go back", model_id, endpoint)
        return True

    async def _asettled(self, name: str) -> RequestStatus:
        """:meth:`_settled` from the event loop."""
        deadline = time.monotonic() + CANCEL_SETTLE_SECONDS
        status = await self.aget_status(name)
        while status.phase is Phase.WAITING and time.monotonic() < deadline:
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            status = await self.aget_status(name)
        return status
