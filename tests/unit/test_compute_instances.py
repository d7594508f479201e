"""Standalone flex-start VMs (no MIG): the operator's parse-time checks, what a set of VMs is from
its members (all or nothing), and the request the trigger makes (no network)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud import compute_v1

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.compute_instances import (
    INSTANCE_SET_STATES,
    LABEL_SET,
    LABEL_SET_SIZE,
    instances_from_spec,
    member_names,
    parse_set_name,
    set_name,
    set_status,
)
from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement

ZONE = "us-central1-a"
NAME = f"projects/p/zones/{ZONE}/instances/dws-vms-0123456789abcdef-t1-a1"
IDENTITY = RequestIdentity("d", "vms", "manual__1")


def op(**kwargs: Any) -> CreateComputeFlexStartInstancesOperator:
    args: dict[str, Any] = {
        "task_id": "vms",
        "project_id": "my-project",
        "zone": ZONE,
        "count": 2,
        "machine_type": "a3-highgpu-8g",
        "max_run": timedelta(hours=4),
    }
    args.update(kwargs)
    return CreateComputeFlexStartInstancesOperator(**args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "count must be an integer from 1 to 100"),
        ({"count": 101}, "count must be an integer from 1 to 100"),
        ({"max_wait": 30}, "max_wait must be at least 0:01:30"),
        ({"max_run": timedelta(minutes=5)}, "max_run must be at least 0:10:00"),
        ({"max_run": timedelta(days=8)}, "max_run"),
        ({"termination_action": "KILL"}, "termination_action must be one of ['DELETE', 'STOP']"),
        ({"zone": "us-central1"}, "zone must be a Compute Engine zone"),
        ({"machine_type": "n1-standard-8"}, "has no GPUs of its own"),
        ({"failover": ["us-east4"], "capacity_retry": 1}, "is not a Compute Engine zone"),
    ],
)
def test_parse_time_checks(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        op(**kwargs)


def test_a_templated_zone_is_checked_after_rendering_and_defaults_are_the_apis_bounds() -> None:
    task = op(zone="{{ params.zone }}")
    assert task.max_wait == timedelta(hours=2) and task.termination_action == "DELETE"
    assert op(max_wait=timedelta(hours=9)).max_wait == timedelta(hours=9)  # kept by asking again
    op(failover=["us-east4-b", Placement("us-central1-b", machine_type="a2-ultragpu-8g")], capacity_retry=2)


def vm(name: str, status: str, size: int = 2, started: str = "") -> Any:
    return compute_v1.Instance(
        name=name,
        status=status,
        zone=f"https://www.googleapis.com/compute/v1/projects/p/zones/{ZONE}",
        machine_type=f"zones/{ZONE}/machineTypes/a3-highgpu-8g",
        creation_timestamp="2026-12-07T10:00:00.000Z",
        last_start_timestamp=started,
        labels={LABEL_SET: NAME.rsplit("/", 1)[-1], LABEL_SET_SIZE: str(size)},
        network_interfaces=[compute_v1.NetworkInterface(network_i_p=f"10.0.0.{name[-1]}")],
        scheduling=compute_v1.Scheduling(max_run_duration=compute_v1.Duration(seconds=4 * 3600)),
        params=compute_v1.InstanceParams(request_valid_for_duration=compute_v1.Duration(seconds=7200)),
    )


def test_all_members_running_is_the_set_running_with_its_result() -> None:
    a, b = member_names(NAME, 2)
    status = set_status(NAME, [vm(a, "RUNNING", started="2026-12-07T10:30:00.000Z"), vm(b, "RUNNING")], 2)
    assert (status.state, status.phase) == ("RUNNING", Phase.RUNNING)
    assert status.timings.wait_seconds == 1800.0
    result = status.details[RESULT]
    assert result["instance_names"] == [a, b] and result["gpus"] == 16 and result["zone"] == ZONE
    assert result["internal_ips"] == ["10.0.0.0", "10.0.0.1"] and result["run_duration_seconds"] == 4 * 3600
    assert status.details["max_wait_seconds"] == 7200


@pytest.mark.parametrize(
    ("members", "state"),
    [
        (["PENDING", "RUNNING"], "PENDING"),
        (["STAGING", "RUNNING"], "STARTING"),
        (["RUNNING"], "INCOMPLETE"),  # one is gone: its wait ended without capacity
        (["TERMINATED", "RUNNING"], "INCOMPLETE"),
        ([], "INCOMPLETE"),
    ],
)
def test_the_set_is_all_or_nothing(members: list[str], state: str) -> None:
    names = member_names(NAME, 2)
    status = set_status(NAME, [vm(n, s) for n, s in zip(names, members, strict=False)], 2)
    assert status.state == state
    assert RESULT not in status.details
    if state == "INCOMPLETE":
        assert (status.phase, status.outcome.failure) == (
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
        )
        expected = "1 of 2 VMs were running" if members else "none of the 2 VMs exists"
        assert expected in status.outcome.message
    else:
        assert status.phase is Phase.WAITING


def test_the_state_table_lives_where_it_should() -> None:
    assert INSTANCE_SET_STATES.live_states() == ("PENDING", "STARTING", "RUNNING")
    assert INSTANCE_SET_STATES.ended_states() == ("INCOMPLETE",)


def test_names_fit_and_parse_back() -> None:
    long = RequestIdentity("d", "t" * 80, "r", try_number=12, attempt=345)
    name = set_name(long)
    assert len(name) <= 59 and all(len(m) <= 63 for m in member_names(name, 100))
    assert parse_attempt_name(name)[1:] == (12, 345)  # type: ignore[index]
    assert parse_set_name(f"projects/p/zones/{ZONE}/instances/{name}") == ("p", ZONE, name)
    with pytest.raises(ValueError):
        parse_set_name(f"projects/p/regions/us-central1/instances/{name}")


def test_the_request_carries_identity_labels_the_apis_wait_and_zonal_types() -> None:
    task = op(
        machine_type="n1-standard-8",
        accelerator_type="nvidia-tesla-t4",
        accelerator_count=2,
        boot_disk_type="pd-ssd",
        labels={"team": "ml"},
        termination_action="STOP",
    )
    spec = task.adapter().request_spec(IDENTITY, Placement(ZONE), timedelta(seconds=20))
    assert spec["wait_seconds"] == 90  # the API's least; the provider's deadline keeps the rest
    assert spec["labels"]["dws_managed"] == "true" and spec["labels"]["team"] == "ml"
    assert spec["labels"][LABEL_SET] == spec["name"] and spec["labels"][LABEL_SET_SIZE] == "2"
    made = instances_from_spec(spec, ZONE)
    assert [m.name for m in made] == member_names(spec["name"], 2)
    first = made[0]
    assert first.machine_type == f"zones/{ZONE}/machineTypes/n1-standard-8"
    assert first.guest_accelerators[0].accelerator_type == f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4"
    assert first.disks[0].initialize_params.disk_type == f"zones/{ZONE}/diskTypes/pd-ssd"
    sched = first.scheduling
    assert (sched.provisioning_model, sched.instance_termination_action) == ("FLEX_START", "STOP")
    assert sched.max_run_duration.seconds == 4 * 3600 and not sched.automatic_restart
    assert first.params.request_valid_for_duration.seconds == 90
    long = task.adapter().request_spec(IDENTITY, Placement(ZONE), timedelta(hours=5))
    assert long["wait_seconds"] == 7200


def test_a_retry_is_advised_among_the_placements_not_tried_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_dws.runtime.compute_instances import ComputeInstancesAdapter
    from airflow_provider_dws.runtime.outlook import rank
    from airflow_provider_dws.runtime.state import AttemptState
    from airflow_provider_dws.scheduling.policies import Advised

    a, b, c = (Placement(f"us-central1-{z}") for z in "abc")
    task = op(failover=Advised("us-central1-b", "us-central1-c"), capacity_retry=2)
    asked: list[list[Placement]] = []

    def advise(self: Any, placements: list[Placement]) -> list[tuple[Placement, float]]:
        asked.append(list(placements))
        scores = {a: 0.2, b: 0.9, c: 0.5}
        return sorted(((p, scores[p]) for p in placements), key=lambda x: -x[1])

    monkeypatch.setattr(ComputeInstancesAdapter, "advise", advise)
    loop = task.attempt_loop()
    assert rank(loop, AttemptState(placement=a)).placement == b
    tried_b = {"placement": b.to_dict()}
    assert rank(loop, AttemptState(placement=a, attempt=2, history=(tried_b,))).placement == c
    assert asked[-1] == [a, c]
    all_tried = tuple({"placement": p.to_dict()} for p in (a, b, c))
    assert rank(loop, AttemptState(placement=a, attempt=4, history=all_tried)).placement == b

    def failing(self: Any, placements: list[Placement]) -> None:
        raise RuntimeError("advice unavailable")

    monkeypatch.setattr(ComputeInstancesAdapter, "advise", failing)
    assert (
        rank(loop, AttemptState(placement=c, attempt=2, history=(tried_b,))).placement == c
    )  # written order
