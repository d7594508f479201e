"""Calendar mode's pure parts, without a server: the calendar of free capacity, the lock time rule,
reservation references and the settings."""

from __future__ import annotations

import pytest

from dws_emulator.calendar.inventory import DAY, CapacityCalendar, parse_day
from dws_emulator.calendar.records import CalendarSettings, parse_seconds
from dws_emulator.calendar.state import lock_time
from dws_emulator.core.capacity import PoolKey
from dws_emulator.core.reservations import Reservation, Reservations, parse_reference

KEY = PoolKey("us-central1-a", "NVIDIA_H100_80GB")
T0 = 20_000 * DAY  # a UTC midnight


def test_a_block_fits_when_every_moment_of_it_has_room() -> None:
    calendar = CapacityCalendar({KEY: 64})
    calendar.book(KEY, T0 + 3600, T0 + 3 * DAY, 48, "a")
    assert not calendar.fits(KEY, T0, T0 + DAY, 32)
    assert calendar.fits(KEY, T0, T0 + 3600, 64)  # ends when the booking starts
    assert calendar.fits(KEY, T0 + 3 * DAY, T0 + 5 * DAY, 64)  # starts when it ends, mid-day too
    assert calendar.fits(KEY, T0, T0 + 10 * DAY, 16)
    assert calendar.room_until(KEY, T0, 32, T0 + 10 * DAY) == T0 + 3600
    assert calendar.room_until(KEY, T0 + 3600, 32, T0 + 10 * DAY) == T0 + 3600  # short at once
    calendar.set_day(KEY, parse_day("2024-10-07"), 0)  # T0 + 3 days has no capacity
    assert parse_day("2024-10-07") == 20003
    assert calendar.room_until(KEY, T0 + 3 * DAY, 1, T0 + 10 * DAY) == T0 + 3 * DAY
    assert calendar.room_until(KEY, T0 + 2 * DAY, 1, T0 + 10 * DAY) == T0 + 3 * DAY  # to its midnight
    assert calendar.room_until(KEY, T0 + 4 * DAY, 1, T0 + 10 * DAY) == T0 + 10 * DAY
    assert not calendar.offers(PoolKey("us-east4-b", "NVIDIA_H100_80GB"))
    assert calendar.zones("NVIDIA_H100_80GB") == ["us-central1-a"]


def test_bookings_resize_release_and_the_snapshot() -> None:
    calendar = CapacityCalendar({KEY: 64})
    booking = calendar.book(KEY, T0, T0 + DAY, 64, "projects/p/zones/us-central1-a/futureReservations/a")
    assert not calendar.fits(KEY, T0, T0 + DAY, 1)
    calendar.resize(booking, 16)
    assert calendar.fits(KEY, T0, T0 + DAY, 48)
    snapshot = calendar.snapshot()
    assert snapshot["pools"] == {str(KEY): 64} and snapshot["bookings"][0]["units"] == 16
    calendar.release(booking)
    assert calendar.snapshot()["bookings"] == [] and calendar.fits(KEY, T0, T0 + DAY, 64)
    with pytest.raises(ValueError):
        calendar.set_total(KEY, -1)


@pytest.mark.parametrize(
    ("approved", "start", "lock"),
    [
        (0, 40 * DAY, 10 * DAY),  # more than 30 days ahead: cancellable until start - 30 days
        (0, 10 * DAY, DAY),  # at least 4 days ahead: 24 hours after the approval
        (0, 4.5 * DAY, 0.5 * DAY),  # ... but no later than start - 4 days
        (0, 2 * DAY, 0),  # closer: locked at approval
        (0, 60, 0),
    ],
)
def test_the_documented_cancel_window_is_the_lock_time(approved: float, start: float, lock: float) -> None:
    assert lock_time(approved, start) == lock


def test_reservation_references_in_every_spelling() -> None:
    full = "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/reservations/res-1"
    assert parse_reference(full) == ("p", "us-central1-a", "res-1")
    assert parse_reference("projects/p/locations/us-central1-a/reservations/res-1") == (
        "p",
        "us-central1-a",
        "res-1",
    )
    assert parse_reference("zones/us-central1-a/reservations/res-1") == (None, "us-central1-a", "res-1")
    assert parse_reference("res-1") == (None, None, "res-1")
    assert parse_reference("zones/us-central1-a/res-1") is None
    assert parse_reference("Bad_Name") is None

    reservations = Reservations()
    res = Reservation(
        "projects/p/zones/us-central1-a/reservations/res-1",
        "p",
        "us-central1-a",
        "res-1",
        "NVIDIA_H100_80GB",
        "a3-highgpu-8g",
        8,
        "fr",
    )
    reservations.add(res)
    assert reservations.resolve("res-1", "p", region="us-central1") is res
    assert reservations.resolve("res-1", "p", region="us-east4") is None
    assert reservations.resolve("res-1", "other", region="us-central1") is None
    assert reservations.resolve(full, "other", zones=["us-central1-a"]) is res  # the URL names its project
    assert reservations.resolve(full, "p", zones=["us-central1-b"]) is None
    assert res.pool == PoolKey("us-central1-a", "NVIDIA_H100_80GB@res-1") and res.unit == "GPUs"


def test_settings_parse_seconds_and_manual() -> None:
    assert parse_seconds("2.5", "x") == 2.5
    assert parse_seconds("manual", "x", manual_ok=True) is None
    for bad in ("-1", "soon", True):
        with pytest.raises(ValueError):
            parse_seconds(bad, "x")
    assert CalendarSettings().to_json() == {
        "approval_seconds": 1.0,
        "min_lead_seconds": 0.0,
        "provision_seconds": 1.0,
    }
