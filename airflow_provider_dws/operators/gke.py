"""Get GKE nodes through Dynamic Workload Scheduler: a ProvisioningRequest for a pod set (queued
provisioning); the release is in :mod:`.gke_release`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf

from airflow_provider_dws.facts import (
    DEFAULT_MAX_WAIT,
    GKE_QUEUED_PROVISIONING_CLASS,
    GPU_TOLERATION,
    MAX_WAIT_LIMIT,
    PROVISIONING_REQUEST_MAX_RUN,
    QUEUED_TOLERATION,
)
from airflow_provider_dws.links import GKEProvisioningRequestLink
from airflow_provider_dws.operators.base import DwsRequestOperator
from airflow_provider_dws.operators.checks import duration
from airflow_provider_dws.operators.gke_checks import CHECKS

__all__ = ["QUEUED_GPU_TOLERATIONS", "CreateGKEProvisioningRequestOperator"]

#: The tolerations GPU pods on a queued node pool need (the ``tolerations`` of the operator's
#: result), for a workload operator whose ``tolerations`` is not templated (cncf-kubernetes' pod
#: and Job operators): pass ``tolerations=list(QUEUED_GPU_TOLERATIONS)``.
QUEUED_GPU_TOLERATIONS: tuple[dict[str, str], ...] = (dict(QUEUED_TOLERATION), dict(GPU_TOLERATION))

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.gke import GKEProvisioningRequestAdapter
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet


class CreateGKEProvisioningRequestOperator(DwsRequestOperator):
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
    :param project_id: the cluster's project; defaults to the connection's project (templated).
    :param namespace: where the PodTemplate and the request live (templated).
    :param pod_template: the pods (templated): a pod template spec
        (``{"metadata": {...}, "spec": {"containers": [...], "nodeSelector": {...}}}``) or a pod spec
        (``{"containers": [...]}``). GPU pods name their node pool's GPU in
        ``nodeSelector["cloud.google.com/gke-accelerator"]`` (e.g. ``nvidia-h100-80gb``) and ask for
        ``nvidia.com/gpu`` in their limits; the operator adds the queued node pool's toleration.
    :param count: pods to provision at once.
    :param max_run: how long the nodes may run (``maxRunDurationSeconds``, at most 7 days); ``None``:
        GKE's default (7 days).
    :param max_wait: how long the request may wait in the queue (default 24 h, at most 7 days).
    :param provisioning_class: the request's class (default ``queued-provisioning.gke.io``).
    :param parameters: more ``spec.parameters`` (strings) (templated).
    :param labels: more labels on the PodTemplate and the request (the ``dws_*`` keys are the
        provider's) (templated).
    :param kubernetes_conn_id: a cncf-kubernetes connection (in-cluster, kubeconfig) to use instead
        of the GKE cluster lookup.
    :param use_internal_ip: talk to the cluster's private endpoint.
    :param gcp_conn_id: Airflow connection for Google Cloud; :param impersonation_chain: service
        account (or chain) to impersonate.
    :param poll_interval: seconds between status reads (default 30).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param cancel_on_kill: delete the request when a user kills the waiting task (default True).
    :param window: only let capacity arrive inside this off-peak window; :param deadline: nothing is
        submitted, and no wait extends, past it; :param capacity_retry: resubmit after capacity was not
        obtained or revoked (each attempt its own request, ``-a<N>``). One cluster: no ``failover``.
    """

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
    ADAPTER = "airflow_provider_dws.runtime.gke:GKEProvisioningRequestAdapter"
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
        project_id: str | None = None,
        namespace: str = "default",
        max_run: timedelta | int | float | None = None,
        max_wait: timedelta | int | float = DEFAULT_MAX_WAIT,
        provisioning_class: str = GKE_QUEUED_PROVISIONING_CLASS,
        parameters: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool = False,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        window: OffPeakWindow | WindowSet | str | None = None,
        deadline: Deadline | timedelta | datetime | None = None,
        capacity_retry: CapacityRetry | int | None = None,
        failover: Failover | Sequence[str | Placement] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.location = location
        self.pod_template = pod_template
        self.count = count
        self.cluster_name = cluster_name
        self.project_id = project_id
        self.namespace = namespace
        self.provisioning_class = provisioning_class
        self.parameters = parameters
        self.labels = labels
        self.service_account = None  # the pods' service account is the pod template's
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.max_wait = duration(self, "max_wait", max_wait, MAX_WAIT_LIMIT)
        self.max_run = (
            None if max_run is None else duration(self, "max_run", max_run, PROVISIONING_REQUEST_MAX_RUN)
        )
        self.check_parameters(rendered=False)
        if failover is not None:
            raise self._param_error(
                "failover is not supported: a ProvisioningRequest is for one cluster's node pools (use "
                "capacity_retry to ask again)"
            )
        self.init_policies(window, deadline, capacity_retry, None)

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
