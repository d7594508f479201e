"""Regular expressions compiled on first use rather than when their module is imported.

A task process imports the provider's runtime modules afresh for each deferral and each resume, and
most of their patterns serve paths that run rarely (a reservation's end, a Batch event's text):
compiling them all at import cost every task process a few milliseconds (issue 36).
"""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    """A :class:`re.Pattern` compiled the first time one of its methods is called."""

    __slots__ = ("_compiled", "_flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
        return self._compiled

    def match(self, string: str) -> re.Match[str] | None:
        """As :meth:`re.Pattern.match`."""
        return self.compiled.match(string)

    def fullmatch(self, string: str) -> re.Match[str] | None:
        """As :meth:`re.Pattern.fullmatch`."""
        return self.compiled.fullmatch(string)

    def search(self, string: str) -> re.Match[str] | None:
        """As :meth:`re.Pattern.search`."""
        return self.compiled.search(string)

    def sub(self, repl: Any, string: str) -> str:
        """As :meth:`re.Pattern.sub`."""
        return self.compiled.sub(repl, string)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"
