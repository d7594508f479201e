"""Shared pytest fixtures.

Emulator fixtures start ``dws-emulator serve`` as a real subprocess (the way users and DAG tests
run it) and hand back an :class:`EmulatorProcess` with ``.address`` and ``.control``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from airflow_provider_dws.emulator.control import EmulatorControl

EMULATOR_START_TIMEOUT = 60.0


class EmulatorProcess:
    """A ``dws-emulator serve`` subprocess: ``address`` (host:port), ``port``, ``control``."""

    def __init__(
        self,
        capacity: Mapping[str, int] | None,
        seed: int,
        log_path: Path,
        faults: Sequence[str] | None = None,
    ) -> None:
        cmd = [sys.executable, "-m", "airflow_provider_dws.emulator", "serve", "--port", "0"]
        cmd += ["--seed", str(seed)]
        if faults:
            cmd += ["--faults", *faults]
        if capacity is not None:
            if not capacity:
                raise ValueError("capacity needs at least one pool (a pool may have size 0)")
            cmd += ["--capacity", *(f"{k}={v}" for k, v in capacity.items())]
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=os.environ.copy())
        self.address = self._read_address()
        self.port = int(self.address.rsplit(":", 1)[1])
        self.control = EmulatorControl(self.address)

    def _read_address(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + EMULATOR_START_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode()
                prefix = "dws-emulator listening on "
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
                if not line:
                    break
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"dws-emulator did not start; log:\n{self.logs()}")

    def logs(self) -> str:
        """The emulator's stderr so far (state changes, one line each)."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "control"):
            self.control.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


EmulatorFactory = Callable[..., EmulatorProcess]


@pytest.fixture(scope="session")
def dws_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """One emulator with the default inventory for the whole session.

    Shared: tests should use their own project id so listings do not see each other's jobs,
    and must not assume exact free capacity (use ``dws_emulator_factory`` for that).
    """
    emulator = EmulatorProcess(None, 0, tmp_path_factory.mktemp("dws-emulator") / "emulator.log")
    yield emulator
    emulator.stop()


@pytest.fixture
def dws_emulator_factory(tmp_path: Path) -> Iterator[EmulatorFactory]:
    """Start private emulators: ``dws_emulator_factory({"us-central1/NVIDIA_H100_80GB": 0}, seed=1)``.

    ``capacity=None`` gives the default inventory; ``faults`` are ``serve --faults`` rules
    (``["GetCustomJob=UNAVAILABLE@0.2"]``). All are stopped at the end of the test.
    """
    started: list[EmulatorProcess] = []

    def start(
        capacity: Mapping[str, int] | None = None, seed: int = 0, faults: Sequence[str] | None = None
    ) -> EmulatorProcess:
        emulator = EmulatorProcess(capacity, seed, tmp_path / f"emulator-{len(started)}.log", faults)
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()
