"""One probe interpreter for the tests that ask what a fresh interpreter imports.

Starting ``python`` for every such check paid interpreter start-up and ``import airflow`` (seconds
of CPU each) again and again. Here one server process is started per test session; it imports
nothing but the standard library. A probe names the modules its interpreter would have imported
first (``preload``: ``airflow.sdk`` and the dag-processor, as its parent has them), the environment
and the working directory. The server keeps one *zygote* per (preload, environment): a forked child
that set that environment, then imported the preload, and nothing else. Every probe is a fresh fork
of its zygote that runs the probe's code as ``__main__``, so it starts from exactly the modules the
preload brings, never from what an earlier probe imported; that is how the dag-processor parses
every DAG file too (a forked child of a parent that imported only ``airflow.*``).

What differs from a new ``python``, and why no check here depends on it: the server has imported
some of the standard library for itself (json, subprocess, threading, tempfile...), which the
checks do not count (they look for the provider, Airflow, client libraries, or non-stdlib
modules); ``PYTHONPATH`` is applied by putting its entries where the interpreter would; the other
start-up variables (:data:`STARTUP_VARIABLES`) cannot change in a fork, and a probe that changes
one is refused. ``PYTEST_CURRENT_TEST``, which pytest changes at every test and nothing reads at
import, is left out of the probe's environment, so probes of different tests share a zygote.

``python tests/probe.py`` is the server: one JSON request per line on stdin, one JSON reply per line
on stdout. :class:`Probe` is the client the ``probe`` fixture hands out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

#: Read by the interpreter at start-up: a probe cannot change them in a forked child, so a probe
#: whose environment changes one is refused (it would not be the interpreter it asked for).
#: Changed by pytest at every test, read by nothing at import: kept out of the zygotes' key.
VOLATILE = ("PYTEST_CURRENT_TEST",)

#: What the dag-processor's parent has imported before it forks a child per DAG file.
DAG_PROCESSOR = ("airflow.dag_processing.processor", "airflow.sdk")

STARTUP_VARIABLES = ("PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONOPTIMIZE", "PYTHONHASHSEED")


@dataclass
class Result:
    """What the probe's interpreter did: as ``subprocess.CompletedProcess`` reports it."""

    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Result:
        """Raise with the probe's output unless it exited 0."""
        if self.returncode != 0:
            raise AssertionError(f"probe exited {self.returncode}:\n{self.stdout}\n{self.stderr}")
        return self


class Probe:
    """The client: one server process, requests one at a time (a lock for threaded callers)."""

    def __init__(self) -> None:
        self._server = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        self._lock = threading.Lock()

    def run(
        self,
        code: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        preload: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> Result:
        """Run ``code`` (as ``python -c``) or the file ``path`` (as ``python path args...``) in a
        fresh fork of an interpreter that imported only ``preload``, with ``env`` (default: this
        process's environment) and ``cwd``."""
        if (code is None) == (path is None):
            raise ValueError("a probe runs either code or a path")
        request = {
            "code": code,
            "path": None if path is None else str(path),
            "args": list(args),
            "preload": list(preload),
            "env": {k: v for k, v in (os.environ if env is None else env).items() if k not in VOLATILE},
            "cwd": str(cwd or os.getcwd()),
        }
        with self._lock:
            assert self._server.stdin is not None and self._server.stdout is not None
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the probe server ended (exit code {self._server.poll()})")
        return Result(**json.loads(line))

    def close(self) -> None:
        """End the server (its zygotes end with it: their request pipe closes)."""
        assert self._server.stdin is not None
        self._server.stdin.close()
        self._server.wait(timeout=60)


# -- the server side -----------------------------------------------------------------------------


def _run_child(request: dict[str, Any]) -> None:
    """In the probe's own fork: become ``python -c code`` / ``python path``, run, exit."""
    import runpy
    import types

    os.chdir(request["cwd"])
    if request["path"] is not None:
        sys.argv = [request["path"], *request["args"]]
        sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))
        runpy.run_path(request["path"], run_name="__main__")
    else:
        sys.argv = ["-c", *request["args"]]
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)


def _child(request: dict[str, Any], out: str, err: str) -> int:
    """Fork one probe; its exit code once it ended (its output is in the files ``out``, ``err``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, name in ((1, out), (2, err)):
                os.dup2(os.open(name, os.O_WRONLY | os.O_TRUNC), fd)
            _run_child(request)
            code = 0
        except SystemExit as stop:
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
            if code == 1 and not isinstance(stop.code, int):
                print(stop.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            import atexit

            atexit._run_exitfuncs()  # as the interpreter would at its end
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _zygote(request: dict[str, Any], requests: TextIO, replies: TextIO) -> None:
    """The forked parent of the probes of one (preload, environment, folder): set it up once, then
    fork one child per request."""
    env, preload = request["env"], request["preload"]
    base = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.path[0] = ""  # as for ``python -c``: not the server's folder (tests/, which has an airflow/)
    # PYTHONPATH is read at start-up: its entries go where the interpreter puts them (after the
    # script's folder, before the standard library).
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in base.split(os.pathsep)]
    sys.path[1:1] = extra
    for name in preload:
        __import__(name)
    # mkdtemp, not TemporaryDirectory: its clean-up is an atexit function, which every probe runs.
    scratch = tempfile.mkdtemp(prefix="probe-")
    out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
    try:
        for line in requests:
            Path(out).write_text("")
            Path(err).write_text("")
            code = _child(json.loads(line), out, err)
            reply = {"returncode": code, "stdout": Path(out).read_text(), "stderr": Path(err).read_text()}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _start_zygote(request: dict[str, Any], others: list[TextIO]) -> tuple[int, TextIO, TextIO]:
    """Fork a zygote; its pid and the pipes to send it requests and read its replies. ``others``:
    the server's ends of the earlier zygotes' pipes, closed in the new one (a copy of a request
    pipe's writing end would keep its zygote from ever seeing the end of its requests)."""
    child_reads, parent_writes = os.pipe()
    parent_reads, child_writes = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(parent_writes)
        os.close(parent_reads)
        for pipe in others:
            os.close(pipe.fileno())
        try:
            with os.fdopen(child_reads) as requests, os.fdopen(child_writes, "w") as replies:
                _zygote(request, requests, replies)
        except BaseException:
            import traceback

            traceback.print_exc()  # to the server's stderr: the test's output
        finally:
            os._exit(0)
    os.close(child_reads)
    os.close(child_writes)
    return pid, os.fdopen(parent_writes, "w"), os.fdopen(parent_reads)


def serve() -> None:
    """The server loop: route each request to its zygote (started on first use)."""
    # The replies keep the pipe that was stdout to themselves; stdout becomes stderr, so nothing an
    # import prints to it (alembic's "setup plugin" lines, on Airflow 3.1 and 3.2) falls between them.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    zygotes: dict[str, tuple[int, TextIO, TextIO]] = {}
    for line in sys.stdin:
        request = json.loads(line)
        env = request["env"]
        changed = [v for v in STARTUP_VARIABLES if env.get(v) != os.environ.get(v)]
        if changed:
            reply = {"returncode": 1, "stdout": "", "stderr": f"probe: cannot change {changed} in a fork"}
        else:
            key = json.dumps([request["preload"], request["cwd"], sorted(env.items())])
            if key not in zygotes:
                zygotes[key] = _start_zygote(request, [p for _, *pipes in zygotes.values() for p in pipes])
            _, send, receive = zygotes[key]
            send.write(json.dumps(request) + "\n")
            send.flush()
            reply = json.loads(
                receive.readline() or '{"returncode": 1, "stdout": "", "stderr": "zygote ended"}'
            )
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    for pid, send, receive in zygotes.values():  # end and reap them (their CPU counts as ours)
        send.close()
        receive.close()
        os.waitpid(pid, 0)


if __name__ == "__main__":
    serve()
