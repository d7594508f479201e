"""Run a Kubernetes Job on GKE queued provisioning through Kueue, without holding a worker slot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.facts import DEFAULT_MAX_RUN, MAX_RUN_LIMIT
from airflow_provider_dws.links import GKEQueuedJobLink
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS, DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import Check, duration, matches
from airflow_provider_dws.operators.job_params import (
    JOB_CHECKS,
    JOB_TEMPLATE_FIELDS,
    JOB_TEMPLATE_RENDERERS,
    gpus_fit,
    job_or_image_error,
)

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["CreateGKEQueuedJobOperator"]


class CreateGKEQueuedJobOperator(DwsQueuedRequestOperator):
    """Run a Kubernetes Job on a GKE cluster's queued provisioning (DWS) through Kueue.

    The Job is created suspended with the ``kueue.x-k8s.io/queue-name`` label of ``queue_name`` (a
    LocalQueue whose ClusterQueue has a ProvisioningRequest admission check): Kueue queues it until
    DWS can create all its nodes at once, then unsuspends it. ``max_run`` goes to the
    ProvisioningRequest as ``provreq.kueue.x-k8s.io/maxRunDurationSeconds`` (GKE removes the nodes
    then). Kueue has no max wait: the provider deletes a Job still waiting at ``max_wait``, and the
    task fails with capacity not obtained. The task defers until the Job ends.

    The Job's name comes from the task instance (``dws-<task>-<hash>-t<try>-a<attempt>``): a retry
    finds and adopts its own live Job. On kill or at max wait the Job is deleted (background
    propagation: its pods, its Workload and its ProvisioningRequests go with it).

    On success the task returns ``{"name", "namespace", "status", "succeeded", "failed",
    "wait_seconds", "run_seconds"}``. On failure it raises
    :class:`~airflow_provider_dws.exceptions.WorkloadFailedError` (the Job failed),
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` (rejected by the admission
    check, or max wait passed), :class:`~airflow_provider_dws.exceptions.CapacityPreemptedError`
    (capacity revoked while it ran) or :class:`~airflow_provider_dws.exceptions.RequestCancelledError`.

    :param location: the cluster's region or zone. :param cluster_name: the GKE cluster.
    :param namespace: the Job's namespace (default ``default``).
    :param queue_name: the Kueue LocalQueue in that namespace.
    :param job: a whole ``batch/v1`` Job manifest (dict); its name, namespace, ``suspend`` and the
        queue label are the operator's. Or, instead of ``job``:
    :param image: the container image; :param cmds: its command; :param arguments: its arguments;
    :param env_vars: its environment; :param gpus: GPUs per pod; :param accelerator: the GPU
        (``nvidia-h100-80gb``, the node pool's ``cloud.google.com/gke-accelerator``);
    :param parallelism: pods run at once (and completions; default 1). Such a Job does not retry a
        failed pod (``backoffLimit: 0``): a failure is the task's, for Airflow's retries.
    :param max_run: the ProvisioningRequest's run limit (default and at most 7 days).

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``; one cluster, so no ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = (*JOB_TEMPLATE_FIELDS, "queue_name")
    template_fields_renderers = JOB_TEMPLATE_RENDERERS
    ADAPTER = registry.KUEUE_JOB_ADAPTER
    operator_extra_links = (GKEQueuedJobLink(),)
    ui_color = "#d2e3fc"
    CHECKS: tuple[Check, ...] = (
        *CONNECTION_CHECKS,
        *(check for check in WAIT_CHECKS if check.name != "service_account"),
        *JOB_CHECKS,
        Check(
            "queue_name",
            matches(facts.KUBE_NAMESPACE_PATTERN),
            "must be a Kueue LocalQueue name (lowercase letters, digits and '-', at most 63 characters)",
            templated=True,
        ),
    )

    def __init__(
        self,
        *,
        location: str,
        queue_name: str,
        cluster_name: str | None = None,
        namespace: str = "default",
        job: Mapping[str, Any] | None = None,
        image: str | None = None,
        cmds: Sequence[str] | None = None,
        arguments: Sequence[str] | None = None,
        env_vars: Mapping[str, str] | None = None,
        gpus: int | None = None,
        accelerator: str | None = None,
        parallelism: int = 1,
        max_run: timedelta | int | float = DEFAULT_MAX_RUN,
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool = False,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)
        super().__init__(**kwargs)
        self.location = location
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.queue_name = queue_name
        self.job = job
        self.image = image
        self.cmds = cmds
        self.arguments = arguments
        self.env_vars = env_vars
        self.gpus = gpus
        self.accelerator = accelerator
        self.parallelism = parallelism
        self.max_run = duration(self, "max_run", max_run, MAX_RUN_LIMIT)
        self.service_account = None
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        if failover is not None:
            raise self._param_error(
                "failover is not supported: a Kueue Job waits in its cluster's queue (use capacity_retry)"
            )
        problem = job_or_image_error(self, ("gpus", "accelerator"))
        if problem:
            raise self._param_error(problem)
        if not gpus_fit(accelerator, gpus):
            from airflow_provider_dws.specs.kueue_job import gpu_error

            raise self._param_error(gpu_error(accelerator, gpus) or f"gpus={gpus!r} cannot be given")
        self.check_parameters(rendered=False)
        self.check_policies()

    def home_placement(self) -> Placement:
        """The cluster's location (the one place its queue is)."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.location)
