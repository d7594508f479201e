"""Deferral and resume of N mapped tasks, with the CPU of the workers that ran them.

The two phases a DAG author waits through, measured the same way for the provider's tasks and for
stock tasks deferring on ``DateTimeTrigger`` in the same deployment:

* **deferral**: from triggering the DAG run until all N task instances are ``deferred``;
* **resume**: from the moment the waits can end (capacity for all N requests; the stock trigger's
  moment) until the last of the N task instances ended ``success`` (its ``end_date``).

Worker CPU is that of everything under the scheduler (LocalExecutor's worker processes, each the
supervisor of the task it runs, and the task processes they fork; ended ones included), over both
phases.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from tests.faults.harness import HarnessError, wait_for

from .deployment import STOCK_DAG, STOCK_TASK_ID, BenchDeployment, say
from .procs import tree_cpu
from .triggerer import BURST_TAIL, burst_stalls, profiled

#: States a mapped task instance must not reach while the benchmark waits for it.
FAILED = ("failed", "upstream_failed", "up_for_retry")


def deferral(
    dep: BenchDeployment,
    dag_id: str,
    run_id: str,
    n: int,
    roots: Mapping[str, int],
    worker_cpu: Callable[[], float],
    timeout: float,
    conf: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Trigger a run of ``dag_id`` and wait until its N mapped tasks are deferred: timings and CPU."""
    assert dep.api is not None
    cpu_before, workers_before = tree_cpu(roots.values()), worker_cpu()
    began = time.monotonic()
    dep.api.trigger(dag_id, run_id, conf)
    first_deferred: float | None = None
    last_report = began
    states: dict[str, int] = {}
    timed_out = False
    while True:
        states = dep.ti_states(dag_id, run_id)
        deferred = states.get("deferred", 0)
        now = time.monotonic()
        if deferred and first_deferred is None:
            first_deferred = now - began
        if any(states.get(s) for s in FAILED):
            raise HarnessError(f"{dag_id}: mapped tasks failed before deferring: {states}")
        if deferred >= n:
            break
        if now - began > timeout:
            timed_out = True
            break
        if now - last_report >= 30:
            rate = deferred / (now - began) * 60
            say(f"  {deferred}/{n} deferred after {now - began:.0f}s ({rate:.1f}/min); states {states}")
            last_report = now
        time.sleep(0.5 if n < 100 else 2.0)
    elapsed = time.monotonic() - began
    workers = worker_cpu() - workers_before
    cpu_after = tree_cpu(roots.values())
    cpu = {name: cpu_after[pid] - cpu_before[pid] for name, pid in roots.items()}
    deferred = states.get("deferred", 0)
    return {
        "run_id": run_id,
        "seconds": elapsed,
        "first_deferred_seconds": first_deferred,
        "deferred": deferred,
        "timed_out": timed_out,
        "states": states,
        "cpu_seconds": cpu,
        "cpu_per_task": sum(cpu.values()) / max(1, deferred),
        "seconds_per_task": elapsed / max(1, deferred),
        "worker_cpu": workers,
    }


def resume(
    dep: BenchDeployment,
    dag_id: str,
    run_id: str,
    n: int,
    since: float,
    workers_before: float,
    worker_cpu: Callable[[], float],
    timeout: float,
) -> dict[str, Any]:
    """Wait until the N mapped tasks of a run succeeded; seconds from ``since`` (epoch) to the last
    one's end, and the workers' CPU from ``workers_before`` on."""
    states: dict[str, int] = {}

    def done() -> bool:
        nonlocal states
        states = dep.ti_states(dag_id, run_id)
        if any(states.get(s) for s in FAILED):
            raise HarnessError(f"{dag_id}: mapped tasks failed after resuming: {states}")
        return states.get("success", 0) >= n

    with contextlib.suppress(HarnessError):
        wait_for(done, timeout, f"the {n} tasks of {dag_id} to succeed", 1.0)
    workers = worker_cpu() - workers_before
    last = dep.last_end(dag_id, run_id)
    succeeded = states.get("success", 0)
    complete = last is not None and succeeded >= n
    # The first trigger that fired: what follows it is Airflow's and the task's work, whatever the
    # poll interval (the provider's triggers notice capacity at their next poll, the stock ones
    # fire at their moment).
    fired = [t["fired"] for t in dep.trigger_log_times(dag_id, run_id, None).values() if "fired" in t]
    return {
        "seconds": (last - since) if complete else None,
        "after_first_event": (last - min(fired)) if complete and fired and last else None,
        "succeeded": succeeded,
        "states": states,
        "worker_cpu": workers,
    }


def stock_run(
    dep: BenchDeployment,
    n: int,
    lead: float,
    roots: Mapping[str, int],
    worker_cpu: Callable[[], float],
    timeout: float,
    dag_id: str = STOCK_DAG,
    burst: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """N stock tasks deferred on ``DateTimeTrigger`` until one moment ``lead`` seconds away: their
    deferral, resume and worker CPU; with ``burst`` (the triggerer's log and the profile), the
    event-loop stalls of the N events.

    The moment must come after every task deferred and its trigger runs, else the run is not
    valid (``ready`` False): ``lead`` is chosen from how long the provider's tasks took.
    """
    run_id = f"stock-{secrets.token_hex(3)}"
    began = time.time()
    fire_at = began + lead
    moment = datetime.fromtimestamp(fire_at, timezone.utc).isoformat()
    say(f"triggering {dag_id} run {run_id}: {n} tasks on DateTimeTrigger({moment})")
    d = deferral(dep, dag_id, run_id, n, roots, worker_cpu, max(1.0, lead - 3.0), {"fire_at": moment})

    def assigned() -> bool:
        return not dep.unassigned_triggers(dag_id, run_id)

    ready = not d["timed_out"]
    if ready:
        with contextlib.suppress(HarnessError):
            wait_for(assigned, max(1.0, fire_at - time.time() - 2.0), "the stock triggers to run", 1.0)
        ready = assigned()
    say(
        f"{d['deferred']}/{n} stock tasks deferred in {d['seconds']:.0f}s, "
        f"{fire_at - time.time():.0f}s before the moment"
    )
    # The stalls while the N tasks deferred and their triggers started (the provider's counterpart:
    # its triggers making the N requests).
    started = dep.stalls(burst["service_log"], began, time.time()) if burst else None
    time.sleep(max(0.0, fire_at - time.time() - 2.0))
    workers_before = worker_cpu()  # the workers are idle until the moment
    burst = burst or {}
    profile = burst.get("profile") or {}
    with profiled(profile.get("dir"), "stock", profile.get("pids", {})):
        r = resume(dep, dag_id, run_id, n, fire_at, workers_before, worker_cpu, timeout)
        if burst:
            time.sleep(BURST_TAIL)
    result = {
        "run_id": run_id,
        "ready": ready,
        "deferred_before_moment": d["deferred"],
        "defer": d,
        "resume": r,
        "fire_at": fire_at,
        "start_stalls": started,
    }
    if burst:
        result.update(_stock_events(dep, run_id, n, fire_at, burst["service_log"]))
    return result


def _stock_events(
    dep: BenchDeployment, run_id: str, n: int, fire_at: float, service_log: Any
) -> dict[str, Any]:
    """When each stock trigger fired, and the stalls of that burst."""

    def fired() -> dict[int, dict[str, float]] | None:
        times = dep.trigger_log_times(STOCK_DAG, run_id, STOCK_TASK_ID)
        return times if sum(1 for t in times.values() if "fired" in t) >= n else None

    try:
        times = wait_for(fired, 30, f"all {n} stock trigger logs to say 'Trigger fired event'", 2.0)
    except HarnessError:
        times = dep.trigger_log_times(STOCK_DAG, run_id, STOCK_TASK_ID)
    at = [t["fired"] for t in times.values() if "fired" in t]
    return {
        "fired": len(at),
        "latencies": [x - fire_at for x in at],
        **burst_stalls(dep, service_log, fire_at, at),
    }
