"""Parse-time checks of failover placements, loaded only for a DAG file that gives ``failover``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement


def check_gpu_placement(op: Any, placement: Placement, where: str, what: str) -> None:
    """A region (``where`` describes one) and, if given, a GPU machine type with its own GPUs."""
    if not catalog.REGION_RE.fullmatch(placement.location):
        raise op._param_error(f"failover location {placement.location!r} is not a {where}")
    if placement.tier is not None:
        raise op._param_error(f"failover placement {placement}: {what} have no tier")
    if placement.machine_type and not placement.accelerator_type:
        raise op._param_error(
            f"failover placement {placement}: a machine_type needs its accelerator_type too "
            "(the machine and the GPU must match)"
        )
    if placement.accelerator_type and placement.accelerator_type not in catalog.FLEX_START_GPUS:
        raise op._param_error(
            f"failover placement {placement}: accelerator_type must be one of {sorted(catalog.FLEX_START_GPUS)}"
        )
    if placement.accelerator_type and not placement.machine_type:
        raise op._param_error(
            f"failover placement {placement}: an accelerator_type needs its machine_type too (GPU "
            f"machine types come with a fixed GPU), one of {catalog.machines_for(placement.accelerator_type)}"
        )
    if placement.machine_type:
        machine = catalog.GPU_MACHINES.get(placement.machine_type)
        error = catalog.gpu_machine_error(
            placement.machine_type, placement.accelerator_type, machine.accelerator_count if machine else 0
        )
        if error:
            raise op._param_error(f"failover placement {placement}: {error}")
