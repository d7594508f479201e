"""The one exponential backoff of the provider: API retries, the shared poller, capacity retries.

Pure (stdlib only): the caller passes the random generator, so a seeded decision repeats itself.
"""

from __future__ import annotations

import random
from typing import Literal

Jitter = Literal["full", "equal", "none"]
JITTERS: tuple[Jitter, ...] = ("full", "equal", "none")


def backoff(
    n: int,
    base: float,
    cap: float,
    jitter: Jitter = "full",
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before the ``n``-th retry (``n`` >= 1): ``base * 2**(n-1)``, at most ``cap``.

    ``jitter`` spreads many callers apart: ``"full"`` waits anywhere in ``[0, b]`` (best spread,
    for ordinary transient errors), ``"equal"`` in ``[b/2, b]`` (never quick: for quota errors,
    where a retry burns quota), ``"none"`` exactly ``b``, where ``b`` is the capped backoff.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n counts retries from 1, got {n!r}")
    if base < 0 or cap < 0:
        raise ValueError(f"base and cap must not be negative, got base={base!r} cap={cap!r}")
    if jitter not in JITTERS:
        raise ValueError(f"jitter must be one of {JITTERS}, got {jitter!r}")
    # Exponent bounded: 2**1100 overflows a float, and any cap is reached long before.
    bound = min(cap, base * 2.0 ** min(n - 1, 1000))
    if jitter == "none":
        return bound
    draw = (rng or random).uniform
    if jitter == "equal":
        return bound / 2 + draw(0.0, bound / 2)
    return draw(0.0, bound)
