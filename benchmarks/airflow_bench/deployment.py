"""The fault matrix's deployment with the benchmark's DAG folder and sizing, and what the benchmark reads."""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.faults.harness import Deployment

DAGS_FOLDER = Path(__file__).resolve().parents[1] / "airflow_dags"
POOL = "us-central1/NVIDIA_H100_80GB"
GPUS_PER_JOB = 8
WARMUP_DAG = "dws_bench_warmup"
FANOUT_DAG = "dws_bench_fanout"
TASK_ID = "fine_tune"
#: N tasks deferred on ``DateTimeTrigger`` firing at one moment (``stock_burst.py``), and the same
#: with the families' N.
STOCK_DAG = "dws_bench_stock"
STOCK_FAMILY_DAG = "dws_bench_stock_family"
STOCK_TASK_ID = "wait"
#: Airflow's watchdog sleeps 0.1 s and logs when the sleep took longer than this threshold; a
#: stall is the excess over the sleep, so this logs every stall above 50 ms.
WATCHDOG_SLEEP = 0.1
WATCHDOG_THRESHOLD = 0.15
#: How the provider's trigger log starts a line about a request still waiting: its first status.
WAITING_LINES = ("Waiting for capacity [", "Capacity promised, not usable yet [")
STALL_LINE = re.compile(r"^(\S+) \[\w+\s*\] Triggerer's async thread was blocked for ([\d.]+) seconds")


def say(message: str) -> None:
    """One progress line, timestamped."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def epoch(stamp: str) -> float:
    """Seconds since the epoch of an ISO timestamp (``Z`` or an offset)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


class BenchDeployment(Deployment):
    """The fault matrix's deployment with the benchmark's DAG folder, sizing and emulator pools."""

    def __init__(
        self,
        tasks: int,
        family_tasks: int,
        poll_interval: float,
        parallelism: int,
        pools: Mapping[str, int],
        dag_ids: Sequence[str],
        workdir: Path | None,
    ) -> None:
        super().__init__({POOL: 0, **pools}, [WARMUP_DAG, FANOUT_DAG, *dag_ids], workdir=workdir)
        self.tasks = tasks
        self.family_tasks = family_tasks
        self.poll_interval = poll_interval
        self.parallelism = parallelism
        self.asyncio_debug = False

    def start_triggerer(self, timeout: float = 120.0) -> Any:
        """The harness's triggerer; with ``asyncio_debug``, asyncio names every slow callback."""
        if not self.asyncio_debug:
            return super().start_triggerer(timeout)
        plain = self.env
        self.env = {**plain, "PYTHONASYNCIODEBUG": "1"}
        try:
            return super().start_triggerer(timeout)
        finally:
            self.env = plain

    def _environment(self, port: int) -> dict[str, str]:
        env = super()._environment(port)
        most = max(self.tasks, self.family_tasks)
        env.update(
            {
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(16, self.parallelism)),
                "AIRFLOW__CORE__MAX_MAP_LENGTH": str(max(1024, most)),
                "AIRFLOW__TRIGGERER__CAPACITY": str(max(1000, most + 10)),
                # Airflow's defaults: the harness heartbeats every second for its takeover
                # scenarios, which would add the triggerer's own DB writes to the CPU measured.
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "5",
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
                "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": str(WATCHDOG_THRESHOLD),
                "DWS_BENCH_TASKS": str(self.tasks),
                "DWS_BENCH_FAMILY_TASKS": str(self.family_tasks),
                "DWS_BENCH_POLL_INTERVAL": str(self.poll_interval),
                "DWS_BENCH_REGION": POOL.split("/")[0],
            }
        )
        return env

    # -- what the benchmark reads ----------------------------------------------------------------

    def ti_states(self, dag_id: str, run_id: str) -> dict[str, int]:
        """Mapped task instances of a run by state."""
        assert self.db is not None
        rows = self.db.query(
            "SELECT coalesce(state, 'none'), count(*) FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s AND map_index >= 0 GROUP BY 1",
            (dag_id, run_id),
        )
        return {state: int(count) for state, count in rows}

    def last_end(self, dag_id: str, run_id: str) -> float | None:
        """When the last mapped task instance of a run ended (epoch seconds), None if none did."""
        assert self.db is not None
        rows = self.db.query(
            "SELECT max(end_date) FROM task_instance WHERE dag_id = %s AND run_id = %s AND map_index >= 0",
            (dag_id, run_id),
        )
        return rows[0][0].timestamp() if rows and rows[0][0] else None

    def unassigned_triggers(self, dag_id: str, run_id: str) -> int:
        """Deferred task instances of a run whose trigger no triggerer runs yet."""
        assert self.db is not None
        rows = self.db.query(
            "SELECT count(*) FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
            "WHERE ti.dag_id = %s AND ti.run_id = %s AND t.triggerer_id IS NULL",
            (dag_id, run_id),
        )
        return int(rows[0][0])

    def trigger_log_times(
        self, dag_id: str, run_id: str, task_id: str | None = TASK_ID
    ) -> dict[int, dict[str, float]]:
        """Per map index, from the trigger logs: when the first status arrived and when it fired
        (``task_id`` None: the run has one mapped task, whatever its id)."""
        times: dict[int, dict[str, float]] = {}
        run_dir = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        for path in run_dir.glob("**/*.log.trigger.*.log"):
            # Airflow 3.1's trigger log records carry no map_index: the file's folder names it.
            folder = re.search(r"map_index=(-?\d+)", str(path))
            with contextlib.suppress(OSError):
                for line in path.read_text(errors="replace").splitlines():
                    _log_line(line, times, int(folder.group(1)) if folder else -1)
        # Airflow 3.3 closes a trigger's log file when the runner reports it finished; lines still
        # in flight on the log socket then land in the triggerer's own log, the fired line often.
        fired = re.compile(
            rf"^(\S+) \[info\s*\] Trigger fired event .* name='{re.escape(dag_id)}/{re.escape(run_id)}/"
            rf"{re.escape(task_id) if task_id else '[^/]+'}/(\d+)/"
        )
        for triggerer in self.triggerers:
            for line in triggerer.log_path.read_text(errors="replace").splitlines():
                if (match := fired.match(line)) is not None:
                    times.setdefault(int(match.group(2)), {}).setdefault("fired", epoch(match.group(1)))
        return times

    def stalls(self, service_log: Path, start: float, end: float) -> list[float]:
        """Event-loop stalls above 50 ms that the triggerer's watchdog logged overlapping [start, end].

        The watchdog logs a stall when it ends, with its length: one that began in the window
        counts even if it ended after it.
        """
        found = []
        for line in service_log.read_text(errors="replace").splitlines():
            match = STALL_LINE.match(line)
            if match is None:
                continue
            ended, blocked = epoch(match.group(1)), float(match.group(2))
            if ended >= start and ended - blocked <= end:
                found.append(blocked - WATCHDOG_SLEEP)
        return found


def _log_line(line: str, times: dict[int, dict[str, float]], map_index: int = -1) -> None:
    """Note a trigger log line's first status or firing in ``times`` (by the record's map index, else
    ``map_index``)."""
    if '"Trigger fired event"' not in line and not any(w in line for w in WAITING_LINES):
        return  # most lines: skip the JSON decoding
    try:
        record = json.loads(line)
    except ValueError:
        return  # a line still being written
    seen = times.setdefault(int(record.get("map_index", map_index)), {})
    at = epoch(record["timestamp"])
    if record.get("event") == "Trigger fired event":
        seen.setdefault("fired", at)
    elif str(record.get("event")).startswith(WAITING_LINES):
        seen.setdefault("waiting", at)
