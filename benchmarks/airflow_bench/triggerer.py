"""The triggerer's phases: warm-up, idle, N waiting over whole poll cycles, bursts of N events."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.faults.harness import HarnessError, wait_for

from .deployment import (
    FANOUT_DAG,
    GPUS_PER_JOB,
    POOL,
    WARMUP_DAG,
    BenchDeployment,
    epoch,
    say,
)
from .procs import process_cpu, rss_mib, tree_cpu

IN_LOOP_SCRIPT = Path(__file__).resolve().parents[1] / "triggerer_scale.py"
#: A burst's stalls are counted from capacity (or the moment) until this long after the last event:
#: Airflow's handling of the events (sending them to the supervisor, closing the trigger logs)
#: goes on after the last one fired.
BURST_TAIL = 5.0
LIST_METHOD = "google.cloud.aiplatform.v1.JobService/ListCustomJobs"


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


def wait_all_waiting(
    dep: BenchDeployment, run_id: str, timeout: float, dag_id: str = FANOUT_DAG, n: int | None = None
) -> float:
    """Wait until the triggerer runs every trigger and each logged its first status; seconds taken."""
    began = time.monotonic()
    n = dep.tasks if n is None else n

    def ready() -> bool:
        if dep.unassigned_triggers(dag_id, run_id):
            return False
        times = dep.trigger_log_times(dag_id, run_id, None)
        return sum(1 for t in times.values() if "waiting" in t) >= n

    wait_for(ready, timeout, f"all {n} triggers of {dag_id} to report their first status", 5.0)
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
    dep: BenchDeployment,
    run_id: str,
    service_log: Path,
    timeout: float,
    profile: Mapping[str, Any],
    worker_cpu: Callable[[], float],
) -> dict[str, Any]:
    """Give every job its GPUs at once; per task, how long until its trigger fired."""
    assert dep.emulator is not None
    n = dep.tasks
    with profiled(profile.get("dir"), "provider", profile.get("pids", {})):
        workers_before = worker_cpu()
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
            ended[int(labels.get("dws_map", -1))] = epoch(record["end_time"])
    noticed = [t["fired"] - ended[i] for i, t in times.items() if "fired" in t and i in ended]
    return {
        "given": given,
        "worker_cpu_before": workers_before,
        "fired": len(latencies),
        "latencies": latencies,
        "end_to_event": noticed,
        "jobs_ended_seconds": (max(ended.values()) - given) if ended else None,
        **burst_stalls(dep, service_log, given, [given + x for x in latencies]),
    }


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
