"""The request record's shape: one for every surface, tolerant when read, replaced per request."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_dws.records import (
    RECORD_VERSION,
    RequestRecord,
    iso,
    parse_time,
    read_records,
    upsert,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def record(**kwargs: object) -> RequestRecord:
    base: dict[str, object] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-central1",
        "request_name": "projects/p/locations/us-central1/customJobs/1",
        "phase": "waiting",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    }
    base.update(kwargs)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_a_record_round_trips_through_its_stored_form() -> None:
    r = record(submitted=iso(T0), max_wait_seconds=7200.0)
    stored = r.to_dict()
    assert stored["v"] == RECORD_VERSION
    assert RequestRecord.from_dict(stored) == r
    assert parse_time(stored["submitted"]) == T0


def test_unknown_keys_are_ignored_and_newer_or_broken_records_skipped() -> None:
    newer = dict(record().to_dict(), v=RECORD_VERSION + 1)
    extra = dict(record().to_dict(), colour="blue")
    broken = dict(record().to_dict(), phase="sleeping")
    got = read_records([newer, extra, broken, "junk", {"api": "x"}])
    assert got == [record()]
    assert read_records(None) == [] and read_records("[]") == []


def test_upsert_replaces_the_record_of_the_same_request() -> None:
    first = record(attempt=1)
    second = record(request_name="projects/p/locations/us-central1/customJobs/2", attempt=2)
    ended = record(phase="not_obtained", ended=iso(T0 + timedelta(hours=2)))
    value = upsert(read_records(upsert([first], second)), ended)
    assert [r.attempt for r in read_records(value)] == [1, 2]
    assert read_records(value)[0].phase == "not_obtained"


def test_times_must_carry_a_time_zone() -> None:
    with pytest.raises(ValueError, match="time zone"):
        iso(datetime(2026, 12, 1))
    assert parse_time("2026-12-01T12:00:00") is None and parse_time(None) is None
    assert record(holds=True, phase="succeeded").live and not record(phase="failed").live


def test_every_backend_kind_has_the_name_the_dws_page_shows() -> None:
    """A new surface's backend kind (``registry.BACKENDS``) gets its readable name in ``API_NAMES``:
    without one the page would show the raw kind."""
    from airflow_provider_dws.records import API_NAMES
    from airflow_provider_dws.registry import BACKENDS

    assert sorted(API_NAMES) == sorted(BACKENDS)
