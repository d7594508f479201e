"""The emulator's state as served: the shared core hosting every API package.

`EmulatorState` is a :class:`~.core.state.CoreState` with the Vertex AI, Cloud TPU, Cloud Batch,
Compute Engine, calendar-mode, Kubernetes and Vertex AI inference APIs registered (``state.vertex``,
``state.tpu``, ``state.batch``, ``state.compute``, ``state.calendar``, ``state.kube``,
``state.vertex_inference``), in that order (their tick hooks run in it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .batch.state import BatchState
from .calendar.state import CalendarState
from .compute.state import ComputeState
from .core.api import Api
from .core.state import CoreState
from .defaults import DEFAULT_CALENDAR_CAPACITY
from .kube.state import KubeState
from .tpu.state import TpuState
from .vertex.state import VertexState
from .vertex_inference.state import VertexInferenceState

#: The APIs every emulator hosts, in tick order.
APIS: tuple[type[Api], ...] = (
    VertexState,
    TpuState,
    BatchState,
    ComputeState,
    CalendarState,
    KubeState,
    VertexInferenceState,
)

__all__ = ["APIS", "EmulatorState"]


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
    vertex_inference: VertexInferenceState

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
