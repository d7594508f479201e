"""The operator families of the per-family rows: their DAG, emulator pool, and how capacity comes.

Each family asks in a pool of its own, empty (or, for GKE, held) from the start, so its N requests
wait; :meth:`Family.give` then gives capacity for all N at once, the way the fault matrix does
(``tests/faults/scenarios.py``, ``tests/faults/gke_scenarios.py``). Calendar blocks are delivered
at their start, not when capacity comes: every block of the run starts at one moment (the run's
``conf["start"]``), approved 1 s after it was asked for and delivered 1 s after its start.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.kube_view import free_capacity, hold_capacity

from .deployment import BenchDeployment

H100 = "NVIDIA_H100_80GB"
#: How long a provisioned ProvisioningRequest keeps its nodes: longer than any run here.
BOOKING_SECONDS = 3600
NODE_GPUS = 8


@dataclass(frozen=True)
class Family:
    """One operator family: its mapped DAG (``benchmarks/airflow_dags/family_<name>.py``) and pool."""

    name: str
    operator: str
    pool: str
    #: Capacity one task's request takes from the pool (GPUs, TPU chips).
    per_task: int
    #: For GKE: the queued node pool the requests select, drawing on ``pool``.
    node_pool: str | None = None
    #: Calendar mode: ``pool`` is a calendar's (units a day) and the wait ends at the blocks' start.
    at_moment: bool = False

    @property
    def dag_id(self) -> str:
        return f"dws_bench_family_{self.name}"

    def prepare(self, dep: BenchDeployment, n: int) -> None:
        """Make the family's requests wait: an empty pool, or (GKE) one node, held by a request of
        no DAG's (a pool with no GPUs at all fails a GKE request at once: it could never fit); for
        calendar blocks, a calendar with room for all ``n``."""
        assert dep.emulator is not None
        control = dep.emulator.control
        if self.at_moment:
            control.set_calendar(
                approval_seconds=1,
                min_lead_seconds=0,
                provision_seconds=1,
                pools={self.pool: self.per_task * n},
            )
            return
        if self.node_pool is None:
            control.set_capacity({self.pool: 0})
            return
        region = self.pool.split("/")[0]
        control.set_kube_booking_window(BOOKING_SECONDS)
        control.set_kube_node_pools([f"{self.node_pool}=nvidia-h100-80gb@{region}"])
        control.set_capacity({self.pool: NODE_GPUS})
        hold_capacity(dep.emulator.address, self.node_pool, NODE_GPUS, self.holder)

    @property
    def holder(self) -> str:
        return f"holder-{self.name}"

    def give(self, dep: BenchDeployment, n: int) -> None:
        """Capacity for all ``n`` requests at once (calendar blocks: nothing, their start gives it)."""
        assert dep.emulator is not None
        if self.at_moment:
            return
        dep.emulator.control.set_capacity({self.pool: self.per_task * n})
        if self.node_pool is not None:
            free_capacity(dep.emulator.address, self.holder)


FAMILIES = {
    f.name: f
    for f in (
        Family("vertex", "CreateVertexAIFlexStartJobOperator", f"us-east1/{H100}", 8),
        Family("batch", "CreateBatchFlexStartJobOperator", "us-east1/NVIDIA_L4", 1),
        Family("tpu", "CreateTPUQueuedResourceOperator", "us-west4-a/v5litepod", 16),
        Family("compute", "CreateComputeFlexStartVMsOperator", f"us-west1/{H100}", 8),
        Family("instances", "CreateComputeFlexStartInstancesOperator", f"us-west3/{H100}", 8),
        Family("gke", "CreateGKEProvisioningRequestOperator", f"us-west2/{H100}", 8, "bench-gke"),
        Family("kueue", "CreateGKEQueuedJobOperator", f"us-east5/{H100}", 8, "bench-kueue"),
        Family("calendar", "ReserveCalendarBlockOperator", f"us-central1-b/{H100}", 8, at_moment=True),
    )
}
#: Families not measured, and why (printed under the table); none today.
NOT_MEASURED: dict[str, str] = {}
