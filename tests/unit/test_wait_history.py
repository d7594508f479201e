"""The wait history in Airflow Variables: what it keeps, how a lost write is written again."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws import wait_history
from airflow_provider_dws.records import RequestRecord


def finished(name: str, submitted: datetime, waited: timedelta, **changes: Any) -> RequestRecord:
    values: dict[str, Any] = {
        "api": "batch_job",
        "kind": "Cloud Batch job",
        "project": "p",
        "location": "us-central1",
        "request_name": name,
        "phase": "succeeded",
        "accelerator_type": "nvidia-l4",
        "accelerator_count": 1,
        "submitted": submitted.isoformat(),
        "started": (submitted + waited).isoformat(),
        "ended": (submitted + waited + timedelta(minutes=5)).isoformat(),
    }
    values.update(changes)
    return RequestRecord(**values)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values: dict[str, str] = {}
    monkeypatch.setattr(wait_history, "_config", lambda: (True, timedelta(days=30)))
    monkeypatch.setattr(wait_history, "_get", values.get)
    monkeypatch.setattr(wait_history, "_set", values.__setitem__)
    monkeypatch.setattr(wait_history.time, "sleep", lambda _: None)
    return values


def test_the_variable_name_is_safe_for_variables_and_secret_ids() -> None:
    key = wait_history.variable_key("batch_job|us-central1|nvidia_l4|1")
    assert key == "dws_wait_history__batch_job__us-central1__nvidia_l4__1"


def test_an_ended_wait_is_kept_once_per_request_and_forecast_from(store: dict[str, str]) -> None:
    now = datetime.now(timezone.utc)
    for i in range(6):
        assert wait_history.observe(
            finished(f"r{i}", now - timedelta(hours=i + 1), timedelta(minutes=10 * (i + 1)))
        )
    assert wait_history.observe(finished("r0", now - timedelta(hours=1), timedelta(minutes=10)))
    (key,) = store
    assert len(json.loads(store[key])["waits"]) == 6
    found = wait_history.forecast("batch_job|us-central1|nvidia_l4|1")
    assert found is not None and found.requests == 6 and found.p50 == 30 * 60


def test_live_refused_and_calendar_records_are_not_kept(store: dict[str, str]) -> None:
    now = datetime.now(timezone.utc)
    assert not wait_history.observe(
        finished("w", now, timedelta(0), phase="waiting", started=None, ended=None)
    )
    assert not wait_history.observe(finished("f", now, timedelta(0), phase="failed", started=None))
    assert not wait_history.observe(finished("c", now, timedelta(0), api="compute_future_reservation"))
    assert store == {}


def test_old_waits_leave_the_history_when_it_is_written(store: dict[str, str]) -> None:
    now = datetime.now(timezone.utc)
    wait_history.observe(finished("old", now - timedelta(days=45), timedelta(minutes=1)))
    wait_history.observe(finished("new", now - timedelta(days=1), timedelta(minutes=1)))
    (value,) = store.values()
    assert [w[0] for w in json.loads(value)["waits"]] == ["new"]


def test_a_concurrent_write_over_this_one_is_written_again(
    store: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(timezone.utc)
    wait_history.observe(finished("first", now - timedelta(hours=2), timedelta(minutes=3)))
    (key,) = store
    before = store[key]
    writes = []

    def racing_set(k: str, value: str) -> None:
        writes.append(value)
        # The first write is lost: another task that read before it writes its own list after it.
        store[k] = before if len(writes) == 1 else value

    monkeypatch.setattr(wait_history, "_set", racing_set)
    assert wait_history.observe(finished("second", now - timedelta(hours=1), timedelta(minutes=4)))
    assert len(writes) == 2
    assert {w[0] for w in json.loads(store[key])["waits"]} == {"first", "second"}


def test_an_unreadable_history_costs_the_forecast_not_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: str) -> None:
        raise RuntimeError("no API server")

    monkeypatch.setattr(wait_history, "_config", lambda: (True, timedelta(days=30)))
    monkeypatch.setattr(wait_history, "_get", broken)
    assert wait_history.forecast("batch_job|us-central1|nvidia_l4|1") is None
    assert not wait_history.observe(finished("x", datetime.now(timezone.utc), timedelta(minutes=1)))


def test_turned_off_it_neither_reads_nor_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(wait_history, "_config", lambda: (False, timedelta(days=30)))
    monkeypatch.setattr(wait_history, "_get", calls.append)
    monkeypatch.setattr(wait_history, "_set", lambda *a: calls.append(a))
    assert wait_history.forecast("g|l|t|1") is None
    assert not wait_history.observe(finished("x", datetime.now(timezone.utc), timedelta(minutes=1)))
    assert calls == []
