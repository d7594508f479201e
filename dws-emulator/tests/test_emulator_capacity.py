"""Unit tests of the emulator's capacity model, driven by a fake clock."""

from __future__ import annotations

import pytest

from dws_emulator.core.capacity import CapacityModel, PoolKey, parse_pool_spec

H100 = "us-central1/NVIDIA_H100_80GB"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_parse_pool_spec() -> None:
    assert parse_pool_spec("us-central1/NVIDIA_H100_80GB=8") == (
        PoolKey("us-central1", "NVIDIA_H100_80GB"),
        8,
    )
    assert str(PoolKey.parse("us-west4-a/v5litepod")) == "us-west4-a/v5litepod"
    for bad in ("us-central1=8", "us-central1/H100", "a/b=-1", "a/b=x", "/b=1", "a/b/c=1"):
        with pytest.raises(ValueError):
            parse_pool_spec(bad)


def test_whole_set_starts_only_when_all_free(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8}, clock=clock)
    assert model.acquire_now("running", H100, 4)
    model.enqueue("big", H100, 8)
    assert model.advance().started == []  # 4 free is not enough: no partial start
    assert model.inventory()[H100] == {"total": 8, "in_use": 4, "free": 4, "queued": 1}
    model.release("running")
    result = model.advance()
    assert result.started == ["big"]
    assert model.is_holding("big")
    assert model.inventory()[H100] == {"total": 8, "in_use": 8, "free": 0, "queued": 0}


def test_strict_fifo_head_is_not_starved(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8}, clock=clock)
    assert model.acquire_now("a", H100, 6)
    model.enqueue("big", H100, 8)
    model.enqueue("small", H100, 2)  # would fit in the 2 free, but must wait behind "big"
    assert model.advance().started == []
    assert model.queue(H100) == ["big", "small"]
    model.release("a")
    assert model.advance().started == ["big"]
    model.release("big")
    assert model.advance().started == ["small"]


def test_fifo_starts_several_heads_in_one_advance(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8}, clock=clock)
    for name in ("a", "b", "c"):
        model.enqueue(name, H100, 4)
    assert model.advance().started == ["a", "b"]
    assert model.is_queued("c")


def test_release_frees_capacity_and_leaves_queue(clock: FakeClock) -> None:
    model = CapacityModel({H100: 4}, clock=clock)
    model.enqueue("a", H100, 4)
    model.enqueue("b", H100, 4)
    model.advance()
    model.release("b")  # cancelled while queued
    assert model.inventory()[H100]["queued"] == 0
    model.release("a")
    assert model.inventory()[H100]["in_use"] == 0
    model.release("a")  # idempotent
    assert model.demand("a") is None


def test_max_wait_expires_queued_holder(clock: FakeClock) -> None:
    model = CapacityModel({H100: 0}, clock=clock)
    model.enqueue("a", H100, 8, max_wait=2.0)
    clock.advance(1.9)
    assert model.advance().expired == []
    clock.advance(0.1)
    model.set_total(H100, 8)  # capacity arrives at the deadline: expiry wins
    result = model.advance()
    assert result.expired == ["a"]
    assert result.started == []
    assert model.demand("a") is None
    assert model.inventory()[H100]["queued"] == 0


def test_expiry_of_head_unblocks_the_next(clock: FakeClock) -> None:
    model = CapacityModel({H100: 4}, clock=clock)
    model.enqueue("big", H100, 8, max_wait=1.0)
    model.enqueue("small", H100, 4, max_wait=None)
    assert model.advance().started == []
    clock.advance(1.0)
    result = model.advance()
    assert result.expired == ["big"]
    assert result.started == ["small"]


def test_none_max_wait_waits_indefinitely(clock: FakeClock) -> None:
    model = CapacityModel({H100: 0}, clock=clock)
    model.enqueue("a", H100, 8, max_wait=None)
    clock.advance(10 * 365 * 24 * 3600)
    assert model.advance().expired == []
    model.set_total(H100, 8)
    assert model.advance().started == ["a"]


def test_shrinking_a_pool_does_not_evict(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8}, clock=clock)
    assert model.acquire_now("a", H100, 8)
    model.set_total(H100, 2)
    assert model.is_holding("a")
    assert model.inventory()[H100] == {"total": 2, "in_use": 8, "free": 0, "queued": 0}
    model.enqueue("b", H100, 2)
    assert model.advance().started == []
    model.release("a")
    assert model.advance().started == ["b"]


def test_acquire_now_does_not_jump_the_queue(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8}, clock=clock)
    assert model.acquire_now("a", H100, 4)
    model.enqueue("big", H100, 8)
    assert not model.acquire_now("on-demand", H100, 2)  # 4 free, but "big" is waiting
    assert model.demand("on-demand") is None
    assert not model.acquire_now("too-big", "us-central1/NVIDIA_H100_80GB", 16)


def test_pools_are_independent_and_errors(clock: FakeClock) -> None:
    model = CapacityModel({H100: 8, "us-west4-a/v5litepod": 64}, clock=clock)
    model.enqueue("gpu", H100, 16)
    model.enqueue("tpu", "us-west4-a/v5litepod", 32)
    assert model.advance().started == ["tpu"]
    assert model.locations_for("NVIDIA_H100_80GB") == ["us-central1"]
    with pytest.raises(KeyError):
        model.enqueue("x", "us-east1/NVIDIA_H100_80GB", 1)
    with pytest.raises(ValueError):
        model.enqueue("gpu", H100, 1)  # duplicate holder
    with pytest.raises(ValueError):
        model.enqueue("zero", H100, 0)
    with pytest.raises(ValueError):
        model.set_total(H100, -1)


def test_a_holder_that_left_and_came_back_expires_on_its_new_deadline(clock: FakeClock) -> None:
    """The deadline heap keeps entries of holders that left; they must not expire a newcomer."""
    model = CapacityModel({H100: 0}, clock=clock)
    model.enqueue("a", H100, 8, max_wait=10)
    model.release("a")
    clock.now += 5
    model.enqueue("a", H100, 8, max_wait=10)  # deadline now +15 from the start
    clock.now += 5  # the first deadline passes
    assert model.advance().expired == []
    assert model.is_queued("a")
    clock.now += 5
    assert model.advance().expired == ["a"]
    assert model.inventory()[H100]["queued"] == 0


def test_an_unchanged_pool_whose_head_does_not_fit_is_not_looked_at_again(clock: FakeClock) -> None:
    model = CapacityModel({H100: 4}, clock=clock)
    model.enqueue("big", H100, 8)
    assert model.advance().started == []
    assert not model._dirty  # nothing changed since: the next advance has nothing to look at
    model.set_total(H100, 8)
    assert model.advance().started == ["big"]
