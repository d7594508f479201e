"""The emulator's own tests: the fixtures are its pytest plugin's (:mod:`dws_emulator.testing.fixtures`),
the same the provider's tests use; every test's REST calls are held against Google's discovery
documents (``dws_discovery_conformance``)."""

from typing import Any

import pytest

pytest_plugins = ["dws_emulator.testing.fixtures"]


@pytest.fixture(autouse=True)
def _discovery_conformance(dws_discovery_conformance: Any) -> Any:
    """Every test: the emulator's answers, as Google's discovery documents describe them."""
    return dws_discovery_conformance
