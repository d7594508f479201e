"""A model deployed on flex-start in the attempt loop, and its teardown: the endpoint of the task
instance, the deployment it waits for, what the task returns, and the undeploy."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import ConflictError, InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    DwsError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links import VertexAIEndpointLink
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.task import resolve_project
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.specs.vertex_inference import (
    VERTEX_DEPLOYMENT_KIND,
    deployed_model_id,
    machine_spec,
    parse_endpoint_name,
    parse_operation_name,
    spec_shape,
)
from airflow_provider_dws.specs.vertex_pools import duration

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.vertex_endpoint import VertexDeploymentBackend
    from airflow_provider_dws.operators.vertex_endpoint import DeployVertexAIFlexStartModelOperator
    from airflow_provider_dws.operators.vertex_endpoint_release import UndeployVertexAIFlexStartModelOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement


def endpoint_console_url(project_id: str, region: str, endpoint_id: str) -> str:
    """The console page of one endpoint."""
    return f"{CONSOLE}/vertex-ai/online-prediction/locations/{region}/endpoints/{endpoint_id}?project={project_id}"


class VertexDeploymentAdapter(
    RequestAdapter["DeployVertexAIFlexStartModelOperator", "VertexDeploymentBackend"]
):
    """One deploy operation per attempt on the task instance's endpoint; the wait ends when the
    model is deployed (its machines held for the tasks in between). No API max wait: the trigger
    gives a deployment up at the provider's."""

    name_key = "deployment_operation"
    target = "running"
    wait_grace = timedelta(0)
    result_keys = ("endpoint", "deployed_model_id")
    op: DeployVertexAIFlexStartModelOperator

    def backend(self, location: str | None = None) -> VertexDeploymentBackend:
        """The backend of ``location`` (default: the operator's region)."""
        from airflow_provider_dws.backends.vertex_endpoint import VertexDeploymentBackend

        return self.cached_backend(VertexDeploymentBackend, location or self.op.region)

    def location_of(self, name: str) -> str:
        """The region of a deploy operation's name."""
        return parse_operation_name(name)[1]

    def deployed_model(self, identity: RequestIdentity, placement: Placement) -> dict[str, Any]:
        """The ``DeployedModel`` of this attempt, as JSON: its id from the identity, the machines with
        ``flex_start`` and its max runtime."""
        op = self.op
        model: dict[str, Any] = {
            "id": deployed_model_id(identity.key, identity.try_number, identity.attempt),
            "model": op.model,
            "display_name": op.display_name or identity.display_name(),
            "dedicated_resources": {
                "machine_spec": machine_spec(placement.machine_type or op.machine_type),
                "min_replica_count": op.replica_count,
                "max_replica_count": op.max_replica_count or op.replica_count,
                "flex_start": {"max_runtime_duration": duration(op.max_run)},
            },
        }
        if op.service_account:
            model["service_account"] = op.service_account
        return model

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Make the task instance's endpoint unless it exists, then deploy this attempt's model."""
        from google.cloud.aiplatform_v1beta1 import DeployedModel

        op = self.op
        backend = self.backend(placement.location)
        spec = self.deployed_model(identity, placement)
        try:
            endpoint, created = backend.ensure_endpoint(
                identity,
                op.endpoint_display_name or spec["display_name"],
                {**(op.labels or {}), **identity.labels()},
            )
            if created:
                self.log.info("Created endpoint %s for this task's deployments", endpoint)
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the endpoint: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"Vertex AI refused the endpoint: {err.message}") from None
        try:
            status, made = backend.submit((endpoint, DeployedModel(spec)), identity)
        except (PermissionDeniedApiError, InvalidRequestError) as err:
            if created:  # nothing will ever be deployed on it
                backend.delete_endpoint(endpoint)
            what = (
                "permission denied deploying the model"
                if isinstance(err, PermissionDeniedApiError)
                else ("Vertex AI refused the deployment")
            )
            raise BadRequestError(f"{what}: {err.message}") from None
        total, accelerator, machine = spec_shape(spec["dedicated_resources"], "min_replica_count")
        self.log.info(
            "%s flex-start deployment %s of %s as deployed model %s (attempt %d, %d x %s on %s); it may "
            "wait up to %s for capacity, and Vertex AI undeploys it %s after this request",
            "Submitted" if made else "Adopted",
            status.name,
            op.model,
            spec["id"],
            identity.attempt,
            total,
            accelerator,
            machine,
            max_wait,
            op.max_run,
        )
        self.remember(context, status)
        return status

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The endpoint's console page."""
        region, endpoint_id = parse_endpoint_name(parse_operation_name(status.name)[0])
        return push_url(
            context,
            VertexAIEndpointLink.key,
            endpoint_console_url(resolve_project(self.op), region, endpoint_id),
        )

    def result(self, context: Context, status: RequestStatus) -> Any:
        """``{"endpoint", "endpoint_id", "deployed_model_id", "model", "region"}``."""
        if RESULT not in status.details:
            fresh = self.backend(self.location_of(status.name)).get_status(status.name)
            status = fresh or status
        result = status.details.get(RESULT) or {}
        submitted = status.timings.submitted
        self.log.info(
            "Model %s is deployed on %s as %s; Vertex AI undeploys it at the latest at %s (max_run %s "
            "after its request)",
            result.get("model"),
            result.get("endpoint"),
            result.get("deployed_model_id"),
            (submitted + self.op.max_run).isoformat(timespec="seconds") if submitted else "its max runtime",
            self.op.max_run,
        )
        return result

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """After an attempt without a deployment: nothing deployed, nothing waiting, and the endpoint
        this task made deleted when no model is left on it."""
        backend = self.backend(self.location_of(status.name))
        backend.release(status.name, wait=True)
        endpoint = parse_operation_name(status.name)[0]
        deployed = backend.deployed_ids(endpoint)
        if deployed is None:  # gone already
            return
        if not deployed and not any(not o.done for o in backend.operations(endpoint)):
            if backend.delete_endpoint(endpoint):
                self.log.info("Deleted endpoint %s: no model is deployed on it", endpoint)

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The GPUs of the replicas deployed at once, the machine type, the endpoint's page."""
        resources = {
            "machine_spec": machine_spec(placement.machine_type or self.op.machine_type),
            "min_replica_count": self.op.replica_count,
        }
        total, accelerator, machine = spec_shape(resources, "min_replica_count")
        try:
            region, endpoint_id = parse_endpoint_name(parse_operation_name(status.name)[0])
            page: str | None = endpoint_console_url(resolve_project(self.op), region, endpoint_id)
        except ValueError:
            page = None
        return {
            "api": VERTEX_DEPLOYMENT_KIND,
            "kind": "Vertex AI endpoint deployment",
            "accelerator_type": accelerator or None,
            "accelerator_count": total,
            "machine_type": machine or None,
            "pricing_model": "flex_start",
            "console_url": page,
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a deployment that ended without a model deployed."""
        message = status.outcome.message
        where = f"deployment {status.name}{': ' + message if message else ''}"
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in {placement.location} for "
                f"{placement.machine_type or self.op.machine_type} x {self.op.replica_count} ({where})"
            )
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Vertex AI refused the {where}")
        if status.outcome.failure is FailureKind.WORKLOAD_FAILED:
            return WorkloadFailedError(f"the model did not deploy ({where})")
        if status.outcome.failure is FailureKind.PREEMPTED:
            return CapacityPreemptedError(
                f"the model was undeployed (its max runtime, or another client) before the task could hand "
                f"it over ({where})"
            )
        return RequestCancelledError(f"{where} was cancelled before the model was deployed")


def release_deployments(op: UndeployVertexAIFlexStartModelOperator, context: Context) -> dict[str, Any]:
    """Cancel the setup's waiting deployments, undeploy every model on its endpoint (waited for),
    delete the endpoint, and record the release."""
    from airflow_provider_dws.backends.vertex_endpoint import VertexDeploymentBackend
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release
    from airflow_provider_dws.runtime.task import task_identity

    backend = VertexDeploymentBackend(
        resolve_project(op), str(op.region), op.gcp_conn_id, op.impersonation_chain
    )
    endpoint = backend.endpoint_name(task_identity(context, task_id=op.setup_task_id))
    released: list[tuple[str, str]] = []
    for status in backend.find(task_identity(context, task_id=op.setup_task_id)):
        if status.phase.live:
            op.log.info("Giving back %s (%s)", status.name, status.state)
            backend.release(status.name, wait=True)
            released.append((status.name, status.state))
    raw = backend.get_endpoint(endpoint)
    # The models without traffic first: the last one left may keep its share as it goes.
    models = (
        sorted(raw.deployed_models, key=lambda m: raw.traffic_split.get(m.id, 0)) if raw is not None else []
    )
    for model in models:
        op.log.info("Undeploying %s (%s) from %s", model.id, model.model, endpoint)
        backend.undeploy(endpoint, model.id)
    try:
        deleted = raw is not None and backend.delete_endpoint(endpoint)
    except ConflictError as err:  # a deployment whose cancel has not ended it yet
        raise DwsError(
            f"endpoint {endpoint} was not deleted: {err.message}; a deployment still pending may come up "
            "later: undeploy it and delete the endpoint (run this task again)"
        ) from None
    op.log.info("Endpoint %s %s", endpoint, "deleted" if deleted else "was already gone")
    api = ReleasedApi(
        backend.kind,
        "Vertex AI endpoint deployment",
        lambda name: parse_operation_name(name)[1],
        ("DEPLOYED",),
    )
    record_release(op, context, api, Released(released))
    return {"released": [name for name, _ in released], "endpoint": endpoint, "endpoint_deleted": deleted}
