"""window=, deadline=, capacity_retry= and failover= on both operators: short forms, parse-time errors,
and what a failover placement changes in the request that is built."""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from google.cloud.aiplatform_v1 import AcceleratorType

from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, RequestIdentity
from airflow_provider_dws.scheduling.policies import (
    CapacityRetry,
    Deadline,
    Failover,
    OffPeakWindow,
    Placement,
    WindowSet,
)

SEOUL = "Mon-Fri 22:00-06:00 Asia/Seoul"
H100 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
POOL = {
    "machine_spec": H100,
    "replica_count": 1,
    "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/train:1"},
}
VERTEX_IDENTITY = RequestIdentity("train_dag", "fit", "manual__2026-01-01", 2)
TPU_IDENTITY = RequestIdentity("train_dag", "ask_for_tpu", "manual__2026-01-01", 2)
TPU_PARENT = "projects/my-project/locations/us-east5-a"
FLEX_ACCELERATORS = (
    "['NVIDIA_A100_80GB', 'NVIDIA_B200', 'NVIDIA_GB200', 'NVIDIA_H100_80GB', 'NVIDIA_H100_MEGA_80GB', "
    "'NVIDIA_H200_141GB', 'NVIDIA_L4', 'NVIDIA_TESLA_A100']"
)
TPU_FAMILIES = "v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N"


def vertex(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    args: dict[str, Any] = {
        "task_id": "t",
        "region": "us-central1",
        "worker_pool_specs": [copy.deepcopy(POOL)],
    }
    args.update(kwargs)
    if "failover" in kwargs and "capacity_retry" not in kwargs:
        args["capacity_retry"] = 3  # failover happens on retries
    return CreateVertexAIFlexStartJobOperator(**args)


def tpu(**kwargs: Any) -> CreateTPUQueuedResourceOperator:
    args: dict[str, Any] = {
        "task_id": "t",
        "zone": "us-west4-a",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    args.update(kwargs)
    if "failover" in kwargs and "capacity_retry" not in kwargs:
        args["capacity_retry"] = 3  # failover happens on retries
    return CreateTPUQueuedResourceOperator(**args)


OPERATORS = {
    "vertex": (vertex, "CreateVertexAIFlexStartJobOperator"),
    "tpu": (tpu, "CreateTPUQueuedResourceOperator"),
}
BOTH = pytest.mark.parametrize("which", sorted(OPERATORS))


def refused(which: str, message: str) -> Any:
    """``pytest.raises`` for a parse-time error of ``which`` whose text contains ``message``."""
    _, name = OPERATORS[which]
    return pytest.raises(ValueError, match=f"^{name} 't': .*{re.escape(message)}")


def make(which: str, **kwargs: Any) -> Any:
    factory, _ = OPERATORS[which]
    return factory(**kwargs)


# -- defaults -------------------------------------------------------------------------------------


@BOTH
def test_no_policies_by_default(which: str) -> None:
    op = make(which)
    assert op.window is None
    assert op.deadline is None
    assert op.capacity_retry is None
    assert op.failover is None


# -- window ---------------------------------------------------------------------------------------


@BOTH
def test_window_spec_string_is_parsed(which: str) -> None:
    op = make(which, window=SEOUL)
    assert op.window == OffPeakWindow("Mon-Fri", "22:00", "06:00", "Asia/Seoul")
    assert str(op.window) == SEOUL


@BOTH
def test_window_spec_with_bar_becomes_a_window_set(which: str) -> None:
    op = make(which, window=f"{SEOUL} | Sat,Sun 00:00-23:00 Asia/Seoul")
    assert isinstance(op.window, WindowSet)
    assert [str(w) for w in op.window.windows] == [SEOUL, "Sat,Sun 00:00-23:00 Asia/Seoul"]


@BOTH
def test_cron_window_spec_is_parsed(which: str) -> None:
    op = make(which, window="cron 0 22 * * 1-5 for 8h Asia/Seoul")
    assert op.window == OffPeakWindow.from_cron("0 22 * * 1-5", timedelta(hours=8), "Asia/Seoul")


@BOTH
def test_window_objects_are_kept(which: str) -> None:
    window = OffPeakWindow("weekends", "00:00", "23:00", "Europe/Berlin")
    assert make(which, window=window).window is window
    both = window | OffPeakWindow.parse(SEOUL)
    assert make(which, window=both).window is both


@BOTH
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "nightly",
            "OffPeakWindow spec 'nightly' is not '<days> <HH:MM>-<HH:MM> <time zone>' "
            "(e.g. 'Mon-Fri 22:00-06:00 Asia/Seoul') or 'cron <5 fields> for <duration> <time zone>'",
        ),
        ("Mon-Fri 22:00-06:00", "OffPeakWindow spec 'Mon-Fri 22:00-06:00' is not '<days> <HH:MM>-<HH:MM>"),
        (
            "Mon-Fri 22:00-22:00 Asia/Seoul",
            "OffPeakWindow.start and end are both 22:00: an empty window "
            "(an end before the start crosses midnight, e.g. 22:00-06:00)",
        ),
        ("Mon-Fri 22:00-06:00 Mars/Olympus", "OffPeakWindow.timezone: unknown IANA time zone 'Mars/Olympus'"),
        ("Funday 22:00-06:00 UTC", "OffPeakWindow.days: unknown day name 'Funday'"),
        ("Mon-Fri 25:00-06:00 UTC", "OffPeakWindow.start must be a time 'HH:MM' or 'HH:MM:SS'"),
        (
            "cron 0 22 * * 1-5 for 8x UTC",
            "OffPeakWindow spec 'cron 0 22 * * 1-5 for 8x UTC': bad duration '8x'",
        ),
    ],
)
def test_bad_window_spec_is_refused(which: str, spec: str, message: str) -> None:
    with refused(which, message):
        make(which, window=spec)


@BOTH
@pytest.mark.parametrize(("value", "type_name"), [(42, "int"), (timedelta(hours=8), "timedelta")])
def test_window_of_another_type_is_refused(which: str, value: object, type_name: str) -> None:
    with refused(which, f"OffPeakWindow or WindowSet (or None), got {type_name}"):
        make(which, window=value)


# -- deadline -------------------------------------------------------------------------------------


@BOTH
def test_deadline_timedelta_is_relative_to_the_data_interval_end(which: str) -> None:
    op = make(which, deadline=timedelta(hours=2))
    assert op.deadline == Deadline(after_data_interval_end=timedelta(hours=2))


@BOTH
def test_deadline_aware_datetime_is_absolute(which: str) -> None:
    at = datetime(2026, 12, 2, 8, 0, tzinfo=ZoneInfo("Asia/Seoul"))
    op = make(which, deadline=at)
    assert op.deadline == Deadline(at=at)
    assert op.deadline.resolve(None) == datetime(2026, 12, 1, 23, 0, tzinfo=timezone.utc)


@BOTH
def test_deadline_object_is_kept(which: str) -> None:
    deadline = Deadline(after_data_interval_end=timedelta(minutes=30))
    assert make(which, deadline=deadline).deadline is deadline


@BOTH
def test_naive_deadline_is_refused(which: str) -> None:
    with refused(
        which,
        "Deadline.at must be timezone-aware, got naive 2026-12-02T08:00:00 "
        "(add tzinfo, e.g. datetime(..., tzinfo=ZoneInfo('UTC')))",
    ):
        make(which, deadline=datetime(2026, 12, 2, 8, 0))


@BOTH
def test_negative_deadline_is_refused(which: str) -> None:
    with refused(which, "Deadline.after_data_interval_end must not be negative, got -1 day, 23:00:00"):
        make(which, deadline=timedelta(hours=-1))


@BOTH
def test_deadline_of_another_type_is_refused(which: str) -> None:
    with refused(which, "deadline must be a Deadline (or None), got str"):
        make(which, deadline="tomorrow 08:00")


# -- capacity_retry -------------------------------------------------------------------------------


@BOTH
def test_capacity_retry_zero_means_no_retries(which: str) -> None:
    op = make(which, capacity_retry=0)
    assert op.capacity_retry == CapacityRetry(attempts=1)
    assert op.capacity_retry.retries == 0


@BOTH
def test_capacity_retry_number_is_the_number_of_retries(which: str) -> None:
    op = make(which, capacity_retry=2)
    assert op.capacity_retry == CapacityRetry(attempts=3)
    assert op.capacity_retry.retries == 2


@BOTH
def test_capacity_retry_object_is_kept(which: str) -> None:
    retry = CapacityRetry(attempts=4, backoff=timedelta(minutes=5), max_backoff=timedelta(minutes=20))
    assert make(which, capacity_retry=retry).capacity_retry is retry


@BOTH
@pytest.mark.parametrize(("value", "type_name"), [(True, "bool"), ("2", "str"), (2.0, "float")])
def test_capacity_retry_of_another_type_is_refused(which: str, value: object, type_name: str) -> None:
    with refused(which, f"capacity_retry must be a CapacityRetry (or None), got {type_name}"):
        make(which, capacity_retry=value)


@BOTH
def test_negative_capacity_retry_is_refused(which: str) -> None:
    with refused(which, "capacity_retry must be a number of retries >= 0, got -1"):
        make(which, capacity_retry=-1)


# -- failover: accepted forms ---------------------------------------------------------------------

FAILOVER_FORMS = {
    "vertex": (
        "us-east4",
        Placement("us-west1", machine_type="a2-ultragpu-8g", accelerator_type="NVIDIA_A100_80GB"),
    ),
    "tpu": ("us-east5-a", Placement("us-central1-a", accelerator_type="v5litepod-8", tier="spot")),
}


@BOTH
def test_failover_single_location_string(which: str) -> None:
    location, _ = FAILOVER_FORMS[which]
    op = make(which, failover=location)
    assert op.failover == Failover(Placement(location))


@BOTH
def test_failover_list_of_strings_and_placements(which: str) -> None:
    location, placement = FAILOVER_FORMS[which]
    op = make(which, failover=[location, placement])
    assert op.failover == Failover([Placement(location), placement])
    assert op.failover.placements == (Placement(location), placement)


@BOTH
def test_failover_object_is_kept(which: str) -> None:
    location, _ = FAILOVER_FORMS[which]
    failover = Failover(location)
    assert make(which, failover=failover).failover is failover


@BOTH
def test_failover_empty_list_is_refused(which: str) -> None:
    with refused(which, "Failover.placements must name at least one placement, got none"):
        make(which, failover=[])


@BOTH
def test_failover_listing_a_placement_twice_is_refused(which: str) -> None:
    location, _ = FAILOVER_FORMS[which]
    with refused(which, f"Failover.placements lists {location} twice"):
        make(which, failover=[location, location])


@BOTH
def test_failover_item_of_another_type_is_refused(which: str) -> None:
    with refused(which, "Failover.placements must hold Placement values or location strings, got int"):
        make(which, failover=[5])


@BOTH
def test_failover_malformed_location_is_refused(which: str) -> None:
    with refused(
        which,
        "Placement.location must be a region or zone such as 'us-central1' or 'us-west4-a', got 'US-EAST4'",
    ):
        make(which, failover="US-EAST4")


@BOTH
def test_placements_are_home_then_failover_in_order(which: str) -> None:
    location, placement = FAILOVER_FORMS[which]
    op = make(which, failover=[location, placement])
    home = "us-central1" if which == "vertex" else "us-west4-a"
    assert op.placements() == [Placement(home), Placement(location), placement]
    assert op.home_placement() == Placement(home)


@BOTH
def test_placements_without_failover_is_home_only(which: str) -> None:
    home = "us-central1" if which == "vertex" else "us-west4-a"
    assert make(which).placements() == [Placement(home)]


# -- failover: what a Vertex placement may change -------------------------------------------------


def test_vertex_failover_to_a_zone_is_refused() -> None:
    with refused("vertex", "failover location 'us-east4-a' is not a Vertex AI region such as 'us-east4'"):
        vertex(failover="us-east4-a")


def test_vertex_failover_with_a_tier_is_refused() -> None:
    with refused("vertex", "failover placement us-east4 (spot): Flex Start custom jobs have no tier"):
        vertex(failover=[Placement("us-east4", tier="spot")])


@pytest.mark.parametrize("accelerator", ["NVIDIA_TESLA_T4", "H100"])
def test_vertex_failover_with_a_non_flex_start_accelerator_is_refused(accelerator: str) -> None:
    with refused(
        "vertex",
        f"failover placement us-east4 ({accelerator}): accelerator_type must be one of {FLEX_ACCELERATORS}",
    ):
        vertex(failover=[Placement("us-east4", accelerator_type=accelerator)])


def test_vertex_failover_with_another_machine_is_accepted() -> None:
    other = Placement("us-west1", machine_type="a2-ultragpu-8g", accelerator_type="NVIDIA_A100_80GB")
    assert vertex(failover=[other]).failover == Failover(other)


# -- failover: what a TPU placement may change ----------------------------------------------------


def test_tpu_failover_to_a_region_is_refused() -> None:
    with refused("tpu", "failover location 'us-east5' is not a Cloud TPU zone such as 'us-east5-a'"):
        tpu(failover="us-east5")


def test_tpu_failover_with_a_machine_type_is_refused() -> None:
    with refused("tpu", "failover placement us-east5-a (ct5p-hightpu-4t): TPU slices have no machine_type"):
        tpu(failover=[Placement("us-east5-a", machine_type="ct5p-hightpu-4t")])


def test_tpu_failover_with_a_bad_tier_is_refused_by_the_placement() -> None:
    # Placement checks the tier itself, before the operator sees it.
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Placement.tier must be one of spot, guaranteed, on-demand or None, got 'preemptible'"
        ),
    ):
        tpu(failover=[Placement("us-east5-a", tier="preemptible")])


@pytest.mark.parametrize(
    ("accelerator", "message"),
    [
        ("tpu-8", f"accelerator_type must be one of {TPU_FAMILIES} (e.g. 'v5litepod-16'), got 'tpu-8'"),
        (
            "v5p-12",
            "accelerator_type 'v5p-12' is not a v5p slice Cloud TPU offers: "
            "the sizes are 8, 16, 32 or 64 TensorCores, or a multiple of 128 up to 12288 (whole cubes)",
        ),
    ],
)
def test_tpu_failover_with_a_bad_accelerator_is_refused(accelerator: str, message: str) -> None:
    with refused("tpu", message):
        tpu(failover=[Placement("us-east5-a", accelerator_type=accelerator)])


@pytest.mark.parametrize("tier", ["spot", "guaranteed", "on-demand"])
def test_tpu_failover_tiers_are_accepted(tier: str) -> None:
    placement = Placement("us-east5-a", accelerator_type="v5p-8", tier=tier)
    assert tpu(failover=[placement]).failover == Failover(placement)


# -- the request built for a failover placement ---------------------------------------------------


def test_vertex_build_with_a_placement_swaps_the_machine_of_every_pool() -> None:
    workers = {**copy.deepcopy(POOL), "replica_count": 3}
    op = vertex(worker_pool_specs=[copy.deepcopy(POOL), workers], max_wait=timedelta(hours=2))
    placement = Placement("us-east4", machine_type="a2-ultragpu-8g", accelerator_type="NVIDIA_A100_80GB")
    job = op.adapter().build(VERTEX_IDENTITY.with_attempt(2), placement, max_wait=timedelta(minutes=5))
    pools = list(job.job_spec.worker_pool_specs)
    assert [p.replica_count for p in pools] == [1, 3]
    for built in pools:
        assert built.machine_spec.machine_type == "a2-ultragpu-8g"
        assert built.machine_spec.accelerator_type == AcceleratorType.NVIDIA_A100_80GB
        assert built.machine_spec.accelerator_count == 8
    assert job.job_spec.scheduling.max_wait_duration == timedelta(minutes=5)
    assert job.job_spec.scheduling.timeout == timedelta(days=7)
    assert job.labels[LABEL_ATTEMPT] == "2"


def test_vertex_build_with_a_location_only_placement_keeps_the_machine() -> None:
    op = vertex(max_wait=timedelta(hours=2))
    job = op.adapter().build(VERTEX_IDENTITY, Placement("us-east4"), max_wait=timedelta(minutes=30))
    (built,) = job.job_spec.worker_pool_specs
    assert built.machine_spec.machine_type == "a3-highgpu-8g"
    assert built.machine_spec.accelerator_type == AcceleratorType.NVIDIA_H100_80GB
    assert job.job_spec.scheduling.max_wait_duration == timedelta(minutes=30)
    assert job.labels[LABEL_ATTEMPT] == "1"


def test_vertex_build_without_max_wait_uses_the_operator_max_wait() -> None:
    job = vertex(max_wait=timedelta(hours=2)).adapter().build(VERTEX_IDENTITY, Placement("us-east4"))
    assert job.job_spec.scheduling.max_wait_duration == timedelta(hours=2)


def test_tpu_build_with_a_placement_sets_accelerator_spot_tier_and_valid_until() -> None:
    op = tpu(max_wait=timedelta(hours=2))
    placement = Placement("us-east5-a", accelerator_type="v5p-8", tier="spot")
    qr = op.adapter().build(
        TPU_IDENTITY.labels(), TPU_PARENT, "node-1", placement, max_wait=timedelta(minutes=5)
    )
    spec = qr.tpu.node_spec[0]
    assert spec.parent == TPU_PARENT
    assert spec.node.accelerator_type == "v5p-8"
    assert qr._pb.WhichOneof("tier") == "spot"
    assert spec.node.scheduling_config.spot is True
    assert qr.queueing_policy.valid_until_duration == timedelta(minutes=5)


def test_tpu_build_with_a_guaranteed_placement_overrides_a_spot_home() -> None:
    op = tpu(spot=True)
    qr = op.adapter().build(
        TPU_IDENTITY.labels(), TPU_PARENT, "node-1", Placement("us-east5-a", tier="guaranteed")
    )
    assert qr._pb.WhichOneof("tier") == "guaranteed"
    assert not qr.tpu.node_spec[0].node.scheduling_config.spot
    assert qr.tpu.node_spec[0].node.accelerator_type == "v5litepod-16"
    assert qr.queueing_policy.valid_until_duration == timedelta(hours=24)


def test_tpu_build_with_an_on_demand_placement_has_no_tier() -> None:
    op = tpu(spot=True)
    qr = op.adapter().build(
        TPU_IDENTITY.labels(), TPU_PARENT, "node-1", Placement("us-east5-a", tier="on-demand")
    )
    assert qr._pb.WhichOneof("tier") is None
    assert not qr.tpu.node_spec[0].node.scheduling_config.spot


def test_tpu_build_with_a_location_only_placement_keeps_the_home_tier() -> None:
    qr = (
        tpu(guaranteed=True)
        .adapter()
        .build(
            TPU_IDENTITY.labels(),
            TPU_PARENT,
            "node-1",
            Placement("us-east5-a"),
            max_wait=timedelta(minutes=9),
        )
    )
    assert qr._pb.WhichOneof("tier") == "guaranteed"
    assert qr.tpu.node_spec[0].node.accelerator_type == "v5litepod-16"
    assert qr.queueing_policy.valid_until_duration == timedelta(minutes=9)


# -- identity of attempts (TPU ids) ---------------------------------------------------------------


def test_derived_queued_resource_id_per_attempt() -> None:
    op = tpu()
    first = op.adapter().id_for(TPU_IDENTITY)
    third = op.adapter().id_for(TPU_IDENTITY.with_attempt(3))
    assert first == TPU_IDENTITY.queued_resource_id()
    assert re.fullmatch(r"dws-ask-for-tpu-[0-9a-f]{16}-t1-a1", first)
    assert third == first.replace("-t1-a1", "-t1-a3")


def test_custom_queued_resource_id_per_attempt() -> None:
    # The attempt is always in the name (Kueue's rule), so the teardown can find every attempt.
    op = tpu(queued_resource_id="nightly-slice")
    assert op.adapter().id_for(TPU_IDENTITY) == "nightly-slice-t1-a1"
    assert op.adapter().id_for(TPU_IDENTITY.with_attempt(3)) == "nightly-slice-t1-a3"
    retried = RequestIdentity(TPU_IDENTITY.dag_id, TPU_IDENTITY.task_id, TPU_IDENTITY.run_id, try_number=2)
    assert op.adapter().id_for(retried) == "nightly-slice-t2-a1"


def test_long_custom_queued_resource_id_is_cut_to_fit_the_suffix() -> None:
    # 63 characters; cut to 57 for "-t1-a2", it would end in "-", which is dropped.
    op = tpu(queued_resource_id="ab-" + "c" * 53 + "-def")
    second = op.adapter().id_for(TPU_IDENTITY.with_attempt(2))
    assert second == "ab-" + "c" * 53 + "-t1-a2"
    assert len(second) == 62
    twelfth = tpu(queued_resource_id="x" * 63).adapter().id_for(TPU_IDENTITY.with_attempt(12))
    assert twelfth == "x" * 56 + "-t1-a12"
    assert len(twelfth) == 63


@BOTH
def test_failover_without_retries_is_refused(which: str) -> None:
    location, _ = FAILOVER_FORMS[which]
    with refused(which, "to try each failover placement once, got no capacity_retry"):
        make(which, failover=location, capacity_retry=None)
    with refused(which, "to try each failover placement once, got capacity_retry with 0 retries"):
        make(which, failover=location, capacity_retry=0)


def test_vertex_failover_machine_without_accelerator_is_refused() -> None:
    with refused("vertex", "a machine_type needs its accelerator_type too"):
        vertex(failover=[Placement("us-east4", machine_type="a3-megagpu-8g")])


def test_tpu_valid_after_with_window_is_refused() -> None:
    with refused("tpu", "valid_after cannot be combined with window or deadline"):
        tpu(valid_after=60, window="daily 22:00-06:00 UTC")


def test_tpu_failover_drops_the_home_zone_reservation() -> None:
    op = tpu(reservation_name="projects/p/locations/us-west4-a/reservations/r", failover="us-east5-a")
    home = op.adapter().build({}, "projects/p/locations/us-west4-a", "n")
    away = op.adapter().build({}, "projects/p/locations/us-east5-a", "n", Placement("us-east5-a"))
    assert home.reservation_name == "projects/p/locations/us-west4-a/reservations/r"
    assert away.reservation_name == ""
