"""The fault-matrix scenarios: one injected fault each, the runs it triggers and what it expects.

Scenarios marked ``shared`` change something every run would feel (the triggerers, the
emulator's faults or availability, a whole Celery worker) and run one at a time; the others ask
in a region of their own and run side by side. ``executors`` says which executors a scenario
runs on (most run on both).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from tests.faults.context import (
    BATCH_DAG,
    BATCH_FULL,
    BATCH_POOL,
    BATCH_REGION,
    H100,
    KILLED_TRY_WAIT,
    L4,
    SETTLE_SECONDS,
    TPU_DAG,
    TPU_FULL,
    TPU_POOL,
    VERTEX_DAG,
    VERTEX_FULL,
    VERTEX_POOL,
    WAITING_STATES,
    RunRef,
    Scenario,
    ScenarioContext,
    parse_time,
    utcnow,
)
from tests.faults.gke_scenarios import GKE_DAG_IDS, GKE_SCENARIOS
from tests.faults.harness import TASK_HEARTBEAT_TIMEOUT, TRIGGERER_HEALTH_THRESHOLD, HarnessError, wait_for
from tests.faults.inference_scenarios import INFERENCE_DAG_IDS, INFERENCE_SCENARIOS
from tests.faults.inference_scenarios import SHARED_REGION as INFERENCE_SHARED_REGION
from tests.faults.instance_scenarios import INSTANCE_SCENARIOS, INSTANCES_DAG_IDS
from tests.faults.page_view import check_page_shows_ended
from tests.faults.success_scenarios import SUCCESS_SCENARIOS
from tests.faults.tpu_scenarios import FLEX_SHARED_POOL, TPU_DAG_IDS, TPU_SCENARIOS, flex_pool, tpu_pool

# -- scenarios --------------------------------------------------------------------------------------

EXPECT_VERTEX_OK = "1 SUCCEEDED run=success"
EXPECT_TPU_OK = "1 RELEASED run=success"


def _both_examples(ctx: ScenarioContext) -> tuple[RunRef, RunRef]:
    ctx.emulator.set_capacity({VERTEX_POOL: 0, TPU_POOL: 0})
    vertex = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", EXPECT_VERTEX_OK, {"run_seconds": 3})
    tpu = ctx.trigger(TPU_DAG, "tpu", "request_tpu_slice", EXPECT_TPU_OK)
    for ref in (vertex, tpu):
        ctx.wait_waiting(ref)
        ctx.wait_polled(ref)
    return vertex, tpu


def _capacity_arrives(ctx: ScenarioContext) -> None:
    ctx.emulator.set_capacity({VERTEX_POOL: VERTEX_FULL, TPU_POOL: TPU_FULL})
    ctx.log("capacity arrives")


def triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while both examples wait; a new one must pick their waits up."""
    dep = ctx.deployment
    while len(dep.triggerers) > 1:  # one triggerer only, so the waits can only go to the new one
        dep.stop_triggerer(dep.triggerers[0])
    [old] = dep.triggerers
    refs = _both_examples(ctx)
    ctx.wait_trigger_running(refs, {old.job_id})
    killed_at = time.monotonic()
    dep.kill_triggerer(old)
    ctx.log(f"SIGKILLed {old.name} (job {old.job_id}); starting a new triggerer")
    new = dep.start_triggerer()
    ctx.wait_trigger_running(refs, {new.job_id})
    for ref in refs:  # the new triggerer has read both requests again
        ctx.wait_polled(ref, starts=2)
    moved = time.monotonic() - killed_at
    ctx.check("waits moved to new triggerer", f"moved to {new.name} in {moved:.0f}s", True)
    ctx.log(f"{new.name} (job {new.job_id}) polls both requests, {moved:.0f}s after the kill")
    _capacity_arrives(ctx)
    ctx.wait_finished(240)


def two_triggerers_takeover(ctx: ScenarioContext) -> None:
    """Two triggerers; SIGKILL the one running the waits; the other must take them over."""
    dep = ctx.deployment
    while len(dep.triggerers) < 2:
        dep.start_triggerer()
    refs = _both_examples(ctx)
    jobs = {t.job_id: t for t in dep.triggerers if t.job_id is not None}
    ctx.wait_trigger_running(refs, set(jobs))
    owners = [dep.trigger_assignments(r.dag_id, r.run_id)[r.request_task] for r in refs]
    victim = jobs[max(set(owners), key=owners.count)]
    survivors = {job for job in jobs if job != victim.job_id}
    killed_at = time.monotonic()
    dep.kill_triggerer(victim)
    ctx.log(f"SIGKILLed {victim.name} (job {victim.job_id}), which ran {owners.count(victim.job_id)} wait(s)")
    ctx.wait_trigger_running(refs, survivors, timeout=TRIGGERER_HEALTH_THRESHOLD + 90)
    for ref, owner in zip(refs, owners, strict=True):
        if owner == victim.job_id:
            ctx.wait_polled(ref, starts=2)
    moved = time.monotonic() - killed_at
    ctx.check(
        f"survivor takes over (threshold {TRIGGERER_HEALTH_THRESHOLD}s)", f"taken over in {moved:.0f}s", True
    )
    _capacity_arrives(ctx)
    ctx.wait_finished(240)


def triggerer_paused_redistribution(ctx: ScenarioContext) -> None:
    """SIGSTOP the triggerer running the wait past its health threshold: Airflow moves the wait to
    the other one. SIGCONT it: it drops the trigger through Airflow's user-action path, so
    ``on_kill`` runs there, and must leave alone the request the other triggerer now waits on."""
    dep = ctx.deployment
    while len(dep.triggerers) < 2:
        dep.start_triggerer()
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", "1 SUCCEEDED run=success", {"run_seconds": 3})
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    jobs = {t.job_id: t for t in dep.triggerers if t.job_id is not None}
    ctx.wait_trigger_running([ref], set(jobs))
    owner = dep.trigger_assignments(ref.dag_id, ref.run_id)[ref.request_task]
    paused = jobs[owner]
    others = set(jobs) - {owner}
    os.killpg(paused.pid, signal.SIGSTOP)
    ctx.log(f"SIGSTOPped {paused.name} (job {owner}), which runs the wait")
    try:
        ctx.wait_trigger_running([ref], others, timeout=TRIGGERER_HEALTH_THRESHOLD + 90)
        ctx.wait_polled(ref, starts=2)
        ctx.log("the other triggerer took the wait over")
    finally:
        os.killpg(paused.pid, signal.SIGCONT)
    ctx.log(f"SIGCONTinued {paused.name}; it must drop its copy without cancelling the request")

    def dropped() -> str | None:
        logs = ctx.trigger_logs(ref)
        for marker in ("still deferred", "Task killed by a user"):
            if marker in logs:
                return marker
        return None

    try:
        seen = wait_for(dropped, 60, "the resumed triggerer to drop its copy of the trigger", 1.0)
    except HarnessError:
        seen = None
    states = [r["state"] for r in ctx.requests(ref)]
    kept = bool(states) and all(state in WAITING_STATES for state in states)
    ctx.check(
        "old copy's on_kill leaves the request",
        f"on_kill: {'skipped (task still deferred)' if seen == 'still deferred' else seen or 'not seen'}; "
        f"request {','.join(states) or '-'}",
        seen == "still deferred" and kept,
    )
    _capacity_arrives(ctx)
    ctx.wait_finished(240)


def worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The task process is SIGKILLed right after its submit returned; the retry must reattach."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    # The job runs 10 s once capacity comes: its event must not fire within seconds of try 2's
    # deferral, or Airflow 3.3's stale defer-exit race (apache/airflow#72716) can fail the resumed
    # try (seen once in a full run with the default 3 s).
    ref = ctx.trigger(
        "dws_fault_kill_after_submit", "vx", "fine_tune", "1+0 SUCCEEDED run=success", {"run_seconds": 10}
    )
    _retry_adopts_after_kill(ctx, ref, ctx.pool, 8)


def _retry_adopts_after_kill(
    ctx: ScenarioContext, ref: RunRef, pool: str, full: int, *, delay: float = 0, finish: float = 180
) -> None:
    """Try 1 killed itself right after submitting: try 2 must defer on the same request, which then
    gets ``full`` accelerators of ``pool`` (``delay`` seconds after try 2 deferred)."""
    ctx.wait_waiting(ref, timeout=KILLED_TRY_WAIT, try_number=2)
    time.sleep(delay)
    ctx.give(pool, full)
    ctx.wait_finished(finish)
    ctx.check_killed_after_submit(ref)


def _mark_failed_while_waiting(ctx: ScenarioContext, ref: RunRef) -> None:
    """Once the request waits and was polled, a user marks its task failed through the REST API;
    the request must then be cancelled within :data:`SETTLE_SECONDS`."""
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    marked = utcnow()
    ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
    ctx.log(f"marked {ref.request_task} failed through the REST API")
    ctx.wait_finished(120)
    ctx.after_settle.append(lambda: ctx.check_cancelled_within(ref, marked, SETTLE_SECONDS))
    # What the user then sees: the request ended, with why, counted to the task's end only (in
    # Chromium too for the Vertex row, whose page every mark-failed row shares).
    browser = ctx.scenario.name == "user_marks_failed"
    ctx.after_settle.append(lambda: check_page_shows_ended(ctx, ref, browser=browser))


def celery_worker_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the whole Celery worker running try 1 (main process, pool, task process) after its
    submit: no process of that worker reports anything. The scheduler fails the try once its
    heartbeat is :data:`TASK_HEARTBEAT_TIMEOUT` old, another worker runs the retry, which must
    reattach to the request try 1 made."""
    dep = ctx.deployment
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(
        "dws_fault_hold_after_submit", "vx", "fine_tune", "1+0 SUCCEEDED run=success", {"run_seconds": 10}
    )
    wait_for(lambda: "FAULT: holding" in ctx.task_log(ref, 1), 180, "try 1 to submit and hold", 1.0)
    pid = dep.task_pid(ref.dag_id, ref.run_id, ref.request_task)
    worker = dep.worker_running(pid) if pid else None
    if worker is None:
        ctx.check("a Celery worker runs try 1", f"task pid {pid} under no worker", False)
        return
    dep.kill_worker(worker)
    ctx.log(f"SIGKILLed {worker.name} and every process under it (try 1's task process {pid})")
    replacement = dep.start_worker()
    ctx.log(f"started {replacement.name}")
    ctx.wait_waiting(ref, timeout=TASK_HEARTBEAT_TIMEOUT + 240, try_number=2)
    ctx.give(VERTEX_POOL, VERTEX_FULL)
    ctx.wait_finished(240)
    tries = ctx.api.tries(ref.dag_id, ref.run_id, ref.request_task)
    first = tries[0].get("state") if tries else None
    # The workers that ran a try of this run, from their own logs (the killed one is gone).
    others = [w.name for w in dep.workers if ref.run_id in w.log_path.read_text(errors="replace")]
    ctx.check(
        "worker of try 1 SIGKILLed; try 1 failed, try 2 on another worker",
        f"SIGKILLed {worker.name}; try 1 {first}, try 2 on {','.join(others) or 'no worker'}",
        first in ("failed", "up_for_retry") and bool(others),
    )


def workload_fails_once(ctx: ScenarioContext) -> None:
    """The workload exits 3 on try 1: the retry must submit a new job, the failed one stays ended."""
    ctx.emulator.set_capacity({ctx.pool: 8})
    # The workload runs 10 s, not 2: an event a few seconds after a deferral meets Airflow 3.3's
    # stale defer-exit race (apache/airflow#72716), which fails the resumed try whatever it returns.
    ctx.trigger(
        "dws_fault_fail_once", "vx", "fine_tune", "1+1 FAILED,SUCCEEDED run=success", {"run_seconds": 10}
    )
    ctx.wait_finished(240)


def success_while_worker_dead(ctx: ScenarioContext) -> None:
    """The worker dies after submitting; the job succeeds before the retry, which takes the result."""
    ctx.emulator.set_capacity({ctx.pool: 8})
    ref = ctx.trigger(
        "dws_fault_success_while_dead", "vx", "fine_tune", "1+0 SUCCEEDED run=success", {"run_seconds": 2}
    )
    ctx.wait_finished(240)
    ctx.check_killed_after_submit(ref)
    tries = ctx.api.tries(ref.dag_id, ref.run_id, ref.request_task)
    jobs = ctx.requests(ref)
    second = parse_time(tries[1]["start_date"]) if len(tries) > 1 else None
    ended = parse_time(jobs[0]["end_time"]) if jobs else None
    if second is None or ended is None:
        ctx.check("job ended before try 2", "no try 2 or no job end", False)
    else:
        lead = (second - ended).total_seconds()
        ctx.check("job ended before try 2", f"ended {lead:.1f}s before try 2", lead > 0)


def user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting task failed through the REST API: its request must be cancelled."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger("dws_fault_user_action", "vx", "fine_tune", "1 CANCELLED run=failed")
    _mark_failed_while_waiting(ctx, ref)


def mark_failed_cancel_unavailable(ctx: ScenarioContext) -> None:
    """As ``user_marks_failed``, but the cancel call meets one UNAVAILABLE (retried after ~1-2 s)."""
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", "1 CANCELLED run=failed", {"run_seconds": 3})
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.emulator.set_faults(["CancelCustomJob=UNAVAILABLEx1"])

    def fired() -> int:
        return sum(rule["fired"] for rule in ctx.emulator.faults()["rules"])

    try:
        marked = utcnow()
        ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
        ctx.log("marked fine_tune failed; the first cancel call will answer UNAVAILABLE")
        with contextlib.suppress(HarnessError):  # no cancel call at all is a finding, not an error
            wait_for(fired, SETTLE_SECONDS, "a cancel call", 0.5)
        times = fired()
    finally:
        ctx.emulator.clear_faults()
    ctx.check("cancel met UNAVAILABLE", f"UNAVAILABLE fired {times}x", times == 1)
    ctx.wait_finished(120)
    ctx.after_settle.append(lambda: ctx.check_cancelled_within(ref, marked, SETTLE_SECONDS))


def mark_failed_slow_poll(ctx: ScenarioContext) -> None:
    """As ``user_marks_failed``, but every status read takes 3 s, so the kill lands during one."""
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", "1 CANCELLED run=failed", {"run_seconds": 3})
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.emulator.set_faults(["GetCustomJob=latency:3"])
    try:
        time.sleep(5)  # the trigger is now inside a 3 s read most of the time
        marked = utcnow()
        ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
        ctx.log("marked fine_tune failed while its status reads take 3 s")
        ctx.wait_finished(120)
    finally:
        ctx.emulator.clear_faults()
    ctx.after_settle.append(lambda: ctx.check_cancelled_within(ref, marked, SETTLE_SECONDS))


def user_clears_task(ctx: ScenarioContext) -> None:
    """A user clears the waiting task: the old request must be cancelled and exactly one new one made.

    Before Airflow 3.3 no task state store tells try 2 which request try 1 waited on: try 2 finds it
    by its identity labels and adopts it (its place in the queue kept), and try 1's trigger, whose
    stop is seen only after try 2 deferred, leaves it alone. Still one request, none orphaned."""
    from airflow_provider_dws.compat import AIRFLOW_V_3_3_PLUS

    ctx.emulator.set_capacity({ctx.pool: 0})
    expected = "1+1 CANCELLED,SUCCEEDED run=success" if AIRFLOW_V_3_3_PLUS else "1+0 SUCCEEDED run=success"
    ref = ctx.trigger("dws_fault_user_action", "vx", "fine_tune", expected)
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    cleared = utcnow()
    ctx.api.clear_task(ref.dag_id, ref.run_id, ref.request_task)
    ctx.log("cleared fine_tune through the REST API")

    def next_try_settled() -> bool:
        ti = ctx.task(ref)
        return ti.get("try_number", 0) >= 2 and ti.get("state") in ("deferred", "failed", "success")

    try:
        wait_for(next_try_settled, 180, "try 2 to defer or end", 1.0)
    except HarnessError as err:
        ctx.problems.append(str(err))
    time.sleep(3)  # a late second submit would show up before the capacity arrives
    ctx.give(ctx.pool)
    ctx.wait_finished(180)
    if AIRFLOW_V_3_3_PLUS:
        ctx.after_settle.append(
            lambda: ctx.check_cancelled_within(ref, cleared, SETTLE_SECONDS, first_only=True)
        )


def execution_timeout_while_waiting(ctx: ScenarioContext) -> None:
    """``execution_timeout`` (180 s) passes while the job waits: request cancelled, task failed.

    The bound is on the cancel, counted from the deadline (the try's start + 180 s), not on the
    whole task. The timeout counts from the try's start, so the time to the submit must stay well
    inside it on a loaded machine: the DAG imports the client library in ``pre_execute``, outside
    the timed ``execute`` (with every row's worker starting at once, that import has taken 40 s,
    and once in CI the timeout passed before the submit); what is left is the provider's own calls.
    """
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger("dws_fault_execution_timeout", "vx", "fine_tune", "1 CANCELLED run=failed")
    ti = ctx.wait_waiting(ref)
    started = parse_time(ti.get("start_date")) or utcnow()
    deadline = started + timedelta(seconds=EXECUTION_TIMEOUT_SECONDS)
    ctx.wait_finished(EXECUTION_TIMEOUT_SECONDS + 150)
    cancelled = [
        parse_time(step["time"])
        for record in ctx.requests(ref)
        for step in record["history"]
        if step["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    ]
    first = min((c for c in cancelled if c is not None), default=None)
    late = (first - deadline).total_seconds() if first else None
    ctx.check(
        "cancelled <= 60s after the deadline",
        f"cancelled {late:.0f}s after the deadline" if late is not None else "not cancelled",
        late is not None and late <= SETTLE_SECONDS,
    )
    ctx.after_settle.append(lambda: check_page_shows_ended(ctx, ref, outcome="timed_out"))


#: The execution_timeout of the dws_fault_execution_timeout DAG (tests/faults/dags/fault_scenarios.py).
EXECUTION_TIMEOUT_SECONDS = 180


def flaky_api(ctx: ScenarioContext) -> None:
    """20% UNAVAILABLE on every method for the whole run, plus 4-second bursts of 429 every 20 s."""
    ctx.emulator.set_capacity({VERTEX_POOL: VERTEX_FULL})
    rules = ["*=UNAVAILABLE@0.2"] + [f"*=RESOURCE_EXHAUSTED+{s}..{s + 4}" for s in range(5, 300, 20)]
    before = _injected(ctx.emulator.faults())
    ctx.emulator.set_faults(rules, seed=7)
    try:
        ctx.trigger(VERTEX_DAG, "vx", "fine_tune", EXPECT_VERTEX_OK, {"run_seconds": 8})
        ctx.wait_finished(300)
    finally:
        after = _injected(ctx.emulator.clear_faults())
    counts = {code: n - before.get(code, 0) for code, n in after.items() if n > before.get(code, 0)}
    detail = ", ".join(f"{n} {code}" for code, n in sorted(counts.items()))
    ctx.check("faults injected", f"injected {detail or 'none'}", bool(counts))


def _injected(report: dict[str, Any]) -> dict[str, int]:
    """Injected errors by code, over every method (delays left out)."""
    counts: dict[str, int] = {}
    for codes in report["injected"].values():
        for code, n in codes.items():
            if code != "LATENCY":
                counts[code] = counts.get(code, 0) + n
    return counts


def emulator_outage(ctx: ScenarioContext) -> None:
    """The emulator refuses connections for 30 s while the job waits; the wait must survive it."""
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", EXPECT_VERTEX_OK, {"run_seconds": 3})
    _outage_while_waiting(ctx, ref, VERTEX_POOL, VERTEX_FULL)


def _outage_while_waiting(ctx: ScenarioContext, ref: RunRef, pool: str, full: int) -> None:
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.emulator.outage(30)
    ctx.log("emulator down for 30s")
    time.sleep(32)
    state = ctx.task(ref).get("state")
    ctx.check("still deferred after outage", f"{state} after outage", state == "deferred")
    ctx.give(pool, full)
    ctx.wait_finished(180)


# -- Cloud Batch: the same faults on the Batch example's job (16 shards, one L4 each) -------------


def batch_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """As ``worker_sigkill_after_submit``, for a Batch job: the retry must reattach to the same job."""
    ctx.emulator.set_capacity({ctx.l4_pool: 0})
    # 10 s of run time, for the reason worker_sigkill_after_submit gives (apache/airflow#72716).
    ref = ctx.trigger(
        "dws_fault_batch_kill_after_submit", "bj", "infer", "1+0 SUCCEEDED run=success", {"run_seconds": 10}
    )
    _retry_adopts_after_kill(ctx, ref, ctx.l4_pool, BATCH_FULL)


def batch_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the Batch example's waiting ``infer`` failed: its job must be cancelled.

    The example asks in its own pool (:data:`BATCH_POOL`, L4s of ``DWS_EXAMPLE_REGION``, which the
    deployment leaves at ``us-central1``): no other scenario running side by side asks for L4s there.
    """
    ctx.emulator.set_capacity({BATCH_POOL: 0})
    ref = ctx.trigger(BATCH_DAG, "bj", "infer", "1 CANCELLED run=failed", {"run_seconds": 3})
    _mark_failed_while_waiting(ctx, ref)


def batch_emulator_outage(ctx: ScenarioContext) -> None:
    """The emulator refuses connections for 30 s while the Batch example's job waits."""
    ctx.emulator.set_capacity({BATCH_POOL: 0})
    ref = ctx.trigger(BATCH_DAG, "bj", "infer", "1 SUCCEEDED run=success", {"run_seconds": 3})
    _outage_while_waiting(ctx, ref, BATCH_POOL, BATCH_FULL)


# -- Compute Engine: flex-start VMs through a resize request (2 x a3-highgpu-8g, the release as teardown)

COMPUTE_DAG = "dws_fault_compute_vms"
COMPUTE_TASK = "ask_for_vms"
#: Two a3-highgpu-8g VMs: 16 H100s, a whole scenario pool.
COMPUTE_GPUS = 16


def _zone(ctx: ScenarioContext) -> str:
    return f"{ctx.region}-a" if ctx.region is not None else "us-central1-a"


def _compute_pool(ctx: ScenarioContext) -> str:
    return ctx.pool if ctx.region is not None else VERTEX_POOL


def compute_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the resize request was created: the retry must adopt it, and the
    teardown delete its VMs."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger(
        "dws_fault_compute_kill_after_submit",
        "vm",
        COMPUTE_TASK,
        "1+0 RELEASED run=success",
        {"zone": _zone(ctx)},
    )
    # A resize request has no run time to wait out: capacity comes 10 s after try 2 deferred, so
    # its event does not meet Airflow 3.3's stale defer-exit race (apache/airflow#72716; see
    # worker_sigkill_after_submit). Met 3 s after the deferral, it failed the resumed try after the
    # task had returned its VMs, the teardown did not run, and the VMs stayed held (seen once).
    _retry_adopts_after_kill(ctx, ref, ctx.pool, COMPUTE_GPUS, delay=10, finish=240)


def compute_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting ``ask_for_vms`` failed: its resize request must be cancelled (and
    no VM ever created)."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger(COMPUTE_DAG, "vm", COMPUTE_TASK, "1 CANCELLED run=failed", {"zone": _zone(ctx)})
    _mark_failed_while_waiting(ctx, ref)


def compute_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the resize request waits; a new one must pick the wait up."""
    old = _only_triggerer(ctx)
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(COMPUTE_DAG, "vm", COMPUTE_TASK, "1 RELEASED run=success", {"zone": _zone(ctx)})
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    ctx.give(VERTEX_POOL, COMPUTE_GPUS)
    ctx.wait_finished(240)


def _only_triggerer(ctx: ScenarioContext) -> Any:
    """Stop triggerers until one is left, before the run starts: its wait can only go there."""
    dep = ctx.deployment
    while len(dep.triggerers) > 1:
        dep.stop_triggerer(dep.triggerers[0])
    [only] = dep.triggerers
    return only


def _kill_the_triggerer_while_waiting(ctx: ScenarioContext, ref: RunRef, old: Any) -> None:
    """Once ``ref``'s request waits and its trigger read it on ``old``, the only triggerer,
    SIGKILL it and start a new one, which must take the wait over and read the request."""
    dep = ctx.deployment
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.wait_trigger_running([ref], {old.job_id})
    dep.kill_triggerer(old)
    ctx.log(f"SIGKILLed {old.name} (job {old.job_id}); starting a new triggerer")
    new = dep.start_triggerer()
    ctx.wait_trigger_running([ref], {new.job_id})
    ctx.wait_polled(ref, starts=2)
    ctx.check("wait moved to the new triggerer", f"moved to {new.name}", True)


def compute_emulator_outage(ctx: ScenarioContext) -> None:
    """The emulator (its REST front too) refuses connections for 30 s while the resize request waits."""
    ctx.emulator.set_capacity({_compute_pool(ctx): 0})
    ref = ctx.trigger(COMPUTE_DAG, "vm", COMPUTE_TASK, "1 RELEASED run=success", {"zone": _zone(ctx)})
    _outage_while_waiting(ctx, ref, _compute_pool(ctx), COMPUTE_GPUS)


# -- Calendar mode: a block booked, delivered at its start, used and released (1 x a3-highgpu-8g) ----

CALENDAR_DAG = "dws_fault_calendar_block"
CALENDAR_TASK = "reserve_block"


def _calendar_zone(ctx: ScenarioContext, lead_seconds: int) -> dict[str, Any]:
    """The run's params: a zone with a calendar of its own (8 H100s a day, one block's worth),
    approvals after 1 s and deliveries 1 s after the start, and the block's start."""
    zone = _zone(ctx)
    ctx.emulator.set_calendar(
        approval_seconds=1, min_lead_seconds=0, provision_seconds=1, pools={f"{zone}/{H100}": 8}
    )
    return {"zone": zone, "lead_seconds": lead_seconds}


def calendar_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the future reservation was created: the retry must adopt that
    block (never book a second one), wait for its delivery, and the teardown release it."""
    # The block starts 150 s after the run: time for try 1 to book it and try 2 to adopt it and
    # defer long before the delivery (its event then cannot meet Airflow 3.3's stale defer-exit
    # race, apache/airflow#72716), with this row beside a dozen others on two cores (a worker
    # there took 90 s from its start to its first call). A try that begins after the start books
    # nothing: a new block must start ahead.
    params = _calendar_zone(ctx, 150)
    ref = ctx.trigger(
        "dws_fault_calendar_kill_after_submit", "cal", CALENDAR_TASK, "1+0 RELEASED run=success", params
    )

    # On a machine loaded past that (make faults beside a whole make test: try 2 took 61 s from its
    # start to its first call), try 2 may find the block delivered already and end at once on it,
    # without deferring: as right as deferring on it. What the row checks is that it adopted it.
    def adopted() -> bool:
        ti = ctx.task(ref)
        return ti.get("try_number", 0) >= 2 and ti.get("state") in ("deferred", "success")

    wait_for(adopted, 300, "try 2 to adopt the block (deferred on it, or done if delivered already)", 1.0)
    ctx.wait_finished(420)
    ctx.check_killed_after_submit(ref)


def calendar_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while an approved block waits for its start; a new one must take
    the wait over and see the delivery."""
    old = _only_triggerer(ctx)
    params = _calendar_zone(ctx, 90)
    ref = ctx.trigger(CALENDAR_DAG, "cal", CALENDAR_TASK, "1 RELEASED run=success", params)
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    ctx.wait_finished(300)


def calendar_triggerer_sigkill_while_booking(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while its trigger books the block (the emulator holds the create
    for 30 s): the new triggerer's trigger must look the block up and adopt it, or make it under the
    same name and request id: one block, delivered and released."""
    old = _only_triggerer(ctx)
    params = _calendar_zone(ctx, 150)
    ctx.emulator.set_faults([f"{BOOK}=latency:30x1"])
    try:
        ref = ctx.trigger(CALENDAR_DAG, "cal", CALENDAR_TASK, "1 RELEASED run=success", params)
        wait_for(lambda: _held(ctx, BOOK), 240, "the trigger's create to reach the emulator", 0.5)
        ctx.deployment.kill_triggerer(old)
        ctx.log(f"SIGKILLed {old.name} (job {old.job_id}) during the create; starting a new triggerer")
        new = ctx.deployment.start_triggerer()
        ctx.wait_trigger_running([ref], {new.job_id})
        ctx.check("the booking moved to the new triggerer", f"moved to {new.name}", True)
    finally:
        ctx.emulator.clear_faults()
    ctx.wait_finished(420)


#: The create of a future reservation, as the emulator's fault rules name it.
BOOK = "compute.futureReservations.insert"


def _held(ctx: ScenarioContext, method: str) -> bool:
    """Whether the emulator has delayed a call of ``method`` (a latency rule fired on it)."""
    injected = ctx.emulator.faults().get("injected") or {}
    return any(method in name and codes.get("LATENCY") for name, codes in injected.items())


SCENARIOS: list[Scenario] = [
    Scenario(
        "triggerer_sigkill",
        "SIGKILL the triggerer while requests wait",
        triggerer_sigkill,
        shared=True,
        ci=True,
    ),
    Scenario(
        "worker_sigkill_after_submit", "SIGKILL the worker after submit", worker_sigkill_after_submit, ci=True
    ),
    Scenario(
        "celery_worker_sigkill",
        "SIGKILL the whole Celery worker after submit",
        celery_worker_sigkill,
        shared=True,
        executors=("celery",),
    ),
    Scenario("workload_fails_once", "workload fails once, the task retries", workload_fails_once),
    Scenario("success_while_worker_dead", "job succeeds while the worker is dead", success_while_worker_dead),
    Scenario("user_marks_failed", "user marks the waiting task failed", user_marks_failed, ci=True),
    Scenario("user_clears_task", "user clears the waiting task", user_clears_task),
    Scenario(
        "mark_failed_cancel_unavailable",
        "user marks failed; the cancel call meets one UNAVAILABLE",
        mark_failed_cancel_unavailable,
        shared=True,
    ),
    Scenario(
        "mark_failed_slow_poll",
        "user marks failed while status reads take 3 s",
        mark_failed_slow_poll,
        shared=True,
    ),
    Scenario("flaky_api", "20% UNAVAILABLE + 429 bursts on every method", flaky_api, shared=True),
    Scenario("emulator_outage", "emulator down 30 s during the wait", emulator_outage, shared=True),
    Scenario(
        "execution_timeout",
        "execution_timeout passes while waiting",
        execution_timeout_while_waiting,
        ci=True,
    ),
    Scenario(
        "two_triggerers_takeover", "two triggerers, one SIGKILLed", two_triggerers_takeover, shared=True
    ),
    Scenario(
        "triggerer_paused",
        "triggerer paused past its heartbeat: the wait moves, the old copy must not cancel",
        triggerer_paused_redistribution,
        shared=True,
    ),
    Scenario(
        "batch_worker_sigkill_after_submit",
        "Batch: SIGKILL the worker after submit",
        batch_worker_sigkill_after_submit,
        ci=True,
    ),
    Scenario(
        "batch_user_marks_failed",
        "Batch: user marks the waiting task failed",
        batch_user_marks_failed,
        ci=True,
    ),
    Scenario(
        "batch_emulator_outage",
        "Batch: emulator down 30 s during the wait",
        batch_emulator_outage,
        shared=True,
    ),
    Scenario(
        "compute_worker_sigkill_after_submit",
        "Compute: SIGKILL the worker after submit",
        compute_worker_sigkill_after_submit,
        ci=True,
    ),
    Scenario(
        "compute_user_marks_failed",
        "Compute: user marks the waiting task failed",
        compute_user_marks_failed,
        ci=True,
    ),
    Scenario(
        "compute_triggerer_sigkill",
        "Compute: SIGKILL the triggerer while the VMs wait",
        compute_triggerer_sigkill,
        shared=True,
    ),
    Scenario(
        "compute_emulator_outage",
        "Compute: emulator down 30 s during the wait",
        compute_emulator_outage,
        shared=True,
    ),
    Scenario(
        "calendar_worker_sigkill_after_submit",
        "Calendar: SIGKILL the worker after the reserve request",
        calendar_worker_sigkill_after_submit,
    ),
    Scenario(
        "calendar_triggerer_sigkill",
        "Calendar: SIGKILL the triggerer while the block waits for delivery",
        calendar_triggerer_sigkill,
        shared=True,
    ),
    Scenario(
        "calendar_triggerer_sigkill_while_booking",
        "Calendar: SIGKILL the triggerer while its trigger books the block",
        calendar_triggerer_sigkill_while_booking,
        shared=True,
    ),
    *GKE_SCENARIOS,
    *INFERENCE_SCENARIOS,
    *TPU_SCENARIOS,
    *INSTANCE_SCENARIOS,
    *SUCCESS_SCENARIOS,
]
BY_NAME = {s.name: s for s in SCENARIOS}
#: Side-by-side scenarios on an example DAG ask where its ``DWS_EXAMPLE_REGION`` (one per
#: deployment) says; each has a pool there no other side-by-side scenario uses.
EXAMPLE_REGIONS = {"batch_user_marks_failed": BATCH_REGION}
#: One region (an emulator pool of its own) per scenario that runs side by side with others.
REGIONS = {
    **dict(
        zip(
            [s.name for s in SCENARIOS if not s.shared and s.name not in EXAMPLE_REGIONS],
            [
                "us-east1",
                "us-west1",
                "us-west2",
                "us-east5",
                "us-south1",
                "europe-west4",
                "asia-east1",
                "us-east4",
                "asia-northeast1",
                "northamerica-northeast1",
                "europe-west1",
                "europe-west2",
                "asia-south1",
                "australia-southeast1",
                "southamerica-east1",
                "europe-west3",
                "me-west1",
                "europe-north1",
                "asia-southeast1",
                "us-central2",
                "europe-west6",
                "asia-northeast3",
                "asia-east2",
                "europe-central2",
                "us-east7",
                "europe-southwest1",
                "asia-southeast2",
                "me-central1",
            ],
            strict=False,
        )
    ),
    **EXAMPLE_REGIONS,
}
DAG_IDS = [
    VERTEX_DAG,
    TPU_DAG,
    "dws_fault_kill_after_submit",
    "dws_fault_success_while_dead",
    "dws_fault_fail_once",
    "dws_fault_user_action",
    "dws_fault_execution_timeout",
    "dws_fault_hold_after_submit",
    BATCH_DAG,
    "dws_fault_batch_kill_after_submit",
    COMPUTE_DAG,
    "dws_fault_compute_kill_after_submit",
    CALENDAR_DAG,
    "dws_fault_calendar_kill_after_submit",
    *GKE_DAG_IDS,
    *INFERENCE_DAG_IDS,
    *TPU_DAG_IDS,
    *INSTANCES_DAG_IDS,
]


def emulator_pools() -> dict[str, int]:
    """Every pool the matrix uses, empty: each scenario decides when capacity arrives."""
    return {
        VERTEX_POOL: 0,
        TPU_POOL: 0,
        BATCH_POOL: 0,
        **{f"{region}/{H100}": 0 for region in REGIONS.values()},
        **{f"{region}/{L4}": 0 for region in REGIONS.values()},
        **{tpu_pool(region): 0 for region in REGIONS.values()},
        **{flex_pool(region): 0 for region in REGIONS.values()},
        FLEX_SHARED_POOL: 0,
        f"{INFERENCE_SHARED_REGION}/{L4}": 0,
    }


def select(names: Iterable[str] | None = None, ci: bool = False, executor: str = "local") -> list[Scenario]:
    """Scenarios by name (in matrix order), the CI subset, or all; only those ``executor`` runs."""
    if names:
        wanted = list(names)
        unknown = [n for n in wanted if n not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown scenario(s) {unknown}; choose from {list(BY_NAME)}")
        chosen = [s for s in SCENARIOS if s.name in wanted]
    else:
        chosen = [s for s in SCENARIOS if s.ci or not ci]
    return [s for s in chosen if executor in s.executors]
