"""The triggerer scale numbers again, with a real ``airflow triggerer`` and N deferred mapped tasks.

``benchmarks/triggerer_scale.py`` measures the provider's triggers in one event loop. This script
checks those numbers in a real Airflow deployment (``tests.faults.harness.Deployment``: PostgreSQL,
api-server, scheduler with LocalExecutor, dag-processor, one triggerer) against ``dws-emulator``:

1. start the deployment with the emulator pool ``us-central1/NVIDIA_H100_80GB`` at 0 GPUs;
2. run ``dws_bench_warmup`` once with capacity, so the trigger runner has loaded the provider,
   then read its idle memory and CPU (Airflow's own cost, taken off the waiting one);
3. trigger ``dws_bench_fanout`` (``benchmarks/airflow_dags/``: the example's 8 x H100 Flex Start
   task mapped N times) and time how long the N tasks take to submit and defer;
4. once every trigger has its first status, measure over whole poll cycles: emulator calls,
   CPU of the triggerer process tree, memory of the trigger runner, event-loop stalls (Airflow's
   own watchdog lines);
5. give capacity for all N jobs at once and read, from each task's trigger log, when its trigger
   fired: capacity-to-event latency, and the event-loop stalls of that burst of N events;
6. unless ``--no-stock``, once those N tasks finished: the same burst with a stock trigger, N
   tasks of ``dws_bench_stock`` deferred on ``DateTimeTrigger`` firing at one moment, and the
   burst table (longest and total stall, provider against stock; PASS at most 1.2x each).

``--profile DIR`` records the trigger runner and its supervisor with py-spy during each burst;
``benchmarks/burst_profile.py`` says which functions the loop's busy stretches ran.

The in-loop column is ``triggerer_scale.py --sizes N --modes provider`` run afterwards (or read
from ``--in-loop-json``). Unless ``--no-preload``, the scheduler imports the provider once, so
the task processes it forks skip that import (see ``PRELOAD``); the triggerer is left stock.

Run ``make bench-airflow`` (N=500) or ``.venv/bin/python benchmarks/triggerer_airflow.py --tasks 20``.
Needs the local PostgreSQL server the fault matrix uses (see ``tests/faults/README.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests/ is not an installed package

from tests.faults.harness import Deployment, HarnessError, probe_postgres, wait_for  # noqa: E402

DAGS_FOLDER = Path(__file__).resolve().parent / "airflow_dags"
IN_LOOP_SCRIPT = Path(__file__).resolve().parent / "triggerer_scale.py"
POOL = "us-central1/NVIDIA_H100_80GB"
GPUS_PER_JOB = 8
WARMUP_DAG = "dws_bench_warmup"
FANOUT_DAG = "dws_bench_fanout"
TASK_ID = "fine_tune"
#: The stock burst: N tasks deferred on ``DateTimeTrigger`` firing at one moment (``stock_burst.py``).
STOCK_DAG = "dws_bench_stock"
STOCK_TASK_ID = "wait"
#: A burst's stalls are counted from capacity (or the moment) until this long after the last event:
#: Airflow's handling of the events (sending them to the supervisor, closing the trigger logs)
#: goes on after the last one fired.
BURST_TAIL = 5.0
#: PASS when the provider's burst stalls the loop at most this much more than the stock one.
BURST_TARGET = 1.2
LIST_METHOD = "google.cloud.aiplatform.v1.JobService/ListCustomJobs"
#: Airflow's watchdog sleeps 0.1 s and logs when the sleep took longer than this threshold; a
#: stall is the excess over the sleep, so this logs every stall above 50 ms.
WATCHDOG_SLEEP = 0.1
WATCHDOG_THRESHOLD = 0.15
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: ``airflow_local_settings.py`` unless ``--no-preload``: the scheduler imports the operator's module
#: once, so the LocalExecutor workers it forks, and the task processes they fork, start with it
#: loaded instead of each spending seconds of CPU importing it while parsing the DAG file. Only the
#: scheduler: the triggerer stays as it would be.
PRELOAD = """import sys

if sys.argv[1:2] == ["scheduler"]:
    import airflow_provider_dws.operators.vertex_ai  # noqa: F401
"""
STALL_LINE = re.compile(r"^(\S+) \[\w+\s*\] Triggerer's async thread was blocked for ([\d.]+) seconds")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- processes --------------------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, CPU seconds of itself and its reaped children)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # exited while we looked
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = text[text.rindex(")") + 2 :].split()
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        table[int(entry.name)] = (int(fields[1]), ticks / CLK_TCK)
    return table


def _tree(root: int, table: Mapping[int, tuple[int, float]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            found.append(pid)
            todo.extend(children.get(pid, ()))
    return found


def tree_cpu(roots: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each root's process tree, processes that already ended included.

    A live process counts its own time plus that of its reaped children; a child still running
    counts itself, so nothing is counted twice.
    """
    table = _proc_table()
    return {root: sum(table[pid][1] for pid in _tree(root, table)) for root in roots}


def process_cpu(pid: int) -> float:
    """CPU seconds of one process (with its reaped children), 0 if it is gone."""
    return _proc_table().get(pid, (0, 0.0))[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def trigger_runner(triggerer_pid: int) -> int:
    """The trigger runner: the child process of ``airflow triggerer`` that runs the event loop."""
    table = _proc_table()
    children = [pid for pid, (ppid, _) in table.items() if ppid == triggerer_pid]
    if not children:
        raise HarnessError(f"the triggerer (pid {triggerer_pid}) has no trigger runner process")
    # Only one child is expected; should Airflow add a helper, the runner is the biggest.
    return max(children, key=rss_mib)


# -- the deployment ---------------------------------------------------------------------------------


class BenchDeployment(Deployment):
    """The fault matrix's deployment with the benchmark's DAG folder and sizing."""

    def __init__(
        self, tasks: int, poll_interval: float, parallelism: int, preload: bool, workdir: Path | None
    ) -> None:
        super().__init__({POOL: 0}, [WARMUP_DAG, FANOUT_DAG, STOCK_DAG], workdir=workdir)
        self.tasks = tasks
        self.poll_interval = poll_interval
        self.parallelism = parallelism
        self.asyncio_debug = False
        if preload:
            config = self.home / "config"  # on sys.path of every Airflow process
            config.mkdir(parents=True, exist_ok=True)
            (config / "airflow_local_settings.py").write_text(PRELOAD)

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
        env.update(
            {
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(16, self.parallelism)),
                "AIRFLOW__CORE__MAX_MAP_LENGTH": str(max(1024, self.tasks)),
                "AIRFLOW__TRIGGERER__CAPACITY": str(max(1000, self.tasks + 10)),
                # Airflow's defaults: the harness heartbeats every second for its takeover
                # scenarios, which would add the triggerer's own DB writes to the CPU measured.
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "5",
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
                "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": str(WATCHDOG_THRESHOLD),
                "DWS_BENCH_TASKS": str(self.tasks),
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

    def unassigned_triggers(self, dag_id: str, run_id: str) -> int:
        assert self.db is not None
        rows = self.db.query(
            "SELECT count(*) FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
            "WHERE ti.dag_id = %s AND ti.run_id = %s AND t.triggerer_id IS NULL",
            (dag_id, run_id),
        )
        return int(rows[0][0])

    def trigger_log_times(
        self, dag_id: str, run_id: str, task_id: str = TASK_ID
    ) -> dict[int, dict[str, float]]:
        """Per map index, from the trigger logs: when the first status arrived and when it fired."""
        times: dict[int, dict[str, float]] = {}
        run_dir = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        for path in run_dir.glob("**/*.log.trigger.*.log"):
            with contextlib.suppress(OSError):
                for line in path.read_text(errors="replace").splitlines():
                    if '"Trigger fired event"' not in line and "Waiting for capacity [" not in line:
                        continue  # most lines: skip the JSON decoding
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a line still being written
                    seen = times.setdefault(int(record.get("map_index", -1)), {})
                    at = _epoch(record["timestamp"])
                    if record.get("event") == "Trigger fired event":
                        seen.setdefault("fired", at)
                    elif str(record.get("event")).startswith("Waiting for capacity ["):
                        seen.setdefault("waiting", at)
        # Airflow 3.3 closes a trigger's log file when the runner reports it finished; lines still
        # in flight on the log socket then land in the triggerer's own log, the fired line often.
        fired = re.compile(
            rf"^(\S+) \[info\s*\] Trigger fired event .* name='{re.escape(dag_id)}/{re.escape(run_id)}/"
            rf"{re.escape(task_id)}/(\d+)/"
        )
        for triggerer in self.triggerers:
            for line in triggerer.log_path.read_text(errors="replace").splitlines():
                if (match := fired.match(line)) is not None:
                    times.setdefault(int(match.group(2)), {}).setdefault("fired", _epoch(match.group(1)))
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
            ended, blocked = _epoch(match.group(1)), float(match.group(2))
            if ended >= start and ended - blocked <= end:
                found.append(blocked - WATCHDOG_SLEEP)
        return found


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


# -- phases ---------------------------------------------------------------------------------------


def warm_up(dep: BenchDeployment, timeout: float) -> None:
    """Run the one-task DAG with capacity, so the runner has loaded the provider and its clients."""
    assert dep.api is not None and dep.emulator is not None
    api = dep.api
    dep.emulator.control.set_capacity({POOL: GPUS_PER_JOB})
    run_id = f"warmup-{secrets.token_hex(3)}"
    api.trigger(WARMUP_DAG, run_id)

    def done() -> bool:
        state = api.dag_run(WARMUP_DAG, run_id)["state"]
        if state == "failed":
            raise HarnessError(f"the warm-up run failed; states {dep.ti_states(WARMUP_DAG, run_id)}")
        return state == "success"

    wait_for(done, timeout, "the warm-up run to succeed", 2.0)
    dep.emulator.control.set_capacity({POOL: 0})


def defer_all(dep: BenchDeployment, run_id: str, roots: Mapping[str, int], timeout: float) -> dict[str, Any]:
    """Trigger the fan-out run and wait until all N tasks are deferred; timings and CPU per task."""
    assert dep.api is not None
    n = dep.tasks
    cpu_before = tree_cpu(roots.values())
    began = time.monotonic()
    dep.api.trigger(FANOUT_DAG, run_id)
    first_deferred: float | None = None
    last_report = began
    states: dict[str, int] = {}
    timed_out = False
    while True:
        states = dep.ti_states(FANOUT_DAG, run_id)
        deferred = states.get("deferred", 0)
        now = time.monotonic()
        if deferred and first_deferred is None:
            first_deferred = now - began
        bad = {s: c for s, c in states.items() if s in ("failed", "upstream_failed", "up_for_retry")}
        if bad:
            raise HarnessError(f"mapped tasks failed before deferring: {states}")
        if deferred >= n:
            break
        if now - began > timeout:
            timed_out = True
            break
        if now - last_report >= 30:
            rate = deferred / (now - began) * 60
            say(f"  {deferred}/{n} deferred after {now - began:.0f}s ({rate:.1f}/min); states {states}")
            last_report = now
        time.sleep(2.0)
    elapsed = time.monotonic() - began
    cpu_after = tree_cpu(roots.values())
    cpu = {name: cpu_after[pid] - cpu_before[pid] for name, pid in roots.items()}
    deferred = states.get("deferred", 0)
    return {
        "seconds": elapsed,
        "first_deferred_seconds": first_deferred,
        "deferred": deferred,
        "timed_out": timed_out,
        "states": states,
        "cpu_seconds": cpu,
        "cpu_per_task": sum(cpu.values()) / max(1, deferred),
        "seconds_per_task": elapsed / max(1, deferred),
    }


def wait_all_waiting(dep: BenchDeployment, run_id: str, timeout: float) -> float:
    """Wait until the triggerer runs every trigger and each logged its first status; seconds taken."""
    began = time.monotonic()

    def ready() -> bool:
        if dep.unassigned_triggers(FANOUT_DAG, run_id):
            return False
        times = dep.trigger_log_times(FANOUT_DAG, run_id)
        return sum(1 for t in times.values() if "waiting" in t) >= dep.tasks

    wait_for(ready, timeout, f"all {dep.tasks} triggers to report their first status", 5.0)
    return time.monotonic() - began


def measure_idle(triggerer: int, runner: int, seconds: float) -> dict[str, float]:
    """CPU of the triggerer with no trigger at all: Airflow's own cost, taken off the waiting one."""
    cpu0, runner0, start = tree_cpu([triggerer])[triggerer], process_cpu(runner), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    return {
        "seconds": elapsed,
        "cpu_seconds": tree_cpu([triggerer])[triggerer] - cpu0,
        "runner_cpu_seconds": process_cpu(runner) - runner0,
    }


def measure_waiting(
    dep: BenchDeployment, triggerer: int, runner: int, service_log: Path, cycles: int
) -> dict[str, Any]:
    """Emulator calls, CPU, memory and stalls over exactly ``cycles`` poll cycles of N waiting."""
    assert dep.emulator is not None
    control = dep.emulator.control
    interval = dep.poll_interval
    # Start half an interval after a list, so the window holds exactly ``cycles`` polls
    # wherever the poller's phase happens to be.
    control.reset_stats()

    def listed() -> bool:
        return control.stats()["calls"].get(LIST_METHOD, 0) > 0

    wait_for(listed, interval * 2 + 30, "the shared poller's next list", 0.1)
    time.sleep(interval / 2)
    control.reset_stats()
    start_wall, start = time.time(), time.monotonic()
    cpu0 = tree_cpu([triggerer])[triggerer]
    runner_cpu0 = process_cpu(runner)
    rss_samples = [rss_mib(runner)]
    end = start + cycles * interval
    while time.monotonic() < end:
        time.sleep(min(5.0, max(0.0, end - time.monotonic())))
        rss_samples.append(rss_mib(runner))
    stats = control.stats()
    seconds = time.monotonic() - start
    cpu = tree_cpu([triggerer])[triggerer] - cpu0
    runner_cpu = process_cpu(runner) - runner_cpu0
    stalls = dep.stalls(service_log, start_wall, time.time())
    calls = dict(stats["calls"])
    return {
        "seconds": seconds,
        "cycles": cycles,
        "calls": calls,
        "calls_total": int(stats["total"]),
        "lists": calls.get(LIST_METHOD, 0),
        "cpu_seconds": cpu,
        "runner_cpu_seconds": runner_cpu,
        "rss_mib": statistics.median(rss_samples),
        "rss_max_mib": max(rss_samples),
        "stalls": stalls,
    }


@contextlib.contextmanager
def profiled(directory: str | None, name: str, pids: Mapping[str, int]) -> Iterator[None]:
    """With ``--profile DIR``: ``py-spy record`` each process while the block runs.

    Chrome-trace output (``DIR/<name>-<process>.json``, one timestamped sample per thread every
    10 ms, idle threads included) lets a stall the watchdog logged be matched with what the event
    loop's thread was doing during it (``benchmarks/burst_profile.py``).
    """
    if not directory:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    Path(directory).mkdir(parents=True, exist_ok=True)
    spies = []
    for process, pid in pids.items():
        out = Path(directory) / f"{name}-{process}.json"
        cmd = [str(spy), "record", "--pid", str(pid), "--idle", "--threads", "--format", "chrometrace"]
        spies.append(subprocess.Popen([*cmd, "--output", str(out)], stdout=subprocess.DEVNULL))
    time.sleep(2.0)  # py-spy attaches
    try:
        yield
    finally:
        for proc in spies:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for proc in spies:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        say(f"profiles written to {directory}/{name}-*.json")


def burst_stalls(
    dep: BenchDeployment, service_log: Path, began: float, fired: Sequence[float]
) -> dict[str, Any]:
    """The watchdog's stalls from ``began`` until :data:`BURST_TAIL` after the last event."""
    end = (max(fired) if fired else time.time()) + BURST_TAIL
    return {"stalls": dep.stalls(service_log, began, end), "window": [began, end]}


def capacity_latency(
    dep: BenchDeployment, run_id: str, service_log: Path, timeout: float, profile: Mapping[str, Any]
) -> dict[str, Any]:
    """Give every job its GPUs at once; per task, how long until its trigger fired."""
    assert dep.emulator is not None
    n = dep.tasks
    with profiled(profile.get("dir"), "provider", profile.get("pids", {})):
        given = time.time()
        dep.emulator.control.set_capacity({POOL: GPUS_PER_JOB * n})

        # The database says cheaply when no task is deferred any more; the trigger logs, read only
        # then (reading N files a second would take CPU from the triggerer), say when each one fired.
        with contextlib.suppress(HarnessError):
            wait_for(lambda: not dep.ti_states(FANOUT_DAG, run_id).get("deferred"), timeout, "events", 0.5)
        time.sleep(BURST_TAIL)

    def fired() -> dict[int, dict[str, float]] | None:
        times = dep.trigger_log_times(FANOUT_DAG, run_id)
        return times if sum(1 for t in times.values() if "fired" in t) >= n else None

    try:
        times = wait_for(fired, 30, f"all {n} trigger logs to say 'Trigger fired event'", 2.0)
    except HarnessError:
        times = dep.trigger_log_times(FANOUT_DAG, run_id)
    latencies = [t["fired"] - given for t in times.values() if "fired" in t]
    # When the emulator ended each job: what is left is the provider noticing it.
    ended = {}
    for record in dep.emulator.control.requests():
        labels = record.get("labels") or {}
        if labels.get("dws_dag") == FANOUT_DAG and record.get("end_time"):
            ended[int(labels.get("dws_map", -1))] = _epoch(record["end_time"])
    noticed = [t["fired"] - ended[i] for i, t in times.items() if "fired" in t and i in ended]
    return {
        "fired": len(latencies),
        "latencies": latencies,
        "end_to_event": noticed,
        "jobs_ended_seconds": (max(ended.values()) - given) if ended else None,
        **burst_stalls(dep, service_log, given, [given + x for x in latencies]),
    }


def stock_burst(
    dep: BenchDeployment, service_log: Path, lead: float, timeout: float, profile: Mapping[str, Any]
) -> dict[str, Any]:
    """N tasks deferred on ``DateTimeTrigger`` until one moment ``lead`` seconds away; its stalls.

    The moment must come after every task deferred and its trigger runs: ``lead`` is chosen from
    how long the provider's N tasks took to defer (the stock task, with no API call, is faster).
    """
    assert dep.api is not None
    n = dep.tasks
    run_id = f"stock-{secrets.token_hex(3)}"
    fire_at = time.time() + lead
    moment = datetime.fromtimestamp(fire_at, timezone.utc).isoformat()
    say(f"triggering {STOCK_DAG} run {run_id}: {n} tasks on DateTimeTrigger({moment})")
    dep.api.trigger(STOCK_DAG, run_id, {"fire_at": moment})

    def all_deferred() -> bool:
        states = dep.ti_states(STOCK_DAG, run_id)
        if states.get("failed") or states.get("upstream_failed"):
            raise HarnessError(f"stock tasks failed before deferring: {states}")
        return states.get("deferred", 0) >= n and not dep.unassigned_triggers(STOCK_DAG, run_id)

    ready = True
    try:
        wait_for(all_deferred, max(1.0, fire_at - time.time() - 3.0), f"all {n} stock tasks to defer", 2.0)
    except HarnessError:
        ready = False
    deferred_by = dep.ti_states(STOCK_DAG, run_id).get("deferred", 0)
    say(f"{deferred_by}/{n} stock tasks deferred {fire_at - time.time():.0f}s before the moment")
    time.sleep(max(0.0, fire_at - time.time() - 2.0))
    with profiled(profile.get("dir"), "stock", profile.get("pids", {})):
        with contextlib.suppress(HarnessError):
            wait_for(
                lambda: time.time() > fire_at and not dep.ti_states(STOCK_DAG, run_id).get("deferred"),
                timeout,
                "the stock events",
                0.5,
            )
        time.sleep(BURST_TAIL)

    def fired() -> dict[int, dict[str, float]] | None:
        times = dep.trigger_log_times(STOCK_DAG, run_id, STOCK_TASK_ID)
        return times if sum(1 for t in times.values() if "fired" in t) >= n else None

    try:
        times = wait_for(fired, 30, f"all {n} stock trigger logs to say 'Trigger fired event'", 2.0)
    except HarnessError:
        times = dep.trigger_log_times(STOCK_DAG, run_id, STOCK_TASK_ID)
    at = [t["fired"] for t in times.values() if "fired" in t]
    return {
        "run_id": run_id,
        "ready": ready,
        "deferred_before_moment": deferred_by,
        "fired": len(at),
        "latencies": [x - fire_at for x in at],
        **burst_stalls(dep, service_log, fire_at, at),
    }


def wait_finished(
    dep: BenchDeployment, run_id: str, timeout: float, dag_id: str = FANOUT_DAG
) -> tuple[str, float]:
    """Wait for a run to end (every task resumed in a worker); its state and seconds."""
    assert dep.api is not None
    api = dep.api
    began = time.monotonic()

    def ended() -> str | None:
        state = str(api.dag_run(dag_id, run_id)["state"])
        return state if state in ("success", "failed") else None

    state = wait_for(ended, timeout, f"the {dag_id} run to end", 5.0)
    return state, time.monotonic() - began


# -- the in-loop numbers --------------------------------------------------------------------------


def in_loop(tasks: int, json_path: str | None, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """The provider row of ``triggerer_scale.py`` for the same N and why (or why there is none)."""
    if json_path:
        source = json_path
        rows = json.loads(Path(json_path).read_text()).get("rows", [])
    else:
        if not IN_LOOP_SCRIPT.exists():
            return None, f"{IN_LOOP_SCRIPT.name} does not exist"
        script = [sys.executable, str(IN_LOOP_SCRIPT)]
        usage = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=120).stdout
        option = next((o for o in ("--modes", "--mode") if re.search(rf"{o}\b", usage)), None)
        if option is None:
            return None, (
                f"{IN_LOOP_SCRIPT.name} has no provider-only mode (it always runs its baseline too); run "
                f"`{IN_LOOP_SCRIPT.name} --sizes {tasks} --json FILE` and pass --in-loop-json FILE"
            )
        with tempfile.TemporaryDirectory(prefix="dws-bench-") as tmp:
            out = Path(tmp) / "in-loop.json"
            cmd = [*script, "--sizes", str(tasks), option, "provider", "--interval", "30", "--json", str(out)]
            say(f"running {' '.join(cmd[1:])}")
            # Exit status 1 means a target was missed: still a result.
            done = subprocess.run(cmd, timeout=timeout, check=False, capture_output=True, text=True)
            if not out.exists():
                tail = (done.stdout + done.stderr)[-2000:]
                return None, f"{IN_LOOP_SCRIPT.name} wrote no results (exit {done.returncode}):\n{tail}"
            rows = json.loads(out.read_text()).get("rows", [])
        source = IN_LOOP_SCRIPT.name
    row = next((r for r in rows if r.get("size") == tasks and r.get("mode") == "provider"), None)
    if row is None:
        return None, f"no provider row for N={tasks} in {source}"
    return row, f"in-loop: provider row of {source} (poll every {row['interval']:g}s, normalized to 30s)"


# -- report ---------------------------------------------------------------------------------------


def _ms(stalls: Sequence[float]) -> str:
    return "< 50 ms" if not stalls else f"{max(stalls) * 1000:.0f} ms"


def _latency(value: float | None, interval: float) -> str:
    return "-" if value is None else f"{value:.1f} s ({value / interval:.2f} I)"


def report(result: dict[str, Any], row: dict[str, Any] | None, source: str) -> str:
    """The comparison table and the run's details, as printed."""
    n, interval = result["tasks"], result["poll_interval"]
    w, lat, d = result["waiting"], result["latency"], result["defer"]
    cycles = w["cycles"]
    per_minute = 2.0  # poll cycles per minute at the real 30 s interval
    rss_per_trigger = (w["rss_mib"] - result["rss_idle_mib"]) * 1024 / n
    other = row or {}

    def theirs(key: str, fmt: str) -> str:
        value = other.get(key)
        return "-" if value is None else fmt.format(value)

    in_loop_interval = float(other.get("interval") or 1.0)
    idle = result["idle"]

    def gross(cpu: float) -> float:
        return cpu / w["seconds"] * 60.0  # per real minute, like the idle rate it is shown with

    def idle_rate(cpu: float) -> float:
        return cpu / idle["seconds"] * 60.0

    def net(cpu: float, idle_cpu: float) -> float:
        # As the in-loop benchmark does: the by-the-second cost is taken off before normalizing.
        return max(0.0, cpu - idle_cpu / idle["seconds"] * w["seconds"]) / cycles * per_minute

    rows: list[tuple[str, str, str, str]] = [
        (
            "API requests / min",
            f"{w['calls_total'] / cycles * per_minute:,.1f}",
            theirs("requests_per_minute", "{:,.1f}"),
            "emulator counters, per poll cycle x 2",
        ),
        (
            "CPU s / min added by N waiting",
            f"{net(w['runner_cpu_seconds'], idle['runner_cpu_seconds']):.3f}",
            theirs("cpu_per_minute", "{:.3f}"),
            "trigger runner utime+stime, less its rate with no trigger",
        ),
        (
            "CPU s / min, trigger runner",
            f"{gross(w['runner_cpu_seconds']):.3f} / {idle_rate(idle['runner_cpu_seconds']):.3f}",
            "-",
            "per real minute with N waiting / with none (Airflow's own loop: watchdog, sync)",
        ),
        (
            "CPU s / min, triggerer tree",
            f"{gross(w['cpu_seconds']):.3f} / {idle_rate(idle['cpu_seconds']):.3f}",
            "-",
            "same for airflow triggerer + trigger runner (heartbeats, DB)",
        ),
        (
            "RSS per waiting trigger",
            f"{rss_per_trigger:,.1f} KiB",
            theirs("rss_per_trigger_kb", "{:,.1f} KiB"),
            "runner VmRSS with N waiting - idle after warm-up, / N",
        ),
        (
            "longest stall, waiting",
            _ms(w["stalls"]),
            theirs("max_stall_ms", "{:.0f} ms"),
            "airflow: watchdog lines (> 50 ms only); in-loop: 5 ms probe, waiting and events",
        ),
        (
            "longest stall, events",
            _ms(lat["stalls"]),
            "-",
            "from capacity until the last trigger fired",
        ),
    ]
    p50 = percentile(lat["latencies"], 50) if lat["latencies"] else None
    p99 = percentile(lat["latencies"], 99) if lat["latencies"] else None
    rows += [
        (
            "capacity-to-event p50",
            _latency(p50, interval),
            _latency(other.get("latency_p50"), in_loop_interval) if row else "-",
            "I = poll interval",
        ),
        (
            "capacity-to-event p99",
            _latency(p99, interval),
            _latency(other.get("latency_p99"), in_loop_interval) if row else "-",
            "airflow: 'Trigger fired event' in each task's trigger log",
        ),
    ]
    widths = [max(len(r[i]) for r in [("metric", "airflow", "in-loop", ""), *rows]) for i in range(3)]
    header = f"{'metric':<{widths[0]}}  {'airflow':>{widths[1]}}  {'in-loop':>{widths[2]}}  note"
    lines = [
        f"Triggerer scale with a real Airflow triggerer: N={n} deferred mapped Flex Start tasks, "
        f"poll interval {interval:g}s, {cycles} cycles measured ({w['seconds']:.0f}s); "
        "per-minute figures at a 30s interval",
        "",
        header,
        "-" * len(header),
    ]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {note}" for a, b, c, note in rows]
    lines += ["", source if row else f"in-loop column empty: {source}", ""]
    cpu = d["cpu_seconds"]
    lines += [
        f"Deferring: {d['deferred']}/{n} tasks deferred in {d['seconds']:.0f}s ({d['seconds_per_task']:.2f}s "
        f"per task; first after {d['first_deferred_seconds'] or 0:.0f}s; parallelism {result['parallelism']}, "
        f"provider {'preloaded by the scheduler' if result['preload'] else 'imported by every task'})",
        f"  Airflow CPU {sum(cpu.values()):.0f}s = {d['cpu_per_task']:.2f}s per task: "
        + ", ".join(f"{k} {v:.0f}s" for k, v in cpu.items()),
        f"Waiting: emulator calls {w['calls_total']} in {cycles} cycles ({_calls(w['calls'])}); "
        f"trigger runner RSS {result['rss_cold_mib']:.0f} MiB cold, {result['rss_idle_mib']:.0f} MiB idle after "
        f"the warm-up, {w['rss_mib']:.0f} MiB (max {w['rss_max_mib']:.0f}) with {n} waiting",
        f"Events: {lat['fired']}/{n} triggers fired; the emulator ended the last job "
        f"{lat['jobs_ended_seconds'] or 0:.1f}s after capacity; job end to trigger fired p50 "
        f"{_opt(lat['end_to_event'], 50)} p99 {_opt(lat['end_to_event'], 99)}; first and last event "
        f"{min(lat['latencies'], default=0):.1f}s and {max(lat['latencies'], default=0):.1f}s after capacity "
        "(capacity came once, at one random point of the poll cycle: the spread is the cost of N events, "
        "the offset mostly that point)",
    ]
    if "finished" in result:
        state, seconds = result["finished"]
        lines.append(f"The fan-out run ended {state} {seconds:.0f}s after the last trigger fired")
    lines.append(f"Load average at the end: {result['loadavg']} (on {os.cpu_count()} CPUs)")
    return "\n".join(lines)


#: The watchdog logs only stalls above this: a burst with none logged stalled less, and a ratio
#: to it is taken against this floor.
STALL_FLOOR = WATCHDOG_THRESHOLD - WATCHDOG_SLEEP


def burst_report(result: Mapping[str, Any]) -> tuple[str, bool]:
    """The provider's burst of N events against the stock one: stalls, ratios and PASS/FAIL."""
    ours, stock = result["latency"], result.get("stock")
    if not stock:
        return "", True
    n = result["tasks"]

    def spread(burst: Mapping[str, Any]) -> str:
        lat = burst["latencies"]
        return f"{max(lat) - min(lat):.1f} s" if lat else "-"

    def total(stalls: Sequence[float]) -> float:
        return sum(stalls)

    checks = []
    rows = [
        ("events fired", f"{ours['fired']}/{n}", f"{stock['fired']}/{n}", ""),
        ("first to last event", spread(ours), spread(stock), ""),
        ("stalls over 50 ms", str(len(ours["stalls"])), str(len(stock["stalls"])), ""),
    ]
    for label, pick in (("longest stall", max), ("total stall", total)):
        mine = pick(ours["stalls"]) if ours["stalls"] else 0.0
        theirs = pick(stock["stalls"]) if stock["stalls"] else 0.0
        ratio = max(mine, STALL_FLOOR) / max(theirs, STALL_FLOOR)
        checks.append((label, ratio))
        rows.append((label, f"{mine * 1000:.0f} ms", f"{theirs * 1000:.0f} ms", f"{ratio:.2f}x"))
    widths = [max(len(r[i]) for r in [("metric", "provider", "stock", "ratio"), *rows]) for i in range(4)]
    header = (
        f"{'metric':<{widths[0]}}  {'provider':>{widths[1]}}  {'stock':>{widths[2]}}  {'ratio':>{widths[3]}}"
    )
    lines = [
        f"Burst of {n} events on the same triggerer: the provider's triggers when capacity came for all "
        f"{n} jobs at once, and {n} tasks on airflow.providers.standard's DateTimeTrigger firing at one "
        f"moment; stalls from capacity (the moment) until {BURST_TAIL:g}s after the last event",
        "",
        header,
        "-" * len(header),
    ]
    lines += [
        f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d:>{widths[3]}}" for a, b, c, d in rows
    ]
    lines.append("")
    ok = stock["ready"] and ours["fired"] >= n and stock["fired"] >= n
    if not stock["ready"]:
        lines.append(
            f"FAIL  the stock burst is not valid: only {stock['deferred_before_moment']}/{n} tasks had "
            "deferred before the moment"
        )
    for label, ratio in checks:
        verdict = "PASS" if ratio <= BURST_TARGET else "FAIL"
        ok = ok and verdict == "PASS"
        lines.append(f"{verdict}  {label}: provider/stock {ratio:.2f}x (target <= {BURST_TARGET:g}x)")
    lines.append(
        f"(the watchdog logs stalls over {STALL_FLOOR * 1000:.0f} ms only; a ratio takes "
        f"{STALL_FLOOR * 1000:.0f} ms for a burst that logged none)"
    )
    return "\n".join(lines), ok


def _opt(values: Sequence[float], pct: float) -> str:
    return "-" if not values else f"{percentile(values, pct):.1f}s"


def _calls(calls: Mapping[str, int]) -> str:
    return ", ".join(f"{k.rsplit('/', 1)[-1]} {v}" for k, v in sorted(calls.items())) or "none"


# -- main -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    problem = probe_postgres()
    if problem:
        say(f"cannot run: {problem}")
        return 2
    workdir = Path(args.workdir) if args.workdir else None
    dep = BenchDeployment(args.tasks, args.poll_interval, args.parallelism, args.preload, workdir)
    dep.asyncio_debug = args.asyncio_debug
    result: dict[str, Any] = {
        "tasks": args.tasks,
        "poll_interval": args.poll_interval,
        "parallelism": args.parallelism,
        "preload": args.preload,
    }
    began = time.monotonic()
    try:
        say(f"starting Airflow (workdir {dep.workdir})")
        dep.start(timeout=args.start_timeout)
        assert dep.api is not None
        triggerer = dep.triggerers[0]
        service_log = triggerer.log_path
        runner = trigger_runner(triggerer.pid)
        roots = {name: service.pid for name, service in dep.services.items()}
        roots["triggerer"] = triggerer.pid
        result["rss_cold_mib"] = rss_mib(runner)
        say(f"up in {dep.startup_seconds:.0f}s; trigger runner pid {runner}; warming up")
        warm_up(dep, args.step_timeout)
        time.sleep(5)  # the warm-up trigger is gone; let the runner settle
        result["rss_idle_mib"] = rss_mib(runner)
        say(f"measuring the idle triggerer for {args.idle_seconds:g}s")
        result["idle"] = measure_idle(triggerer.pid, runner, args.idle_seconds)
        run_id = f"bench-{secrets.token_hex(3)}"
        say(f"triggering {FANOUT_DAG} run {run_id}: {args.tasks} mapped tasks")
        result["defer"] = d = defer_all(dep, run_id, roots, args.defer_timeout)
        say(
            f"{d['deferred']}/{args.tasks} deferred in {d['seconds']:.0f}s: {d['seconds_per_task']:.2f}s "
            f"wall and {d['cpu_per_task']:.2f}s Airflow CPU per task "
            f"({', '.join(f'{k} {v:.0f}s' for k, v in d['cpu_seconds'].items())})"
        )
        if d["timed_out"]:
            say(f"gave up after --defer-timeout {args.defer_timeout:.0f}s; task states {d['states']}")
            return 1
        result["waiting_ready_seconds"] = wait_all_waiting(
            dep, run_id, args.poll_interval * 3 + args.step_timeout
        )
        say(f"all {args.tasks} waiting; measuring {args.cycles} poll cycles of {args.poll_interval:g}s")
        result["waiting"] = measure_waiting(dep, triggerer.pid, runner, service_log, args.cycles)
        profile = {"dir": args.profile, "pids": {"runner": runner, "supervisor": triggerer.pid}}
        say(f"giving capacity for all {args.tasks} jobs")
        result["latency"] = capacity_latency(
            dep, run_id, service_log, args.poll_interval * 3 + args.step_timeout, profile
        )
        if args.wait_finish or args.stock:
            # Before the stock burst: the resumed tasks would compete with it for the CPU.
            say("waiting for every task to resume and finish")
            result["finished"] = wait_finished(dep, run_id, args.defer_timeout)
        if args.stock:
            time.sleep(10)  # the runner settles
            # The stock task makes no API call and defers about twice as fast as the provider's
            # (153 s and 355 s for 500 on a loaded machine); the lead leaves room for that plus
            # the trigger assignment.
            lead = d["seconds"] * 0.8 + 45.0
            result["stock"] = stock_burst(dep, service_log, lead, args.step_timeout, profile)
            say("waiting for every stock task to resume and finish")
            result["stock_finished"] = wait_finished(
                dep, result["stock"]["run_id"], args.defer_timeout, STOCK_DAG
            )
        result["loadavg"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        result["seconds"] = time.monotonic() - began
    except HarnessError as err:
        say(f"failed: {err}")
        for service in [*dep.services.values(), *dep.triggerers]:
            print(f"--- {service.name} ---\n{service.tail(15)}", file=sys.stderr)
        return 1
    finally:
        dep.stop()
        if args.keep:
            say(f"logs kept in {dep.workdir}")
        else:
            dep.remove_workdir()
    # After the deployment is gone, so the in-loop run has the machine to itself.
    row, source = None, "skipped (--no-in-loop)"
    if args.in_loop:
        row, source = in_loop(args.tasks, args.in_loop_json, args.step_timeout * 4)
    print()
    print(report(result, row, source))
    burst, burst_ok = burst_report(result)
    if burst:
        print(f"\n{burst}")
    print(f"\nAirflow part {result['seconds'] / 60:.1f} min (start-up to the last event)")
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "in_loop": row}, indent=2, default=str))
    return 0 if result["latency"]["fired"] >= args.tasks and burst_ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=500, help="mapped tasks to defer (default 500)")
    parser.add_argument("--poll-interval", type=float, default=30.0, help="trigger poll interval, s")
    parser.add_argument("--cycles", type=int, default=4, help="poll cycles to measure while waiting")
    parser.add_argument(
        "--parallelism", type=int, default=8, help="Airflow core parallelism: task processes at once"
    )
    parser.add_argument(
        "--no-preload",
        dest="preload",
        action="store_false",
        help="let every task process import the provider itself (stock; several CPU s per task)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=60.0, help="how long to measure the idle triggerer's CPU"
    )
    parser.add_argument("--defer-timeout", type=float, default=1800.0, help="give up deferring after, s")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--step-timeout", type=float, default=300.0)
    parser.add_argument(
        "--asyncio-debug",
        action="store_true",
        help="diagnosis only: PYTHONASYNCIODEBUG=1 in the triggerer, which then logs each slow callback "
        "(and costs CPU: do not trust the CPU figures of such a run)",
    )
    parser.add_argument("--wait-finish", action="store_true", help="also wait for every task to finish")
    parser.add_argument(
        "--no-stock",
        dest="stock",
        action="store_false",
        help="skip the stock burst (N tasks on DateTimeTrigger firing at one moment) and its comparison",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="diagnosis: py-spy record the trigger runner and its supervisor during each burst, "
        "chrome-trace files in DIR (see benchmarks/burst_profile.py)",
    )
    parser.add_argument("--no-in-loop", dest="in_loop", action="store_false", help="no in-loop column")
    parser.add_argument(
        "--in-loop-json", help="take the in-loop column from this triggerer_scale.py --json output"
    )
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--from-json", help="print the report of an earlier --json file; run nothing")
    parser.add_argument("--workdir", help="work directory (kept); default: a temporary one")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        row = result.get("in_loop")
        source = f"in-loop: from {args.from_json}" if row else f"no in-loop numbers in {args.from_json}"
        if args.in_loop_json:
            row, source = in_loop(result["tasks"], args.in_loop_json, 0)
        print(report(result, row, source))
        burst, burst_ok = burst_report(result)
        if burst:
            print(f"\n{burst}")
        return 0 if burst_ok else 1
    if args.tasks < 1 or args.cycles < 1 or args.poll_interval <= 0:
        parser.error("--tasks, --cycles and --poll-interval must be positive")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
