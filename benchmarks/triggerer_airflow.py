"""Airflow at scale with the provider: N mapped Flex Start tasks in a real deployment, against stock.

A real Airflow deployment (``tests.faults.harness.Deployment``: PostgreSQL, api-server, scheduler
with LocalExecutor, dag-processor, one triggerer) against ``dws-emulator``, with no preload (a
user's deployment has none) and with compiled bytecode, as a pip-installed Airflow has it: every
process runs with ``PYTHONPYCACHEPREFIX=<venv>/pycache`` (whatever ``PYTHONDONTWRITEBYTECODE`` the
shell sets), and the standard library, the virtualenv and the repository's trees are compiled
there before the deployment starts, so no measured process compiles anything.

1. start the deployment with the emulator pool ``us-central1/NVIDIA_H100_80GB`` at 0 GPUs;
2. run ``dws_bench_warmup`` once with capacity, so the trigger runner has loaded the provider,
   then read its idle memory and CPU (Airflow's own cost, taken off the waiting one);
3. **deferral**: trigger ``dws_bench_fanout`` (``benchmarks/airflow_dags/``: the example's 8 x H100
   Flex Start task mapped N times) and time it until all N tasks are deferred;
4. once every trigger has its first status, measure over whole poll cycles: emulator calls,
   CPU of the triggerer process tree, memory of the trigger runner, event-loop stalls (Airflow's
   own watchdog lines);
5. **resume**: give capacity for all N jobs at once; read, from each task's trigger log, when its
   trigger fired (capacity-to-event latency, and the stalls of that burst of N events), and time
   until the last of the N tasks ended ``success`` in a worker;
6. unless ``--no-stock``: the same with N stock tasks of ``dws_bench_stock``, each deferring from
   ``execute`` on ``DateTimeTrigger`` to one moment and resuming in a worker (``execute_complete``):
   its deferral, its resume from the moment, and its burst (longest and total stall, provider
   against stock; PASS at most 1.2x each). Deferral, resume and the worker CPU per task (the
   LocalExecutor workers and their task processes, over both phases, / N) are printed side by
   side, PASS at most 1.5x each;
7. the per-family rows (``--families``, ``--family-tasks``, default 50): one mapped DAG per operator
   family (``airflow_dags/family_<name>.py``, a file each), each asking in an emulator pool of its own, deferral,
   capacity for all, resume, against one stock run of the same N (``dws_bench_stock_family``).

``--profile DIR`` records the trigger runner and its supervisor with py-spy during each burst;
``benchmarks/burst_profile.py`` says which functions the loop's busy stretches ran.

The in-loop column is ``triggerer_scale.py --sizes N --modes provider`` run afterwards (or read
from ``--in-loop-json``).

Run ``make bench-airflow`` (N=500 and the families at 50) or
``.venv/bin/python benchmarks/triggerer_airflow.py --tasks 20 --family-tasks 5``.
Needs the local PostgreSQL server the fault matrix uses (see ``tests/faults/README.md``).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests/ is not an installed package

from airflow_bench.deployment import (  # noqa: E402
    FANOUT_DAG,
    STOCK_DAG,
    STOCK_FAMILY_DAG,
    BenchDeployment,
    say,
)
from airflow_bench.families import FAMILIES, NOT_MEASURED, Family  # noqa: E402
from airflow_bench.fanout import deferral, resume, stock_run  # noqa: E402
from airflow_bench.procs import children_cpu, rss_mib, trigger_runner  # noqa: E402
from airflow_bench.report import (  # noqa: E402
    burst_report,
    families_report,
    phases_report,
    report,
    submission_report,
)
from airflow_bench.triggerer import (  # noqa: E402
    capacity_latency,
    in_loop,
    measure_idle,
    measure_waiting,
    wait_all_waiting,
    warm_up,
)

from tests.faults.harness import HarnessError, compile_bytecode, probe_postgres  # noqa: E402

#: The repository's trees the deployment's processes import from (the rest is the virtualenv's).
SOURCE_TREES = [
    ROOT / p for p in ("airflow_provider_dws", "dws-emulator/dws_emulator", "benchmarks/airflow_dags")
]


def provider_fanout(
    dep: BenchDeployment, args: argparse.Namespace, ctx: dict[str, Any], result: dict[str, Any]
) -> bool:
    """Steps 3-5: the N mapped Flex Start tasks; False if they did not all defer."""
    run_id = f"bench-{secrets.token_hex(3)}"
    say(f"triggering {FANOUT_DAG} run {run_id}: {args.tasks} mapped tasks")
    submissions_began = time.time()
    result["defer"] = d = deferral(
        dep, FANOUT_DAG, run_id, args.tasks, ctx["roots"], ctx["workers"], args.defer_timeout
    )
    say(
        f"{d['deferred']}/{args.tasks} deferred in {d['seconds']:.0f}s: {d['seconds_per_task']:.2f}s "
        f"wall, {d['cpu_per_task']:.2f}s Airflow CPU and {d['worker_cpu'] / args.tasks:.2f}s worker CPU per task "
        f"({', '.join(f'{k} {v:.0f}s' for k, v in d['cpu_seconds'].items())})"
    )
    if d["timed_out"]:
        say(f"gave up after --defer-timeout {args.defer_timeout:.0f}s; task states {d['states']}")
        return False
    result["waiting_ready_seconds"] = wait_all_waiting(
        dep, run_id, args.poll_interval * 3 + args.step_timeout
    )
    # The triggers made the N requests between the run's start and now: the submission burst.
    result["submission_stalls"] = dep.stalls(ctx["service_log"], submissions_began, time.time())
    say(f"all {args.tasks} waiting; measuring {args.cycles} poll cycles of {args.poll_interval:g}s")
    result["waiting"] = measure_waiting(dep, ctx["triggerer"], ctx["runner"], ctx["service_log"], args.cycles)
    say(f"giving capacity for all {args.tasks} jobs")
    result["latency"] = lat = capacity_latency(
        dep,
        run_id,
        ctx["service_log"],
        args.poll_interval * 3 + args.step_timeout,
        ctx["profile"],
        ctx["workers"],
    )
    say("waiting for every task to resume and finish")
    result["resume"] = r = resume(
        dep,
        FANOUT_DAG,
        run_id,
        args.tasks,
        lat["given"],
        lat["worker_cpu_before"],
        ctx["workers"],
        args.defer_timeout,
    )
    say(f"{r['succeeded']}/{args.tasks} succeeded, the last {r['seconds'] or 0:.0f}s after capacity")
    return True


def run_family(
    dep: BenchDeployment, family: Family, args: argparse.Namespace, ctx: dict[str, Any]
) -> dict[str, Any]:
    """One family's row: deferral of its N mapped tasks, capacity for all (or the blocks' start), resume."""
    n = args.family_tasks
    family.prepare(dep, n)
    run_id = f"family-{secrets.token_hex(3)}"
    conf, timeout, moment = None, args.defer_timeout, 0.0
    if family.at_moment:
        lead = stock_lead(ctx["stock_per_task"] * n)
        moment = time.time() + lead
        conf, timeout = {"start": datetime.fromtimestamp(moment, timezone.utc).isoformat()}, lead - 3.0
    say(f"family {family.name}: triggering {family.dag_id} run {run_id}: {n} mapped tasks")
    d = deferral(dep, family.dag_id, run_id, n, ctx["roots"], ctx["workers"], timeout, conf)
    if d["timed_out"]:
        return {"operator": family.operator, "error": f"{d['deferred']}/{n} deferred; states {d['states']}"}
    wait_all_waiting(dep, run_id, args.poll_interval * 3 + args.step_timeout, family.dag_id, n)
    if family.at_moment:
        time.sleep(max(0.0, moment - time.time() - 1.0))
    workers_before, given = ctx["workers"](), time.time()
    family.give(dep, n)
    since = moment if family.at_moment else given
    r = resume(dep, family.dag_id, run_id, n, since, workers_before, ctx["workers"], args.defer_timeout)
    say(
        f"family {family.name}: deferred in {d['seconds']:.0f}s, resumed in {r['seconds'] or 0:.0f}s; "
        f"{r['states']}"
    )
    if r["seconds"] is None:
        return {"operator": family.operator, "error": f"{r['succeeded']}/{n} succeeded; states {r['states']}"}
    return {"operator": family.operator, "defer": d, "resume": r}


def stock_lead(deferral_seconds: float) -> float:
    """How far ahead the stock moment is set: past the stock deferral, with room to spare (the
    stock task makes no API call; a provider faster than stock still leaves the stock its time)."""
    return max(deferral_seconds, 30.0) * 1.5 + 45.0


def run(args: argparse.Namespace) -> int:
    problem = probe_postgres()
    if problem:
        say(f"cannot run: {problem}")
        return 2
    families = [FAMILIES[name] for name in args.families if name in FAMILIES]
    pools = {f.pool: 0 for f in families if not f.at_moment}
    dag_ids = [
        *([STOCK_DAG] if args.stock else []),
        *([STOCK_FAMILY_DAG] if families else []),
        *(f.dag_id for f in families),
    ]
    workdir = Path(args.workdir) if args.workdir else None
    dep = BenchDeployment(
        args.tasks, args.family_tasks, args.poll_interval, args.parallelism, pools, dag_ids, workdir
    )
    dep.asyncio_debug = args.asyncio_debug
    result: dict[str, Any] = {
        "tasks": args.tasks,
        "family_tasks": args.family_tasks,
        "poll_interval": args.poll_interval,
        "parallelism": args.parallelism,
    }
    say("compiling bytecode (the standard library, the virtualenv, the repository's trees)")
    result["compile_seconds"] = compile_bytecode(*SOURCE_TREES)
    began = time.monotonic()
    try:
        say(f"starting Airflow (workdir {dep.workdir}) after {result['compile_seconds']:.0f}s of compiling")
        dep.start(timeout=args.start_timeout)
        triggerer = dep.triggerers[0]
        scheduler = dep.services["scheduler"].pid
        runner = trigger_runner(triggerer.pid)
        roots = {name: service.pid for name, service in dep.services.items()}
        roots["triggerer"] = triggerer.pid
        ctx: dict[str, Any] = {
            "roots": roots,
            "triggerer": triggerer.pid,
            "runner": runner,
            "service_log": triggerer.log_path,
            "workers": lambda: children_cpu(scheduler),
            "profile": {"dir": args.profile, "pids": {"runner": runner, "supervisor": triggerer.pid}},
        }
        result["rss_cold_mib"] = rss_mib(runner)
        say(f"up in {dep.startup_seconds:.0f}s; trigger runner pid {runner}; warming up")
        warm_up(dep, args.step_timeout)
        time.sleep(5)  # the warm-up trigger is gone; let the runner settle
        result["rss_idle_mib"] = rss_mib(runner)
        say(f"measuring the idle triggerer for {args.idle_seconds:g}s")
        result["idle"] = measure_idle(triggerer.pid, runner, args.idle_seconds)
        if not provider_fanout(dep, args, ctx, result):
            return 1
        if args.stock:
            time.sleep(10)  # the runner settles
            lead = stock_lead(result["defer"]["seconds"])
            burst = {"service_log": triggerer.log_path, "profile": ctx["profile"]}
            result["stock"] = stock_run(
                dep, args.tasks, lead, roots, ctx["workers"], args.defer_timeout, STOCK_DAG, burst
            )
        run_families(dep, families, args, ctx, result)
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
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "in_loop": row}, indent=2, default=str))
    ok = print_reports(result, row, source)
    print(f"\nAirflow part {result['seconds'] / 60:.1f} min (start-up to the last family)")
    return 0 if ok else 1


def run_families(
    dep: BenchDeployment,
    families: list[Family],
    args: argparse.Namespace,
    ctx: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """Step 7: the stock run of the families' N, then one row per family."""
    if not families:
        return
    # The moments (the stock's, the calendar blocks' start) are set from the slower of the N-task
    # runs' deferral per task, so that every task deferred before its moment.
    stock = result.get("stock")
    per_task = result["defer"]["seconds"] / args.tasks
    if stock:
        per_task = max(per_task, stock["defer"]["seconds"] / args.tasks)
    ctx["stock_per_task"] = per_task
    lead = stock_lead(per_task * args.family_tasks)
    time.sleep(5)
    result["stock_family"] = stock_run(
        dep, args.family_tasks, lead, ctx["roots"], ctx["workers"], args.defer_timeout, STOCK_FAMILY_DAG
    )
    result["families"] = rows = {}
    for family in families:
        try:
            rows[family.name] = run_family(dep, family, args, ctx)
        except HarnessError as err:
            rows[family.name] = {"operator": family.operator, "error": str(err)[:300]}
    for name in args.families:
        if name in NOT_MEASURED:
            rows[name] = {"skipped": NOT_MEASURED[name]}


def print_reports(result: dict[str, Any], row: dict[str, Any] | None, source: str) -> bool:
    """Every table of the report; False if a target was missed."""
    print()
    print(report(result, row, source))
    burst, burst_ok = burst_report(result)
    if burst:
        print(f"\n{burst}")
    submissions, submissions_ok = submission_report(result)
    if submissions:
        print(submissions)
    n = result["tasks"]
    ours = {"defer": result["defer"], "resume": result["resume"], "latency": result["latency"]}
    title = (
        f"Deferral and resume: N={n} mapped Flex Start tasks against N={n} stock tasks on DateTimeTrigger, "
        f"same deployment, parallelism {result['parallelism']}"
    )
    phases, phases_ok = phases_report(ours, result.get("stock"), n, title)
    print(f"\n{phases}")
    table, families_ok = families_report(result)
    if table:
        print(f"\n{table}")
    fired = result["latency"]["fired"] >= n
    return fired and burst_ok and submissions_ok and phases_ok and families_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=500, help="mapped tasks to defer (default 500)")
    parser.add_argument("--poll-interval", type=float, default=30.0, help="trigger poll interval, s")
    parser.add_argument("--cycles", type=int, default=4, help="poll cycles to measure while waiting")
    parser.add_argument(
        "--parallelism", type=int, default=8, help="Airflow core parallelism: task processes at once"
    )
    parser.add_argument(
        "--family-tasks", type=int, default=50, help="mapped tasks of each family's DAG (default 50)"
    )
    parser.add_argument(
        "--families",
        default=",".join([*FAMILIES, *NOT_MEASURED]),
        help=f"comma-separated families to run, or 'none' (default: all of {', '.join([*FAMILIES, *NOT_MEASURED])})",
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
    args.families = (
        [] if args.families == "none" else [f.strip() for f in args.families.split(",") if f.strip()]
    )
    unknown = [f for f in args.families if f not in FAMILIES and f not in NOT_MEASURED]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {[*FAMILIES, *NOT_MEASURED]}")
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        row = result.get("in_loop")
        source = f"in-loop: from {args.from_json}" if row else f"no in-loop numbers in {args.from_json}"
        if args.in_loop_json:
            row, source = in_loop(result["tasks"], args.in_loop_json, 0)
        return 0 if print_reports(result, row, source) else 1
    if args.tasks < 1 or args.family_tasks < 1 or args.cycles < 1 or args.poll_interval <= 0:
        parser.error("--tasks, --family-tasks, --cycles and --poll-interval must be positive")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
