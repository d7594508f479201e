"""Shared pytest fixtures.

Emulator fixtures start ``dws-emulator serve`` as a real subprocess (the way users and DAG tests
run it) and hand back an :class:`EmulatorProcess` with ``.address`` and ``.control``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from airflow_provider_dws.emulator.process import EmulatorProcess

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
