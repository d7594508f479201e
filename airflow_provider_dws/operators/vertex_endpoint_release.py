"""Give back the GPUs of a model deployed on flex-start: undeploy it and delete its endpoint (the
teardown of :class:`~airflow_provider_dws.operators.vertex_endpoint.DeployVertexAIFlexStartModelOperator`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.links import VertexAIEndpointLink
from airflow_provider_dws.operators.base import vertex_region_check
from airflow_provider_dws.operators.checks import Check
from airflow_provider_dws.operators.release import DwsSetupReleaseOperator
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["UndeployVertexAIFlexStartModelOperator"]


class UndeployVertexAIFlexStartModelOperator(DwsSetupReleaseOperator):
    """Give back the GPUs of a model its setup deployed: cancel a deployment still waiting,
    undeploy every model on the setup task instance's endpoint (waited for), then delete the
    endpoint. Already gone is success; the release is written to the request's record. Meant as
    the teardown of :class:`DeployVertexAIFlexStartModelOperator`.

    :param setup_task_id: the deploying task, in the same DAG.
    :param region: the endpoint's region (templated); default: the setup task's.
    :param project_id: the endpoint's project (templated); default: the setup's, else the connection's.
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.
    """

    template_fields: Sequence[str] = ("project_id", "region", "impersonation_chain")
    SETUP_ROLE = roles.VERTEX_DEPLOYMENT
    FROM_SETUP = ("region", "project_id")
    operator_extra_links = (VertexAIEndpointLink(),)
    ui_color = "#d2e3fc"
    CHECKS: tuple[Check, ...] = (  # type: ignore[assignment]
        *DwsSetupReleaseOperator.CHECKS,
        vertex_region_check(optional=True),
    )

    def __init__(self, *, setup_task_id: str, region: str | None = None, **kwargs: Any) -> None:
        self.region = region
        super().__init__(setup_task_id=setup_task_id, **kwargs)

    def execute(self, context: Context) -> Any:
        """Take the region (and project) from the setup task when not given, then release."""
        self.take_from_setup(context)
        if not self.region:
            raise self._param_error(
                f"region is not set and task {self.setup_task_id!r} is not a "
                "DeployVertexAIFlexStartModelOperator of this DAG to take it from"
            )
        return super().execute(context)

    def release(self, context: Context) -> dict[str, Any]:
        """Undeploy and delete (:func:`~airflow_provider_dws.runtime.vertex_endpoint.release_deployments`)."""
        from airflow_provider_dws.runtime.vertex_endpoint import release_deployments

        return release_deployments(self, context)
