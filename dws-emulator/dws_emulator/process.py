"""Run ``dws-emulator serve`` as a subprocess and wait until it listens.

The way tests, the fault matrix and the benchmarks start an emulator: a real process on a free
port, its stderr (one line per request state change) in a log file.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .control import EmulatorControl

#: The one line ``serve`` prints to stdout once it accepts connections.
LISTENING = "dws-emulator listening on "


class EmulatorProcess:
    """A ``dws-emulator serve`` subprocess: ``address`` (host:port), ``port``, ``pid``, ``control``,
    and ``rest_url`` (``http://host:port+1``, the REST front).

    ``capacity`` ``None`` gives the default inventory; ``faults`` are ``serve --faults`` rules;
    ``control_timeout`` is the control client's per-call timeout (seconds).
    """

    def __init__(
        self,
        capacity: Mapping[str, int] | None,
        seed: int,
        log_path: Path,
        faults: Sequence[str] | None = None,
        *,
        start_timeout: float = 60.0,
        control_timeout: float = 10.0,
    ) -> None:
        cmd = [sys.executable, "-m", "dws_emulator", "serve", "--port", "0"]
        cmd += ["--seed", str(seed)]
        if faults:
            cmd += ["--faults", *faults]
        if capacity is not None:
            if not capacity:
                raise ValueError("capacity needs at least one pool (a pool may have size 0)")
            cmd += ["--capacity", *(f"{k}={v}" for k, v in capacity.items())]
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=os.environ.copy())
        self.pid = self.proc.pid
        self.address = self._read_address(start_timeout)
        self.port = int(self.address.rsplit(":", 1)[1])
        self.rest_port = self.port + 1  # the REST front's address convention (see core.rest)
        self.rest_url = f"http://{self.address.rsplit(':', 1)[0]}:{self.rest_port}"
        self.control = EmulatorControl(self.address, timeout=control_timeout)

    def _read_address(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode()
                if line.startswith(LISTENING):
                    return line[len(LISTENING) :].strip()
                if not line:
                    break
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"dws-emulator did not start; log:\n{self.logs()}")

    def logs(self) -> str:
        """The emulator's stderr so far (state changes, one line each)."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Terminate the emulator (SIGTERM, then SIGKILL after 10 s) and close its pipes."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "control"):
            self.control.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
