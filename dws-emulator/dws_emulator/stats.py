"""Moved to :mod:`.core.stats`; this module keeps the old import path working."""

from .core.stats import *  # noqa: F403
