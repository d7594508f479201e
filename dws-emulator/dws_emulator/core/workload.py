"""The workload convention every API shares: run time and exit code from environment variables.

A request's workload sets ``DWS_EMULATOR_RUN_SECONDS`` (how long it runs once started, default
5 s) and ``DWS_EMULATOR_EXIT_CODE`` (0 succeeds, anything else fails after the run) in its
container or task environment; each API reads them from where its own spec keeps them.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import EmulatorError

RUN_SECONDS_ENV = "DWS_EMULATOR_RUN_SECONDS"
EXIT_CODE_ENV = "DWS_EMULATOR_EXIT_CODE"
DEFAULT_RUN_SECONDS = 5.0


def parse_workload(
    run_text: str | None, exit_text: str | None, field: str, make_error: Callable[[str, str], EmulatorError]
) -> tuple[float, int]:
    """``(run_seconds, exit_code)`` from the two variables' values (None: unset), or ``make_error(field, ...)``."""
    try:
        run_seconds = DEFAULT_RUN_SECONDS if run_text is None else float(run_text)
    except ValueError:
        raise make_error(field, f"{RUN_SECONDS_ENV} must be a number, got {run_text!r}.") from None
    if run_seconds < 0:
        raise make_error(field, f"{RUN_SECONDS_ENV} must not be negative, got {run_text!r}.")
    try:
        exit_code = 0 if exit_text is None else int(exit_text)
    except ValueError:
        raise make_error(field, f"{EXIT_CODE_ENV} must be an integer, got {exit_text!r}.") from None
    return run_seconds, exit_code
