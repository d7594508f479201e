"""Moved to :mod:`.vertex.validation` (and the shared checks to :mod:`.core.errors`); kept for old imports."""

from .core.errors import EmulatorError, check_labels  # noqa: F401
from .core.workload import DEFAULT_RUN_SECONDS, EXIT_CODE_ENV, RUN_SECONDS_ENV  # noqa: F401
from .vertex.validation import *  # noqa: F403
from .vertex.validation import invalid, validate_custom_job, validate_labels  # noqa: F401
