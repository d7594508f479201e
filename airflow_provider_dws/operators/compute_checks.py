"""Why a flex-start VM spec or a failover placement is refused (loaded only when a quick test of
:mod:`.compute` cannot accept a value, or for a DAG that gives ``failover``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement


def check_gpus(op: Any) -> None:
    """``machine_type`` and the GPUs must go together (a3-highgpu-8g: 8 x nvidia-h100-80gb)."""
    error = catalog.batch_gpu_error(op.machine_type, op.accelerator_type, op.accelerator_count)
    if error:
        raise op._param_error(error.replace("to Cloud Batch", "as flex-start VMs"))


def check_compute_placement(op: Any, placement: Placement) -> None:
    """The home's kind of location (zone or region), no tier; another machine type (with GPUs that go
    with it) only where the operator creates the MIG."""
    zonal = op.zone is not None
    pattern, kind = (
        (catalog.ZONE_RE, "zone such as 'us-east4-b'")
        if zonal
        else (catalog.REGION_RE, "region such as 'us-east4'")
    )
    if not pattern.fullmatch(placement.location):
        raise op._param_error(
            f"failover location {placement.location!r} is not a Compute Engine {kind} (the home is a "
            f"{'zone' if zonal else 'region'}, so every placement is)"
        )
    if placement.tier is not None:
        raise op._param_error(f"failover placement {placement}: flex-start VMs have no tier")
    if op.instance_group_manager is not None and (placement.machine_type or placement.accelerator_type):
        raise op._param_error(
            f"failover placement {placement}: with an existing instance_group_manager the VMs are its "
            "template's; another machine type needs the operator to create the MIG (pass machine_type "
            "instead of instance_group_manager)"
        )
    if placement.accelerator_type and not placement.machine_type:
        raise op._param_error(
            f"failover placement {placement}: an accelerator_type needs its machine_type too (e.g. "
            "'g2-standard-8' for 'nvidia-l4')"
        )
    if placement.machine_type:
        accelerator = placement.accelerator_type
        if accelerator is None and catalog.batch_machine_gpus(placement.machine_type) is None:
            accelerator = op.accelerator_type  # an n1 machine keeps the operator's GPU
        error = catalog.batch_gpu_error(placement.machine_type, accelerator, None)
        if error:
            raise op._param_error(
                f"failover placement {placement}: {error.replace('to Cloud Batch', 'as flex-start VMs')}"
            )
