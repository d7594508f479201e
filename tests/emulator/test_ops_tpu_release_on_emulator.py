"""D2: the teardown releases every attempt its setup made, in every zone, however the id was given.

A setup with a custom ``queued_resource_id``, ``capacity_retry`` and a failover zone gets its slice
on a later attempt in the failover zone; the release must find that slice whether it is given the
setup's task id (with the setup's XCom lost) or the custom id, against a live dws-emulator with the
real TPU client.
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.scheduling.policies import CapacityRetry

pytestmark = pytest.mark.emulator

PROJECT = "emu-release"
HOME, FAILOVER = "us-west4-a", "us-central1-a"
_ids = itertools.count()


class FakeTI:
    """Identity fields and XCom; ``xcom_pull`` answers nothing, as if the setup's push was lost."""

    def __init__(self, task_id: str, run_id: str) -> None:
        self.dag_id = "release_on_emulator"
        self.task_id = task_id
        self.run_id = run_id
        self.map_index = -1
        self.try_number = 1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str | None = None) -> Any:
        return None


def live(emu: Any) -> list[str]:
    return [r["name"] for r in emu.control.requests() if r["kind"] == "QueuedResource" and not r["deleted"]]


@pytest.mark.parametrize("given", ["setup_task_id", "queued_resource_id"])
def test_release_finds_the_failover_attempt_of_a_custom_id(
    given: str, monkeypatch: pytest.MonkeyPatch, dws_emulator_factory: Any
) -> None:
    emu = dws_emulator_factory({f"{HOME}/v5litepod": 0, f"{FAILOVER}/v5litepod": 16})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
    run_id = f"manual__{next(_ids)}_{time.monotonic_ns()}"
    with DAG("release_on_emulator", schedule=None):
        setup = CreateTPUQueuedResourceOperator(
            task_id="ask",
            project_id=PROJECT,
            zone=HOME,
            accelerator_type="v5litepod-16",
            runtime_version="v2-alpha-tpuv5-lite",
            queued_resource_id="nightly-slice",
            max_wait=timedelta(seconds=2),
            capacity_retry=CapacityRetry(attempts=2, backoff=timedelta(0), max_backoff=timedelta(0)),
            failover=[FAILOVER],
            poll_interval=0.2,
            deferrable=False,
        )
        if given == "setup_task_id":
            release = DeleteTPUQueuedResourceOperator(
                task_id="release", project_id=PROJECT, zone=HOME, setup_task_id="ask"
            )
        else:
            release = DeleteTPUQueuedResourceOperator(
                task_id="release",
                project_id=PROJECT,
                zone=HOME,
                queued_resource_id="nightly-slice",
                failover_zones=[FAILOVER],
            )
    result = setup.execute({"ti": FakeTI("ask", run_id)})
    assert result["zone"] == FAILOVER
    assert result["queued_resource_id"].startswith("nightly-slice-")
    assert live(emu) == [result["queued_resource"]]

    stats_before = emu.control.reset_stats()
    out = release.execute({"ti": FakeTI("release", run_id)})

    assert live(emu) == []
    assert result["queued_resource"] in out["released"]
    calls = emu.control.stats()["calls"]
    gets = calls.get("google.cloud.tpu.v2.Tpu/GetQueuedResource", 0)
    lists = calls.get("google.cloud.tpu.v2.Tpu/ListQueuedResources", 0)
    # One list per zone finds the attempts; GETs only follow the delete of the one that exists.
    assert lists == 2, calls
    assert gets <= 3, calls
    assert stats_before is not None
