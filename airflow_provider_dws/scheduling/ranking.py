"""The order a ranked failover tries its placements in: pure, over figures the runtime gathers.

Three orders (:attr:`~.policies.Failover.order`): ``advice`` (the capacity advice's obtainability,
highest first), ``expected_wait`` (the p50 wait of similar requests, shortest first; where the
advice also scores the placements, each placement's rank by wait and its rank by obtainability are
added, and the lower sum goes first, so neither figure's scale decides alone), and ``written`` (the
operator's own placement, then its failover list). A placement without a figure ranks after those
with one. ``greener`` breaks the ties that remain by the region's grid carbon intensity, lowest
first; in the written order the failover placements (all accepted alike) are ordered by it. The
written order breaks what is still tied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
ORDERS = ("written", "advice", "expected_wait")
_LAST = float("inf")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    """A placement with the figures it is ranked by (``None``: unknown)."""

    item: T
    index: int
    score: float | None = None
    wait: float | None = None
    wait_text: str | None = None
    intensity: float | None = None


def _places(values: Sequence[float | None], reverse: bool = False) -> list[float]:
    """Each value's rank (0 best, ties share the better one); an unknown ranks after every known."""
    known = sorted({v for v in values if v is not None}, reverse=reverse)
    position = {v: i for i, v in enumerate(known)}
    return [float(position[v]) if v is not None else float(len(known)) for v in values]


def rank_candidates(candidates: Sequence[Candidate[T]], order: str, greener: bool) -> list[Candidate[T]]:
    """``candidates`` best first, as ``order`` and ``greener`` say (see the module)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    items = list(candidates)
    by_wait = _places([c.wait for c in items])
    by_score = _places([c.score for c in items], reverse=True)
    has_scores = any(c.score is not None for c in items)

    def key(pair: tuple[int, Candidate[T]]) -> tuple[float, ...]:
        at, c = pair
        carbon = (c.intensity if c.intensity is not None else _LAST) if greener else 0.0
        if order == "advice":
            return (by_score[at], carbon, c.index)
        if order == "expected_wait":
            primary = by_wait[at] + by_score[at] if has_scores else by_wait[at]
            return (primary, by_wait[at], carbon, c.index)
        return (0.0 if c.index == 0 else 1.0, carbon, c.index)

    return [c for _, c in sorted(enumerate(items), key=key)]
