"""Moved to :mod:`.core.filters`; this module keeps the old import path working."""

from .core.filters import *  # noqa: F403
