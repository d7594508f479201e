"""Run a Kubernetes Job on GKE flex-start nodes (no queued provisioning), without holding a worker slot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.links import GKEFlexStartJobLink
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS, DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import Check, duration, flag
from airflow_provider_dws.operators.job_params import (
    JOB_CHECKS,
    JOB_TEMPLATE_FIELDS,
    JOB_TEMPLATE_RENDERERS,
    gpus_fit,
    job_or_image_error,
)
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.adapter import RequestAdapter
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["CreateGKEFlexStartJobOperator"]


def _tpu_error(tpu: Any, topology: Any) -> str | None:
    """What is wrong with asking for a flex-start TPU slice ``tpu`` of ``topology`` (``None``: fine)."""
    if tpu is None and topology is None:
        return None
    topologies = facts.GKE_FLEX_START_TPU_TOPOLOGIES.get(tpu) if isinstance(tpu, str) else None
    if topologies is None:
        offered = sorted(facts.GKE_FLEX_START_TPU_TOPOLOGIES)
        return f"tpu must be a TPU flex-start node pools offer, one of {offered}, got {tpu!r}"
    if topology not in topologies:
        return (
            f"tpu_topology must be a single-host slice of {tpu} (one node: GKE flex-start adds nodes one "
            f"at a time), one of {sorted(topologies)}, got {topology!r}"
        )
    return None


class CreateGKEFlexStartJobOperator(DwsQueuedRequestOperator):
    """Run a Kubernetes Job on a GKE cluster's flex-start node pools (DWS without queued
    provisioning), all pods or none.

    A flex-start node pool (``--flex-start``, autoscaling from zero, no queued provisioning) gets a
    node for a pending pod that selects it when Dynamic Workload Scheduler finds the capacity, one
    node at a time, each for at most the pool's max run duration (7 days at most). This operator
    creates the Job with its pods asking for those nodes (the node selector
    ``cloud.google.com/gke-flex-start: "true"``, the GPU's or the TPU slice's, its resource limit and
    taint toleration) and waits in the triggerer until every pod the Job runs at once has had a
    node, then until the Job ends. If they do not all get a node within ``max_wait`` (GKE has no
    max wait of its own), the Job is deleted with its pods: the nodes that came up for part of it
    scale down, none comes up later, and the task fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` saying how many pods had one.

    The Job's name comes from the task instance (``dws-<task>-<hash>-t<try>-a<attempt>``) and it and
    its pods carry the identity labels: a retry finds and adopts its own Job. On kill, at max wait
    or when a user marks the task failed while it waits, the Job is deleted (background
    propagation).

    On success the task returns ``{"name", "namespace", "status", "succeeded", "failed", "nodes",
    "wait_seconds", "run_seconds"}`` (``wait_seconds``: until the last pod had its node). On failure
    it raises :class:`~airflow_provider_dws.exceptions.WorkloadFailedError` (the Job failed),
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` (max wait passed),
    :class:`~airflow_provider_dws.exceptions.CapacityPreemptedError` (a node went away: its max run
    duration passed) or :class:`~airflow_provider_dws.exceptions.RequestCancelledError`.

    :param location: the cluster's region or zone. :param cluster_name: the GKE cluster.
    :param namespace: the Job's namespace (default ``default``).
    :param job: a whole ``batch/v1`` Job manifest (dict) whose pod template names its accelerator in
        its node selector; its name, namespace and the flex-start selector are the operator's. Or,
        instead of ``job``:
    :param image: the container image; :param cmds: its command; :param arguments: its arguments;
    :param env_vars: its environment; :param parallelism: pods run at once (and completions;
        default 1), with no retry of a failed pod (``backoffLimit: 0``).
    :param accelerator: the GPU (``nvidia-l4``, the node pool's ``cloud.google.com/gke-accelerator``)
        with :param gpus: GPUs per pod; or :param tpu: the TPU (``tpu-v6e-slice`` or
        ``tpu-v5-lite-podslice``) with :param tpu_topology: a single-host slice (``1x1``, ``2x2``,
        ``2x4``): each pod asks for that slice's chips.
    :param wait_until_finished: ``True`` (default): the task ends with the Job. ``False``: hand the
        running Job over to later tasks: the task returns once every pod has had a node, with the
        Job's name, namespace and nodes (``status`` ``Running``), and the Job runs on (a server
        that later tasks call, an evaluation campaign); delete it with
        :class:`~airflow_provider_dws.operators.gke_flex_release.DeleteGKEFlexStartJobOperator` as
        the task's teardown, so its nodes scale down when the work is done.
    :param max_run: how long the Job may run once it waited (at most 7 days; ``None``: only the node
        pool's max run duration bounds it): its ``activeDeadlineSeconds`` is ``max_wait + max_run``,
        since Kubernetes counts that deadline from the Job's creation, the wait for nodes included.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``; one cluster, so no ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = JOB_TEMPLATE_FIELDS
    template_fields_renderers = JOB_TEMPLATE_RENDERERS
    ROLE = roles.GKE_FLEX_START_JOB
    ADAPTER = registry.FLEX_START_JOB_ADAPTER
    operator_extra_links = (GKEFlexStartJobLink(),)
    ui_color = "#d2e3fc"
    CHECKS: tuple[Check, ...] = (
        *CONNECTION_CHECKS,
        *(check for check in WAIT_CHECKS if check.name != "service_account"),
        *JOB_CHECKS,
        flag("wait_until_finished"),
    )

    def __init__(
        self,
        *,
        location: str,
        cluster_name: str | None = None,
        namespace: str = "default",
        job: Mapping[str, Any] | None = None,
        image: str | None = None,
        cmds: Sequence[str] | None = None,
        arguments: Sequence[str] | None = None,
        env_vars: Mapping[str, str] | None = None,
        accelerator: str | None = None,
        gpus: int | None = None,
        tpu: str | None = None,
        tpu_topology: str | None = None,
        parallelism: int = 1,
        max_run: timedelta | int | float | None = None,
        wait_until_finished: bool = True,
        kubernetes_conn_id: str | None = None,
        use_internal_ip: bool = False,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)
        super().__init__(**kwargs)
        self.location = location
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.job = job
        self.image = image
        self.cmds = cmds
        self.arguments = arguments
        self.env_vars = env_vars
        self.accelerator = accelerator
        self.gpus = gpus
        self.tpu = tpu
        self.tpu_topology = tpu_topology
        self.parallelism = parallelism
        self.max_run = (
            None if max_run is None else duration(self, "max_run", max_run, facts.GKE_FLEX_START_MAX_RUN)
        )
        self.wait_until_finished = wait_until_finished
        self.service_account = None
        self.kubernetes_conn_id = kubernetes_conn_id
        self.use_internal_ip = use_internal_ip
        if failover is not None:
            raise self._param_error(
                "failover is not supported: a flex-start Job waits for one cluster's node pools (use capacity_retry)"
            )
        self._check_shape()
        self.check_parameters(rendered=False)
        self.check_policies()

    def _check_shape(self) -> None:
        problem = job_or_image_error(self, ("gpus", "accelerator", "tpu", "tpu_topology"))
        if problem:
            raise self._param_error(problem)
        if self.job is None and (self.accelerator is None) == (self.tpu is None):
            raise self._param_error(
                "pass accelerator and gpus (a GPU node pool) or tpu and tpu_topology (a TPU one): flex-start "
                "node pools are for accelerators"
            )
        problem = _tpu_error(self.tpu, self.tpu_topology)
        if problem:
            raise self._param_error(problem)
        if not gpus_fit(self.accelerator, self.gpus):
            from airflow_provider_dws.specs.kueue_job import gpu_error

            raise self._param_error(
                gpu_error(self.accelerator, self.gpus) or f"gpus={self.gpus!r} cannot be given"
            )

    def tpu_chips(self) -> int:
        """TPU chips each pod asks for: its slice's (0 without a TPU)."""
        if self.tpu is None or self.tpu_topology is None:
            return 0
        return facts.GKE_FLEX_START_TPU_TOPOLOGIES[self.tpu][self.tpu_topology]

    def adapter_entry(self) -> str | type[RequestAdapter[Any, Any]]:
        """The adapter that waits for the Job's end, or (``wait_until_finished=False``) for every
        pod on a node."""
        return self.ADAPTER if self.wait_until_finished else registry.FLEX_START_JOB_HANDOVER_ADAPTER

    def home_placement(self) -> Placement:
        """The cluster's location (the one place its node pools are)."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.location)


def __getattr__(name: str) -> Any:
    # The release (its own module) loads only for a DAG file that uses it.
    if name == "DeleteGKEFlexStartJobOperator":
        from airflow_provider_dws.operators.gke_flex_release import DeleteGKEFlexStartJobOperator

        return DeleteGKEFlexStartJobOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
