"""The per-family table of ``make bench-airflow`` says why a row misses a target where the cause is
known (issue 36: "the benchmark and docs say which version, why, and what it reaches")."""

from __future__ import annotations

from typing import Any

from benchmarks.airflow_bench.report import families_report

N = 50


def side(deferral: float, cpu_per_task: float, **extra: Any) -> dict[str, Any]:
    """One side's numbers as the benchmark records them (half the CPU at deferral, half at resume)."""
    cpu = cpu_per_task * N / 2
    return {
        "defer": {"timed_out": False, "seconds": deferral, "worker_cpu": cpu},
        "resume": {"after_first_event": 6.0, "seconds": 10.0, "worker_cpu": cpu},
        **extra,
    }


def report(**families: dict[str, Any]) -> tuple[str, bool]:
    return families_report(
        {"family_tasks": N, "families": families, "stock_family": side(8.0, 0.13, ready=True)}
    )


def test_rows_inside_the_targets_pass_with_no_note() -> None:
    text, ok = report(vertex=side(9.0, 0.13, operator="CreateVertexAIFlexStartJobOperator"))
    assert ok
    assert "vertex: " not in text


def test_the_calendar_rows_worker_cpu_says_why() -> None:
    text, ok = report(calendar=side(9.0, 0.28, operator="ReserveCalendarBlockOperator"))
    assert not ok
    assert "calendar: worker CPU over target" in text
    assert "asset event only when a worker ends the task" in text


def test_a_small_runs_deferral_over_target_says_which_figure_is_judged() -> None:
    text, ok = report(batch=side(13.0, 0.13, operator="CreateBatchFlexStartJobOperator"))
    assert not ok
    assert "batch: deferral over target at N=50" in text
    assert "the judged deferral is the N=500 Vertex AI one" in text
