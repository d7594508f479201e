"""Airflow end-to-end fixtures: a throwaway Airflow home (SQLite) and a runner for `airflow dags test`."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.records import XCOM_KEY, RequestRecord, read_records

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAG_RUN_TIMEOUT = 240


@dataclass
class DagRunResult:
    """What `airflow dags test` did: exit code and the whole log."""

    returncode: int
    log: str

    def result_line(self) -> str:
        """The example DAG's ``DWS RESULT:`` line."""
        for line in self.log.splitlines():
            if "DWS RESULT:" in line:
                return line
        raise AssertionError(f"no DWS RESULT line in the log:\n{self.log[-4000:]}")


#: The cncf-kubernetes connection of the emulated GKE cluster (as `make demo` names it).
GKE_CONN_ID = "dws_gke_emulator"


def emulator_env(address: str) -> dict[str, str]:
    """What points a DAG run at the emulator at ``address``: every hook, through
    ``DWS_EMULATOR_HOST``, and cncf-kubernetes' operators, through a connection to its cluster."""
    from dws_emulator.kube.connection import airflow_connection

    return {
        "DWS_EMULATOR_HOST": address,
        f"AIRFLOW_CONN_{GKE_CONN_ID.upper()}": airflow_connection(address),
        "DWS_EXAMPLE_KUBERNETES_CONN_ID": GKE_CONN_ID,
    }


class AirflowHome:
    """An initialised AIRFLOW_HOME whose DAG folder is ``dags_folder`` (default ``example_dags/``)."""

    def __init__(self, home: Path, dags_folder: Path = ROOT / "example_dags") -> None:
        self.home = home
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "DWS_EMULATOR", "DWS_EXAMPLE"))
        }
        self.env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                # A generous limit on a DAG file's import (30 s by default, wall-clock): these
                # processes share two cores with the rest of `make test`.
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
                "DWS_EXAMPLE_POLL_INTERVAL": "0.5",
            }
        )
        subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
        )

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run an ``airflow`` CLI command in this home."""
        return subprocess.run(
            [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=300
        )

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """Run Python ``code`` in a fresh interpreter in this home."""
        return subprocess.run(
            [sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=300
        )

    def start_dag_test(
        self,
        dag_id: str,
        emulator_address: str,
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        conf: Mapping[str, Any] | None = None,
        logical_date: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `airflow dags test` in the background (its own process group), logging to a file."""
        cmd = [str(BIN / "airflow"), "dags", "test", dag_id]
        if logical_date:
            cmd.append(logical_date)
        if conf:
            cmd += ["-c", json.dumps(conf)]
        run_env = dict(self.env, **emulator_env(emulator_address), **(env or {}))
        with log_path.open("wb") as out:
            return subprocess.Popen(
                cmd, env=run_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_task_test(
        self, dag_id: str, task_id: str, run_id: str, emulator_address: str, log_path: Path
    ) -> subprocess.Popen[bytes]:
        """Start `airflow tasks test` of one task instance of an existing dag run."""
        cmd = [str(BIN / "airflow"), "tasks", "test", dag_id, task_id, run_id]
        run_env = dict(self.env, **emulator_env(emulator_address))
        with log_path.open("wb") as out:
            return subprocess.Popen(
                cmd, env=run_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def run_dag_test(self, dag_id: str, emulator_address: str, log_path: Path, **kwargs: Any) -> DagRunResult:
        """Run `airflow dags test` to the end."""
        proc = self.start_dag_test(dag_id, emulator_address, log_path, **kwargs)
        return finish(proc, log_path)


def finish(proc: subprocess.Popen[bytes], log_path: Path, timeout: float = DAG_RUN_TIMEOUT) -> DagRunResult:
    """Wait for a started `airflow dags test`, killing its process group on timeout."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"airflow dags test timed out; log:\n{log_path.read_text()[-4000:]}") from None
    return DagRunResult(proc.returncode, log_path.read_text(errors="replace"))


def split_by_dag(log: str) -> dict[str, str]:
    """Each DAG's lines of ``scripts/run_dags.py``'s output (``make demo``'s too), from its
    ``==> dag.test() DAG_ID`` line to the next."""
    parts = re.split(r"^==> dag\.test\(\) (\S+)$", log, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@contextmanager
def dag_test_running(proc: subprocess.Popen[bytes], log_path: Path) -> Iterator[None]:
    """Around what a test does while `airflow dags test` runs: if it fails, kill the run at once
    (not after its timeout) and show the run's log with the failure."""
    try:
        yield
    except BaseException as error:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(
            f"{error}; the run's log:\n{log_path.read_text(errors='replace')[-4000:]}"
        ) from error


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHome]:
    """One migrated SQLite Airflow home for the session's end-to-end tests."""
    yield AirflowHome(tmp_path_factory.mktemp("airflow-home"))


# -- the request records a real Airflow wrote (``airflow dags test``: the task SDK's own XCom push
# and pull), read back from the home's metadata database --------------------------------------------


@dataclass
class ExampleRun:
    """One example DAG's run by ``make demo`` (``test_dws_page_after_demo.py`` runs it once for all
    of them): its own lines of the demo's output, the emulator it ran on, the Airflow home it ran in.

    Each example's module checks its run with a ``check_example(run)`` function."""

    log: str
    emulator: Any
    home: Path


def records(home: AirflowHome | Path, dag_id: str) -> dict[str, list[RequestRecord]]:
    """Each task's ``dws_requests`` of the DAG's latest run in ``home`` (an Airflow home or its path)."""
    path = home.home if isinstance(home, AirflowHome) else home
    with sqlite3.connect(path / "airflow.db") as db:
        run_id = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()[0]
        rows = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = ?",
            (dag_id, run_id, XCOM_KEY),
        ).fetchall()
    out = {}
    for task_id, value in rows:
        decoded: Any = json.loads(value) if isinstance(value, (str, bytes)) else value
        out[task_id] = read_records(json.loads(decoded) if isinstance(decoded, str) else decoded)
    return out


def no_record_warnings(log: str) -> None:
    for warning in (
        "Could not write the request record",
        "Could not read the dws_requests",
        "Could not keep the request records",
        "Could not read the earlier tries",
        "Could not send DWS metric",
    ):
        assert warning not in log


@pytest.fixture(scope="session")
def dws_page_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real api-server with DWS request records of a few DAGs (``tests/airflow/dws_page_server.py``).

    SQLite; ``DWS_PAGE_TEST_DB=postgres`` runs it on a throwaway database of the local PostgreSQL
    server instead (as the fault matrix does).
    """
    from tests.airflow.dws_page_server import running_server

    home = tmp_path_factory.mktemp("dws-page-home")
    if os.environ.get("DWS_PAGE_TEST_DB") != "postgres":
        with running_server(home) as server:
            yield server
        return
    from tests.faults.harness import Database

    database = Database()
    try:
        with running_server(home, database.url) as server:
            yield server
    finally:
        database.drop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium through Playwright (``tests/airflow/browser.py``), one per test module.

    Not one per session: Playwright's sync API keeps an event loop running in the thread while it
    is open, and every later test of the process that calls ``asyncio.run`` would then fail."""
    from playwright.sync_api import expect, sync_playwright

    from tests.airflow.browser import CHROMIUM, IMAGES, WAIT_MS

    # Assertions wait as long as actions do (their own default is 5 s: too short on a loaded machine).
    expect.set_options(timeout=WAIT_MS)
    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root in a container, where Chromium's sandbox cannot start.
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()
