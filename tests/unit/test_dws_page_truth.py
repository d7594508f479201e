"""The DWS page tells the truth about a request whose task ended while it was live.

A record its task left ``waiting`` (killed in the triggerer, marked failed, timed out, a worker
killed, cleared, superseded by a later try) is shown ended, with why, and counted to the task's end
only; a calendar block is held until its end at most. The pure parts: ``data.settle``,
``records.end_record``, the trigger's XCom rewrite, the rendering and the savings sums.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws.plugins.web import render
from airflow_provider_dws.plugins.web.data import Row, TaskRef, row_json, settle
from airflow_provider_dws.records import TASK_ENDED, RequestRecord, end_record, iso
from airflow_provider_dws.savings import PriceTable, request_cost
from airflow_provider_dws.triggers.final_record import ended_value

T0 = datetime(2026, 11, 21, 8, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=5)
LATER = NOW + timedelta(days=2)
H100 = "NVIDIA_H100_80GB"
PRICES = PriceTable({(H100, "flex_start"): 2.0, (H100, "reserved"): 5.0}, "test table")
NAME = "projects/p/locations/us-central1/customJobs/42"


def _record(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-central1",
        "request_name": NAME,
        "phase": "waiting",
        "accelerator_type": H100,
        "accelerator_count": 8,
        "submitted": iso(T0),
        "max_wait_seconds": 3600.0,
        "try_number": 1,
    }
    base.update(kw)
    return RequestRecord(**base)


def _ti(
    state: str | None, try_number: int = 1, start: datetime | None = T0, end: datetime | None = None
) -> TaskRef:
    return TaskRef("dag", "run", "train", -1, state, try_number, start, end)


def _row(record: RequestRecord, ti: TaskRef) -> Row:
    return settle(Row(record, ti, written=T0), NOW)


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("failed", "task failed while waiting"),
        ("upstream_failed", "task upstream failed while waiting"),
        ("success", "task marked success while waiting"),
        ("removed", "task removed while waiting"),
    ],
)
def test_a_waiting_record_of_a_finished_task_is_ended_with_why(state: str, reason: str) -> None:
    end = T0 + timedelta(minutes=20)
    row = _row(_record(), _ti(state, end=end))
    assert row.section == "ended"
    assert row.settled == reason
    assert (row.record.phase, row.record.outcome, row.record.ended) == ("cancelled", TASK_ENDED, iso(end))
    assert row_json(row, NOW, "/")["ended_reason"] == reason
    assert row_json(row, NOW, "/")["written_phase"] == "waiting"


def test_nothing_counts_past_the_tasks_end() -> None:
    """The user's case: marked failed 20 minutes in, the wait and the summary stop growing there."""
    end = T0 + timedelta(minutes=20)
    row = _row(_record(), _ti("failed", end=end))
    assert row.waited_seconds(NOW) == row.waited_seconds(LATER) == 20 * 60
    cost, later = request_cost(row.record, PRICES, NOW), request_cost(row.record, PRICES, LATER)
    assert cost == later
    assert cost.waited_hours == 8 * 20 / 60
    assert cost.saved == 0.0  # it never got capacity: nothing saved, nothing "rising"


def test_a_later_try_supersedes_the_record_of_an_earlier_one() -> None:
    started = T0 + timedelta(hours=1)
    row = _row(_record(), _ti("queued", try_number=2, start=started))
    assert row.section == "ended"
    assert row.settled is not None and row.settled.startswith("superseded by try 2")
    assert row.record.ended == iso(started)


def test_a_try_up_for_retry_says_what_the_next_try_does() -> None:
    row = _row(_record(), _ti("up_for_retry", end=T0 + timedelta(minutes=5)))
    assert row.section == "ended"
    assert row.settled is not None and "next try adopts the request" in row.settled


def test_a_cleared_task_instance_ends_its_record() -> None:
    row = _row(_record(), _ti(None))
    assert row.settled == "task cleared while waiting"
    assert row.record.ended == iso(T0)  # the record's last write: no task end is known


@pytest.mark.parametrize("state", ["deferred", "running", "queued", "scheduled", "restarting"])
def test_a_record_its_try_still_waits_on_stays_waiting(state: str) -> None:
    row = _row(_record(), _ti(state))
    assert (row.section, row.settled, row.record.phase) == ("waiting", None, "waiting")


def test_a_request_adopted_by_a_later_try_is_that_trys_and_stays_waiting() -> None:
    row = _row(_record(try_number=2), _ti("deferred", try_number=2))
    assert row.section == "waiting" and row.settled is None


def test_held_capacity_is_its_release_tasks_not_ended_with_its_task() -> None:
    held = _record(
        api="tpu_queued_resource", phase="running", holds=True, started=iso(T0), held_since=iso(T0)
    )
    row = _row(held, _ti("failed", end=T0 + timedelta(hours=1)))
    assert row.section == "running" and row.settled is None


def test_an_approved_calendar_block_of_a_successful_task_stays_live() -> None:
    block = _record(
        api="compute_future_reservation", pricing_model="calendar", held_until=iso(NOW + timedelta(days=1))
    )
    row = _row(block, _ti("success", end=T0))
    assert row.section == "waiting" and row.settled is None


def test_a_block_past_its_end_is_held_no_more() -> None:
    end = NOW - timedelta(hours=1)
    block = _record(
        api="compute_future_reservation",
        pricing_model="calendar",
        phase="running",
        holds=True,
        started=iso(T0 + timedelta(hours=1)),
        held_since=iso(T0 + timedelta(hours=1)),
        held_until=iso(end),
    )
    row = _row(block, _ti("success", end=T0))
    assert row.section == "ended"
    assert (row.record.phase, row.record.holds, row.record.released) == ("succeeded", False, iso(end))
    assert row.run_seconds(NOW) == row.run_seconds(LATER) == 3 * 3600


def test_a_running_request_of_a_failed_task_is_ended_too() -> None:
    """A Vertex job whose task was marked failed while the job ran (the trigger cancels it)."""
    row = _row(_record(phase="running", started=iso(T0 + timedelta(hours=1))), _ti("failed", end=NOW))
    assert row.settled == "task failed while the request ran"
    assert row.run_seconds(LATER) == 4 * 3600


def test_end_record_leaves_an_ended_record_alone_and_stops_a_hold() -> None:
    done = _record(phase="succeeded", ended=iso(T0), outcome="succeeded")
    assert end_record(done, phase="cancelled", message="x", at=NOW) == done
    held = _record(phase="running", holds=True, held_since=iso(T0))
    ended = end_record(held, phase="cancelled", message="killed", at=NOW)
    assert (ended.holds, ended.released, ended.ended, ended.message) == (False, iso(NOW), iso(NOW), "killed")


def test_the_triggers_rewrite_ends_only_its_own_live_record() -> None:
    other = replace(
        _record(), request_name="projects/p/locations/us-central1/customJobs/7", phase="not_obtained"
    )
    value = [other.to_dict(), _record().to_dict()]
    new = ended_value(value, NAME, "cancelled", "killed", NOW)
    assert new is not None
    assert new[0] == other.to_dict()
    assert (new[1]["phase"], new[1]["outcome"], new[1]["ended"]) == ("cancelled", TASK_ENDED, iso(NOW))
    assert ended_value(new, NAME, "cancelled", "killed", NOW) is None  # already ended: no write
    assert ended_value(value, "another", "cancelled", "killed", NOW) is None


def test_the_page_shows_why_readable_api_names_and_no_doubled_outcome() -> None:
    ended = _row(_record(), _ti("failed", end=T0 + timedelta(minutes=20)))
    done = Row(_record(phase="succeeded", outcome="succeeded", ended=iso(NOW)), _ti("success"), written=NOW)
    html = render.request_sections([ended, done], NOW, "/")
    assert "task failed while waiting" in html
    assert "Vertex AI custom job" in html and "vertex_custom_job" not in html
    assert "succeeded<br><span class='muted'>succeeded" not in html
    assert "Waiting now (0)" in html and "Ended (2)" in html


def test_the_max_wait_does_not_wrap_and_the_page_says_how_fresh_it_is() -> None:
    row = _row(_record(), _ti("deferred"))
    html = render.request_sections([row], NOW, "/")
    assert "<span class='nw'>1h 00m max wait</span>" in html
    assert "<td class='links'>" in html
    fresh = render.freshness([row], NOW)
    assert "from the records the tasks wrote" in fresh and "2026-11-21 08:00:00Z" in fresh


def test_a_request_on_a_kubernetes_connection_without_a_google_project_is_recorded() -> None:
    """Seen in the fault matrix: a Kueue Job on a cncf-kubernetes connection wrote no record at all
    ("project_id is not set and connection 'google_cloud_default' names no project"), so the page
    never listed it. The GKE adapters give a fallback; the other APIs still need a project."""
    from airflow_provider_dws.runtime import recording

    class Op:
        project_id = None
        gcp_conn_id = "no_such_connection_anywhere"
        task_id = "train"

        def _param_error(self, message: str) -> ValueError:
            return ValueError(message)

    assert recording._project(Op(), {"project": ""}) == ""
    with pytest.raises(Exception, match="no_such_connection_anywhere"):
        recording._project(Op(), {})
