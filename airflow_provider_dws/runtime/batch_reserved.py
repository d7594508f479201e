"""A Cloud Batch job on a delivered calendar block's reservation (the block consumer's adapter).

Its own module, as ``runtime/vertex_ai_reserved.py``: a Flex Start task does not import the
reserved steps and the calendar backend they need.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.runtime.batch import BatchFlexStartAdapter
from airflow_provider_dws.runtime.reserved import ReservedSteps, check_machine

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement


class BatchReservedAdapter(ReservedSteps, BatchFlexStartAdapter):
    """A Cloud Batch job on the block's reservation: RESERVATION_BOUND VMs that consume only it, in
    its zone; the wait ends when the job ends."""

    label = "reserved"

    #: The block is found, and the job checked against it, in the worker first.
    submits_in_trigger = False

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The Flex Start job's spec, bound to the block's reservation instead."""
        job = super().request_spec(identity, placement, max_wait)
        block = self.block
        assert block is not None, "the block is found before a job is built"
        allocation = job.setdefault("allocation_policy", {})
        for instance in allocation.get("instances") or []:
            policy = instance.setdefault("policy", {})
            check_machine(self.op, block, policy.get("machine_type") or "")
            policy["provisioning_model"] = "RESERVATION_BOUND"
            policy["reservation"] = block.reservation
        allocation["location"] = {"allowed_locations": [f"zones/{block.zone}"]}
        return job
