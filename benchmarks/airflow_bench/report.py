"""What the benchmark prints: the triggerer table, the burst table, the fan-out phases and the families."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import Any

from .deployment import WATCHDOG_SLEEP, WATCHDOG_THRESHOLD, percentile
from .triggerer import BURST_TAIL

#: PASS when the provider's burst stalls the loop at most this much more than the stock one.
BURST_TARGET = 1.2


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
        f"Triggerer scale with a real Airflow triggerer (Airflow {version('apache-airflow')}, Python "
        f"{platform.python_version()}): N={n} deferred mapped Flex Start tasks, "
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
        "no preload, bytecode compiled beforehand)",
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


#: No stall of the submission burst may pass Airflow's own warning.
STALL_LIMIT = 0.2


def submission_report(result: Mapping[str, Any]) -> tuple[str, bool]:
    """The stalls while the provider's triggers make the N requests against those while N stock
    tasks defer and their triggers start: PASS at most :data:`BURST_TARGET` x stock and no stall
    over :data:`STALL_LIMIT`."""
    ours, stock = result.get("submission_stalls"), (result.get("stock") or {}).get("start_stalls")
    if ours is None or stock is None:
        return "", True
    mine, theirs = max(ours, default=0.0), max(stock, default=0.0)
    ratio = max(mine, STALL_FLOOR) / max(theirs, STALL_FLOOR)
    ok = ratio <= BURST_TARGET and mine <= STALL_LIMIT
    verdict = "PASS" if ok else "FAIL"
    return (
        f"{verdict}  longest stall while the {result['tasks']} requests are made: provider "
        f"{mine * 1000:.0f} ms ({len(ours)} over 50 ms), stock {theirs * 1000:.0f} ms ({len(stock)}) "
        f"while its tasks defer: {ratio:.2f}x (target <= {BURST_TARGET:g}x, none over "
        f"{STALL_LIMIT * 1000:.0f} ms)",
        ok,
    )


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


#: PASS when the provider's deferral, resume and worker CPU per task are at most this much the stock's.
PHASE_TARGET = 1.5


def _ratio(mine: float | None, theirs: float | None) -> float | None:
    return None if mine is None or not theirs else mine / theirs


def _phase_numbers(run: Mapping[str, Any], n: int) -> dict[str, float | None]:
    """Deferral and resume seconds, and worker CPU seconds per task, of one side."""
    d, r = run["defer"], run["resume"]
    deferral = None if d["timed_out"] else d["seconds"]
    # The judged resume runs from the first trigger event (as the issue measured it: "after the last
    # trigger fired"; the provider's fire within a second of each other): Airflow's and the task's
    # work. From capacity it also holds the provider's wait for its next poll, which the stock
    # trigger, firing at a moment it knows, has not: shown, not judged.
    return {
        "deferral": deferral,
        "resume": r.get("after_first_event"),
        "from_capacity": r["seconds"],
        "cpu": (d["worker_cpu"] + r["worker_cpu"]) / n,
        "cpu_defer": d["worker_cpu"] / n,
        "cpu_resume": r["worker_cpu"] / n,
    }


def _seconds(value: float | None, n: int) -> str:
    return "-" if value is None else f"{value:.1f} s ({n / value * 60:.1f} tasks/min)"


def phases_report(
    ours: Mapping[str, Any], stock: Mapping[str, Any] | None, n: int, title: str
) -> tuple[str, bool]:
    """Deferral, resume and worker CPU per task, provider against stock, with PASS/FAIL lines."""
    mine = _phase_numbers(ours, n)
    lines = [title, ""]
    theirs = _phase_numbers(stock, n) if stock else None
    for key, label in (("deferral", "deferral"), ("resume", "resume")):
        other = _seconds(theirs[key], n) if theirs else "-"
        lines.append(f"{label:<21} provider {_seconds(mine[key], n):<28} stock {other}")
    capacity = _seconds(mine["from_capacity"], n)
    other = _seconds(theirs["from_capacity"], n) if theirs else "-"
    ratio = _ratio(mine["from_capacity"], theirs["from_capacity"] if theirs else None)
    note = f"  ({ratio:.2f}x, not judged)" if ratio is not None else ""
    lines.append(f"{'  from capacity':<21} provider {capacity:<28} stock {other}{note}")
    cpu = f"{mine['cpu']:.2f} CPU-s ({mine['cpu_defer']:.2f} + {mine['cpu_resume']:.2f})"
    other = (
        f"{theirs['cpu']:.2f} CPU-s ({theirs['cpu_defer']:.2f} + {theirs['cpu_resume']:.2f})"
        if theirs
        else "-"
    )
    lines.append(f"{'worker CPU per task':<21} provider {cpu:<28} stock {other}")
    lines.append("  (worker CPU: deferral + resume; LocalExecutor workers with their task processes)")
    fired = (ours.get("latency") or {}).get("latencies")
    if fired:
        lines.append(
            f"  (provider resume: its triggers fired {min(fired):.1f}-{max(fired):.1f} s after capacity, "
            "one poll at most; the stock triggers fire at their moment)"
        )
    if not stock:
        return "\n".join(lines), True
    ok = bool(stock["ready"])
    if not stock["ready"]:
        lines.append(
            f"FAIL  the stock run is not valid: only {stock['defer']['deferred']}/{n} deferred before the moment"
        )
    for key, label in (("deferral", "deferral"), ("resume", "resume"), ("cpu", "worker CPU per task")):
        ratio = _ratio(mine[key], theirs[key] if theirs else None)
        if ratio is None:
            lines.append(f"FAIL  {label}: provider/stock - (a side did not finish)")
            ok = False
            continue
        verdict = "PASS" if ratio <= PHASE_TARGET else "FAIL"
        ok = ok and verdict == "PASS"
        lines.append(f"{verdict}  {label}: provider/stock {ratio:.2f}x (target <= {PHASE_TARGET:g}x)")
    return "\n".join(lines), ok


#: Why a family row can miss a target, where the cause is Airflow's and known (docs/scale.md).
_CPU_LIMITS = {
    "calendar": "its Reserve task carries the Wait task's outlet asset, and Airflow records an asset "
    "event only when a worker ends the task (a trigger's success records none), so each task runs "
    "a second task process",
}


def _why_not(name: str, verdicts: list[bool], n: int) -> list[str]:
    """Notes saying why a family row missed a target, where the reason is known."""
    deferral, _, cpu = verdicts
    notes = []
    if not cpu and name in _CPU_LIMITS:
        notes.append(f"{name}: worker CPU over target on every Airflow version: {_CPU_LIMITS[name]}")
    if not deferral and n < 200:
        notes.append(
            f"{name}: deferral over target at N={n}: a few seconds of scheduling either way, which a "
            "2-core machine's swings move by as much; the judged deferral is the N=500 Vertex AI one "
            "(docs/scale.md, per version)"
        )
    return notes


def families_report(result: Mapping[str, Any]) -> tuple[str, bool]:
    """One row per operator family: its phases against the stock run of the same N."""
    families, stock = result.get("families") or {}, result.get("stock_family")
    if not families:
        return "", True
    n = result["family_tasks"]
    theirs = _phase_numbers(stock, n) if stock else None
    head = (
        "family",
        "operator",
        "deferral s",
        "x stock",
        "resume s",
        "x stock",
        "CPU-s/task",
        "x stock",
        "",
        "from capacity s",
        "x stock",
    )
    rows, ok, notes = [], bool(stock and stock["ready"]), []
    for name, row in families.items():
        if "skipped" in row:
            notes.append(f"{name}: {row['skipped']}")
            continue
        if "error" in row:
            ok = False
            rows.append((name, row["operator"], "-", "-", "-", "-", "-", "-", "FAIL (see below)", "-", "-"))
            notes.append(f"{name}: {row['error']}")
            continue
        mine = _phase_numbers(row, n)
        cells, verdicts = [], []
        for key in ("deferral", "resume", "cpu"):
            ratio = _ratio(mine[key], theirs[key] if theirs else None)
            cells += [
                "-" if mine[key] is None else f"{mine[key]:.{2 if key == 'cpu' else 1}f}",
                "-" if ratio is None else f"{ratio:.2f}x",
            ]
            verdicts.append(ratio is not None and ratio <= PHASE_TARGET)
        ok = ok and all(verdicts)
        notes += _why_not(name, verdicts, n)
        capacity = _ratio(mine["from_capacity"], theirs["from_capacity"] if theirs else None)
        rows.append(
            (
                name,
                row["operator"],
                *cells,
                "PASS" if all(verdicts) else "FAIL",
                "-" if mine["from_capacity"] is None else f"{mine['from_capacity']:.1f}",
                "-" if capacity is None else f"{capacity:.2f}x",
            )
        )
    if theirs:
        rows.append(
            (
                "stock",
                "DateTimeTrigger",
                f"{theirs['deferral'] or 0:.1f}",
                "",
                f"{theirs['resume'] or 0:.1f}",
                "",
                f"{theirs['cpu']:.2f}",
                "",
                "" if stock and stock["ready"] else "not valid: deferred too late",
                "-" if theirs["from_capacity"] is None else f"{theirs['from_capacity']:.1f}",
                "",
            )
        )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if i in (0, 1, 8) else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [
        f"Per family: N={n} mapped tasks each, deferral / resume / worker CPU per task against N={n} stock "
        f"tasks on DateTimeTrigger; PASS when all three are at most {PHASE_TARGET:g}x",
        "",
        fmt.format(*head).rstrip(),
        "-" * (sum(widths) + 2 * (len(widths) - 1)),
    ]
    lines += [fmt.format(*r).rstrip() for r in rows]
    lines.append(
        "(resume: from the first trigger that fired until the last task succeeded. From capacity: from "
        "capacity for all N, for calendar from the blocks' start (delivery 1 s later), with the wait for "
        "the next poll, not judged)"
    )
    lines += notes
    return "\n".join(lines), ok
