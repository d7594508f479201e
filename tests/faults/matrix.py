"""The fault matrix: scenarios, what each expects, what the emulator and Airflow show, and the table.

A scenario triggers one or more DAG runs in a shared :class:`~tests.faults.harness.Deployment`,
injects its fault, and waits for the runs to end. The matrix then reads the emulator's request
list (only the scenario's own runs, by their ``dws_dag``/``dws_run`` labels) and the REST API,
and compares a signature per run, ``<requests per try> <final request states> run=<state>``,
plus the scenario's own checks, with what it expected:

* requests per try: requests created during each Airflow try of the request task (``1+0``: try 1
  created one, try 2 created none and reattached);
* orphans: requests of the scenario still live (waiting, provisioning, running) once its runs
  ended, after up to :data:`SETTLE_SECONDS` for cancellations to land;
* duplicates: requests of one task instance and capacity attempt (``dws_key``, ``dws_attempt``)
  created while an earlier one was still live, or after one had succeeded.

Scenarios marked ``shared`` change something every run would feel (the triggerers, the
emulator's faults or availability) and run one at a time; the others ask in a region of their
own and run side by side.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tests.faults.harness import TRIGGERER_HEALTH_THRESHOLD, Deployment, HarnessError, wait_for

VERTEX_DAG = "dws_vertex_flex_start"
TPU_DAG = "dws_tpu_queued_resource"
H100 = "NVIDIA_H100_80GB"
#: The pools the example DAGs ask in (region and accelerator; zone and TPU family).
VERTEX_POOL = f"us-central1/{H100}"
TPU_POOL = "us-west4-a/v5litepod"
#: Enough for two of the example's 8-GPU jobs (or 16-chip slices): a leftover cannot starve a run.
VERTEX_FULL, TPU_FULL = 16, 32

LIVE_STATES = {
    "CustomJob": {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING"},
    "QueuedResource": {
        "CREATING",
        "ACCEPTED",
        "WAITING_FOR_RESOURCES",
        "PROVISIONING",
        "ACTIVE",
        "SUSPENDING",
    },
}
#: For duplicates, a request stops counting once it was given up: CANCELLING holds no new capacity.
HELD_STATES = {kind: states - {"JOB_STATE_CANCELLING", "SUSPENDING"} for kind, states in LIVE_STATES.items()}
WAITING_STATES = {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"}
TERMINAL_RUN_STATES = {"success", "failed"}
#: How long after its runs ended a scenario's requests may take to stop (cancel, delete).
SETTLE_SECONDS = 60.0


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- what a scenario drives and expects -----------------------------------------------------------


@dataclass
class RunRef:
    """One DAG run a scenario triggered, the task in it that asks for capacity, and what it expects."""

    label: str
    dag_id: str
    run_id: str
    request_task: str
    expected: str = ""


@dataclass
class Check:
    """A scenario-specific condition: what was expected, what was seen, whether it held."""

    expected: str
    seen: str
    ok: bool


@dataclass
class RunFacts:
    """What Airflow and the emulator show about one run."""

    ref: RunRef
    run_state: str
    task_states: dict[str, str]
    per_try: list[int]
    requests: list[dict[str, Any]]

    def signature(self) -> str:
        return signature(self.per_try, [final_state(r) for r in self.requests], self.run_state)


@dataclass
class Row:
    """One line of the table."""

    scenario: str
    requests_per_try: str
    orphans: int
    duplicates: int
    task_states: str
    expected: str
    seen: str
    passed: bool
    seconds: float
    problems: list[str] = field(default_factory=list)


def signature(per_try: Sequence[int], finals: Sequence[str], run_state: str) -> str:
    """``1+0 SUCCEEDED run=success``: requests created per try, their final states, the run's state."""
    tries = "+".join(str(n) for n in per_try) or "0"
    return f"{tries} {','.join(finals) or '-'} run={run_state}"


def final_state(record: dict[str, Any]) -> str:
    """A request's final state, short: ``SUCCEEDED``; a TPU slice released after ACTIVE is ``RELEASED``."""
    state = str(record["state"]).removeprefix("JOB_STATE_")
    if record["kind"] == "QueuedResource" and record["deleted"]:
        reached = {h["state"] for h in record["history"]}
        return "RELEASED" if "ACTIVE" in reached else "DELETED"
    return state


def is_live(record: dict[str, Any]) -> bool:
    return not record["deleted"] and record["state"] in LIVE_STATES[record["kind"]]


def own_requests(records: Iterable[dict[str, Any]], ref: RunRef) -> list[dict[str, Any]]:
    """The requests one run's request task created (identity labels; TPU: on the slice's nodes)."""
    return [
        r
        for r in records
        if r["labels"].get("dws_dag") == ref.dag_id
        and r["labels"].get("dws_run") == ref.run_id
        and r["labels"].get("dws_task") == ref.request_task
    ]


def requests_per_try(records: Sequence[dict[str, Any]], tries: Sequence[dict[str, Any]]) -> list[int]:
    """How many requests each try created: a request belongs to the last try started before it."""
    starts = [(t["try_number"], _parse_time(t.get("start_date"))) for t in tries]
    counts = {number: 0 for number, _ in starts} or {1: 0}
    first = min(counts)
    for record in records:
        created = _parse_time(record["create_time"])
        owner = first
        for number, started in starts:
            if started is not None and created is not None and started <= created:
                owner = max(owner, number)
        counts[owner] = counts.get(owner, 0) + 1
    return [counts[n] for n in sorted(counts)]


def _live_until(record: dict[str, Any]) -> datetime | None:
    """When a request stopped counting (None: still live, or it succeeded and holds the result)."""
    for step in record["history"]:
        state = step["state"]
        if state in ("JOB_STATE_SUCCEEDED", "ACTIVE"):
            return None
        if state not in HELD_STATES[record["kind"]]:
            return _parse_time(step["time"])
    return None


def count_duplicates(records: Sequence[dict[str, Any]]) -> int:
    """Requests created while another of the same identity and attempt was live or had succeeded."""
    by_identity: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        key = (record["labels"].get("dws_key", record["name"]), record["labels"].get("dws_attempt", "1"))
        by_identity.setdefault(key, []).append(record)
    duplicates = 0
    for group in by_identity.values():
        group.sort(key=lambda r: r["create_time"])
        for index, record in enumerate(group[1:], start=1):
            created = _parse_time(record["create_time"])
            for earlier in group[:index]:
                until = _live_until(earlier)
                if until is None or (created is not None and created < until):
                    duplicates += 1
                    break
    return duplicates


# -- the scenario's view of the deployment ----------------------------------------------------------


class Scenario:
    """A named fault with its procedure; ``ci`` ones also run in ``make test``."""

    def __init__(
        self,
        name: str,
        title: str,
        procedure: Callable[[ScenarioContext], None],
        *,
        shared: bool = False,
        ci: bool = False,
    ) -> None:
        self.name = name
        self.title = title
        self.procedure = procedure
        self.shared = shared
        self.ci = ci


class ScenarioContext:
    """What a scenario procedure gets: the deployment, its own region, and helpers to act and wait."""

    def __init__(self, deployment: Deployment, scenario: Scenario, region: str | None) -> None:
        self.deployment = deployment
        self.scenario = scenario
        self.region = region
        self.runs: list[RunRef] = []
        self.checks: list[Check] = []
        self.after_settle: list[Callable[[], None]] = []
        self.problems: list[str] = []
        self.started = time.monotonic()

    @property
    def api(self) -> Any:
        assert self.deployment.api is not None
        return self.deployment.api

    @property
    def emulator(self) -> Any:
        assert self.deployment.emulator is not None
        return self.deployment.emulator.control

    @property
    def pool(self) -> str:
        """The scenario's own Vertex pool (its region)."""
        assert self.region is not None, f"{self.scenario.name} is shared: it uses the examples' pools"
        return f"{self.region}/{H100}"

    def log(self, message: str) -> None:
        print(f"  [{self.scenario.name} +{time.monotonic() - self.started:5.1f}s] {message}", flush=True)

    def trigger(
        self, dag_id: str, label: str, request_task: str, expected: str, conf: dict[str, Any] | None = None
    ) -> RunRef:
        """Start a DAG run whose run id (a valid label value) marks the scenario's requests."""
        run_id = f"fm-{self.scenario.name.replace('_', '-')}-{label}-{secrets.token_hex(3)}"
        conf = dict(conf or {})
        if self.region is not None:
            conf.setdefault("region", self.region)
        self.api.trigger(dag_id, run_id, conf)
        ref = RunRef(label, dag_id, run_id, request_task, expected)
        self.runs.append(ref)
        self.log(f"triggered {dag_id} run {run_id}")
        return ref

    def check(self, expected: str, seen: str, ok: bool) -> None:
        self.checks.append(Check(expected, seen, ok))

    def task(self, ref: RunRef, task_id: str | None = None) -> dict[str, Any]:
        return self.api.task_instances(ref.dag_id, ref.run_id).get(task_id or ref.request_task, {})

    def requests(self, ref: RunRef) -> list[dict[str, Any]]:
        return own_requests(self.emulator.requests(), ref)

    def wait_waiting(self, ref: RunRef, timeout: float = 120.0, try_number: int = 1) -> dict[str, Any]:
        """Until the request task's try is deferred on a request that waits for capacity."""

        def ready() -> dict[str, Any] | None:
            ti = self.task(ref)
            if ti.get("state") in ("failed", "success", "upstream_failed"):
                raise HarnessError(f"{ref.request_task} ended {ti['state']} before it was waiting")
            if ti.get("state") != "deferred" or ti.get("try_number", 0) < try_number:
                return None
            waiting = [r for r in self.requests(ref) if r["state"] in WAITING_STATES]
            return ti if waiting else None

        ti = wait_for(ready, timeout, f"{ref.request_task} of {ref.run_id} to wait deferred", 1.0)
        self.log(f"{ref.request_task} try {ti['try_number']} is deferred, its request waits for capacity")
        return ti

    def task_log(self, ref: RunRef, try_number: int) -> str:
        """The task log of one try of the request task (the worker's side)."""
        path = (
            self.deployment.home
            / "logs"
            / f"dag_id={ref.dag_id}"
            / f"run_id={ref.run_id}"
            / f"task_id={ref.request_task}"
            / f"attempt={try_number}.log"
        )
        return path.read_text(errors="replace") if path.exists() else ""

    def check_killed_after_submit(self, ref: RunRef) -> None:
        """Check that try 1 really died of SIGKILL right after its submit (the DAG's fault fired)."""
        log = self.task_log(ref, 1)
        fired = "FAULT: SIGKILL" in log
        killed = '"signal":-9' in log.replace(" ", "")
        seen = (
            "try 1 SIGKILLed after submit" if fired and killed else f"fault fired={fired}, signal 9={killed}"
        )
        self.check("try 1 SIGKILLed after submit", seen, fired and killed)

    def trigger_logs(self, ref: RunRef) -> str:
        """The trigger logs of the request task (every try and trigger), as Airflow wrote them."""
        base = self.deployment.home / "logs" / f"dag_id={ref.dag_id}" / f"run_id={ref.run_id}"
        files = sorted((base / f"task_id={ref.request_task}").glob("attempt=*.log.trigger.*.log"))
        return "".join(f.read_text(errors="replace") for f in files)

    def wait_polled(self, ref: RunRef, starts: int = 1, timeout: float = 120.0) -> None:
        """Until the trigger logged a status of its request ``starts`` times (once per trigger start).

        Only then is the request "waiting" as a user sees it: the trigger runs and has read it.
        """

        def polled() -> bool:
            names = [r["name"] for r in self.requests(ref)]
            lines = [line for line in self.trigger_logs(ref).splitlines() if any(n in line for n in names)]
            # "Waiting on NAME" opens every trigger start; the first status line follows it.
            opened = [i for i, line in enumerate(lines) if "Waiting on " in line]
            return len(opened) >= starts and len(lines) > opened[starts - 1] + 1

        wait_for(polled, timeout, f"the trigger of {ref.run_id} to read its request", 1.0)

    def wait_trigger_running(self, refs: Sequence[RunRef], job_ids: set[int], timeout: float = 120.0) -> None:
        """Until every deferred request task's trigger is assigned to one of ``job_ids``."""

        def assigned() -> bool:
            for ref in refs:
                owners = self.deployment.trigger_assignments(ref.dag_id, ref.run_id)
                if owners.get(ref.request_task) not in job_ids:
                    return False
            return True

        wait_for(assigned, timeout, f"the triggers to run on triggerer job(s) {sorted(job_ids)}", 0.5)

    def wait_finished(self, timeout: float, refs: Sequence[RunRef] | None = None) -> bool:
        """Until every run (or ``refs``) ended; False when ``timeout`` passed first."""
        refs = list(refs or self.runs)

        def done() -> bool:
            return all(self.api.dag_run(r.dag_id, r.run_id)["state"] in TERMINAL_RUN_STATES for r in refs)

        try:
            wait_for(done, timeout, "the runs to end", 1.0)
        except HarnessError:
            self.log(f"runs still not finished after {timeout:.0f}s")
            return False
        return True


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
    ctx.wait_waiting(ref, timeout=180, try_number=2)
    _give(ctx, ctx.pool)
    ctx.wait_finished(180)
    ctx.check_killed_after_submit(ref)


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
    second = _parse_time(tries[1]["start_date"]) if len(tries) > 1 else None
    ended = _parse_time(jobs[0]["end_time"]) if jobs else None
    if second is None or ended is None:
        ctx.check("job ended before try 2", "no try 2 or no job end", False)
    else:
        lead = (second - ended).total_seconds()
        ctx.check("job ended before try 2", f"ended {lead:.1f}s before try 2", lead > 0)


def user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting task failed through the REST API: its request must be cancelled."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger("dws_fault_user_action", "vx", "fine_tune", "1 CANCELLED run=failed")
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    marked = _now()
    ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
    ctx.log("marked fine_tune failed through the REST API")
    ctx.wait_finished(120)
    ctx.after_settle.append(lambda: _cancelled_within(ctx, ref, marked, SETTLE_SECONDS))


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
        marked = _now()
        ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
        ctx.log("marked fine_tune failed; the first cancel call will answer UNAVAILABLE")
        with contextlib.suppress(HarnessError):  # no cancel call at all is a finding, not an error
            wait_for(fired, SETTLE_SECONDS, "a cancel call", 0.5)
        times = fired()
    finally:
        ctx.emulator.clear_faults()
    ctx.check("cancel met UNAVAILABLE", f"UNAVAILABLE fired {times}x", times == 1)
    ctx.wait_finished(120)
    ctx.after_settle.append(lambda: _cancelled_within(ctx, ref, marked, SETTLE_SECONDS))


def mark_failed_slow_poll(ctx: ScenarioContext) -> None:
    """As ``user_marks_failed``, but every status read takes 3 s, so the kill lands during one."""
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(VERTEX_DAG, "vx", "fine_tune", "1 CANCELLED run=failed", {"run_seconds": 3})
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.emulator.set_faults(["GetCustomJob=latency:3"])
    try:
        time.sleep(5)  # the trigger is now inside a 3 s read most of the time
        marked = _now()
        ctx.api.set_task_state(ref.dag_id, ref.run_id, ref.request_task, "failed")
        ctx.log("marked fine_tune failed while its status reads take 3 s")
        ctx.wait_finished(120)
    finally:
        ctx.emulator.clear_faults()
    ctx.after_settle.append(lambda: _cancelled_within(ctx, ref, marked, SETTLE_SECONDS))


def user_clears_task(ctx: ScenarioContext) -> None:
    """A user clears the waiting task: the old request must be cancelled and exactly one new one made."""
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger("dws_fault_user_action", "vx", "fine_tune", "1+1 CANCELLED,SUCCEEDED run=success")
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    cleared = _now()
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
    _give(ctx, ctx.pool)
    ctx.wait_finished(180)
    ctx.after_settle.append(lambda: _cancelled_within(ctx, ref, cleared, SETTLE_SECONDS, first_only=True))


def execution_timeout_while_waiting(ctx: ScenarioContext) -> None:
    """``execution_timeout`` (20 s) passes while the job waits: request cancelled, task failed.

    The bound is on the cancel, counted from the deadline (the try's start + 20 s), not on the
    whole task: on a loaded machine a worker may take half a minute just to start.
    """
    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger("dws_fault_execution_timeout", "vx", "fine_tune", "1 CANCELLED run=failed")
    ti = ctx.wait_waiting(ref)
    started = _parse_time(ti.get("start_date")) or _now()
    deadline = started + timedelta(seconds=EXECUTION_TIMEOUT_SECONDS)
    ctx.wait_finished(120)
    cancelled = [
        _parse_time(step["time"])
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


#: The execution_timeout of the dws_fault_execution_timeout DAG (tests/faults/dags/fault_scenarios.py).
EXECUTION_TIMEOUT_SECONDS = 20


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
    ctx.wait_waiting(ref)
    ctx.wait_polled(ref)
    ctx.emulator.outage(30)
    ctx.log("emulator down for 30s")
    time.sleep(32)
    state = ctx.task(ref).get("state")
    ctx.check("still deferred after outage", f"{state} after outage", state == "deferred")
    _give(ctx, VERTEX_POOL, VERTEX_FULL)
    ctx.wait_finished(180)


def _give(ctx: ScenarioContext, pool: str, count: int = 8) -> None:
    ctx.emulator.set_capacity({pool: count})
    ctx.log(f"capacity arrives in {pool}")


def _cancelled_within(
    ctx: ScenarioContext, ref: RunRef, since: datetime, limit: float, first_only: bool = False
) -> None:
    """Check that the run's requests (only the first, with ``first_only``) were cancelled in time."""
    records = ctx.requests(ref)[:1] if first_only else ctx.requests(ref)
    stamps = [_cancel_time(r) for r in records]
    if not records or None in stamps:
        ctx.check(f"cancelled <= {limit:.0f}s", "not cancelled", False)
        return
    latency = max((s - since).total_seconds() for s in stamps if s is not None)
    ctx.check(f"cancelled <= {limit:.0f}s", f"cancelled after {latency:.1f}s", latency <= limit)


def _cancel_time(record: dict[str, Any]) -> datetime | None:
    for step in record["history"]:
        if step["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"):
            return _parse_time(step["time"])
    return None


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
]
BY_NAME = {s.name: s for s in SCENARIOS}
#: One region (an emulator pool of its own) per scenario that runs side by side with others.
REGIONS = dict(
    zip(
        [s.name for s in SCENARIOS if not s.shared],
        ["us-east1", "us-west1", "us-west2", "us-east5", "us-south1", "europe-west4", "asia-east1"],
        strict=False,
    )
)
DAG_IDS = [
    VERTEX_DAG,
    TPU_DAG,
    "dws_fault_kill_after_submit",
    "dws_fault_success_while_dead",
    "dws_fault_fail_once",
    "dws_fault_user_action",
    "dws_fault_execution_timeout",
]


def emulator_pools() -> dict[str, int]:
    """Every pool the matrix uses, empty: each scenario decides when capacity arrives."""
    return {VERTEX_POOL: 0, TPU_POOL: 0, **{f"{region}/{H100}": 0 for region in REGIONS.values()}}


def select(names: Iterable[str] | None = None, ci: bool = False) -> list[Scenario]:
    """Scenarios by name (in matrix order), the CI subset, or all."""
    if names:
        wanted = list(names)
        unknown = [n for n in wanted if n not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown scenario(s) {unknown}; choose from {list(BY_NAME)}")
        return [s for s in SCENARIOS if s.name in wanted]
    return [s for s in SCENARIOS if s.ci or not ci]


# -- running and measuring ------------------------------------------------------------------------


def _facts(ctx: ScenarioContext, ref: RunRef, records: list[dict[str, Any]]) -> RunFacts:
    run_state = ctx.api.dag_run(ref.dag_id, ref.run_id)["state"]
    tis = ctx.api.task_instances(ref.dag_id, ref.run_id)
    try:
        tries = ctx.api.tries(ref.dag_id, ref.run_id, ref.request_task)
    except HarnessError:
        tries = []
    mine = own_requests(records, ref)
    return RunFacts(
        ref, run_state, {t: str(ti["state"]) for t, ti in tis.items()}, requests_per_try(mine, tries), mine
    )


def _settle(ctx: ScenarioContext) -> list[dict[str, Any]]:
    """The emulator's records once the scenario's requests stopped, or after :data:`SETTLE_SECONDS`."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        records = ctx.emulator.requests()
        live = [r for ref in ctx.runs for r in own_requests(records, ref) if is_live(r)]
        if not live or time.monotonic() > deadline:
            return records
        time.sleep(1)


def _stop_leftovers(ctx: ScenarioContext) -> None:
    """End what a failed scenario left running, so the next one starts clean (after measuring)."""
    for ref in ctx.runs:
        try:
            if ctx.api.dag_run(ref.dag_id, ref.run_id)["state"] in TERMINAL_RUN_STATES:
                continue
            for task_id, ti in ctx.api.task_instances(ref.dag_id, ref.run_id).items():
                if ti["state"] in ("deferred", "running", "queued", "scheduled", "up_for_retry"):
                    ctx.api.set_task_state(ref.dag_id, ref.run_id, task_id, "failed")
            ctx.log(f"marked the unfinished tasks of {ref.run_id} failed (clean-up after measuring)")
        except HarnessError as err:
            ctx.log(f"clean-up of {ref.run_id} failed: {err}")


def run_scenario(deployment: Deployment, scenario: Scenario, region: str | None) -> Row:
    """Run one scenario and measure it; harness errors become a FAIL row with the reason."""
    ctx = ScenarioContext(deployment, scenario, region)
    ctx.log(f"start: {scenario.title}" + (f" (pool {ctx.pool})" if region else ""))
    try:
        scenario.procedure(ctx)
    except Exception as err:
        ctx.problems.append(f"{type(err).__name__}: {err}")
        ctx.log(f"procedure stopped: {err}\n{traceback.format_exc()}")
    try:
        finished = all(ctx.api.dag_run(r.dag_id, r.run_id)["state"] in TERMINAL_RUN_STATES for r in ctx.runs)
        records = _settle(ctx) if finished else ctx.emulator.requests()
        for check in ctx.after_settle:
            check()
        facts = [_facts(ctx, ref, records) for ref in ctx.runs]
    except Exception as err:
        ctx.problems.append(f"measuring failed: {type(err).__name__}: {err}")
        facts = []
    _stop_leftovers(ctx)
    return _row(ctx, facts, time.monotonic() - ctx.started)


def _row(ctx: ScenarioContext, facts: list[RunFacts], seconds: float) -> Row:
    many = len(facts) > 1

    def tag(fact: RunFacts, text: str) -> str:
        return f"{fact.ref.label}: {text}" if many else text

    records = [r for f in facts for r in f.requests]
    orphans = sum(1 for r in records if is_live(r))
    duplicates = count_duplicates(records)
    # Runs are joined with " / ", the scenario's own checks follow after "; ".
    expected = "; ".join(
        [" / ".join(tag(f, f.ref.expected) for f in facts)] + [c.expected for c in ctx.checks]
    )
    seen = "; ".join([" / ".join(tag(f, f.signature()) for f in facts)] + [c.seen for c in ctx.checks])
    problems = list(ctx.problems)
    problems += [
        f"{f.ref.label}: expected {f.ref.expected!r}, saw {f.signature()!r}"
        for f in facts
        if f.signature() != f.ref.expected
    ]
    problems += [f"expected {c.expected!r}, saw {c.seen!r}" for c in ctx.checks if not c.ok]
    if orphans:
        live = [f"{r['name'].rsplit('/', 1)[-1]} {r['state']}" for r in records if is_live(r)]
        problems.append(f"{orphans} orphan(s) left live: {', '.join(live)}")
    if duplicates:
        problems.append(f"{duplicates} duplicate request(s)")
    if not facts:
        problems.append("no run was measured")
    return Row(
        scenario=ctx.scenario.name,
        requests_per_try=" / ".join(tag(f, "+".join(map(str, f.per_try))) for f in facts) or "-",
        orphans=orphans,
        duplicates=duplicates,
        task_states=" / ".join(tag(f, " ".join(f"{t}={s}" for t, s in f.task_states.items())) for f in facts),
        expected=expected,
        seen=seen,
        passed=not problems,
        seconds=seconds,
        problems=problems,
    )


def run_matrix(deployment: Deployment, scenarios: Sequence[Scenario]) -> list[Row]:
    """Scenarios with their own pool side by side, then the shared ones one at a time; rows in order."""
    rows: dict[str, Row] = {}
    lock = threading.Lock()

    def one(scenario: Scenario) -> None:
        row = run_scenario(deployment, scenario, None if scenario.shared else REGIONS[scenario.name])
        with lock:
            rows[scenario.name] = row
        print(f"==> {row.scenario}: {'PASS' if row.passed else 'FAIL'} in {row.seconds:.0f}s", flush=True)

    side_by_side = [s for s in scenarios if not s.shared]
    if side_by_side:
        with ThreadPoolExecutor(max_workers=len(side_by_side)) as pool:
            list(pool.map(one, side_by_side))
    for scenario in scenarios:
        if scenario.shared:
            one(scenario)
    return [rows[s.name] for s in scenarios]


COLUMNS = (
    "scenario",
    "requests/try",
    "orphans",
    "duplicates",
    "task states",
    "expected",
    "seen",
    "result",
)


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width table, one row per scenario, then the reasons of every FAIL."""
    cells = [
        [
            r.scenario,
            r.requests_per_try,
            str(r.orphans),
            str(r.duplicates),
            r.task_states,
            r.expected,
            r.seen,
            "PASS" if r.passed else "FAIL",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]
    lines = [
        " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(COLUMNS), *cells]
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    for row in rows:
        for problem in row.problems:
            lines.append(f"FAIL {row.scenario}: {problem}")
    return "\n".join(lines)


def run(
    names: Iterable[str] | None = None, ci: bool = False, keep: bool = False, workdir: Path | None = None
) -> tuple[list[Row], str]:
    """Start a deployment, run the chosen scenarios, stop it; returns the rows and the report.

    Logs go to ``workdir`` (kept) or to a temporary directory, removed unless ``keep`` or a
    scenario failed.
    """
    scenarios = select(names, ci)
    began = time.monotonic()
    deployment = Deployment(emulator_pools(), DAG_IDS, workdir=workdir)
    print(f"==> starting Airflow (PostgreSQL, LocalExecutor) in {deployment.workdir}", flush=True)
    passed = False
    try:
        deployment.start()
        print(
            f"==> deployment up in {deployment.startup_seconds:.0f}s; {len(scenarios)} scenario(s)",
            flush=True,
        )
        rows = run_matrix(deployment, scenarios)
        passed = all(r.passed for r in rows)
    finally:
        deployment.stop()
        # A failure's logs (Airflow's and the emulator's) are the only way to tell why: keep them.
        if keep or not passed:
            print(f"==> logs kept in {deployment.workdir}", flush=True)
        else:
            deployment.remove_workdir()
    table = format_table(rows)
    timing = ", ".join(f"{r.scenario} {r.seconds:.0f}s" for r in rows)
    summary = (
        f"{sum(r.passed for r in rows)}/{len(rows)} PASS; startup {deployment.startup_seconds:.0f}s, "
        f"total {time.monotonic() - began:.0f}s ({timing})"
    )
    return rows, f"{table}\n{summary}"
