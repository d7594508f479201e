"""Trigger log lines written off the event loop, in order, many lines per hand-off to a thread.

A triggerer's log write can block (its supervisor reads the log socket while it stores events),
so a trigger must not write from the event loop's thread. structlog's ``ainfo`` avoids that with
one executor job per line; when capacity comes for thousands of waits at once that is thousands
of thread-pool submissions, locks and wake-ups in one burst, and it cost more than everything
else the triggers do then (``docs/scale.md``). Here the lines of every trigger of the process go
into one queue that a single executor job drains while lines keep coming, each written in the
context it was logged in (Airflow routes a trigger's lines to its task's log by context
variables), oldest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

_Line = tuple[
    contextvars.Context,
    Callable[..., Any],
    str,
    tuple[Any, ...],
    "asyncio.AbstractEventLoop | None",
    "asyncio.Future[None] | None",
]


class LineWriter:
    """One queue of log lines and at most one worker thread writing them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: deque[_Line] = deque()
        self._draining = False
        self._jobs: set[asyncio.Future[None]] = set()

    def write(
        self, emit: Callable[..., Any], message: str, args: tuple[Any, ...], *, wait: bool
    ) -> asyncio.Future[None] | None:
        """Queue ``emit(message, *args)``; with ``wait``, a future done once it is written.

        Call from a running event loop.
        """
        loop = asyncio.get_running_loop()
        done = loop.create_future() if wait else None
        line: _Line = (contextvars.copy_context(), emit, message, args, loop if wait else None, done)
        with self._lock:
            self._lines.append(line)
            start, self._draining = not self._draining, True
        if start:
            job = loop.run_in_executor(None, self._drain)
            self._jobs.add(job)  # the loop holds futures weakly
            job.add_done_callback(self._jobs.discard)
        return done

    async def flush(self) -> None:
        """Wait until every line queued so far is written (before the loop ends, in a worker)."""
        done = self.write(_nothing, "", (), wait=True)
        assert done is not None
        await done

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._lines:
                    self._draining = False
                    return
                context, emit, message, args, loop, done = self._lines.popleft()
            try:
                context.run(emit, message, *args)
            except Exception:
                traceback.print_exc()  # a broken handler must not stop the lines behind it
            if loop is not None and done is not None:
                with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits any more
                    loop.call_soon_threadsafe(_settle, done)


def _nothing(message: str) -> None:
    """A line that writes nothing (``flush``)."""


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


#: The process's one writer.
LINES = LineWriter()


async def log_info(log: Any, message: str, *args: Any, wait: bool = True) -> None:
    """Log a line without writing it from the event loop's thread, as Airflow's own trigger lines
    are (``ainfo``), but through the process's one writer, :data:`LINES`.

    Hundreds of triggers log at once when capacity arrives for many, while the triggerer's
    supervisor, which reads the log socket, is busy storing their events: a write from the loop's
    thread then waits for it, and every trigger with it (``docs/scale.md``). With ``wait=False``
    the line is queued (before any later line) and not waited for.
    """
    if getattr(log, "ainfo", None) is None:  # a stdlib logger (not in a triggerer or task process)
        log.info(message, *args)
        return
    done = LINES.write(log.info, message, args, wait=wait)
    if done is not None:
        await done
