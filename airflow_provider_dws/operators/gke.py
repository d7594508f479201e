"""Get GKE nodes through Dynamic Workload Scheduler: a ProvisioningRequest for a pod set (queued
provisioning); the release is in :mod:`.gke_release`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import registry
from airflow_provider_dws.facts import (
    GKE_QUEUED_PROVISIONING_CLASS,
    GPU_TOLERATION,
    PROVISIONING_REQUEST_MAX_RUN,
    QUEUED_TOLERATION,
)
from airflow_provider_dws.links import GKEProvisioningRequestLink
from airflow_provider_dws.operators.base import DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import duration
from airflow_provider_dws.operators.gke_checks import CHECKS
from airflow_provider_dws.specs import roles

__all__ = ["QUEUED_GPU_TOLERATIONS", "CreateGKEProvisioningRequestOperator"]

#: The tolerations GPU pods on a queued node pool need (the ``tolerations`` of the operator's
#: result), for a workload operator whose ``tolerations`` is not templated (cncf-kubernetes' pod
#: and Job operators): pass ``tolerations=list(QUEUED_GPU_TOLERATIONS)``.
QUEUED_GPU_TOLERATIONS: tuple[dict[str, str], ...] = (dict(QUEUED_TOLERATION), dict(GPU_TOLERATION))

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.gke import GKEProvisioningRequestAdapter
    from airflow_provider_dws.scheduling.policies import Placement


class CreateGKEProvisioningRequestOperator(DwsQueuedRequestOperator):
    """Ask Dynamic Workload Scheduler for the GKE nodes of ``count`` pods at once; finish when they
    are provisioned, and hand the workload what its pods must carry to land on them.

    Creates a PodTemplate from ``pod_template`` and a ProvisioningRequest (class
    ``queued-provisioning.gke.io``) for ``count`` of its pods, both named from the task instance
    (``dws-<task>-<hash>-t<try>-a<attempt>``) and labelled with it, so a retry or a re-run worker
    adopts its own request (a create answered 409 reads it back) instead of making a second one. It
    defers while DWS queues the request and returns when the request is ``Provisioned``: the nodes
    are booked for this request's pods for a few minutes (the booking window), then given back if no
    pod came (``BookingExpired``). Start the workload right after, with the returned ``annotations``,
    ``tolerations`` and ``node_selector`` on its pods (cncf-kubernetes' ``KubernetesPodOperator`` or
    ``KubernetesJobOperator`` take them as they are; each is also its own XCom key, so
    ``task.output["annotations"]`` templates a field with it), and release the request with
    :class:`~airflow_provider_dws.operators.gke_release.DeleteGKEProvisioningRequestOperator` as an
    Airflow teardown.

    The API has no max wait: the provider keeps ``max_wait`` and deletes a request still queued
    then (:class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`). A request that ends
    ``Failed`` is resubmitted as a new attempt by ``capacity_retry``.

    :param location: the cluster's region or zone (templated).
    :param cluster_name: the GKE cluster (templated); its endpoint and CA come from the Container
        API and the Google connection. Not needed with ``kubernetes_conn_id`` or the emulator.
    :param namespace: where the PodTemplate and the request live (templated).
    :param pod_template: the pods (templated): a pod template spec
        (``{"metadata": {...}, "spec": {"containers": [...], "nodeSelector": {...}}}``) or a pod spec
        (``{"containers": [...]}``). GPU pods name their node pool's GPU in
        ``nodeSelector["cloud.google.com/gke-accelerator"]`` (e.g. ``nvidia-h100-80gb``) and ask for
        ``nvidia.com/gpu`` in their limits; the operator adds the queued node pool's toleration.
    :param count: pods to provision at once.
    :param max_run: how long the nodes may run (``maxRunDurationSeconds``, at most 7 days); ``None``:
        GKE's default (7 days).
    :param provisioning_class: the request's class (default ``queued-provisioning.gke.io``).
    :param parameters: more ``spec.parameters`` (strings) (templated).
    :param kubernetes_conn_id: a cncf-kubernetes connection (in-cluster, kubeconfig) to use instead
        of the GKE cluster lookup.
    :param use_internal_ip: talk to the cluster's private endpoint.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``; one cluster, so no ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    ROLE = roles.GKE_PROVISIONING_REQUEST
    template_fields: Sequence[str] = (
        "project_id",
        "location",
        "cluster_name",
        "namespace",
        "pod_template",
        "parameters",
        "labels",
        "impersonation_chain",
    )
    template_fields_renderers = {"pod_template": "json", "parameters": "json", "labels": "json"}
    ADAPTER = registry.GKE_PROVISIONING_REQUEST_ADAPTER
    operator_extra_links = (GKEProvisioningRequestLink(),)
    ui_color = "#c6dafc"
    CHECKS = CHECKS

    def __init__(
        self,
        *,
        location: str,
        pod_template: Mapping[str, Any],
        count: int = 1,
        cluster_name: str | None = None,
        namespace: str = "default",
        max_run: timedelta | int | float | None = None,
        provisioning_class: str = GKE_QUEUED_PROVISIONING_CLASS,
        parameters: Mapping[str, str] | None = None,
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool = False,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)  # refused below, with the reason
        super().__init__(**kwargs)
        self.location = location
        self.pod_template = pod_template
        self.count = count
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.provisioning_class = provisioning_class
        self.parameters = parameters
        self.service_account = None  # the pods' service account is the pod template's
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        self.max_run = (
            None if max_run is None else duration(self, "max_run", max_run, PROVISIONING_REQUEST_MAX_RUN)
        )
        self.check_parameters(rendered=False)
        if failover is not None:
            raise self._param_error(
                "failover is not supported: a ProvisioningRequest is for one cluster's node pools (use "
                "capacity_retry to ask again)"
            )
        self.check_policies()

    def home_placement(self) -> Placement:
        """The cluster's location."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=str(self.location))

    def adapter(self) -> GKEProvisioningRequestAdapter:
        """This task run's GKE adapter."""
        return super().adapter()  # type: ignore[return-value]


def __getattr__(name: str) -> Any:
    # The release (its own module) loads only for a DAG file that uses it.
    if name == "DeleteGKEProvisioningRequestOperator":
        from airflow_provider_dws.operators.gke_release import DeleteGKEProvisioningRequestOperator

        return DeleteGKEProvisioningRequestOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
