"""The wait forecast: censored waits, percentiles, groups, the log line, the accuracy figures."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_dws import forecast as fc
from airflow_provider_dws.records import RequestRecord

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
GROUP = "vertex_custom_job|us-central1|nvidia_h100_80gb|5-8"


def obs(name: str, minutes: float, obtained: bool = True, days_ago: float = 1.0) -> fc.Observation:
    submitted = (NOW - timedelta(days=days_ago)).timestamp()
    return fc.Observation(name, submitted, minutes * 60.0, obtained)


def record(**changes: object) -> RequestRecord:
    base: dict[str, object] = {
        "api": "vertex_custom_job",
        "kind": "Vertex AI custom job",
        "project": "p",
        "location": "us-central1",
        "request_name": "projects/p/locations/us-central1/customJobs/1",
        "phase": "succeeded",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
        "submitted": "2026-12-01T10:00:00+00:00",
        "started": "2026-12-01T10:40:00+00:00",
        "ended": "2026-12-01T11:40:00+00:00",
    }
    base.update(changes)
    return RequestRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("count", "bucket"),
    [
        (1, "1"),
        (2, "2"),
        (3, "3-4"),
        (4, "3-4"),
        (5, "5-8"),
        (8, "5-8"),
        (9, "9-16"),
        (256, "129-256"),
        (0, "?"),
    ],
)
def test_size_buckets_are_powers_of_two(count: int, bucket: str) -> None:
    assert fc.size_bucket(count) == bucket


def test_vertex_and_compute_spellings_are_one_group_and_tpu_sizes_share_a_family() -> None:
    assert fc.group_key("a", "r", "NVIDIA_H100_80GB", 8) == fc.group_key("a", "r", "nvidia-h100-80gb", 8)
    assert fc.group_key("tpu", "z", "v5litepod-16", 16).split("|")[2] == "v5litepod"
    assert fc.group_key("tpu", "z", "v6e-8", 8).split("|")[2] == "v6e"


def test_all_obtained_gives_nearest_rank_percentiles() -> None:
    items = [obs(f"r{i}", m) for i, m in enumerate([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])]
    found = fc.estimate(GROUP, items, NOW)
    assert (found.requests, found.obtained) == (10, 10)
    assert found.p50 == 50 * 60 and not found.p50_more_than
    assert found.p90 == 90 * 60 and not found.p90_more_than


def test_censored_waits_push_the_percentiles_up_instead_of_counting_as_waits() -> None:
    # Five got capacity in 10..50 min; five were given up at 2 h. Counting the give-ups as 2 h
    # waits, or dropping them, would both say p90 <= 2 h; the truth is only "more than 2 h".
    items = [obs(f"ok{i}", m) for i, m in enumerate([10, 20, 30, 40, 50])]
    items += [obs(f"gave-up{i}", 120, obtained=False) for i in range(5)]
    found = fc.estimate(GROUP, items, NOW)
    assert found.p50 == 50 * 60 and not found.p50_more_than
    assert found.p90 == 120 * 60 and found.p90_more_than
    share, exact = found.still_waiting(120 * 60)
    assert share == pytest.approx(0.5) and exact


def test_an_early_censoring_raises_the_share_of_later_events() -> None:
    # Kaplan-Meier: one request cancelled at 5 min leaves 3 at risk; each later event is a third.
    items = [obs("c", 5, obtained=False), obs("a", 10), obs("b", 20), obs("d", 30)]
    found = fc.estimate(GROUP, items, NOW)
    assert [at for at, _ in found.curve] == [600.0, 1200.0, 1800.0]
    assert [share for _, share in found.curve] == pytest.approx([2 / 3, 1 / 3, 0.0])
    assert found.p50 == 1200.0


def test_nothing_obtained_says_only_more_than_the_longest_wait() -> None:
    found = fc.estimate(GROUP, [obs(f"x{i}", 30 + i, obtained=False) for i in range(6)], NOW)
    assert found.p50_more_than and found.p50 == 35 * 60
    share, exact = found.still_waiting(3 * 3600)
    assert share == 1.0 and not exact


def test_old_observations_fall_out_of_the_window_and_a_request_counts_once() -> None:
    items = [obs("old", 5, days_ago=40), obs("a", 10), obs("a", 30)]
    found = fc.estimate(GROUP, items, NOW, window=timedelta(days=30))
    assert found.requests == 1 and found.p50 == 30 * 60


def test_observation_of_records() -> None:
    assert fc.observation(record()) == fc.Observation(
        record().request_name, datetime(2026, 12, 1, 10, tzinfo=timezone.utc).timestamp(), 2400.0, True
    )
    given_up = record(phase="not_obtained", started=None, ended="2026-12-01T12:00:00+00:00")
    assert fc.observation(given_up) is not None and not fc.observation(given_up).obtained  # type: ignore[union-attr]
    assert fc.observation(given_up).wait == 7200.0  # type: ignore[union-attr]
    # Still waiting, refused before it waited, a calendar block, work on a block: not a wait.
    assert fc.observation(record(phase="waiting", started=None, ended=None)) is None
    assert fc.observation(record(phase="failed", started=None)) is None
    assert fc.observation(record(api="compute_future_reservation")) is None
    assert fc.observation(record(pricing_model="reservation")) is None


def test_from_records_groups_by_api_location_type_and_size() -> None:
    records = [
        record(request_name="a"),
        record(request_name="b", accelerator_count=16),
        record(request_name="c", location="us-east4"),
    ]
    assert sorted(fc.from_records(records, NOW)) == sorted(
        [
            GROUP,
            "vertex_custom_job|us-central1|nvidia_h100_80gb|9-16",
            "vertex_custom_job|us-east4|nvidia_h100_80gb|5-8",
        ]
    )


def test_the_log_line_names_the_figures_the_basis_and_the_share_beyond_the_max_wait() -> None:
    items = [obs(f"ok{i}", m) for i, m in enumerate([10, 20, 38, 40, 50, 60, 90, 130])]
    items += [obs(f"no{i}", 120, obtained=False) for i in range(2)]
    line = fc.forecast_line(fc.estimate(GROUP, items, NOW), timedelta(hours=2))
    assert line.startswith("Expected wait (Vertex AI custom job in us-central1, nvidia_h100_80gb x 5-8):")
    # Still waiting after each wait that got capacity: 0.9 .. 0.5 at 50 min, 0.3 after 90 min; the
    # two given up at 2 h leave one at risk, whose 130 min takes the share to 0.
    assert "p50 50 min, p90 2 h 10 min" in line and "(10 requests, 8 got capacity, last 30 days)" in line
    assert "; 30% were not obtained within 2 h (this max wait)" in line


def test_too_little_history_is_said_as_such() -> None:
    line = fc.forecast_line(fc.estimate(GROUP, [obs("a", 10), obs("b", 20)], NOW), timedelta(hours=1))
    assert "too little history" in line and "2 similar requests in the last 30 days, 5 needed" in line
    assert line.endswith("; they waited 10 min, 20 min")
    one = fc.forecast_line(fc.estimate(GROUP, [obs("a", 2 / 60, obtained=False)], NOW), None)
    assert one.endswith(
        "(1 similar request in the last 30 days, 5 needed; Vertex AI custom job in "
        "us-central1, nvidia_h100_80gb x 5-8); it waited more than 2 s without capacity"
    )


def test_max_wait_shorter_than_p50_is_flagged_only_with_enough_history() -> None:
    items = [obs(f"ok{i}", 60) for i in range(6)]
    assert fc.short_of_p50(fc.estimate(GROUP, items, NOW), timedelta(minutes=30))
    assert not fc.short_of_p50(fc.estimate(GROUP, items, NOW), timedelta(hours=2))
    assert not fc.short_of_p50(fc.estimate(GROUP, items[:2], NOW), timedelta(minutes=30))


def test_accuracy_counts_p90_exceeded_and_the_mean_error() -> None:
    given = {"expected_wait_p50_seconds": 1800.0, "expected_wait_p90_seconds": 3600.0}
    on_time = record(request_name="a", **given)  # waited 40 min: 10 min over p50, under p90
    late = record(request_name="b", started="2026-12-01T11:30:00+00:00", **given)  # 90 min
    gave_up_late = record(
        request_name="c", phase="not_obtained", started=None, ended="2026-12-01T12:00:00+00:00", **given
    )
    gave_up_early = record(
        request_name="d", phase="cancelled", started=None, ended="2026-12-01T10:10:00+00:00", **given
    )
    no_forecast = record(request_name="e")
    found = fc.accuracy([on_time, late, gave_up_late, gave_up_early, no_forecast])
    assert (found.forecasts, found.p90_exceeded) == (3, 2)
    assert found.mean_error_seconds == pytest.approx((600.0 + 3600.0) / 2)
    lower_bound = record(request_name="f", expected_wait_p90_lower_bound=True, **given)
    assert fc.p90_exceeded(lower_bound) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45 s"), (38 * 60, "38 min"), (7800, "2 h 10 min"), (7200, "2 h"), (90000, "1 d 1 h")],
)
def test_span(seconds: float, text: str) -> None:
    assert fc.span(seconds) == text


def test_a_wait_ended_from_outside_the_attempt_says_nothing_of_the_queue() -> None:
    # A worker killed, or a try ended by a clear: the record ends, but not because of capacity.
    killed = record(phase="cancelled", started=None, ended="2026-12-01T10:05:00+00:00", outcome="task_ended")
    assert fc.observation(killed) is None
    by_user = record(phase="cancelled", started=None, ended="2026-12-01T10:05:00+00:00", outcome="cancelled")
    assert fc.observation(by_user) is not None


def test_the_pricing_model_is_part_of_the_group_but_flex_start_keeps_the_short_key() -> None:
    assert fc.group_of(record()) == GROUP
    spot = fc.group_of(record(api="tpu_queued_resource", pricing_model="spot"))
    assert spot is not None and spot.endswith("|spot")
    assert fc.describe_group(spot).endswith("(spot)")


def test_a_p50_given_as_a_bound_is_not_an_error_to_measure() -> None:
    bound = record(expected_wait_p50_seconds=600.0, expected_wait_p50_lower_bound=True)
    assert fc.forecast_error(bound) is None
    assert fc.forecast_error(record(expected_wait_p50_seconds=600.0)) == 1800.0
