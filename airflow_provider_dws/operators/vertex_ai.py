"""Run a Vertex AI custom job on GPUs obtained through Dynamic Workload Scheduler Flex Start."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.facts import (
    DEFAULT_MAX_RUN,
    MAX_RUN_LIMIT,
)
from airflow_provider_dws.links import VertexAIFlexStartJobLink
from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    WAIT_CHECKS,
    DwsQueuedRequestOperator,
    display_name_check,
    vertex_region_check,
)
from airflow_provider_dws.operators.checks import Check, duration, matches
from airflow_provider_dws.operators.reserved import BlockConsumer, block_checks

__all__ = [
    "FLEX_START_ACCELERATORS",
    "WORKER_POOL_FIELDS",
    "CreateVertexAIFlexStartJobOperator",
    "CreateVertexAIReservedJobOperator",
]

#: GPU types Dynamic Workload Scheduler Flex Start accepts for Vertex AI training.
FLEX_START_ACCELERATORS = facts.FLEX_START_GPUS
#: The fields of a Vertex AI ``WorkerPoolSpec``.
WORKER_POOL_FIELDS = facts.WORKER_POOL_FIELDS

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob, WorkerPoolSpec

    from airflow_provider_dws.scheduling.policies import Placement

#: Patterns, compiled by ``re``'s cache on first use (only for the parameters a DAG gives).
_NETWORK = r"projects/[^/\s]+/global/networks/[^/\s]+"
_GCS_URI = r"gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?"


def _pools_ok(pools: Any) -> bool:
    """Quick: dict pools on one known GPU machine with its own GPUs, replicas in range, an image.

    Anything else (messages, templates in the machine spec, an unknown machine type, an error)
    goes to :mod:`airflow_provider_dws.specs.vertex_pools`, which says what is wrong or accepts what this cannot judge.
    """
    if type(pools) is not list or not pools:
        return False
    machine = None
    for index, pool in enumerate(pools):
        if type(pool) is not dict or not pool.keys() <= WORKER_POOL_FIELDS:
            return False
        if not pool and index:
            continue  # an empty pool: "no replicas of this kind"
        spec = pool.get("machine_spec")
        if type(spec) is not dict:
            return False
        spec = {k: v for k, v in spec.items() if k != "reservation_affinity"}
        if machine is not None and spec != machine:
            return False
        machine = spec
        replicas = pool.get("replica_count", 0 if index else 1)
        container = pool.get("container_spec")
        if type(replicas) is not int or not (0 if index else 1) <= replicas <= 1000:
            return False
        if not (type(container) is dict and container.get("image_uri")) and not (
            container is None and pool.get("python_package_spec")
        ):
            return False
    return machine is not None and facts.gpu_machine_matches(
        machine.get("machine_type"), machine.get("accelerator_type"), machine.get("accelerator_count")
    )


class CreateVertexAIFlexStartJobOperator(DwsQueuedRequestOperator):
    """Run a Vertex AI custom job when DWS Flex Start obtains its GPUs, without holding a worker slot.

    The job is submitted with ``scheduling.strategy = FLEX_START``: it waits in the Dynamic
    Workload Scheduler queue (at most ``max_wait``) until its whole set of machines is free, then
    runs (at most ``max_run``), and is billed only while it runs. The task defers while the job
    waits and runs. A retried or re-run task reattaches to its live job (found by identity labels)
    instead of submitting a second one, and a job that already succeeded is taken as the result.

    On success the task returns the ``CustomJob`` as a dict and pushes ``wait_seconds``,
    ``run_seconds`` and ``dws_request`` (name, state, timings) to XCom. On failure it raises
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` (no capacity within max wait),
    :class:`~airflow_provider_dws.exceptions.WorkloadFailedError` (the job ran and failed),
    :class:`~airflow_provider_dws.exceptions.BadRequestError` (refused; not retried) or
    :class:`~airflow_provider_dws.exceptions.RequestCancelledError`.

    :param region: Vertex AI region, e.g. ``us-central1``.
    :param display_name: job display name; defaults to ``<dag_id>.<task_id>``.
    :param worker_pool_specs: list of ``WorkerPoolSpec`` dicts or messages (all pools must share
        one machine spec, a Flex Start rule). Exactly one of this and ``custom_job``.
    :param custom_job: a whole ``CustomJob`` (dict or message); its ``scheduling`` must not set
        strategy, max wait or timeout (use ``max_wait``/``max_run``).
    :param max_run: how long the job may run once started (default and maximum 7 days).
    :param service_account: service account the job runs as.
    :param network: VPC network ``projects/<number>/global/networks/<name>``.
    :param base_output_directory: ``gs://`` prefix for the job's outputs.
    :param failover: other regions (or placements with another machine/accelerator type) to try,
        in order, after the home region comes back without capacity.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "region",
        "display_name",
        "worker_pool_specs",
        "custom_job",
        "labels",
        "service_account",
        "network",
        "base_output_directory",
        "impersonation_chain",
    )
    template_fields_renderers = {"worker_pool_specs": "json", "custom_job": "json", "labels": "json"}
    ADAPTER = registry.VERTEX_FLEX_START_ADAPTER
    operator_extra_links = (VertexAIFlexStartJobLink(),)
    ui_color = "#c5e1f5"
    CHECKS: tuple[Check, ...] = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        vertex_region_check(),
        display_name_check(),
        Check(
            "network",
            matches(_NETWORK),
            "must look like 'projects/<project number>/global/networks/<name>'",
            templated=True,
            optional=True,
        ),
        Check(
            "base_output_directory",
            matches(_GCS_URI),
            "must be a Cloud Storage URI 'gs://bucket/path'",
            templated=True,
            optional=True,
        ),
        Check(
            "worker_pool_specs",
            templated=True,
            optional=True,
            ok=_pools_ok,
            explain=registry.CHECK_WORKER_POOL_SPECS,
        ),
        Check(
            "custom_job",
            templated=True,
            optional=True,
            explain=registry.CHECK_CUSTOM_JOB,
        ),
    )
    _rendered = False

    def __init__(
        self,
        *,
        region: str,
        display_name: str | None = None,
        worker_pool_specs: Sequence[Mapping[str, Any] | WorkerPoolSpec] | None = None,
        custom_job: Mapping[str, Any] | CustomJob | None = None,
        max_run: timedelta | int | float = DEFAULT_MAX_RUN,
        service_account: str | None = None,
        network: str | None = None,
        base_output_directory: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region = region
        self.display_name = display_name
        self.worker_pool_specs = worker_pool_specs
        self.custom_job = custom_job
        self.max_run = duration(self, "max_run", max_run, MAX_RUN_LIMIT)
        self.service_account = service_account
        self.network = network
        self.base_output_directory = base_output_directory
        if (self.worker_pool_specs is None) == (self.custom_job is None):
            raise self._param_error("pass exactly one of worker_pool_specs and custom_job")
        self.check_parameters(rendered=False)
        self.check_policies()

    # -- validation ----------------------------------------------------------------------------

    def check_parameters(self, *, rendered: bool) -> None:
        """Run :attr:`CHECKS`; after rendering, the worker pools are also built as messages where this
        worker submits the job itself (:meth:`builds_messages_here`)."""
        self._rendered = self.builds_messages_here(rendered)
        super().check_parameters(rendered=rendered)

    def check_placement(self, placement: Placement) -> None:
        """Failover placements must be Vertex AI regions with Flex Start GPUs and no tier."""
        from airflow_provider_dws.operators.placements import check_gpu_placement

        check_gpu_placement(self, placement, "Vertex AI region such as 'us-east4'", "Flex Start custom jobs")

    def home_placement(self) -> Placement:
        """The operator's own region."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.region)

    def prepare_for_execution_checks(self) -> None:
        """Rendered worker pools get their integer fields back (Jinja renders numbers as text)."""

        from airflow_provider_dws.specs.vertex_pools import normalize_pool

        if self.worker_pool_specs is not None:
            self.worker_pool_specs = [normalize_pool(p) for p in self.worker_pool_specs]


class CreateVertexAIReservedJobOperator(BlockConsumer, CreateVertexAIFlexStartJobOperator):
    """Run a Vertex AI custom job on a calendar block's reservation instead of Flex Start.

    Every accelerated worker pool's ``machine_spec.reservation_affinity`` names the block's
    reservation (SPECIFIC_RESERVATION, key ``compute.googleapis.com/reservation-name``, its full
    name); no Flex Start scheduling. The job runs in the reservation's region (``region`` may be left
    out) on the block's machine type. A task started before the block is delivered waits for it,
    deferred, then submits; a job that would run past the block's end (``max_run`` from now) is
    refused unless ``allow_past_block_end=True``; a job stopped by the block's end fails with
    :class:`~airflow_provider_dws.exceptions.CapacityRevokedError`. Identity, reattach, retries and
    the result are the Flex Start operator's. See :mod:`airflow_provider_dws.operators.reserved`.

    :param block_task_id: the Reserve or WaitFor task of the block, in this DAG; or
    :param reservation: the block's future reservation or reservation, by full name (templated).
    :param allow_past_block_end: submit even when ``max_run`` would outlast the block (default False).
    :param region: the job's region; default (and only choice): the reservation's.
    :param max_run: the job's ``scheduling.timeout``; default none of the provider's (the API's own),
        and then no end check.
    :param max_wait: how long the job may wait for room on the delivered reservation (default 24 h);
        the other parameters are :class:`CreateVertexAIFlexStartJobOperator`'s (no ``failover``).
    """

    template_fields: Sequence[str] = (*CreateVertexAIFlexStartJobOperator.template_fields, "reservation")
    ADAPTER = registry.VERTEX_RESERVED_ADAPTER
    CHECKS: tuple[Check, ...] = block_checks(CreateVertexAIFlexStartJobOperator.CHECKS, "Vertex AI")

    def __init__(
        self,
        *,
        block_task_id: str | None = None,
        reservation: str | None = None,
        allow_past_block_end: bool = False,
        region: str | None = None,
        max_run: timedelta | int | float | None = None,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)
        super().__init__(region=region, **kwargs)  # type: ignore[arg-type]  # None: the block's
        self.max_run = None if max_run is None else duration(self, "max_run", max_run, MAX_RUN_LIMIT)  # type: ignore[assignment]
        self.init_block(block_task_id, reservation, allow_past_block_end, failover=failover)
