"""Helpers for tests that run an emulator: a clock they move, an in-process server, a poll.

Pure Python, no pytest: the fixtures that use them are :mod:`.fixtures`, a pytest plugin
(``pytest_plugins = ["dws_emulator.testing.fixtures"]``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..control import EmulatorControl


class FakeClock:
    """Epoch seconds that stand still until the test moves them: ``clock.advance(3600)``.

    Starts at the real time, so the emulator's timestamps look current to its clients.
    """

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward; the emulator applies it on its next tick (every RPC ticks first)."""
        with self._lock:
            self._now += seconds


class InProcessEmulator:
    """An :class:`~dws_emulator.server.EmulatorServer` running in this process, with a control client.

    ``server`` gives direct access to its ``state``, ``faults`` and ``stats``; ``clock`` is the
    model's clock (a :class:`FakeClock` when the test asked for one).
    """

    def __init__(
        self,
        capacity: Mapping[str, int] | None = None,
        seed: int = 0,
        faults: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from ..server import EmulatorServer

        self.clock = clock
        self.server = EmulatorServer(capacity, seed=seed, faults=faults, clock=clock).start()
        self.address = self.server.address
        assert self.server.port is not None
        self.port: int = self.server.port
        self.rest_url = self.server.rest_url  # the REST front (Compute Engine): the port + 1
        self.control = EmulatorControl(self.address, timeout=30.0)

    def calls(self, method: str) -> int:
        """How many calls of ``method`` (short name, ``GetCustomJob``) the emulator received."""
        return sum(
            n for full, n in self.server.stats.snapshot()["calls"].items() if full.endswith("/" + method)
        )

    def stop(self) -> None:
        """Close the control client and stop the server at once."""
        self.control.close()
        self.server.stop(grace=0)


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "the condition") -> Any:
    """Poll ``predicate`` until it is truthy (returned); fail after a generous ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


__all__ = ["FakeClock", "InProcessEmulator", "wait_until"]
