"""The order a ranked failover tries its placements in, and the policies that ask for it."""

from __future__ import annotations

import pytest

from airflow_provider_dws.scheduling.policies import Advised, Failover, ShortestWait
from airflow_provider_dws.scheduling.ranking import Candidate, rank_candidates


def names(ranked: list[Candidate[str]]) -> list[str]:
    return [c.item for c in ranked]


def test_expected_wait_puts_the_shortest_p50_first_and_unknown_last() -> None:
    items = [
        Candidate("home", 0, wait=7200.0),
        Candidate("east", 1, wait=None),
        Candidate("west", 2, wait=1800.0),
    ]
    assert names(rank_candidates(items, "expected_wait", greener=False)) == ["west", "home", "east"]


def test_expected_wait_with_advice_adds_the_two_ranks() -> None:
    # By wait: a 0, b 1, c 2; by obtainability: c 0, b 1, a 2. Sums: a 2, b 2, c 2: all tied, and
    # the wait breaks the tie. With b's advice the best, b wins outright.
    items = [
        Candidate("a", 0, wait=600.0, score=0.1),
        Candidate("b", 1, wait=1200.0, score=0.5),
        Candidate("c", 2, wait=3600.0, score=0.9),
    ]
    assert names(rank_candidates(items, "expected_wait", greener=False)) == ["a", "b", "c"]
    items[1] = Candidate("b", 1, wait=1200.0, score=0.95)
    assert names(rank_candidates(items, "expected_wait", greener=False)) == ["b", "a", "c"]


def test_greener_breaks_ties_only() -> None:
    tied = [
        Candidate("home", 0, score=0.8, intensity=500.0),
        Candidate("clean", 1, score=0.8, intensity=50.0),
        Candidate("better", 2, score=0.9, intensity=700.0),
    ]
    assert names(rank_candidates(tied, "advice", greener=True)) == ["better", "clean", "home"]
    assert names(rank_candidates(tied, "advice", greener=False)) == ["better", "home", "clean"]


def test_greener_written_order_keeps_the_operators_own_first_then_lowest_intensity() -> None:
    items = [
        Candidate("home", 0, intensity=600.0),
        Candidate("dirty", 1, intensity=500.0),
        Candidate("unknown", 2, intensity=None),
        Candidate("clean", 3, intensity=20.0),
    ]
    assert names(rank_candidates(items, "written", greener=True)) == ["home", "clean", "dirty", "unknown"]
    assert names(rank_candidates(items[1:], "written", greener=True)) == ["clean", "dirty", "unknown"]


def test_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        rank_candidates([Candidate("a", 0)], "cheapest", greener=False)


def test_policies_say_their_order() -> None:
    assert (Failover("us-east4").order, Failover("us-east4").ranked) == ("written", False)
    assert Failover("us-east4", greener=True).ranked
    assert (Advised("us-east4-b").order, Advised("us-east4-b").advised) == ("advice", True)
    wait = ShortestWait("us-east4", "us-west1", greener=True)
    assert (wait.order, wait.advised, wait.ranked, wait.greener) == ("expected_wait", False, True, True)
    assert str(wait) == (
        "fail over by expected wait among us-east4, us-west1 (greener: lower carbon intensity first among equals)"
    )
    with pytest.raises(TypeError, match="greener must be True or False"):
        Failover("us-east4", greener="yes")  # type: ignore[arg-type]


def test_a_greener_written_failover_still_needs_capacity_retries() -> None:
    """Its order keeps the operator's own placement first: without a retry nothing else is tried."""
    from tests.unit.test_operator_policies import vertex

    with pytest.raises(ValueError, match="is tried only on capacity retries"):
        vertex(failover=Failover("us-east4", greener=True), capacity_retry=None)
    assert vertex(failover=ShortestWait("us-east4"), capacity_retry=None).failover is not None
