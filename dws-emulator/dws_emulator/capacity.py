"""Moved to :mod:`.core.capacity`; this module keeps the old import path working."""

from .core.capacity import *  # noqa: F403
