"""The emulator's state as served: the shared core hosting every API package.

`EmulatorState` is a :class:`~.core.state.CoreState` with the Vertex AI, Cloud TPU, Cloud Batch,
Compute Engine, calendar-mode and Kubernetes APIs registered (``state.vertex``, ``state.tpu``,
``state.batch``, ``state.compute``, ``state.calendar``, ``state.kube``), in that order (their tick hooks run in it). The
CustomJob methods are also reachable on the state itself (``state.create_custom_job(...)``,
``state.jobs``), as before the split into packages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .batch.state import BatchState
from .calendar.state import CalendarState
from .compute.state import ComputeState
from .core.api import Api
from .core.clock import iso
from .core.clock import timestamp as _timestamp
from .core.state import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, CoreState
from .defaults import DEFAULT_CALENDAR_CAPACITY
from .kube.state import KubeState
from .tpu.state import TpuState
from .vertex.state import TERMINAL_STATES, JobRecord, JobState, VertexState

#: The APIs every emulator hosts, in tick order.
APIS: tuple[type[Api], ...] = (VertexState, TpuState, BatchState, ComputeState, CalendarState, KubeState)

__all__ = [
    "APIS",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "TERMINAL_STATES",
    "EmulatorState",
    "JobRecord",
    "JobState",
    "_timestamp",
    "iso",
]


class EmulatorState(CoreState):
    """All emulator state behind one lock, every API hosted. ``clock`` returns epoch seconds.

    ``calendar_capacity`` is calendar mode's inventory (``"ZONE/ACCELERATOR"``: units per day);
    None uses :data:`~.defaults.DEFAULT_CALENDAR_CAPACITY`.
    """

    vertex: VertexState
    tpu: TpuState
    batch: BatchState
    compute: ComputeState
    calendar: CalendarState
    kube: KubeState

    def __init__(
        self,
        capacity: Mapping[Any, int] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        calendar_capacity: Mapping[Any, int] | None = None,
    ) -> None:
        super().__init__(capacity, seed=seed, clock=clock, apis=APIS)
        inventory = DEFAULT_CALENDAR_CAPACITY if calendar_capacity is None else calendar_capacity
        for key, total in inventory.items():
            self.calendar.calendar.set_total(key, total)

    # The CustomJob surface, kept on the state for the callers written before the split.
    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.vertex.jobs

    def create_custom_job(self, parent: str, job: Any) -> Any:
        return self.vertex.create_custom_job(parent, job)

    def get_custom_job(self, name: str) -> Any:
        return self.vertex.get_custom_job(name)

    def list_custom_jobs(self, parent: str, filter_text: str = "", page_size: int = 0, page_token: str = ""):
        return self.vertex.list_custom_jobs(parent, filter_text, page_size, page_token)

    def cancel_custom_job(self, name: str) -> None:
        self.vertex.cancel_custom_job(name)

    def delete_custom_job(self, name: str) -> Any:
        return self.vertex.delete_custom_job(name)
