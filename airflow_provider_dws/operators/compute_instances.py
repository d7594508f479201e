"""Get Compute Engine flex-start GPU VMs without a MIG: a set of standalone VMs, all or nothing (the
release is in :mod:`.compute_instances_release`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.links import ComputeFlexStartInstancesLink
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS, DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import Check, duration, int_in, matches
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.compute_instances import ComputeInstancesAdapter
    from airflow_provider_dws.scheduling.policies import Placement

__all__ = ["CreateComputeFlexStartInstancesOperator"]

_VM_CHECK_NAMES = (
    "machine_type",
    "accelerator_type",
    "accelerator_count",
    "image",
    "boot_disk_size_gb",
    "boot_disk_type",
    "network",
    "subnetwork",
    "metadata",
)


class CreateComputeFlexStartInstancesOperator(DwsQueuedRequestOperator):
    """Get ``count`` flex-start GPU VMs at once, for ``max_run``, without a template or a MIG, and
    without holding a worker slot while they wait.

    Each VM is an ``instances.insert`` with the FLEX_START provisioning model: it waits ``PENDING``
    for capacity up to ``max_wait`` (``params.requestValidForDuration``: 90 seconds to 2 hours; a
    longer ``max_wait`` is kept by asking again, see below) and runs for ``max_run`` (``scheduling.maxRunDuration``), after which Compute Engine deletes it (or
    stops it: ``termination_action="STOP"``). The VMs are named from the task instance
    (``dws-<task>-<hash>-t<try>-a<attempt>-<i>``) and labelled with it, so a retried task or a
    re-run worker adopts its own VMs instead of making more.

    **All or nothing.** The task ends when all ``count`` VMs are RUNNING and returns their names,
    zones, internal IPs, machine type and GPUs. Compute Engine deletes a VM whose wait ended
    without capacity; if some VMs ran and others did not by the end of the wait, the task deletes
    the ones it got (no GPU is paid for a job that cannot start) and fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`, saying how many it had.
    ``capacity_retry`` and ``failover`` then make a new set.

    **A max wait beyond 2 hours.** One VM may wait at most 2 hours. With a longer ``max_wait`` the
    task asks for up to 2 hours at a time: when a set's wait ends without capacity (Compute Engine
    deletes its VMs), it makes a new set (the next attempt number, logged as asking again), until
    ``max_wait`` has passed. These sets are one wait, not retries: they spend none of
    ``capacity_retry``'s attempts. Each new set queues afresh (flex-start VMs keep no place in a
    queue across requests).

    Give the VMs back with
    :class:`~airflow_provider_dws.operators.compute_instances_release.DeleteComputeFlexStartInstancesOperator`
    as an Airflow teardown (``ask >> work >> release.as_teardown(setups=ask)``).

    :param zone: the VMs' zone, e.g. ``us-central1-a`` (templated).
    :param count: VMs to get at once (1 to 100).
    :param max_run: how long the VMs run (10 minutes to 7 days).
    :param max_wait: how long they may wait for capacity: at least 90 seconds (default 2 hours,
        the most one request may wait; longer is kept by asking again).
    :param termination_action: ``DELETE`` (default) or ``STOP`` the VMs at the end of ``max_run``.
    :param machine_type: e.g. ``a3-highgpu-8g`` (a GPU machine type comes with its GPUs) or
        ``n1-standard-8`` with ``accelerator_type="nvidia-tesla-t4"``; :param accelerator_count:
        GPUs per VM.
    :param image: boot image (default ``projects/debian-cloud/global/images/family/debian-12``);
        :param boot_disk_size_gb: its size; :param boot_disk_type: e.g. ``pd-ssd``.
    :param network: VPC network (default ``global/networks/default``); :param subnetwork: its
        subnetwork; :param metadata: instance metadata such as ``startup-script`` (templated);
        :param service_account: the VMs' service account.
    :param failover: other zones, or other machine types, to try in order after a set came back
        without capacity (with ``capacity_retry``).

    The parameters every queued request takes (``project_id``, ``labels``, ``gcp_conn_id``,
    ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``, ``window``,
    ``deadline``, ``capacity_retry``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    ROLE = roles.COMPUTE_INSTANCE_SET
    template_fields: Sequence[str] = (
        "project_id",
        "zone",
        "image",
        "network",
        "subnetwork",
        "metadata",
        "labels",
        "service_account",
        "impersonation_chain",
    )
    template_fields_renderers = {"metadata": "json", "labels": "json"}
    ADAPTER = registry.COMPUTE_INSTANCES_ADAPTER
    #: ``failover=Advised(...)`` orders the placements by Compute Engine's capacity advice.
    ADVISED = True
    operator_extra_links = (ComputeFlexStartInstancesLink(),)
    ui_color = "#d2e3fc"
    #: No MIG: the failover checks shared with the MIG operator read it (another machine type is
    #: always the operator's own to make).
    instance_group_manager = None
    CHECKS: tuple[Check, ...] = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        Check(
            "zone",
            matches(facts.ZONE_PATTERN),
            "must be a Compute Engine zone such as 'us-central1-a'",
            templated=True,
        ),
        Check(
            "count",
            int_in(1, facts.COMPUTE_MAX_SET_SIZE),
            f"must be an integer from 1 to {facts.COMPUTE_MAX_SET_SIZE} (the VMs to get at once)",
        ),
        Check(
            "termination_action",
            lambda v: v in facts.COMPUTE_TERMINATION_ACTIONS,
            f"must be one of {list(facts.COMPUTE_TERMINATION_ACTIONS)} (what Compute Engine does to the "
            "VMs at the end of max_run)",
        ),
        *(c for c in CreateComputeFlexStartVMsOperator.CHECKS if c.name in _VM_CHECK_NAMES),
    )

    def __init__(
        self,
        *,
        zone: str,
        count: int,
        max_run: timedelta | int | float,
        machine_type: str,
        max_wait: timedelta | int | float = facts.COMPUTE_VM_MAX_WAIT,
        termination_action: str = "DELETE",
        accelerator_type: str | None = None,
        accelerator_count: int | None = None,
        image: str | None = None,
        boot_disk_size_gb: int | None = None,
        boot_disk_type: str | None = None,
        network: str | None = None,
        subnetwork: str | None = None,
        metadata: Mapping[str, str] | None = None,
        service_account: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_wait=max_wait, **kwargs)
        self.zone = zone
        self.count = count
        self.machine_type = machine_type
        self.termination_action = termination_action
        self.accelerator_type = accelerator_type
        self.accelerator_count = accelerator_count
        self.image = image
        self.boot_disk_size_gb = boot_disk_size_gb
        self.boot_disk_type = boot_disk_type
        self.network = network
        self.subnetwork = subnetwork
        self.metadata = metadata
        self.service_account = service_account
        self.max_run = duration(self, "max_run", max_run, facts.COMPUTE_MAX_RUN)
        if self.max_run < facts.COMPUTE_MIN_RUN:
            raise self._param_error(
                f"max_run must be at least {facts.COMPUTE_MIN_RUN} (a flex-start VM's maxRunDuration is "
                f"10 minutes to 7 days), got {self.max_run}"
            )
        if self.max_wait < facts.COMPUTE_VM_MIN_WAIT:
            raise self._param_error(
                f"max_wait must be at least {facts.COMPUTE_VM_MIN_WAIT} (a flex-start VM's "
                f"requestValidForDuration is 90 seconds to 2 hours), got {self.max_wait}"
            )
        self.check_parameters(rendered=False)
        if not facts.batch_gpu_matches(machine_type, accelerator_type, accelerator_count):
            from airflow_provider_dws.operators.compute_checks import check_gpus

            check_gpus(self)
        self.check_policies()

    def check_placement(self, placement: Placement) -> None:
        """Failover placements: other zones, other machine types (never a region)."""
        from airflow_provider_dws.operators.compute_checks import check_compute_placement

        check_compute_placement(self, placement)

    def home_placement(self) -> Placement:
        """The operator's own zone."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=str(self.zone))

    def adapter(self) -> ComputeInstancesAdapter:
        """This task run's adapter."""
        return super().adapter()  # type: ignore[return-value]
