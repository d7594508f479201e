"""The process's one trigger-log writer: lines in order, off the loop's thread, each in the context
it was logged in, many per executor job, and a broken handler never stops the lines behind it."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from airflow_provider_dws.triggers.log_lines import LineWriter

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


class Sink:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, int]] = []

    def emit(self, message: str, *args: Any) -> None:
        self.lines.append((WHO.get(), message % args, threading.get_ident()))


def test_lines_of_many_triggers_are_written_in_order_in_their_own_context() -> None:
    writer, sink = LineWriter(), Sink()
    jobs: list[Any] = []

    async def trigger(i: int) -> None:
        WHO.set(f"trigger-{i}")  # as the triggerer binds each trigger's log routing
        writer.write(sink.emit, "line %d of %s", (0, i), wait=False)
        await asyncio.sleep(0)
        done = writer.write(sink.emit, "line %d of %s", (1, i), wait=True)
        assert done is not None
        await done

    async def scenario() -> None:
        original = writer._drain

        def counted() -> None:
            jobs.append(1)
            original()

        writer._drain = counted  # type: ignore[method-assign]
        await asyncio.gather(*(trigger(i) for i in range(300)))
        await writer.flush()

    asyncio.run(scenario())
    assert len(sink.lines) == 600
    for i in range(300):
        mine = [line for who, line, _ in sink.lines if who == f"trigger-{i}"]
        assert mine == [f"line 0 of {i}", f"line 1 of {i}"]
    assert threading.main_thread().ident not in {thread for *_, thread in sink.lines}
    assert len(jobs) < 300  # far fewer executor jobs than lines


def test_flush_waits_for_lines_not_waited_for() -> None:
    writer = LineWriter()
    gate = threading.Event()
    written: list[str] = []

    def slow(message: str) -> None:
        assert gate.wait(60)
        written.append(message)

    async def scenario() -> list[str]:
        writer.write(slow, "last line", (), wait=False)
        flushed = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0.05)
        assert not flushed.done() and written == []
        gate.set()
        await flushed
        return written

    assert asyncio.run(scenario()) == ["last line"]


def test_a_failing_handler_does_not_stop_the_lines_behind_it(capsys: pytest.CaptureFixture[str]) -> None:
    writer, sink = LineWriter(), Sink()

    def broken(message: str) -> None:
        raise OSError("log socket closed")

    async def scenario() -> None:
        writer.write(broken, "lost", (), wait=False)
        done = writer.write(sink.emit, "kept", (), wait=True)
        assert done is not None
        await done

    asyncio.run(scenario())
    assert [line for _, line, _ in sink.lines] == ["kept"]
    assert "log socket closed" in capsys.readouterr().err


def test_one_writer_serves_loops_one_after_another() -> None:
    """A worker runs one event loop per deferrable=False wait; the writer outlives each."""
    writer, sink = LineWriter(), Sink()

    async def once(i: int) -> None:
        writer.write(sink.emit, "run %d", (i,), wait=False)
        await writer.flush()

    for i in range(3):
        asyncio.run(once(i))
    assert [line for _, line, _ in sink.lines] == ["run 0", "run 1", "run 2"]
