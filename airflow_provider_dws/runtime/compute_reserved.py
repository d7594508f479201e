"""Compute Engine VMs on a calendar block's reservation, in the attempt loop: the flex-start VMs'
steps, with a reservation-bound template and no run duration (the VMs live as long as the block)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends import compute_groups as groups
from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter
from airflow_provider_dws.runtime.reserved import ReservedSteps, check_machine

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement


class ComputeReservedAdapter(ReservedSteps, ComputeFlexStartAdapter):
    """A resize request of a MIG whose template is RESERVATION_BOUND with a specific affinity to the
    block's reservation; no ``requested_run_duration``. A given MIG's template must be such already."""

    label = "reservation-bound"
    #: The block is found first, from the worker (its reservation names the template's affinity).
    submits_in_trigger = False

    def template_for(self, name: str, placement: Placement) -> Any:
        """The reservation-bound template of the block's reservation (by name in its own project)."""
        block = self.block
        assert block is not None, "the block is found before a MIG is made"
        spec = self.spec_for(placement)
        check_machine(self.op, block, spec.machine_type)
        project = self.op.project_id
        reservation = (
            block.name if block.project == project else f"projects/{block.project}/reservations/{block.name}"
        )
        return groups.reservation_bound_template(name, spec, reservation)
