"""Get Compute Engine flex-start GPU VMs: a managed instance group grows through a DWS resize request
(the release is in :mod:`.compute_release`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts, registry
from airflow_provider_dws.facts import COMPUTE_MAX_RUN, COMPUTE_MIN_RUN
from airflow_provider_dws.links import ComputeFlexStartMIGLink
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS, DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import Check, duration, int_in, matches, non_empty_str
from airflow_provider_dws.operators.reserved import BLOCK_CHECKS, BlockConsumer

__all__ = ["CreateComputeFlexStartVMsOperator", "CreateComputeReservedVMsOperator"]

from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter
    from airflow_provider_dws.scheduling.policies import Placement

#: The parameters that describe the VMs when the operator creates the template and MIG.
SPEC_PARAMETERS = (
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


def _str_map(value: Any) -> bool:
    return type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items())


class CreateComputeFlexStartVMsOperator(DwsQueuedRequestOperator):
    """Get ``resize_by`` flex-start GPU VMs at once, for ``max_run``, without holding a worker slot.

    A managed instance group (MIG) grows through a Compute Engine resize request: DWS creates all
    the VMs together when it can and deletes them when ``requested_run_duration`` (``max_run``)
    ends. Give an existing MIG (``instance_group_manager``, whose template uses the FLEX_START
    provisioning model) or describe the VMs (``machine_type`` and its GPUs, ``image``, disk,
    network): the operator then creates a flex-start-ready instance template and MIG (FLEX_START,
    TERMINATE on host maintenance, no automatic restart, target size 0), named from the task
    instance and adopted by a retry.

    The resize request is named from the task instance (``dws-<task>-<hash>-t<try>-a<attempt>``) and
    its ``request_id`` is derived from the same, so a retried task or a re-run worker adopts its own
    request instead of making a second one. The API waits until cancelled, so the provider keeps
    ``max_wait``: a request still waiting then is cancelled and deleted, and the task fails with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`.

    The task ends when the request SUCCEEDED (the VMs exist and are billed) and returns their names,
    zones, internal IPs, machine type and GPUs. Give them back with
    :class:`~airflow_provider_dws.operators.compute_release.DeleteComputeFlexStartVMsOperator` as an
    Airflow teardown (``ask >> work >> release.as_teardown(setups=ask)``).

    :param zone: the MIG's zone, e.g. ``us-central1-a`` (templated); or :param region: a regional
        MIG's region. Exactly one.
    :param instance_group_manager: an existing MIG's name (templated); or the VM spec below.
    :param resize_by: VMs to add, all at once (1 to 1,000).
    :param max_run: how long the VMs run (``requested_run_duration``, 10 minutes to 7 days); they
        are deleted when it ends.
    :param machine_type: e.g. ``a3-highgpu-8g`` (a GPU machine type comes with its GPUs) or
        ``n1-standard-8`` with ``accelerator_type="nvidia-tesla-t4"``.
    :param accelerator_type: Compute Engine GPU name; :param accelerator_count: GPUs per VM.
    :param image: boot image (default ``projects/debian-cloud/global/images/family/debian-12``).
    :param boot_disk_size_gb: boot disk size; :param boot_disk_type: e.g. ``pd-ssd``, ``hyperdisk-balanced``.
    :param network: VPC network (default ``global/networks/default``); :param subnetwork: its subnetwork.
    :param metadata: instance metadata (e.g. ``startup-script``) (templated).
    :param failover: other zones (with an existing MIG: zones with a MIG of the same name) and,
        where the operator creates the MIG, other machine types to try in order.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    ROLE = roles.COMPUTE_FLEX_START_VMS
    template_fields: Sequence[str] = (
        "project_id",
        "zone",
        "region",
        "instance_group_manager",
        "image",
        "network",
        "subnetwork",
        "metadata",
        "labels",
        "service_account",
        "impersonation_chain",
    )
    template_fields_renderers = {"metadata": "json", "labels": "json"}
    ADAPTER = registry.COMPUTE_FLEX_START_ADAPTER
    #: ``failover=Advised(...)`` orders the placements by Compute Engine's capacity advice.
    ADVISED = True
    operator_extra_links = (ComputeFlexStartMIGLink(),)
    ui_color = "#d2e3fc"
    CHECKS: tuple[Check, ...] = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        Check(
            "zone",
            matches(facts.ZONE_PATTERN),
            "must be a Compute Engine zone such as 'us-central1-a'",
            templated=True,
            optional=True,
        ),
        Check(
            "region",
            matches(facts.REGION_PATTERN),
            "must be a Compute Engine region such as 'us-central1'",
            templated=True,
            optional=True,
        ),
        Check(
            "instance_group_manager",
            matches(facts.COMPUTE_NAME_PATTERN),
            "must be a managed instance group name (a lowercase letter, then lowercase letters, digits "
            "and '-', at most 63 characters)",
            templated=True,
            optional=True,
        ),
        Check(
            "resize_by",
            int_in(1, facts.COMPUTE_MAX_RESIZE_BY),
            f"must be an integer from 1 to {facts.COMPUTE_MAX_RESIZE_BY} (the VMs to add at once)",
        ),
        Check(
            "machine_type",
            matches(facts.MACHINE_TYPE_PATTERN),
            "must be a Compute Engine machine type such as 'a3-highgpu-8g'",
            optional=True,
        ),
        Check(
            "accelerator_type",
            lambda v: v in facts.BATCH_FLEX_START_GPUS,
            "must be a GPU flex-start VMs offer, one of " + str(sorted(facts.BATCH_FLEX_START_GPUS)),
            optional=True,
        ),
        Check("accelerator_count", int_in(1, 16), "must be an integer from 1 to 16", optional=True),
        Check("image", non_empty_str, "must be an image URL or family", templated=True, optional=True),
        Check(
            "boot_disk_size_gb", int_in(10, 65536), "must be an integer of GB from 10 to 65536", optional=True
        ),
        Check(
            "boot_disk_type",
            matches(r"[a-z][a-z0-9-]*"),
            "must be a disk type such as 'pd-ssd'",
            optional=True,
        ),
        Check("network", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("subnetwork", non_empty_str, "must be a non-empty string", templated=True, optional=True),
        Check("metadata", _str_map, "must be a dict of strings", templated=True, optional=True),
    )

    def __init__(
        self,
        *,
        resize_by: int,
        max_run: timedelta | int | float,
        zone: str | None = None,
        region: str | None = None,
        instance_group_manager: str | None = None,
        machine_type: str | None = None,
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
        super().__init__(**kwargs)
        self.zone = zone
        self.region = region
        self.instance_group_manager = instance_group_manager
        self.resize_by = resize_by
        self.machine_type = machine_type
        self.accelerator_type = accelerator_type
        self.accelerator_count = accelerator_count
        self.image = image
        self.boot_disk_size_gb = boot_disk_size_gb
        self.boot_disk_type = boot_disk_type
        self.network = network
        self.subnetwork = subnetwork
        self.metadata = metadata
        self.max_run = duration(self, "max_run", max_run, COMPUTE_MAX_RUN)
        if self.max_run < COMPUTE_MIN_RUN:
            raise self._param_error(
                f"max_run must be at least {COMPUTE_MIN_RUN} (a resize request's requested_run_duration "
                f"is 10 minutes to 7 days), got {self.max_run}"
            )
        self.service_account = service_account
        self._check_shape()
        self.check_parameters(rendered=False)
        if self.instance_group_manager is None and not facts.batch_gpu_matches(
            machine_type, accelerator_type, accelerator_count
        ):
            from airflow_provider_dws.operators.compute_checks import check_gpus

            check_gpus(self)
        self.check_policies()

    def _check_shape(self) -> None:
        """A zone or a region; an existing MIG or a machine type, not both."""
        if (self.zone is None) == (self.region is None):
            raise self._param_error("pass exactly one of zone (a zonal MIG) and region (a regional MIG)")
        self._check_vms()

    def _check_vms(self) -> None:
        """An existing MIG or a machine type, not both."""
        if self.instance_group_manager is not None:
            given = [name for name in SPEC_PARAMETERS if getattr(self, name) is not None]
            if given:
                raise self._param_error(
                    "pass either instance_group_manager (an existing MIG, whose template describes the "
                    f"VMs) or the VM spec to create one from, not both: got instance_group_manager and {given}"
                )
        elif self.machine_type is None:
            raise self._param_error(
                "pass instance_group_manager (an existing flex-start MIG) or machine_type (e.g. "
                "'a3-highgpu-8g') for the operator to create the template and MIG"
            )

    def check_placement(self, placement: Placement) -> None:
        """Failover placements: zones (or regions, like the home); other machine types only where the
        operator creates the MIG."""
        from airflow_provider_dws.operators.compute_checks import check_compute_placement

        check_compute_placement(self, placement)

    def home_placement(self) -> Placement:
        """The operator's own zone or region."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=str(self.zone or self.region))

    def adapter(self) -> ComputeFlexStartAdapter:
        """This task run's Compute Engine adapter."""
        return super().adapter()  # type: ignore[return-value]


class CreateComputeReservedVMsOperator(BlockConsumer, CreateComputeFlexStartVMsOperator):
    """Get ``resize_by`` VMs at once on a calendar block's reservation instead of Flex Start.

    The operator's MIG (in the reservation's zone; ``zone`` may be left out) grows through a resize
    request on a RESERVATION_BOUND instance template whose ``reservation_affinity`` is
    SPECIFIC_RESERVATION to the block's reservation, with no ``requested_run_duration``: the VMs live
    until they are released or the block ends (the service then deletes them). Or give an existing
    zonal MIG (``instance_group_manager``) whose template is already bound to the reservation. A task
    started before the block is delivered waits for it, deferred, then submits. The task ends when
    the VMs exist, as for :class:`CreateComputeFlexStartVMsOperator` (whose release,
    ``DeleteComputeFlexStartVMsOperator``, gives them back early). See
    :mod:`airflow_provider_dws.operators.reserved`.

    :param block_task_id: the Reserve or WaitFor task of the block, in this DAG; or
    :param reservation: the block's future reservation or reservation, by full name (templated).
    :param zone: the MIG's zone; default (and only choice): the reservation's. No regional MIG.
    :param machine_type: the block's machine type (e.g. ``a3-highgpu-8g``); the other parameters are
        :class:`CreateComputeFlexStartVMsOperator`'s but ``max_run`` and ``failover``.
    """

    template_fields: Sequence[str] = (*CreateComputeFlexStartVMsOperator.template_fields, "reservation")
    ADAPTER = registry.COMPUTE_RESERVED_ADAPTER
    CHECKS: tuple[Check, ...] = (*CreateComputeFlexStartVMsOperator.CHECKS, *BLOCK_CHECKS)
    LOCATION_FIELD = "zone"

    def __init__(
        self,
        *,
        block_task_id: str | None = None,
        reservation: str | None = None,
        **kwargs: Any,
    ) -> None:
        failover = kwargs.pop("failover", None)
        if "max_run" in kwargs:
            raise TypeError(
                f"{type(self).__name__} takes no max_run: VMs on a reservation live until released or until "
                "the block ends"
            )
        super().__init__(max_run=COMPUTE_MAX_RUN, **kwargs)
        self.max_run = None  # type: ignore[assignment]  # no run duration: the block's end is the VMs'
        self.init_block(block_task_id, reservation, False, failover=failover)

    def _check_shape(self) -> None:
        """A zone (or none: the reservation's), never a region; an existing MIG or a machine type."""
        if self.region is not None:
            raise self._param_error(
                "a reservation is zonal: give zone (or leave it out to use the reservation's), not region"
            )
        self._check_vms()
