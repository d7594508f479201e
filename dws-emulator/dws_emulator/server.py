"""``EmulatorServer``: the shared core's server hosting every API (:class:`.state.EmulatorState`).

The services (each API's, ``google.longrunning.Operations`` and the control service) and their
fault injection and call counting are assembled by :class:`~.core.server.ServerCore`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .core.server import ServerCore, is_loopback
from .defaults import DEFAULT_CAPACITY
from .state import EmulatorState

__all__ = ["EmulatorServer", "is_loopback"]


class EmulatorServer(ServerCore):
    """Runs the emulator in this process: ``EmulatorServer(capacity, seed).start()``.

    ``capacity`` maps ``"LOCATION/ACCELERATOR"`` (or ``PoolKey``) to a count; ``None`` uses
    :data:`~.defaults.DEFAULT_CAPACITY`. ``calendar_capacity`` is calendar mode's inventory (units per
    day by ``"ZONE/ACCELERATOR"``; ``None``: :data:`~.defaults.DEFAULT_CALENDAR_CAPACITY`). The other
    arguments are :class:`ServerCore`'s.
    """

    default_capacity = DEFAULT_CAPACITY
    state: EmulatorState

    def __init__(self, *args: Any, calendar_capacity: Mapping[Any, int] | None = None, **kwargs: Any) -> None:
        self._calendar_capacity = calendar_capacity
        super().__init__(*args, **kwargs)

    def new_state(self, capacity: Mapping[Any, int], seed: int, clock: Callable[[], float]) -> EmulatorState:
        return EmulatorState(capacity, seed=seed, clock=clock, calendar_capacity=self._calendar_capacity)
