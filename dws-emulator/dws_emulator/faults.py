"""Moved to :mod:`.core.faults`; this module keeps the old import path working.

Importing it registers every API's methods (:mod:`.defaults`), so rules may name them.
"""

from . import defaults  # noqa: F401
from .core.faults import *  # noqa: F403
from .core.faults import _SHORT_NAMES, METHODS  # noqa: F401
from .tpu import TPU_SERVICE  # noqa: F401
from .vertex import JOB_SERVICE  # noqa: F401
