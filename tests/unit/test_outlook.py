"""What a request is told before it waits (``runtime/outlook.py``): the forecast and the cost at
submit, the warning when its max wait is shorter than similar requests' p50, and the order a
``ShortestWait`` or ``greener`` failover tries its placements in, with a real operator and adapter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws import wait_history
from airflow_provider_dws.forecast import Observation, group_key
from airflow_provider_dws.records import RequestRecord
from airflow_provider_dws.runtime import outlook
from airflow_provider_dws.runtime.state import AttemptState
from airflow_provider_dws.scheduling.policies import Failover, Placement, ShortestWait
from tests.unit.test_operator_policies import vertex

NOW = datetime.now(timezone.utc)


def waits(*minutes: float, given_up: int = 0, given_up_at: float = 120.0) -> list[Observation]:
    out = [
        Observation(f"ok{i}", (NOW - timedelta(days=1)).timestamp(), m * 60.0, True)
        for i, m in enumerate(minutes)
    ]
    out += [
        Observation(f"no{i}", (NOW - timedelta(days=2)).timestamp(), given_up_at * 60.0, False)
        for i in range(given_up)
    ]
    return out


@pytest.fixture
def history(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Observation]]:
    """The wait history by group, as the worker would read it from its Variables."""
    groups: dict[str, list[Observation]] = {}
    monkeypatch.setattr(wait_history, "_config", lambda: (True, timedelta(days=30)))
    monkeypatch.setattr(wait_history, "_get", lambda key: None)

    def forecast(group: str, now: datetime | None = None) -> Any:
        from airflow_provider_dws.forecast import estimate

        return estimate(group, groups.get(group, []), now or NOW)

    monkeypatch.setattr(wait_history, "forecast", forecast)
    return groups


def h100(region: str) -> str:
    return group_key("vertex_custom_job", region, "NVIDIA_H100_80GB", 8)


def test_shortest_wait_tries_the_region_with_the_shortest_p50_first_then_the_next(
    history: dict[str, list[Observation]], capsys: pytest.CaptureFixture[str]
) -> None:
    history[h100("us-central1")] = waits(90, 100, 110, 120, 130)
    history[h100("us-east4")] = waits(10, 15, 20, 25, 30)
    history[h100("europe-west4")] = waits(40, 45, 50, 55, 60)
    task = vertex(failover=ShortestWait("us-east4", "europe-west4"))
    loop = task.attempt_loop()
    home = Placement("us-central1")
    state = outlook.rank(loop, AttemptState(placement=home))
    assert state.placement == Placement("us-east4")
    assert (
        "Placements by expected wait: us-east4 (p50 20 min from 5 requests), europe-west4 (p50 50 min from 5 "
        "requests), us-central1 (p50 1 h 50 min from 5 requests); trying us-east4"
    ) in capsys.readouterr().out
    tried = ({"placement": Placement("us-east4").to_dict()},)
    assert outlook.rank(loop, AttemptState(placement=home, attempt=2, history=tried)).placement == Placement(
        "europe-west4"
    )


def test_a_region_without_history_ranks_after_those_with_one(history: dict[str, list[Observation]]) -> None:
    history[h100("europe-west4")] = waits(300, 310, 320, 330, 340)
    task = vertex(failover=ShortestWait("us-east4", "europe-west4"))
    assert outlook.rank(
        task.attempt_loop(), AttemptState(placement=Placement("us-central1"))
    ).placement == Placement("europe-west4")


def test_greener_breaks_a_tie_by_the_lower_carbon_intensity(
    history: dict[str, list[Observation]], capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_dws.carbon import SHIPPED

    # No history anywhere: every placement ties, and the written order has the operator's own first.
    task = vertex(failover=Failover("us-east4", "europe-north1", greener=True))
    loop = task.attempt_loop()
    home = Placement("us-central1")
    assert outlook.rank(loop, AttemptState(placement=home)).placement == home
    tried = ({"placement": home.to_dict()},)
    second = outlook.rank(loop, AttemptState(placement=home, attempt=2, history=tried))
    cleaner = min(("us-east4", "europe-north1"), key=lambda r: SHIPPED.intensity(r) or float("inf"))
    assert second.placement == Placement(cleaner)
    assert f"{cleaner} ({SHIPPED.intensity(cleaner):g} gCO2eq/kWh)" in capsys.readouterr().out


def record(**changes: Any) -> RequestRecord:
    values: dict[str, Any] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-central1",
        "request_name": "projects/p/locations/us-central1/customJobs/9",
        "phase": "waiting",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
        "max_wait_seconds": 1800.0,
        "submitted": NOW.isoformat(),
    }
    values.update(changes)
    return RequestRecord(**values)


def test_at_submit_logs_the_forecast_warns_of_a_short_max_wait_and_keeps_the_forecast(
    history: dict[str, list[Observation]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_dws import savings

    monkeypatch.setattr(
        savings, "load_prices", lambda: savings.parse_prices({"NVIDIA_H100_80GB": {"flex_start": 2}}, "test")
    )
    monkeypatch.setattr(savings, "in_task", lambda: True)
    history[h100("us-central1")] = waits(40, 50, 60, 70, 80, given_up=1, given_up_at=200)
    task = vertex(max_run=timedelta(hours=2))
    loop = task.attempt_loop()
    loop.advice = {Placement("us-central1"): 0.4}
    kept = outlook.at_submit(loop, record(), Placement("us-central1"))
    out = capsys.readouterr().out
    assert (kept.expected_wait_p50_seconds, kept.expected_wait_p90_seconds) == (60 * 60.0, 200 * 60.0)
    assert kept.expected_wait_p90_lower_bound and kept.expected_wait_basis == 6
    assert (kept.max_run_seconds, kept.obtainability) == (7200.0, 0.4)
    # Still waiting: 5/6 after 40 min, ... 1/2 after 60 min (the p50), 1/6 after 80; the one given up
    # at 200 min leaves the p90 known only to be longer.
    assert "similar requests waited p50 1 h, p90 more than 3 h 20 min (6 requests, 5 got capacity" in out
    assert (
        "100% were not obtained within 30 min (this max wait); capacity advice: obtainability 0.40 now" in out
    )
    assert [
        line.split("] ", 1)[1].split(" [airflow.task", 1)[0]
        for line in out.splitlines()
        if "[warning" in line
    ] == [
        "The max wait (30 min) is shorter than the p50 wait of similar requests (1 h): more than half "
        "of them would not have got capacity within it. A longer max_wait, an off-peak window or a failover "
        "gives this request a better chance"
    ]
    assert "At most $32.00 for this request: 8 accelerators x 2 h (max_run) x $2.00 (flex_start)" in out


def test_at_submit_without_enough_history_keeps_no_forecast_and_does_not_warn(
    history: dict[str, list[Observation]], capsys: pytest.CaptureFixture[str]
) -> None:
    history[h100("us-central1")] = waits(400)
    kept = outlook.at_submit(vertex().attempt_loop(), record(), Placement("us-central1"))
    out = capsys.readouterr().out
    assert kept.expected_wait_p50_seconds is None and kept.expected_wait_basis == 0
    assert "too little history for a forecast (1 similar request" in out
    assert "[warning" not in out and "[error" not in out


def test_forecast_metrics_are_sent_once_per_attempt_not_again_at_a_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_dws import metrics
    from airflow_provider_dws.scheduling.phases import RequestTimings

    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(metrics, "gauge", lambda name, value, tag: sent.append((name, value)))
    monkeypatch.setattr(metrics, "incr", lambda name, tag, count=1: sent.append((name, count)))
    monkeypatch.setattr(metrics, "timing", lambda *a: None)
    started = NOW + timedelta(hours=3)
    ended = record(
        phase="succeeded",
        started=started.isoformat(),
        ended=(started + timedelta(hours=1)).isoformat(),
        expected_wait_p50_seconds=3600.0,
        expected_wait_p90_seconds=7200.0,
    )
    metrics.attempt_metrics(ended, RequestTimings(NOW, started, started + timedelta(hours=1)))
    assert sent == [(metrics.WAIT_FORECAST_ERROR, 7200.0), (metrics.WAIT_P90_EXCEEDED, 1)]
    sent.clear()
    metrics.end_metrics(ended, None, 3600.0)  # what a release sends for the capacity it gives back
    assert sent == []


def test_a_p50_known_only_as_a_bound_is_kept_and_said_as_one(
    history: dict[str, list[Observation]], capsys: pytest.CaptureFixture[str]
) -> None:
    history[h100("us-central1")] = waits(given_up=6, given_up_at=120)  # nobody got capacity in 2 h
    kept = outlook.at_submit(vertex().attempt_loop(), record(), Placement("us-central1"))
    assert (kept.expected_wait_p50_seconds, kept.expected_wait_p50_lower_bound) == (7200.0, True)
    out = capsys.readouterr().out
    assert "similar requests (more than 2 h): more than half" in out


def test_the_request_made_after_a_ranking_is_not_read_again(
    history: dict[str, list[Observation]], monkeypatch: pytest.MonkeyPatch
) -> None:
    history[h100("us-east4")] = waits(10, 15, 20, 25, 30)
    read: list[str] = []
    forecast = wait_history.forecast
    monkeypatch.setattr(
        wait_history, "forecast", lambda group, now=None: read.append(group) or forecast(group, now)
    )
    loop = vertex(failover=ShortestWait("us-east4")).attempt_loop()
    state = outlook.rank(loop, AttemptState(placement=Placement("us-central1")))
    assert sorted(read) == sorted([h100("us-central1"), h100("us-east4")])
    kept = outlook.at_submit(loop, record(location="us-east4"), state.placement)
    assert len(read) == 2 and kept.expected_wait_p50_seconds == 20 * 60.0
    outlook.at_submit(loop, record(location="us-east4"), state.placement)  # the ranking's read is used once
    assert len(read) == 3
