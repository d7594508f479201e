"""AttemptState: the attempt loop's state, one frozen value written to and read from one dict."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_dws.runtime.state import AttemptState
from airflow_provider_dws.scheduling.policies import Placement

HOME = Placement("us-central1")
OTHER = Placement("us-east4", machine_type="a2-ultragpu-8g", accelerator_type="NVIDIA_A100_80GB")
AT = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)


def test_round_trip_through_json() -> None:
    state = AttemptState(OTHER, 3, ({"number": 1}, {"number": 2}), 2700.0, AT.isoformat())
    data = json.loads(json.dumps(state.to_dict()))
    assert AttemptState.from_dict(data, HOME) == state


def test_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        AttemptState(HOME).attempt = 2  # type: ignore[misc]


def test_the_state_comes_back_in_the_event() -> None:
    # `airflow dags test` resumes without the deferral's kwargs; the trigger's event has the state.
    handed_back = AttemptState(OTHER, 2, ({"number": 1},), 60.0).to_dict()
    assert AttemptState.from_resume({"resume": handed_back}, HOME).placement == OTHER
    assert AttemptState.from_resume({"resume": handed_back}, HOME).attempt == 2
    assert AttemptState.from_resume({"resume": None}, HOME) == AttemptState(HOME)
    assert AttemptState.from_resume(None, HOME) == AttemptState(HOME)


def test_transitions() -> None:
    state = AttemptState(HOME).waiting_until(AT)
    assert state.earliest() == AT
    submitted = state.submitted(OTHER, timedelta(minutes=45))
    assert (submitted.placement, submitted.max_wait(timedelta(hours=1)), submitted.not_before) == (
        OTHER,
        timedelta(minutes=45),
        None,
    )
    ended = submitted.ended({"number": 1})
    following = ended.next(2, HOME, AT)
    assert (following.attempt, following.history, following.max_wait_seconds) == (2, ({"number": 1},), None)
    assert following.earliest() == AT
    assert AttemptState(HOME).max_wait(timedelta(hours=1)) == timedelta(hours=1)
