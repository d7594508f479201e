"""The emulator's own tests: the fixtures are its pytest plugin's (:mod:`dws_emulator.testing.fixtures`),
the same the provider's tests use."""

pytest_plugins = ["dws_emulator.testing.fixtures"]
