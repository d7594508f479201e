"""The one backoff function (API retries, the shared poller's quota backoff, capacity retries)."""

from __future__ import annotations

import random

import pytest

from airflow_provider_dws.scheduling.backoff import backoff


def test_none_doubles_from_base_up_to_cap() -> None:
    assert [backoff(n, 5.0, 60.0, "none") for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert backoff(10_000, 1.0, 30.0, "none") == 30.0  # no float overflow for very late retries


def test_full_and_equal_jitter_stay_in_their_ranges_and_spread() -> None:
    rng = random.Random(7)
    full = [backoff(4, 1.0, 30.0, "full", rng) for _ in range(200)]
    equal = [backoff(4, 1.0, 30.0, "equal", rng) for _ in range(200)]
    assert all(0.0 <= d <= 8.0 for d in full) and max(full) - min(full) > 4.0
    assert all(4.0 <= d <= 8.0 for d in equal) and max(equal) - min(equal) > 2.0


def test_a_seeded_generator_repeats_itself() -> None:
    first = [backoff(n, 2.0, 60.0, "full", random.Random(3)) for n in range(1, 6)]
    again = [backoff(n, 2.0, 60.0, "full", random.Random(3)) for n in range(1, 6)]
    assert first == again


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1.0, 1.0, "full"), "n counts retries from 1"),
        ((True, 1.0, 1.0, "full"), "n counts retries from 1"),
        ((1, -1.0, 1.0, "full"), "must not be negative"),
        ((1, 1.0, 1.0, "half"), "jitter must be one of"),
    ],
)
def test_bad_arguments_are_refused(args: tuple, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        backoff(*args)
