"""The fault matrix: run the scenarios, measure what the emulator and Airflow show, print the table.

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

The scenarios themselves are in :mod:`tests.faults.scenarios`.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.faults.context import (
    SETTLE_SECONDS,
    TERMINAL_RUN_STATES,
    Row,
    RunFacts,
    RunRef,
    Scenario,
    ScenarioContext,
    count_duplicates,
    is_live,
    own_requests,
    requests_per_try,
)
from tests.faults.harness import CELERY_CONCURRENCY, CELERY_WORKERS, EXECUTORS, Deployment, HarnessError
from tests.faults.scenarios import DAG_IDS, REGIONS, SCENARIOS, emulator_pools, select

__all__ = ["SCENARIOS", "format_table", "run", "run_matrix", "run_scenario", "select"]


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
    names: Iterable[str] | None = None,
    ci: bool = False,
    keep: bool = False,
    workdir: Path | None = None,
    executor: str = "local",
) -> tuple[list[Row], str]:
    """Start a deployment on ``executor``, run the chosen scenarios, stop it; the rows and the report.

    Logs go to ``workdir`` (kept) or to a temporary directory, removed unless ``keep`` or a
    scenario failed.
    """
    scenarios = select(names, ci, executor)
    if not scenarios:
        raise ValueError(f"none of the chosen scenarios runs on the {executor} executor")
    began = time.monotonic()
    deployment = Deployment(emulator_pools(), DAG_IDS, workdir=workdir, executor=executor)
    what = EXECUTORS[executor] + (
        f", {CELERY_WORKERS} workers x {CELERY_CONCURRENCY}, Redis broker" if executor == "celery" else ""
    )
    print(f"==> starting Airflow (PostgreSQL, {what}) in {deployment.workdir}", flush=True)
    passed = False
    rows: list[Row] = []
    try:
        # A loaded 2-core machine has taken 160 s to bring a Celery deployment up.
        deployment.start(timeout=420.0)
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
        f"{EXECUTORS[executor]}: {sum(r.passed for r in rows)}/{len(rows)} PASS; "
        f"startup {deployment.startup_seconds:.0f}s, total {time.monotonic() - began:.0f}s ({timing})"
    )
    return rows, f"{table}\n{summary}"
