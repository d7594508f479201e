"""Unit-ring fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.probe import Probe


@pytest.fixture(scope="session")
def probe() -> Iterator[Probe]:
    """The session's probe interpreter (``tests/probe.py``): ``probe.run(code, preload=[...])``
    answers as a fresh ``python -c code`` whose interpreter had imported only ``preload``."""
    server = Probe()
    yield server
    server.close()
