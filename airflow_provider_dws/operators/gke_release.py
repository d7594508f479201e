"""Give GKE nodes back: delete every ProvisioningRequest of a setup task (and, on the same base,
:mod:`.gke_flex_release`, every flex-start Job handed over)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws import facts
from airflow_provider_dws.links import GKEProvisioningRequestLink
from airflow_provider_dws.operators.checks import Check, matches, non_empty_str
from airflow_provider_dws.operators.release import DwsSetupReleaseOperator
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow.sdk import Context

#: What the release takes from its setup task when not given.
FROM_SETUP = ("project_id", "location", "cluster_name", "namespace", "kubernetes_conn_id", "use_internal_ip")


class GKESetupReleaseOperator(DwsSetupReleaseOperator):
    """A teardown that gives back what a GKE setup task got, in the setup's cluster and namespace
    (taken from the setup task when not given); a subclass names the setup's role
    (:attr:`SETUP_ROLE`, :attr:`SETUP_KIND`) and its :meth:`release`.

    :param setup_task_id: the creating task, in the same DAG.
    :param location: :param cluster_name: :param namespace: :param kubernetes_conn_id:
        :param use_internal_ip: where its objects are (templated); default: the setup task's.
    :param project_id: the cluster's project (templated); default: the setup's, else the connection's.
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.
    """

    #: The setup's role (:mod:`airflow_provider_dws.specs.roles`) and its operator, for messages.
    SETUP_ROLE: ClassVar[str | None]
    SETUP_KIND: ClassVar[str]
    FROM_SETUP = FROM_SETUP

    template_fields: Sequence[str] = (
        "project_id",
        "location",
        "cluster_name",
        "namespace",
        "impersonation_chain",
    )
    ui_color = "#c6dafc"
    CHECKS: tuple[Check, ...] = (  # type: ignore[assignment]
        *DwsSetupReleaseOperator.CHECKS,
        Check(
            "location",
            lambda v: isinstance(v, str) and bool(v.strip()),
            "must be the cluster's region or zone",
            templated=True,
            optional=True,
        ),
        Check(
            "cluster_name",
            matches(facts.GKE_CLUSTER_NAME_PATTERN),
            "must be a GKE cluster name",
            templated=True,
            optional=True,
        ),
        Check(
            "namespace",
            matches(facts.KUBE_NAMESPACE_PATTERN),
            "must be a Kubernetes namespace",
            templated=True,
            optional=True,
        ),
        Check("kubernetes_conn_id", non_empty_str, "must be a connection id", optional=True),
        Check("use_internal_ip", lambda v: isinstance(v, bool), "must be True or False", optional=True),
    )

    def __init__(
        self,
        *,
        setup_task_id: str,
        location: str | None = None,
        cluster_name: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self.location = location
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        super().__init__(setup_task_id=setup_task_id, **kwargs)

    def execute(self, context: Context) -> Any:
        """Fill what was not given from the setup task (rendered), then delete its requests."""
        self.take_from_setup(context)
        if not self.location:
            raise self._param_error(
                f"location is not set and task {self.setup_task_id!r} is not a "
                f"{self.SETUP_KIND} of this DAG to take it from"
            )
        self.namespace = self.namespace or "default"
        self.use_internal_ip = bool(self.use_internal_ip)
        return super().execute(context)


class DeleteGKEProvisioningRequestOperator(GKESetupReleaseOperator):
    """Release GKE queued-provisioning nodes: delete every ProvisioningRequest (and its PodTemplate)
    its setup made, any try and attempt (one list by the setup task instance's ``dws_key`` label),
    and log what each held (its state, and the pods that consumed it). Deleting a Provisioned
    request lets the cluster autoscaler remove its nodes once their pods are gone; a queued one
    leaves the queue. Already gone is success. Meant as the setup's teardown::

        ask = CreateGKEProvisioningRequestOperator(task_id="ask_for_nodes", ...)
        release = DeleteGKEProvisioningRequestOperator(task_id="release_nodes", setup_task_id="ask_for_nodes")
        ask >> work >> release.as_teardown(setups=ask)

    The parameters are :class:`GKESetupReleaseOperator`'s.
    """

    SETUP_ROLE = roles.GKE_PROVISIONING_REQUEST
    SETUP_KIND = "CreateGKEProvisioningRequestOperator"
    operator_extra_links = (GKEProvisioningRequestLink(),)

    def release(self, context: Context) -> dict[str, Any]:
        """Delete every request of the setup (:func:`~airflow_provider_dws.runtime.gke.release_all`)."""
        from airflow_provider_dws.runtime.gke import release_all

        return release_all(self, context)
