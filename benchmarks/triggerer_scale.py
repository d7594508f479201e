"""Triggerer scale: the provider's trigger against providers-google's CustomJobTrigger, N waiting requests.

For each N (``--sizes``) and each mode, N Vertex AI Flex Start custom jobs wait in an empty
capacity pool of ``dws-emulator`` while N waiters run in one asyncio event loop of a fresh
subprocess:

* ``provider``: N ``CapacityRequestTrigger``, each consumed with ``async for event in trigger.run()``
  (the public interface only, so whatever the trigger does inside is what gets measured);
* ``baseline``: N of apache-airflow-providers-google's own ``CustomJobTrigger``, consumed the same
  way, with only ``CustomJobAsyncHook.get_job_service_client`` patched to build its client on the
  emulator: each wait has its own ``JobServiceAsyncClient`` (own gRPC channel) and calls
  ``get_custom_job`` once per interval, logging three lines per poll, until the job ends.

Polling costs are per poll cycle, so the interval is compressed (30 s / k) to keep the run short
and the results are normalized back to the real interval: requests and CPU per minute = per cycle
x 60 / interval. k is chosen per N from the emulator's measured cost per request, so that the
baseline keeps the emulator at most ~40 % busy (``--compress`` forces it). After the waiting
window, capacity for all N arrives at once (for the provider: just after a list round, its worst
phase) and each waiter's event is timed.

Run ``make bench`` or ``python benchmarks/triggerer_scale.py [--sizes 100,1000,5000] [--interval 30]
[--compress K] [--json out.json]``. Columns are explained in ``benchmarks/README.md``. The exit
status is 1 when a target check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dws_emulator.process import EmulatorProcess

PROJECT = "dws-bench"
ACCELERATOR = "NVIDIA_H100_80GB"
GPUS_PER_JOB = 8
DAG_ID = "triggerer_scale"
MODES = ("baseline", "provider")
#: Every (N, mode) run gets a region of its own, so no run ever lists another run's jobs.
REGIONS = (
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    "northamerica-northeast1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "asia-east1",
    "asia-northeast1",
    "asia-southeast1",
    "australia-southeast1",
    "southamerica-east1",
)
#: Compression factors tried, largest first; the compressed interval is interval / k.
COMPRESS_CHOICES = (30, 15, 10, 6, 5, 3, 2, 1)
MIN_COMPRESSED_INTERVAL = 2.0  # shorter cycles leave too little time per cycle to measure
EMULATOR_BUSY_TARGET = 0.4  # the baseline's share of one emulator core, at most
SATURATED = 0.8  # emulator CPU share of one core above which it queues requests
WINDOW_SECONDS = 12.0  # the waiting window lasts about this long ...
MIN_WINDOW_CYCLES = 2  # ... but at least this many poll cycles
STALL_PROBE_SECONDS = 0.005
STALL_WINDOW_SECONDS = 4.0  # then the stall probe runs this long, and at least one cycle
IDLE_CALIBRATION_SECONDS = 1.0
QUIET_PROBE_SECONDS = 0.05  # a control call answered this fast: the emulator has no backlog
START_TIMEOUT = 120.0

# Targets (checked and printed; a miss makes the exit status 1).
TARGET_SIZE = 1000
TARGET_REQUEST_RATIO = 20.0  # baseline / provider requests per minute at TARGET_SIZE, at least
TARGET_CPU_RATIO = 5.0  # baseline / provider CPU per minute at TARGET_SIZE, at least
TARGET_RSS_PER_TRIGGER_KB = 30.0
TARGET_STALL_MS = 50.0  # outside garbage collection (see StallMonitor)
TARGET_GC_OBJECTS_PER_TRIGGER = 50.0  # what a waiting trigger adds to every full collection
TARGET_LATENCY_SLACK = 1.0  # p99 capacity-to-event latency <= compressed interval + this
LIST_METHOD = "google.cloud.aiplatform.v1.JobService/ListCustomJobs"
TARGET_REQUESTS_SIZE = 5000
TARGET_REQUESTS_PER_MINUTE = 600.0  # per region, in total, at TARGET_REQUESTS_SIZE


# -- the emulator ------------------------------------------------------------------------------


def start_emulator(pools: dict[str, int], log_path: Path) -> EmulatorProcess:
    """A ``dws-emulator serve`` subprocess with the given pools (``address``, ``pid``, ``control``)."""
    from dws_emulator.process import EmulatorProcess

    return EmulatorProcess(pools, 0, log_path, start_timeout=START_TIMEOUT, control_timeout=600)


def pool_of(region: str) -> str:
    return f"{region}/{ACCELERATOR}"


def job_client(address: str) -> Any:
    """A sync ``JobServiceClient`` on an insecure channel to the emulator."""
    import grpc
    from google.cloud.aiplatform_v1 import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def flex_start_job(index: int, run_id: str) -> Any:
    """A mapped task instance's job, as the operator builds it: 8 x H100, Flex Start, identity labels."""
    from google.cloud.aiplatform_v1 import types

    from airflow_provider_dws.scheduling.identity import RequestIdentity

    identity = RequestIdentity(DAG_ID, "wait", run_id, map_index=index)
    return types.CustomJob(
        display_name=identity.display_name(),
        labels=identity.labels(),
        job_spec=types.CustomJobSpec(
            scheduling=types.Scheduling(
                strategy=types.Scheduling.Strategy.FLEX_START,
                max_wait_duration={"seconds": 2 * 3600},
                timeout={"seconds": 6 * 3600},
            ),
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(
                        machine_type="a3-highgpu-8g",
                        accelerator_type=ACCELERATOR,
                        accelerator_count=GPUS_PER_JOB,
                    ),
                    container_spec=types.ContainerSpec(
                        image_uri="us-docker.pkg.dev/dws-bench/train/llm:latest",
                        # Ends SUCCEEDED as soon as it gets capacity: the event follows at once.
                        env=[types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value="0")],
                    ),
                )
            ],
        ),
    )


def warmup_job(run_id: str) -> Any:
    """A job without accelerators: it needs no capacity and is SUCCEEDED within a tick."""
    from google.cloud.aiplatform_v1 import types

    from airflow_provider_dws.scheduling.identity import RequestIdentity

    identity = RequestIdentity(DAG_ID, "warmup", run_id)
    return types.CustomJob(
        display_name=identity.display_name(),
        labels=identity.labels(),
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(machine_type="n1-standard-4"),
                    container_spec=types.ContainerSpec(
                        image_uri="us-docker.pkg.dev/dws-bench/train/llm:latest",
                        env=[types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value="0")],
                    ),
                )
            ],
        ),
    )


def create_jobs(address: str, region: str, count: int, run_id: str) -> tuple[list[str], str]:
    """Create ``count`` waiting Flex Start jobs and one warm-up job; returns their names."""
    client = job_client(address)
    parent = f"projects/{PROJECT}/locations/{region}"
    names = [
        client.create_custom_job(parent=parent, custom_job=flex_start_job(i, run_id)).name
        for i in range(count)
    ]
    warm = client.create_custom_job(parent=parent, custom_job=warmup_job(run_id)).name
    client.transport.close()
    return names, warm


def seconds_per_request(emulator: EmulatorProcess, names: Sequence[str], samples: int = 50) -> float:
    """The emulator's CPU time for one GetCustomJob with ``len(names)`` jobs in it.

    Read from the emulator process's CPU over ``samples`` calls in a row, so the client's own
    cost and scheduling noise on a busy machine stay out of it.
    """
    client = job_client(emulator.address)
    client.get_custom_job(name=names[0])  # connect first
    picked = [names[i * len(names) // samples] for i in range(samples)]
    before = emulator_cpu_seconds(emulator.pid)
    for name in picked:
        client.get_custom_job(name=name)
    spent = emulator_cpu_seconds(emulator.pid) - before
    client.transport.close()
    return spent / samples


def choose_compression(size: int, per_request: float, interval: float) -> tuple[int, bool]:
    """The largest k whose compressed interval keeps the baseline's load on the emulator low.

    Returns ``(k, saturated)``; ``saturated`` when even the real interval is too short for the
    emulator to serve one GetCustomJob per waiter per interval at that load.
    """
    needed = max(MIN_COMPRESSED_INTERVAL, size * per_request / EMULATOR_BUSY_TARGET)
    for k in COMPRESS_CHOICES:
        if interval / k >= needed:
            return k, False
    return 1, size * per_request > SATURATED * interval


def raise_open_files_limit(wanted: int = 65536) -> None:
    """Raise the soft RLIMIT_NOFILE (inherited by the subprocesses): one channel per baseline waiter."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# -- the waiters (run in the worker subprocess) ------------------------------------------------


def vm_rss_kb() -> float:
    """This process's resident set size now, in KB (``VmRSS`` of ``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return float(line.split()[1])
    except OSError:
        pass
    import psutil

    return float(psutil.Process().memory_info().rss) / 1024


def settled_rss_kb() -> float:
    """RSS after a full collection and, with glibc, ``malloc_trim(0)``, in KB.

    Memory freed earlier (imports, the warm-up) stays resident and is reused by the waiters, which
    would hide their cost; handing it back first makes the before/after difference an upper bound
    of what the waiters hold rather than an underestimate.
    """
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the plain RSS, which may understate the difference
    return vm_rss_kb()


def peak_rss_kb() -> float:
    """Peak resident set size of this process, in KB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)  # macOS reports bytes


class GcClock:
    """Time this process spent in the garbage collector, and its longest full collection.

    A full (generation 2) collection walks every tracked object of the process: in a triggerer
    that is Airflow's and the client libraries' half a million, whoever's allocation set it off,
    and it holds the event loop for as long as it runs. It is measured apart from the loop's
    other stalls so that each has its own number: what the provider's code does per step, and
    what its waiting requests add to every collection (:func:`gc_objects`).
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full_max = 0.0
        self.full_count = 0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.seconds += took
        if info.get("generation") == 2:
            self.full_count += 1
            self.full_max = max(self.full_max, took)

    def reset(self) -> None:
        self.full_max, self.full_count = 0.0, 0


def gc_objects() -> int:
    """Objects the garbage collector tracks (what a full collection walks)."""
    return len(gc.get_objects())


class StallMonitor:
    """A coroutine that sleeps 5 ms over and over and keeps the largest lateness (in seconds),
    and the largest lateness once the garbage collector's time in that sleep is taken off."""

    def __init__(self, gc_clock: GcClock) -> None:
        self.max_stall = 0.0
        self.max_stall_outside_gc = 0.0
        self.gc_clock = gc_clock
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        clock = self.gc_clock
        while True:
            started, in_gc = time.perf_counter(), clock.seconds
            await asyncio.sleep(STALL_PROBE_SECONDS)
            late = time.perf_counter() - started - STALL_PROBE_SECONDS
            self.max_stall = max(self.max_stall, late)
            self.max_stall_outside_gc = max(self.max_stall_outside_gc, late - (clock.seconds - in_gc))

    def start(self) -> None:
        self.max_stall = self.max_stall_outside_gc = 0.0
        self.gc_clock.reset()
        self._task = asyncio.create_task(self._run())

    def stop(self) -> float:
        """Stop probing; returns the largest lateness seen since :meth:`start`."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        return self.max_stall


@dataclass
class Waited:
    """How one waiter ended: when its event came (perf_counter) and the job's state."""

    at: float
    state: str


Waiter = Callable[[str], Awaitable[Waited]]


def provider_waiter(cfg: dict[str, Any], errors: dict[str, int]) -> Waiter:
    """Waits through the provider's trigger, exactly as the triggerer consumes it.

    The trigger handles API errors inside (retries), out of sight: ``errors`` stays empty.
    """
    from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

    spec = {
        "project_id": PROJECT,
        "region": cfg["region"],
        "gcp_conn_id": "google_cloud_default",
        "impersonation_chain": None,
    }

    async def wait(name: str) -> Waited:
        trigger = CapacityRequestTrigger(
            kind="vertex_custom_job", backend_spec=spec, request_name=name, poll_interval=cfg["interval"]
        )
        async for event in trigger.run():
            return Waited(time.perf_counter(), str(event.payload.get("state")))
        raise RuntimeError(f"the trigger for {name} ended without an event")

    return wait


def baseline_waiter(cfg: dict[str, Any], errors: dict[str, int]) -> Waiter:
    """Waits through apache-airflow-providers-google's own ``CustomJobTrigger``, as the triggerer
    consumes it; only the hook's client factory is patched, to build its client on the emulator.

    The trigger is the real one, unchanged: one ``JobServiceAsyncClient`` (own gRPC channel) per
    wait, one ``get_custom_job`` per interval, three log lines per poll, and an error event (the
    wait ends) on a failed call; those are counted in ``errors`` by message.
    """
    import grpc
    from airflow.providers.google.cloud.hooks.vertex_ai.custom_job import CustomJobAsyncHook
    from airflow.providers.google.cloud.triggers.vertex_ai import CustomJobTrigger
    from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobState
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcAsyncIOTransport

    address, interval = cfg["address"], cfg["interval"]

    async def emulator_client(self: Any, region: str | None = None) -> Any:
        # What get_job_service_client returns, on an insecure channel to the emulator instead of
        # Google's endpoint with credentials; created inside the running loop, as there.
        channel = grpc.aio.insecure_channel(address)
        return JobServiceAsyncClient(transport=JobServiceGrpcAsyncIOTransport(channel=channel))

    CustomJobAsyncHook.get_job_service_client = emulator_client  # type: ignore[method-assign]

    async def wait(name: str) -> Waited:
        # projects/{project}/locations/{location}/customJobs/{id}
        _, project, _, location, _, job_id = name.split("/")
        trigger = CustomJobTrigger(
            project_id=project,
            location=location,
            custom_job_id=job_id,
            poll_interval=interval,  # type: ignore[arg-type]  # an int in its signature; sleep takes a float
        )
        async for event in trigger.run():
            payload = event.payload
            if payload.get("status") == "success":  # only SUCCEEDED; other ends are error events
                state = payload["custom_job"]["state"]
                return Waited(time.perf_counter(), JobState(state).name if isinstance(state, int) else state)
            kind = str(payload.get("message"))[:200]
            errors[kind] = errors.get(kind, 0) + 1
            return Waited(time.perf_counter(), "error")
        raise RuntimeError(f"CustomJobTrigger for {name} ended without an event")

    return wait


def emulator_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the emulator process has used so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    """The whole protocol for one (N, mode) run, inside one event loop; returns the metrics."""
    from dws_emulator.control import EmulatorControl

    control = EmulatorControl(cfg["address"], timeout=600)
    interval = float(cfg["interval"])
    names: list[str] = cfg["names"]
    errors: dict[str, int] = {}
    wait = (provider_waiter if cfg["mode"] == "provider" else baseline_waiter)(cfg, errors)
    gc_clock = GcClock()
    monitor = StallMonitor(gc_clock)

    # An idle process costs CPU by the second, not by the poll cycle; compressing time would
    # inflate its share, so its rate is measured alone and taken off the window's CPU.
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(IDLE_CALIBRATION_SECONDS)
    idle_cpu_rate = (time.process_time() - cpu0) / (time.perf_counter() - t0)

    # One waiter end to end first (lazy imports, caches, the first client), on a finished job.
    warm = await asyncio.wait_for(wait(cfg["warm_job"]), 120)
    rss_before = settled_rss_kb()
    objects_before = gc_objects()

    # Waiters start spread evenly over one interval, as tasks defer one after another in a real
    # triggerer; polls of per-trigger clients stay spread out instead of arriving in one burst.
    started = time.perf_counter()

    async def start_later(delay: float, name: str) -> Waited:
        await asyncio.sleep(delay)
        return await wait(name)

    tasks = {
        asyncio.ensure_future(start_later(i * interval / len(names), name)): name
        for i, name in enumerate(names)
    }
    warmed_up = await settle(
        control, started, interval, cfg["quiet_probe_seconds"], cfg["max_warmup_seconds"]
    )
    early = {task for task in tasks if task.done()}
    rss_waiting = settled_rss_kb()
    objects_waiting = gc_objects()

    # Requests and CPU over whole poll cycles of pure waiting. The stall probe is off here: its
    # 200 wake-ups a second would cost about as much CPU as the provider's waiting does.
    await asyncio.to_thread(control.reset_stats)
    emu0 = emulator_cpu_seconds(cfg["emulator_pid"])
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(cfg["window_cycles"] * interval)
    window = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    emu_cpu = emulator_cpu_seconds(cfg["emulator_pid"]) - emu0
    stats = await asyncio.to_thread(control.stats)

    # Event-loop stalls: more waiting cycles with the probe on, then the capacity/event phase.
    monitor.start()
    await asyncio.sleep(cfg["stall_cycles"] * interval)
    stall_waiting = monitor.stop()
    stall_waiting_outside_gc = monitor.max_stall_outside_gc
    gc_full = [(gc_clock.full_count, gc_clock.full_max)]
    monitor.start()
    if cfg["mode"] == "provider":
        await just_after_a_list_round(control, interval)
    capacity_at = time.perf_counter()
    await asyncio.to_thread(control.set_capacity, {pool_of(cfg["region"]): len(names) * GPUS_PER_JOB})
    done, pending = await asyncio.wait(tasks, timeout=cfg["event_timeout"])
    stall_events = monitor.stop()
    stall_events_outside_gc = monitor.max_stall_outside_gc
    gc_full.append((gc_clock.full_count, gc_clock.full_max))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)

    latencies: list[float] = []
    states: dict[str, int] = {}
    failures: list[str] = []
    for task in done:
        if task.exception() is not None:
            failures.append(f"{tasks[task]}: {task.exception()!r}")
            continue
        result: Waited = task.result()
        states[result.state] = states.get(result.state, 0) + 1
        if task not in early and result.state == "JOB_STATE_SUCCEEDED":
            latencies.append(result.at - capacity_at)
    latencies.sort()
    cycles = window / interval
    net_cpu = max(0.0, cpu - idle_cpu_rate * window)
    per_minute = 60.0 / cfg["real_interval"]
    control.close()
    return {
        "warmup_state": warm.state,
        "warmup_seconds": warmed_up,
        "window_seconds": window,
        "window_cycles": cycles,
        "requests": stats["total"],
        "requests_by_method": stats["calls"],
        "requests_per_minute": stats["total"] / cycles * per_minute,
        "cpu_window_seconds": cpu,
        "idle_cpu_rate": idle_cpu_rate,
        "cpu_per_minute": net_cpu / cycles * per_minute,
        "emulator_cpu_share": emu_cpu / window,
        "rss_before_kb": rss_before,
        "rss_waiting_kb": rss_waiting,
        "rss_per_trigger_kb": (rss_waiting - rss_before) / len(names),
        "peak_rss_kb": peak_rss_kb(),
        "max_stall_ms": max(stall_waiting, stall_events) * 1000,
        "stall_waiting_ms": stall_waiting * 1000,
        "stall_events_ms": stall_events * 1000,
        "max_stall_outside_gc_ms": max(stall_waiting_outside_gc, stall_events_outside_gc) * 1000,
        "gc_full_collections": sum(count for count, _ in gc_full),
        "gc_full_max_ms": max(longest for _, longest in gc_full) * 1000,
        "gc_objects_before": objects_before,
        "gc_objects_per_trigger": (objects_waiting - objects_before) / len(names),
        "events": len(latencies),
        "ended_before_capacity": len(early),
        "missing_events": len(names) - len(latencies),
        "event_states": states,
        "poll_errors": sum(errors.values()),
        "poll_error_kinds": errors,
        "failures": failures[:5],
        "latency_p50": percentile(latencies, 50),
        "latency_p99": percentile(latencies, 99),
        "latency_max": latencies[-1] if latencies else None,
    }


async def settle(control: Any, started: float, interval: float, quiet: float, limit: float) -> float:
    """Wait until every waiter has started and polled: the interval the starts are spread over, a
    whole cycle and a second more, then until the emulator answers at once (no backlog of polls
    left), at most ``limit`` seconds after ``started``.

    Returns how long the warm-up took. Only observable things are used, never the waiters' insides.
    """
    await asyncio.sleep(max(0.0, started + 2 * interval + 1.0 - time.perf_counter()))
    while time.perf_counter() - started < limit:
        probe = time.perf_counter()
        await asyncio.to_thread(control.capacity)
        if time.perf_counter() - probe <= quiet:
            break
        await asyncio.sleep(interval / 20)
    return time.perf_counter() - started


async def just_after_a_list_round(control: Any, interval: float) -> None:
    """Wait until a list round of the shared poller has ended: the emulator's count of list calls
    moves, then keeps still for a moment. Capacity given then comes at the worst phase for a
    shared poller (every job was just listed as waiting; the next list is one interval away), so
    the latency measured is the bound, not luck. Per-trigger polls are spread evenly and have no
    such phase. Only the emulator's counters are read, never the poller's insides.
    """

    def lists() -> int:
        return int(control.stats()["calls"].get(LIST_METHOD, 0))

    loop = asyncio.get_running_loop()
    give_up = loop.time() + 3 * interval
    before = await asyncio.to_thread(lists)
    count = before
    while count == before and loop.time() < give_up:  # a round begins
        await asyncio.sleep(0.02)
        count = await asyncio.to_thread(lists)
    quiet = min(0.5, interval / 10)
    still_since = loop.time()
    while loop.time() - still_since < quiet and loop.time() < give_up:  # ... and lists its last page
        await asyncio.sleep(0.02)
        now_count = await asyncio.to_thread(lists)
        if now_count != count:
            count, still_since = now_count, loop.time()


def percentile(sorted_values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def worker_main() -> int:
    """Subprocess entry: config JSON on stdin, metrics JSON written to ``cfg["result_path"]``."""
    import importlib
    import logging

    cfg = json.load(sys.stdin)
    # A triggerer logs at INFO; the lines go to this process's stderr, the run's log file.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    # Import everything either mode may use before anything is measured, so both modes carry the
    # same modules (peak RSS compares) and the RSS before/after difference is the waiters' alone.
    for module in (
        "grpc",
        "psutil",
        "google.cloud.aiplatform_v1",
        "airflow.providers.google.cloud.triggers.vertex_ai",
        "airflow_provider_dws.backends.vertex_ai",
        "airflow_provider_dws.triggers.capacity_request",
    ):
        importlib.import_module(module)

    result = asyncio.run(measure(cfg))
    Path(cfg["result_path"]).write_text(json.dumps(result))
    return 0


# -- the parent: runs, table, checks -----------------------------------------------------------


def run_worker(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Run one (N, mode) in a fresh subprocess and return its metrics."""
    tag = f"{cfg['mode']}-{len(cfg['names'])}"
    cfg = {**cfg, "result_path": str(workdir / f"{tag}.json")}
    env = {
        **os.environ,
        "DWS_EMULATOR_HOST": cfg["address"],
        "AIRFLOW_HOME": str(workdir / "airflow"),
        # The connection the hooks read, from the environment: no metadata database needed.
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform"}),
    }
    log_path = workdir / f"{tag}.log"
    with log_path.open("wb") as log:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            input=json.dumps(cfg).encode(),
            stdout=log,
            stderr=log,
            env=env,
            check=False,
        )
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{tag} worker failed with exit status {proc.returncode}:\n{tail}")
    result: dict[str, Any] = json.loads(Path(cfg["result_path"]).read_text())
    return result


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_all(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Every (N, mode) run, in order of N, baseline first; one row of metrics each."""
    runs = [(size, mode) for size in args.sizes for mode in args.modes]
    regions = dict(zip(runs, REGIONS, strict=False))
    shared = None
    if args.shared_emulator:
        shared = start_emulator({pool_of(r): 0 for r in regions.values()}, workdir / "emulator.log")
    rows: list[dict[str, Any]] = []
    try:
        for size in args.sizes:
            k = args.compress
            saturated = False
            per_request = None
            for mode in args.modes:
                region = regions[(size, mode)]
                emulator = shared or start_emulator(
                    {pool_of(region): 0}, workdir / f"emulator-{mode}-{size}.log"
                )
                try:
                    began = time.monotonic()
                    names, warm = create_jobs(emulator.address, region, size, f"bench__{mode}_{size}")
                    created = time.monotonic() - began
                    if per_request is None:
                        per_request = seconds_per_request(emulator, names)
                        if k is None:
                            k, saturated = choose_compression(size, per_request, args.interval)
                    interval = args.interval / k
                    drain = size * per_request  # the emulator's time for one GetCustomJob per waiter
                    cycles = max(MIN_WINDOW_CYCLES, math.ceil(WINDOW_SECONDS / interval))
                    progress(
                        f"N={size} {mode}: {size} jobs created in {created:.1f}s in {region}; "
                        f"{per_request * 1000:.2f} ms per GetCustomJob; k={k} (poll every {interval:g}s), "
                        f"window {cycles} cycles"
                    )
                    cfg = {
                        "mode": mode,
                        "address": emulator.address,
                        "emulator_pid": emulator.pid,
                        "region": region,
                        "names": names,
                        "warm_job": warm,
                        "interval": interval,
                        "real_interval": args.interval,
                        "quiet_probe_seconds": max(QUIET_PROBE_SECONDS, 4 * per_request),
                        "max_warmup_seconds": 2 * interval + 1.1 * drain + 1.0,
                        "window_cycles": cycles,
                        "stall_cycles": max(1, math.ceil(STALL_WINDOW_SECONDS / interval)),
                        "event_timeout": interval + 2.0 * drain + 15.0,
                    }
                    began = time.monotonic()
                    result = run_worker(cfg, workdir)
                    row = {
                        "size": size,
                        "mode": mode,
                        "region": region,
                        "k": k,
                        "interval": interval,
                        "emulator_seconds_per_request": per_request,
                        "predicted_saturated": saturated,
                        "jobs_created_seconds": created,
                        "run_seconds": time.monotonic() - began,
                        **result,
                    }
                    rows.append(row)
                    progress(
                        f"N={size} {mode}: {row['requests_per_minute']:.0f} req/min, "
                        f"{row['cpu_per_minute']:.3f} CPU s/min, {row['events']}/{size} events, "
                        f"emulator {row['emulator_cpu_share']:.0%} busy ({row['run_seconds']:.0f}s)"
                    )
                finally:
                    if shared is None:
                        emulator.stop()
    finally:
        if shared is not None:
            shared.stop()
    return rows


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def render_table(rows: list[dict[str, Any]]) -> str:
    headers = [
        "N",
        "mode",
        "k",
        "poll s",
        "req/min",
        "CPU s/min",
        "peak RSS MB",
        "RSS/trigger KB",
        "max stall ms",
        "w/o GC ms",
        "GC objs/trigger",
        "p50 s (xI)",
        "p99 s (xI)",
        "events",
        "emu busy",
    ]
    table: list[list[str]] = []

    def latency(row: dict[str, Any], key: str) -> str:
        value = row[key]
        return "-" if value is None else f"{value:.2f} ({value / row['interval']:.2f})"

    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_size.setdefault(row["size"], {})[row["mode"]] = row
        table.append(
            [
                str(row["size"]),
                row["mode"],
                str(row["k"]),
                f"{row['interval']:g}",
                fmt(row["requests_per_minute"], 0),
                fmt(row["cpu_per_minute"], 3),
                fmt(row["peak_rss_kb"] / 1024),
                fmt(row["rss_per_trigger_kb"]),
                fmt(row["max_stall_ms"]),
                fmt(row.get("max_stall_outside_gc_ms")),
                fmt(row.get("gc_objects_per_trigger")),
                latency(row, "latency_p50"),
                latency(row, "latency_p99"),
                f"{row['events']}/{row['size']}"
                + (f" ({row['ended_before_capacity']} early)" if row["ended_before_capacity"] else "")
                + (f" ({row['poll_errors']} errors)" if row["poll_errors"] else ""),
                f"{row['emulator_cpu_share']:.0%}"
                + (" SAT" if row["emulator_cpu_share"] > SATURATED else ""),
            ]
        )
        modes = by_size[row["size"]]
        if row["mode"] == MODES[-1] and "baseline" in modes and "provider" in modes:
            p, b = modes["provider"], modes["baseline"]
            table.append(
                [
                    str(row["size"]),
                    "provider/baseline",
                    "",
                    "",
                    fmt(ratio(p["requests_per_minute"], b["requests_per_minute"]), 3),
                    fmt(ratio(p["cpu_per_minute"], b["cpu_per_minute"]), 3),
                    fmt(ratio(p["peak_rss_kb"], b["peak_rss_kb"]), 2),
                    fmt(ratio(p["rss_per_trigger_kb"], b["rss_per_trigger_kb"]), 2),
                    fmt(ratio(p["max_stall_ms"], b["max_stall_ms"]), 2),
                    fmt(ratio(p.get("max_stall_outside_gc_ms"), b.get("max_stall_outside_gc_ms")), 2),
                    fmt(ratio(p.get("gc_objects_per_trigger"), b.get("gc_objects_per_trigger")), 2),
                    fmt(ratio(p["latency_p50"], b["latency_p50"]), 2),
                    fmt(ratio(p["latency_p99"], b["latency_p99"]), 2),
                    "",
                    "",
                ]
            )
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(len(headers))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in [headers, *table]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def checks(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(target, measured, PASS/FAIL/SKIP)`` for every target the runs can say something about."""
    found = {(row["size"], row["mode"]): row for row in rows}
    out: list[tuple[str, str, str]] = []

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    base, prov = found.get((TARGET_SIZE, "baseline")), found.get((TARGET_SIZE, "provider"))
    for what, key, target in (
        ("API requests", "requests_per_minute", TARGET_REQUEST_RATIO),
        ("CPU", "cpu_per_minute", TARGET_CPU_RATIO),
    ):
        label = f"N={TARGET_SIZE}: at least {target:g}x less {what} than the baseline"
        if base is None or prov is None:
            out.append((label, f"N={TARGET_SIZE} not run", "SKIP"))
            continue
        factor = ratio(base[key], prov[key])
        shown = "provider used none" if factor is None else f"{factor:.2f}x less"
        out.append((label, shown, verdict(factor is None or factor >= target)))
    for row in rows:
        if row["mode"] != "provider":
            continue
        n = row["size"]
        out.append(
            (
                f"N={n}: at most {TARGET_RSS_PER_TRIGGER_KB:g} KB RSS per waiting trigger",
                f"{row['rss_per_trigger_kb']:.1f} KB",
                verdict(row["rss_per_trigger_kb"] <= TARGET_RSS_PER_TRIGGER_KB),
            )
        )
        outside_gc = row.get("max_stall_outside_gc_ms", row["max_stall_ms"])
        out.append(
            (
                f"N={n}: no event-loop stall over {TARGET_STALL_MS:g} ms outside garbage collection",
                f"{outside_gc:.1f} ms ({row['max_stall_ms']:.1f} ms with it)",
                verdict(outside_gc <= TARGET_STALL_MS),
            )
        )
        if "gc_objects_per_trigger" in row:
            out.append(
                (
                    f"N={n}: at most {TARGET_GC_OBJECTS_PER_TRIGGER:g} GC-tracked objects per waiting trigger",
                    f"{row['gc_objects_per_trigger']:.1f} (full collections {row['gc_full_collections']}, "
                    f"longest {row['gc_full_max_ms']:.0f} ms over {row['gc_objects_before']:,} objects before)",
                    verdict(row["gc_objects_per_trigger"] <= TARGET_GC_OBJECTS_PER_TRIGGER),
                )
            )
        limit = row["interval"] + TARGET_LATENCY_SLACK
        p99 = row["latency_p99"]
        complete = row["missing_events"] == 0
        shown = "no events" if p99 is None else f"{p99:.2f} s"
        if not complete:
            shown += f", {row['missing_events']} events missing"
        out.append(
            (
                f"N={n}: capacity-to-event p99 at most {row['interval']:g} s + {TARGET_LATENCY_SLACK:g} s",
                shown,
                verdict(complete and p99 is not None and p99 <= limit),
            )
        )
    prov5k = found.get((TARGET_REQUESTS_SIZE, "provider"))
    label = f"N={TARGET_REQUESTS_SIZE}: under {TARGET_REQUESTS_PER_MINUTE:g} requests per minute per region"
    if prov5k is None:
        out.append((label, f"N={TARGET_REQUESTS_SIZE} not run", "SKIP"))
    else:
        rate = prov5k["requests_per_minute"]  # one region per run
        out.append((label, f"{rate:.0f} req/min", verdict(rate < TARGET_REQUESTS_PER_MINUTE)))
    return out


def sizes_arg(text: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"sizes must be integers separated by commas, got {text!r}"
        ) from None
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    if len(sizes) * len(MODES) > len(REGIONS):
        raise argparse.ArgumentTypeError(f"at most {len(REGIONS) // len(MODES)} sizes")
    return sizes


def modes_arg(text: str) -> list[str]:
    modes = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}; got {text!r}")
    return [mode for mode in MODES if mode in modes]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=sizes_arg, default=[100, 1000, 5000], help="default 100,1000,5000")
    parser.add_argument("--modes", type=modes_arg, default=list(MODES), help="default baseline,provider")
    parser.add_argument("--interval", type=float, default=30.0, help="real poll interval in seconds (30)")
    parser.add_argument(
        "--compress",
        type=int,
        default=None,
        metavar="K",
        help="poll every interval/K seconds (default: auto)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every metric as JSON here")
    parser.add_argument(
        "--shared-emulator",
        action="store_true",
        help="one emulator for all runs (default: one per run; see benchmarks/README.md)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker_main()
    if args.compress is not None and args.compress < 1:
        raise SystemExit("--compress must be >= 1")
    if args.interval <= 0:
        raise SystemExit("--interval must be > 0")
    raise_open_files_limit()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dws-bench-") as tmp:
        rows = run_all(args, Path(tmp))
    elapsed = time.monotonic() - began
    results = checks(rows)
    print()
    print(
        f"Triggerer scale: N waiting Flex Start jobs, poll interval {args.interval:g}s, compressed by k "
        f"(poll s = {args.interval:g}/k); per-minute figures are normalized to the {args.interval:g}s interval."
    )
    print(render_table(rows))
    saturated = [f"N={r['size']} {r['mode']}" for r in rows if r["emulator_cpu_share"] > SATURATED]
    if saturated:
        print(
            f"\nSAT: the emulator was over {SATURATED:.0%} busy in {', '.join(saturated)}: requests queued "
            "there, so request rates are capped by the emulator and latencies include its backlog."
        )
    print()
    width = max(len(label) for label, _, _ in results)
    for label, measured, status in results:
        print(f"{status:4}  {label.ljust(width)}  {measured}")
    print(f"\ntotal time {elapsed / 60:.1f} min")
    if args.json:
        args.json.write_text(
            json.dumps({"interval": args.interval, "rows": rows, "checks": results}, indent=2, sort_keys=True)
        )
    return 1 if any(status == "FAIL" for _, _, status in results) else 0


if __name__ == "__main__":
    sys.exit(main())
