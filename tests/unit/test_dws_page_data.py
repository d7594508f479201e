"""The DWS page's pure parts: merging records of one request, filters, links, idle time, rendering."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_provider_dws.plugins.web import render
from airflow_provider_dws.plugins.web.data import Filters, Row, TaskRef, log_path, matches, merge, ti_path
from airflow_provider_dws.records import RequestRecord

T0 = datetime(2026, 11, 21, tzinfo=timezone.utc)


def _ref(task_id: str, state: str = "success", end: datetime | None = None, map_index: int = -1) -> TaskRef:
    return TaskRef("dag", "manual__2026-11-21T00:00:00+00:00", task_id, map_index, state, 2, None, end)


def _slice(**kw: object) -> RequestRecord:
    base: dict[str, object] = {
        "api": "tpu",
        "kind": "QueuedResource",
        "project": "p",
        "location": "us-west4-a",
        "request_name": "qr-1",
        "phase": "running",
        "submitted": T0.isoformat(),
        "started": (T0 + timedelta(hours=1)).isoformat(),
    }
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_records_of_one_request_merge_latest_phase_first_task() -> None:
    create, delete = _ref("create"), _ref("delete")
    released = (T0 + timedelta(hours=3)).isoformat()
    rows = merge(
        [
            (
                _slice(holds=True, held_since=(T0 + timedelta(hours=1)).isoformat()),
                create,
                T0 + timedelta(hours=1),
            ),
            (_slice(phase="succeeded", released=released, ended=released), delete, T0 + timedelta(hours=3)),
        ]
    )
    assert len(rows) == 1
    row = rows[0]
    assert row.ti == create and row.also == (delete,)
    assert (row.record.phase, row.record.holds, row.record.released, row.record.ended) == (
        "succeeded",
        False,
        released,
        released,
    )
    assert row.record.held_since == (T0 + timedelta(hours=1)).isoformat()  # kept from the first record
    assert row.section == "ended"
    assert row.run_seconds(T0 + timedelta(days=1)) == 2 * 3600


def test_a_hold_is_idle_once_every_task_that_wrote_it_finished() -> None:
    end = T0 + timedelta(hours=2)
    held = Row(_slice(holds=True), _ref("create", "success", end), T0)
    assert held.section == "running" and held.idle_since() == end
    in_use = Row(_slice(holds=True), _ref("create", "success", end), T0, also=(_ref("train", "running"),))
    assert in_use.idle_since() is None


def test_filters_match_api_location_phase_and_holding() -> None:
    record = _slice(holds=True)
    assert matches(record, Filters(api="tpu", location="us-west4-a", phase="running"))
    assert matches(record, Filters(phase="holding"))
    assert not matches(record, Filters(api="vertex"))
    assert not matches(_slice(), Filters(phase="holding"))


def test_links_quote_the_run_id_and_name_the_map_index() -> None:
    ref = _ref("train", map_index=3)
    assert ti_path(ref) == "dags/dag/runs/manual__2026-11-21T00%3A00%3A00%2B00%3A00/tasks/train/mapped/3"
    assert log_path(_ref("train")).endswith("/tasks/train?try_number=2")


def test_the_default_window_is_seven_days() -> None:
    assert Filters().window(T0) == (T0 - timedelta(days=7), None)


def test_the_wait_bar_has_text_and_values_are_escaped() -> None:
    row = Row(
        _slice(phase="waiting", started=None, max_wait_seconds=7200, request_name="<b>x</b>"), _ref("t"), T0
    )
    html = render.request_sections([row], T0 + timedelta(hours=1), "/")
    assert "1h 00m of 2h 00m max wait (50%)" in html and 'role="img"' in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert render.duration(65) == "1m 05s" and render.duration(None) == ""
