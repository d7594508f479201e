"""choose_existing: reattach, take an earlier success, or submit anew."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_dws.scheduling.identity import RequestIdentity
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


# -- the decision in the task log: plain words, the task instance named ---------------------------

OWNER = RequestIdentity("etl", "train", "manual__2026-05-01", map_index=3).describe()


def test_the_task_instance_is_named_in_plain_words() -> None:
    assert OWNER == "dag 'etl', task 'train', run 'manual__2026-05-01', map index 3"
    assert RequestIdentity("etl", "train", "r").describe() == "dag 'etl', task 'train', run 'r'"


def test_no_earlier_request_is_said_without_the_identity_digest() -> None:
    identity = RequestIdentity("etl", "train", "manual__2026-05-01", map_index=3)
    line = choose_existing([]).describe(identity.describe())
    assert line == (
        "No earlier request of this task instance (dag 'etl', task 'train', run 'manual__2026-05-01', "
        "map index 3) found; submitting a new one"
    )
    assert identity.key not in line and "Identity" not in line


def test_each_decision_reads_as_a_sentence() -> None:
    live = choose_existing([Candidate("old", Phase.FAILED, at(0)), Candidate("q", Phase.WAITING, at(5))])
    assert live.describe(OWNER) == (
        f"Found live request q of this task instance ({OWNER}): waiting on it instead of submitting a "
        "new one; 1 other request(s) found"
    )
    done = choose_existing([Candidate("ok", Phase.SUCCEEDED, at(0))])
    assert done.describe(OWNER) == (
        f"Request ok of this task instance ({OWNER}) already succeeded: taking it as the result"
    )
    ended = choose_existing([Candidate("a", Phase.FAILED, at(0)), Candidate("b", Phase.CANCELLED, at(1))])
    assert ended.describe(OWNER) == (
        f"2 earlier request(s) of this task instance ({OWNER}) found, none live or succeeded; "
        "submitting a new one"
    )
