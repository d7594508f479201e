"""Moved to :mod:`.tpu.state`; this module keeps the old import path working."""

from .tpu.state import *  # noqa: F403
