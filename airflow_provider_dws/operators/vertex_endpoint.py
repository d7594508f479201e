"""Serve a Vertex AI model on flex-start GPUs for a bounded campaign: deploy it on an endpoint of the
task's own (Preview, ``aiplatform.v1beta1``); its teardown is in :mod:`.vertex_endpoint_release`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import registry
from airflow_provider_dws.links import VertexAIEndpointLink
from airflow_provider_dws.operators.base import DwsQueuedRequestOperator, display_name_check
from airflow_provider_dws.operators.checks import Check, duration, matches
from airflow_provider_dws.operators.inference_checks import (
    INFERENCE_CHECKS,
    REGISTRY_MODEL_PATTERN,
    InferenceOperatorChecks,
    check_replicas,
)
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.vertex_inference import MAX_RUNTIME_LIMIT

if TYPE_CHECKING:
    pass

__all__ = ["DeployVertexAIFlexStartModelOperator"]


class DeployVertexAIFlexStartModelOperator(InferenceOperatorChecks, DwsQueuedRequestOperator):
    """Deploy a model to a Vertex AI endpoint on flex-start GPUs and hand it to later tasks.

    The task creates an endpoint of its own (``dws-<hash of the task instance>``, labelled with
    its identity) unless it exists, then deploys ``model`` on ``replica_count`` machines of
    ``machine_type`` with ``dedicated_resources.flex_start.max_runtime_duration = max_run``. It
    waits in the triggerer until the model is deployed, then returns ``{"endpoint",
    "endpoint_id", "deployed_model_id", "model", "region"}`` (``endpoint`` and
    ``deployed_model_id`` are also XComs of their own) for the tasks in between. Vertex AI
    undeploys the model ``max_run`` after the deploy request (the wait counts), so a campaign
    never holds the GPUs longer; the teardown
    :class:`~airflow_provider_dws.operators.vertex_endpoint_release.UndeployVertexAIFlexStartModelOperator`
    gives them back as soon as the campaign ends and deletes the endpoint::

        serve = DeployVertexAIFlexStartModelOperator(task_id="serve", ...)
        done = UndeployVertexAIFlexStartModelOperator(task_id="undeploy", setup_task_id="serve")
        serve >> evaluate >> done.as_teardown(setups=serve)

    The API has no max wait for a deployment: at ``max_wait`` the provider cancels the deploy
    operation (and undeploys the model if it came up meanwhile) and the task fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`; an attempt that ends
    without a deployment deletes the endpoint it made. A retried task finds its deployment again
    (the endpoint and the deployed model's id come from its identity) instead of deploying twice.

    :param region: the Vertex AI region (the model's).
    :param model: ``projects/P/locations/R/models/M[@version]`` (templated).
    :param machine_type: an accelerator-optimized machine type; its GPUs come with it (templated).
    :param replica_count: machines deployed at once (``min_replica_count``; default 1).
    :param max_replica_count: machines it may scale to (default: ``replica_count``).
    :param max_run: ``maxRuntimeDuration``: how long after the deploy request the model is
        undeployed (at most 7 days; longer than ``max_wait``). Required: it bounds what a
        deployment can cost when nothing else gives it back (no teardown ran, a cancel came late).
    :param display_name: the deployed model's display name (default ``<dag_id>.<task_id>``).
    :param endpoint_display_name: the endpoint's display name (default: ``display_name``).
    :param service_account: the service account the model's container runs as.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover`` to another machine type of the same
    region) are :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "region",
        "model",
        "machine_type",
        "display_name",
        "endpoint_display_name",
        "labels",
        "service_account",
        "impersonation_chain",
    )
    template_fields_renderers = {"labels": "json"}
    ADAPTER = registry.VERTEX_DEPLOYMENT_ADAPTER
    ROLE = roles.VERTEX_DEPLOYMENT
    operator_extra_links = (VertexAIEndpointLink(),)
    ui_color = "#c5e1f5"
    REQUEST_NOUN = "deployment"
    CHECKS: tuple[Check, ...] = (
        *INFERENCE_CHECKS,
        Check(
            "model",
            matches(REGISTRY_MODEL_PATTERN),
            "must be a model of the project's registry, 'projects/<project>/locations/<region>/models/<id>' "
            "(DeployModel takes no publisher's model)",
            templated=True,
        ),
        display_name_check("endpoint_display_name"),
    )

    def __init__(
        self,
        *,
        region: str,
        model: str,
        machine_type: str,
        max_run: timedelta | int | float,
        replica_count: int = 1,
        max_replica_count: int | None = None,
        display_name: str | None = None,
        endpoint_display_name: str | None = None,
        service_account: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region = region
        self.model = model
        self.machine_type = machine_type
        self.replica_count = replica_count
        self.max_replica_count = max_replica_count
        self.max_run = duration(self, "max_run", max_run, MAX_RUNTIME_LIMIT)
        self.display_name = display_name
        self.endpoint_display_name = endpoint_display_name
        self.service_account = service_account
        if self.max_run <= self.max_wait:
            raise self._param_error(
                f"max_run ({self.max_run}) must be longer than max_wait ({self.max_wait}): Vertex AI counts "
                "the max runtime from the deploy request, so a deployment that waited its whole max wait "
                "would have no time left to serve"
            )
        check_replicas(self)
        self.check_parameters(rendered=False)
        self.check_policies()
