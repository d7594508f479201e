"""pytest fixtures for an emulator (a plugin: ``pytest_plugins = ["dws_emulator.testing.fixtures"]``).

Two ways to get one:

* ``dws_emulator_server`` / ``dws_emulator_server_factory``: an
  :class:`~dws_emulator.testing.InProcessEmulator` in the test's own process (cheap to start; the
  model's clock can be a :class:`~dws_emulator.testing.FakeClock`);
* ``dws_emulator`` / ``dws_emulator_factory``: ``dws-emulator serve`` as a real subprocess, the way
  users and the CLI run it, handed back as an :class:`~dws_emulator.process.EmulatorProcess`.

Both kinds offer ``.address``, ``.port`` and ``.control``.

``dws_discovery_conformance`` fails a test whose in-process emulators answered, or were sent, a
body Google's discovery documents do not allow (:mod:`.discovery`); a conftest makes it autouse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..process import EmulatorProcess
from . import InProcessEmulator

EmulatorFactory = Callable[..., EmulatorProcess]
ServerFactory = Callable[..., InProcessEmulator]


@pytest.fixture(scope="session")
def dws_emulator_server() -> Iterator[InProcessEmulator]:
    """One in-process emulator with the default inventory for the whole session (see ``dws_emulator``)."""
    emulator = InProcessEmulator()
    yield emulator
    emulator.stop()


@pytest.fixture
def dws_emulator_server_factory() -> Iterator[ServerFactory]:
    """Start private in-process emulators: ``factory({"us-central1/NVIDIA_H100_80GB": 0}, clock=FakeClock())``.

    Same arguments as ``dws_emulator_factory`` plus ``clock``. All are stopped at the end of the test.
    """
    started: list[InProcessEmulator] = []

    def start(
        capacity: Mapping[str, int] | None = None,
        seed: int = 0,
        faults: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> InProcessEmulator:
        emulator = InProcessEmulator(capacity, seed, faults, clock)
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture(scope="session")
def dws_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """One emulator subprocess with the default inventory for the whole session.

    Shared: tests should use their own project id so listings do not see each other's jobs,
    and must not assume exact free capacity (use ``dws_emulator_factory`` for that).
    """
    emulator = EmulatorProcess(None, 0, tmp_path_factory.mktemp("dws-emulator") / "emulator.log")
    yield emulator
    emulator.stop()


@pytest.fixture
def dws_emulator_factory(tmp_path: Path) -> Iterator[EmulatorFactory]:
    """Start private emulator subprocesses: ``dws_emulator_factory({"us-central1/NVIDIA_H100_80GB": 0}, seed=1)``.

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


@pytest.fixture
def dws_discovery_conformance() -> Iterator[Any]:
    """Check every REST call to an in-process emulator during the test against Google's discovery
    documents (:func:`.discovery.checking`), and fail the test on a problem. Checks nothing when
    google-api-python-client is not installed; calls to ``dws-emulator serve`` subprocesses are
    not seen."""
    from .discovery import checking

    with checking() as conformance:
        yield conformance
    if conformance.problems:
        shown = "\n".join(sorted(set(conformance.problems))[:30])
        pytest.fail(f"{len(conformance.problems)} call(s) the discovery documents do not allow:\n{shown}")
