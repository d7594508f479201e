"""A Vertex AI custom job on a delivered calendar block's reservation (the block consumer's adapter).

Its own module: a Flex Start task, which never runs on a block, does not import the reserved steps
and the calendar backend they need (the task process of each mapped task pays every import).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.facts import RESERVATION_AFFINITY_KEY
from airflow_provider_dws.runtime.reserved import ReservedSteps, check_machine
from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter
from airflow_provider_dws.specs.vertex_pools import duration

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement


class VertexReservedAdapter(ReservedSteps, VertexFlexStartAdapter):
    """A ``CustomJob`` on the block's reservation (``machine_spec.reservation_affinity``, no Flex
    Start); the API has no max wait for it, so the trigger cancels at ``max_wait`` with no grace."""

    label = "reserved"
    wait_grace = timedelta(0)
    #: The block is found, and the job checked against it, in the worker first.
    submits_in_trigger = False

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The Flex Start job's spec, on the block's reservation instead (its own scheduling)."""
        job = super().request_spec(identity, placement, max_wait)
        block = self.block
        assert block is not None, "the block is found before a job is built"
        spec = job["job_spec"]
        old = spec["scheduling"]
        spec["scheduling"] = {
            k: v for k, v in old.items() if k in ("restart_job_on_worker_restart", "disable_retries")
        }
        if self.op.max_run is not None:
            spec["scheduling"]["timeout"] = duration(self.op.max_run)
        for pool in spec.get("worker_pool_specs") or []:
            machine = pool.get("machine_spec") or {}
            if machine.get("accelerator_count"):
                check_machine(self.op, block, machine.get("machine_type", ""))
                machine["reservation_affinity"] = {
                    "reservation_affinity_type": "SPECIFIC_RESERVATION",
                    "key": RESERVATION_AFFINITY_KEY,
                    "values": [block.reservation],
                }
        return job
