"""Run a Cloud Batch job on GPU VMs obtained through Dynamic Workload Scheduler Flex Start."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.facts import MAX_RUN_LIMIT
from airflow_provider_dws.links import BatchFlexStartJobLink, BatchJobLogsLink
from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    WAIT_CHECKS,
    DwsQueuedRequestOperator,
    _labels_ok,
)
from airflow_provider_dws.operators.checks import Check, duration, flag, int_in, matches, non_empty_str
from airflow_provider_dws.operators.reserved import BlockConsumer, block_checks

__all__ = ["CreateBatchFlexStartJobOperator", "CreateBatchReservedJobOperator"]

if TYPE_CHECKING:
    from google.cloud.batch_v1 import Job

    from airflow_provider_dws.scheduling.policies import Placement

#: An environment variable name (what a shell accepts).
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: The parameters that describe the job when no whole ``job`` is given.
SHAPE_PARAMETERS = (
    "image_uri",
    "commands",
    "entrypoint",
    "script",
    "task_count",
    "parallelism",
    "machine_type",
    "accelerator_type",
    "accelerator_count",
    "environment",
)


def _environment_ok(env: Any) -> bool:
    return type(env) is dict and all(
        type(k) is str and type(v) is str and re.fullmatch(_ENV_NAME, k) is not None for k, v in env.items()
    )


def _batch_labels_ok(labels: Any) -> bool:
    """The common labels rule, with room for one more label of the provider's (the max wait)."""
    return _labels_ok(labels) and len(labels) < facts.MAX_LABELS - facts.IDENTITY_LABELS


class CreateBatchFlexStartJobOperator(DwsQueuedRequestOperator):
    """Run a Cloud Batch job when DWS Flex Start obtains its GPU VMs, without holding a worker slot.

    Every instance policy of the job gets the ``FLEX_START`` provisioning model: the job waits
    (QUEUED, SCHEDULED) until Compute Engine can create its VMs, then its tasks run, and the VMs
    are billed only while they exist. Cloud Batch has no max-wait setting, so the provider keeps
    it: a job still waiting when ``max_wait`` has passed is cancelled and the task fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`.

    The job id is derived from the task instance (``dws-<task>-<hash>-t<try>-a<attempt>``) and each
    create carries a ``request_id`` derived from it too: a retried or re-run task finds its live
    job by its labels and reattaches, ALREADY_EXISTS is adoption, and a job that already
    succeeded is taken as the result.

    On success the task returns a summary of the job (state, task counts by state, timings,
    console and logs URLs) and pushes ``wait_seconds``, ``run_seconds`` and ``dws_request`` to
    XCom. Other ends raise :class:`~airflow_provider_dws.exceptions.WorkloadFailedError` (a task
    ran and failed), :class:`~airflow_provider_dws.exceptions.BadRequestError` (refused; not
    retried) or :class:`~airflow_provider_dws.exceptions.RequestCancelledError`.

    Describe the job either whole (``job``) or by its common shape: one task group of
    ``task_count`` tasks (``parallelism`` at once), each running a container (``image_uri`` with
    ``commands``/``entrypoint``) or a ``script``, on ``machine_type`` VMs with their GPUs.

    :param region: Cloud Batch region, e.g. ``us-central1`` (templated).
    :param job: a whole ``google.cloud.batch_v1.Job`` (dict or message; templated). Its instance
        policies must not set another provisioning model nor use instance templates.
    :param image_uri: container image each task runs (templated); :param commands: its arguments;
        :param entrypoint: its entrypoint override.
    :param script: a shell script each task runs instead of a container (templated).
    :param task_count: tasks in the job (default 1, at most 10,000); ``BATCH_TASK_INDEX`` tells
        each its shard.
    :param parallelism: tasks run at once (default: all of them).
    :param machine_type: VM machine type, e.g. ``g2-standard-8`` (GPU machine types come with their
        GPUs) or ``n1-standard-8`` with ``accelerator_type="nvidia-tesla-t4"``.
    :param accelerator_type: Compute Engine GPU name (``nvidia-l4``, ``nvidia-h100-80gb``, ...);
        for GPU machine types it may be left out, or must be the machine's own.
    :param accelerator_count: GPUs per VM (default: the machine's own, or 1).
    :param install_gpu_drivers: let Batch install the GPU drivers on the VMs (default True).
    :param max_run: how long each task may run (the task spec's ``max_run_duration``; default
        Batch's own; at most 7 days, the Flex Start limit).
    :param environment: environment variables of every task (templated).
    :param service_account: service account the VMs run as.
    :param network: VPC network (``projects/<p>/global/networks/<name>``); :param subnetwork:
        its subnetwork (``projects/<p>/regions/<r>/subnetworks/<name>``).
    :param failover: other regions (optionally with another machine type and GPU) to try, in
        order, after the home region comes back without capacity.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "region",
        "job",
        "image_uri",
        "commands",
        "entrypoint",
        "script",
        "environment",
        "labels",
        "service_account",
        "network",
        "subnetwork",
        "impersonation_chain",
    )
    template_fields_renderers = {"job": "json", "environment": "json", "labels": "json", "script": "bash"}
    ADAPTER = registry.BATCH_FLEX_START_ADAPTER
    #: ``failover=Advised(...)``: the regions ordered by Compute Engine's capacity advice.
    ADVISED = True
    operator_extra_links = (BatchFlexStartJobLink(), BatchJobLogsLink())
    ui_color = "#d7ecd9"
    CHECKS = (
        *CONNECTION_CHECKS,
        *(check for check in WAIT_CHECKS if check.name != "labels"),
        Check(
            "labels",
            _batch_labels_ok,
            templated=True,
            optional=True,
            explain=registry.CHECK_BATCH_LABELS,
        ),
        Check(
            "region",
            matches(facts.REGION_PATTERN),
            "must be a Cloud Batch region such as 'us-central1'",
            templated=True,
        ),
        Check("job", templated=True, optional=True, explain=registry.CHECK_BATCH_JOB),
        Check("image_uri", non_empty_str, "must be a container image URI", templated=True, optional=True),
        Check(
            "commands",
            lambda v: type(v) is list and all(type(c) is str for c in v),
            "must be a list of strings",
            templated=True,
            optional=True,
        ),
        Check("entrypoint", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("script", non_empty_str, "must be the text of a shell script", templated=True, optional=True),
        Check(
            "task_count",
            int_in(1, facts.BATCH_MAX_TASKS),
            f"must be an integer from 1 to {facts.BATCH_MAX_TASKS}",
            optional=True,
        ),
        Check(
            "parallelism",
            int_in(1, facts.BATCH_MAX_TASKS),
            f"must be an integer from 1 to {facts.BATCH_MAX_TASKS}",
            optional=True,
        ),
        Check(
            "machine_type",
            matches(facts.MACHINE_TYPE_PATTERN),
            "must be a Compute Engine machine type such as 'g2-standard-8' or 'a3-highgpu-8g'",
            optional=True,
        ),
        Check(
            "accelerator_type",
            lambda v: v in facts.BATCH_FLEX_START_GPUS,
            "must be a GPU Flex Start offers to Cloud Batch, one of "
            + str(sorted(facts.BATCH_FLEX_START_GPUS)),
            optional=True,
        ),
        Check("accelerator_count", int_in(1, 16), "must be an integer from 1 to 16", optional=True),
        flag("install_gpu_drivers"),
        Check(
            "environment",
            _environment_ok,
            "must be a dict of environment variable names to strings",
            templated=True,
            optional=True,
        ),
        Check("network", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("subnetwork", non_empty_str, "must be a non-empty string", templated=True, optional=True),
    )
    _rendered = False

    def __init__(
        self,
        *,
        region: str,
        job: Mapping[str, Any] | Job | None = None,
        image_uri: str | None = None,
        commands: Sequence[str] | None = None,
        entrypoint: str | None = None,
        script: str | None = None,
        task_count: int | None = None,
        parallelism: int | None = None,
        machine_type: str | None = None,
        accelerator_type: str | None = None,
        accelerator_count: int | None = None,
        install_gpu_drivers: bool = True,
        max_run: timedelta | int | float | None = None,
        environment: Mapping[str, str] | None = None,
        service_account: str | None = None,
        network: str | None = None,
        subnetwork: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region = region
        self.job = job
        self.image_uri = image_uri
        self.commands = list(commands) if isinstance(commands, tuple) else commands
        self.entrypoint = entrypoint
        self.script = script
        self.task_count = task_count
        self.parallelism = parallelism
        self.machine_type = machine_type
        self.accelerator_type = accelerator_type
        self.accelerator_count = accelerator_count
        self.install_gpu_drivers = install_gpu_drivers
        self.max_run = None if max_run is None else duration(self, "max_run", max_run, MAX_RUN_LIMIT)
        self.environment = environment
        self.service_account = service_account
        self.network = network
        self.subnetwork = subnetwork
        self._check_shape()
        self.check_parameters(rendered=False)
        if self.job is None and not facts.batch_gpu_matches(
            machine_type, accelerator_type, accelerator_count
        ):
            from airflow_provider_dws.specs.batch_job import check_gpus

            check_gpus(self)
        self.check_policies()

    # -- validation ----------------------------------------------------------------------------

    def check_parameters(self, *, rendered: bool) -> None:
        """Run :attr:`CHECKS`; after rendering, a whole ``job`` is also built as a message where this
        worker submits it itself (:meth:`builds_messages_here`)."""
        self._rendered = self.builds_messages_here(rendered)
        super().check_parameters(rendered=rendered)

    def _check_shape(self) -> None:
        """A whole job, or a container or a script; the parameters that go with each."""
        if self.job is not None:
            given = [name for name in SHAPE_PARAMETERS if getattr(self, name) is not None]
            if given:
                raise self._param_error(
                    f"pass either job or the job's parameters, not both: got job and {given}"
                )
            return
        if (self.image_uri is None) == (self.script is None):
            raise self._param_error(
                "pass exactly one of job, image_uri (a container for every task) and script (a shell "
                "script for every task)"
            )
        if self.script is not None and (self.commands is not None or self.entrypoint is not None):
            raise self._param_error("commands and entrypoint go with image_uri, not with script")
        if self.machine_type is None:
            raise self._param_error(
                "machine_type is required: Flex Start schedules GPU VMs, e.g. 'g2-standard-8' (1 x nvidia-l4)"
            )
        tasks = self.task_count if self.task_count is not None else 1
        if isinstance(self.parallelism, int) and isinstance(tasks, int) and self.parallelism > tasks:
            raise self._param_error(f"parallelism ({self.parallelism}) cannot exceed task_count ({tasks})")

    def check_placement(self, placement: Placement) -> None:
        """Failover placements must be regions, with a machine type and GPU that go together."""
        from airflow_provider_dws.specs.batch_job import check_batch_placement

        check_batch_placement(self, placement)

    def home_placement(self) -> Placement:
        """The operator's own region."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.region)


class CreateBatchReservedJobOperator(BlockConsumer, CreateBatchFlexStartJobOperator):
    """Run a Cloud Batch job on a calendar block's reservation instead of Flex Start.

    Every instance policy gets the ``RESERVATION_BOUND`` provisioning model and
    ``InstancePolicy.reservation`` (the block's reservation, by full name), and the job's VMs are
    placed in the reservation's zone (``allocation_policy.location``). The job runs in the
    reservation's region (``region`` may be left out) on the block's machine type. A task started
    before the block is delivered waits for it, deferred, then submits; a job whose tasks'
    ``max_run`` would outlast the block is refused unless ``allow_past_block_end=True``; a job
    stopped by the block's end fails with :class:`~airflow_provider_dws.exceptions.CapacityRevokedError`.
    Identity, reattach and the result are the Flex Start operator's; ``max_wait`` bounds the wait for
    room on the delivered reservation. See :mod:`airflow_provider_dws.operators.reserved`.

    :param block_task_id: the Reserve or WaitFor task of the block, in this DAG; or
    :param reservation: the block's future reservation or reservation, by full name (templated).
    :param allow_past_block_end: submit even when ``max_run`` would outlast the block (default False).
    :param region: the job's region; default (and only choice): the reservation's.
    :param machine_type: the block's machine type (e.g. ``a3-highgpu-8g``); the other parameters are
        :class:`CreateBatchFlexStartJobOperator`'s (no ``failover``).
    """

    template_fields: Sequence[str] = (*CreateBatchFlexStartJobOperator.template_fields, "reservation")
    ADAPTER = registry.BATCH_RESERVED_ADAPTER
    CHECKS: tuple[Check, ...] = block_checks(CreateBatchFlexStartJobOperator.CHECKS, "Cloud Batch")

    def __init__(
        self,
        *,
        block_task_id: str | None = None,
        reservation: str | None = None,
        allow_past_block_end: bool = False,
        region: str | None = None,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)
        super().__init__(region=region, **kwargs)  # type: ignore[arg-type]  # None: the block's
        self.init_block(block_task_id, reservation, allow_past_block_end, failover=failover)
