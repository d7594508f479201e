"""choose_existing: reattach, take an earlier success, or submit anew."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_no_candidates_submits() -> None:
    decision = choose_existing([])
    assert decision.action == "submit"
    assert decision.name is None
    assert decision.reason == "no earlier request"


def test_live_wins_over_succeeded() -> None:
    decision = choose_existing(
        [Candidate("done", Phase.SUCCEEDED, at(10)), Candidate("live", Phase.WAITING, at(0))]
    )
    assert decision.action == "wait"
    assert decision.name == "live"


def test_newest_live_is_chosen_among_several() -> None:
    candidates = [
        Candidate("old", Phase.RUNNING, at(0)),
        Candidate("newest", Phase.WAITING, at(20)),
        Candidate("middle", Phase.PROVISIONING, at(10)),
        Candidate("failed-later", Phase.FAILED, at(30)),
    ]
    decision = choose_existing(candidates)
    assert decision.action == "wait"
    assert decision.name == "newest"
    assert "2 more live" in decision.reason


def test_succeeded_taken_when_nothing_live() -> None:
    decision = choose_existing(
        [
            Candidate("failed", Phase.FAILED, at(30)),
            Candidate("ok-old", Phase.SUCCEEDED, at(0)),
            Candidate("ok-new", Phase.SUCCEEDED, at(5)),
        ]
    )
    assert decision.action == "done"
    assert decision.name == "ok-new"


@pytest.mark.parametrize(
    "phases",
    [
        [Phase.FAILED],
        [Phase.NOT_OBTAINED],
        [Phase.CANCELLED],
        [Phase.FAILED, Phase.NOT_OBTAINED, Phase.CANCELLED],
    ],
)
def test_only_unsuccessful_endings_submit(phases: list[Phase]) -> None:
    candidates = [Candidate(f"j{i}", p, at(i)) for i, p in enumerate(phases)]
    decision = choose_existing(candidates)
    assert decision.action == "submit"
    assert decision.name is None
    assert f"{len(phases)} earlier request(s) ended without success" == decision.reason


def test_unknown_creation_time_sorts_last() -> None:
    decision = choose_existing(
        [Candidate("no-date", Phase.WAITING, None), Candidate("dated", Phase.WAITING, at(0))]
    )
    assert decision.name == "dated"
    decision = choose_existing(
        [Candidate("dated", Phase.SUCCEEDED, at(0)), Candidate("no-date", Phase.SUCCEEDED, None)]
    )
    assert decision.name == "dated"


def test_undated_live_still_beats_dated_success() -> None:
    decision = choose_existing(
        [Candidate("ok", Phase.SUCCEEDED, at(0)), Candidate("live", Phase.RUNNING, None)]
    )
    assert (decision.action, decision.name) == ("wait", "live")
