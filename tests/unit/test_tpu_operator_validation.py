"""CreateTPUQueuedResourceOperator / DeleteTPUQueuedResourceOperator: parse-time checks and the request built."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.configuration import conf
from airflow.sdk import DAG
from google.cloud.tpu_v2 import QueuedResource

from airflow_provider_dws.links import TPUQueuedResourceLink
from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.policies import Placement

IDENTITY = RequestIdentity("train_dag", "ask_for_tpu", "manual__2026-01-01", 2)
PARENT = "projects/my-project/locations/us-west4-a"
NODE_ID = IDENTITY.queued_resource_id()
RESERVATION = "projects/my-project/locations/us-west4-a/reservations/res-1"
FAMILIES = "v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N"
LIMIT = "must be greater than 0 and at most 7 days, 0:00:00"
QR_ID_RULE = "queued_resource_id must start with a lowercase letter, use only lowercase letters, digits"


def make(**kwargs: Any) -> CreateTPUQueuedResourceOperator:
    args: dict[str, Any] = {
        "task_id": "t",
        "zone": "us-west4-a",
        "accelerator_type": "v5litepod-16",
        "runtime_version": "v2-alpha-tpuv5-lite",
    }
    args.update(kwargs)
    return CreateTPUQueuedResourceOperator(**args)


def make_delete(**kwargs: Any) -> DeleteTPUQueuedResourceOperator:
    args: dict[str, Any] = {"task_id": "d", "zone": "us-west4-a"}
    args.update(kwargs)
    return DeleteTPUQueuedResourceOperator(**args)


def build(**kwargs: Any) -> QueuedResource:
    return make(**kwargs).adapter().build(IDENTITY.labels(), PARENT, NODE_ID)


BAD = [
    # (id, kwargs, expected message fragment (literal))
    (
        "accel-unknown-family",
        {"accelerator_type": "v9-8"},
        f"accelerator_type must be one of {FAMILIES} (e.g. 'v5litepod-16'), got 'v9-8'",
    ),
    ("accel-tpu-8", {"accelerator_type": "tpu-8"}, f"accelerator_type must be one of {FAMILIES}"),
    (
        "accel-no-size",
        {"accelerator_type": "v5litepod"},
        "accelerator_type must be one of v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N (e.g. 'v5litepod-16'), "
        "got 'v5litepod'",
    ),
    ("accel-upper", {"accelerator_type": "V5P-8"}, "accelerator_type must be one of"),
    ("accel-int", {"accelerator_type": 16}, "accelerator_type must be one of"),
    (
        "accel-not-power-of-two",
        {"accelerator_type": "v5litepod-12"},
        "accelerator_type 'v5litepod-12' is not a v5litepod slice Cloud TPU offers: the sizes are 1, 4, 8, 16, 32, 64, 128 or 256 chips",
    ),
    (
        "accel-too-big",
        {"accelerator_type": "v5litepod-512"},
        "accelerator_type 'v5litepod-512' is not a v5litepod slice Cloud TPU offers: the sizes are 1, 4, 8, 16, 32, 64, 128 or 256 chips",
    ),
    (
        "accel-too-small",
        {"accelerator_type": "v5p-4"},
        "accelerator_type 'v5p-4' is not a v5p slice Cloud TPU offers: "
        "the sizes are 8, 16, 32 or 64 TensorCores, or a multiple of 128 up to 12288 (whole cubes)",
    ),
    (
        "accel-zero",
        {"accelerator_type": "v6e-0"},
        "accelerator_type 'v6e-0' is not a v6e slice Cloud TPU offers: the sizes are 1, 4, 8, 16, 32, 64, 128 or 256 chips",
    ),
    ("node-count-zero", {"node_count": 0}, "node_count must be an integer from 1 to 256, got 0"),
    ("node-count-257", {"node_count": 257}, "node_count must be an integer from 1 to 256, got 257"),
    ("node-count-str", {"node_count": "2"}, "node_count must be an integer from 1 to 256, got '2'"),
    ("node-count-bool", {"node_count": True}, "node_count must be an integer from 1 to 256, got True"),
    ("node-count-float", {"node_count": 2.0}, "node_count must be an integer from 1 to 256, got 2.0"),
    (
        "spot-and-guaranteed",
        {"spot": True, "guaranteed": True},
        "choose at most one tier: spot=True or guaranteed=True, not both",
    ),
    (
        "reservation-with-spot",
        {"spot": True, "reservation_name": RESERVATION},
        "a reservation is not spot capacity: pass reservation_name or spot=True, not both",
    ),
    (
        "reservation-short",
        {"reservation_name": "res-1"},
        "reservation_name must look like 'projects/<project>/locations/<zone>/reservations/<name>', got 'res-1'",
    ),
    (
        "reservation-wrong-collection",
        {"reservation_name": "projects/p/zones/us-west4-a/reservations/r"},
        "reservation_name must look like",
    ),
    ("spot-str", {"spot": "yes"}, "spot must be True or False, got 'yes'"),
    ("guaranteed-int", {"guaranteed": 1}, "guaranteed must be True or False, got 1"),
    (
        "external-ips-none",
        {"enable_external_ips": None},
        "enable_external_ips must be True or False, got None",
    ),
    (
        "zone-region",
        {"zone": "us-west4"},
        "zone must be a Cloud TPU zone such as 'us-west4-a', got 'us-west4'",
    ),
    (
        "zone-upper",
        {"zone": "US-WEST4-A"},
        "zone must be a Cloud TPU zone such as 'us-west4-a', got 'US-WEST4-A'",
    ),
    ("zone-none", {"zone": None}, "zone must be a Cloud TPU zone such as 'us-west4-a', got None"),
    (
        "runtime-empty",
        {"runtime_version": ""},
        "runtime_version must name a TPU software version such as 'v2-alpha-tpuv5-lite', got ''",
    ),
    ("runtime-blank", {"runtime_version": "   "}, "runtime_version must name a TPU software version"),
    ("qr-id-upper", {"queued_resource_id": "My-QR"}, f"{QR_ID_RULE} and '-', not end with '-'"),
    ("qr-id-digit-first", {"queued_resource_id": "1qr"}, "and have at most 63 characters, got '1qr'"),
    ("qr-id-trailing-dash", {"queued_resource_id": "my-qr-"}, "not end with '-'"),
    ("qr-id-64", {"queued_resource_id": "q" * 64}, f"have at most 63 characters, got '{'q' * 64}'"),
    ("qr-id-underscore", {"queued_resource_id": "my_qr"}, QR_ID_RULE),
    ("qr-id-empty", {"queued_resource_id": ""}, QR_ID_RULE),
    ("max-wait-zero", {"max_wait": 0}, f"max_wait {LIMIT}"),
    ("max-wait-zero-delta", {"max_wait": timedelta(0)}, f"max_wait {LIMIT}, got 0:00:00"),
    ("max-wait-over-7-days", {"max_wait": timedelta(days=7, seconds=1)}, f"max_wait {LIMIT}"),
    ("max-wait-seconds-over-7-days", {"max_wait": 7 * 86400 + 1}, f"max_wait {LIMIT}"),
    ("max-wait-inf", {"max_wait": float("inf")}, f"max_wait {LIMIT}, got inf seconds"),
    ("max-wait-nan", {"max_wait": float("nan")}, f"max_wait {LIMIT}"),
    ("max-wait-fraction", {"max_wait": 1.5}, "max_wait must be a whole number of seconds"),
    ("max-wait-str", {"max_wait": "1h"}, "max_wait must be a datetime.timedelta (or seconds), got str"),
    ("valid-after-negative", {"valid_after": -60}, f"valid_after {LIMIT}"),
    ("valid-after-negative-delta", {"valid_after": timedelta(minutes=-1)}, f"valid_after {LIMIT}"),
    ("valid-after-zero", {"valid_after": 0}, f"valid_after {LIMIT}"),
    (
        "labels-reserved",
        {"labels": {"dws_key": "x"}},
        "labels ['dws_key'] are reserved: the provider writes the task's identity under the 'dws_' keys",
    ),
    ("labels-bad-key", {"labels": {"Team": "ml"}}, "label key 'Team' is invalid"),
    ("labels-bad-value", {"labels": {"team": "ML"}}, "label value 'ML' (key 'team') is invalid"),
    ("labels-list", {"labels": ["team"]}, "labels must be a dict of strings, got list"),
    (
        "project-short",
        {"project_id": "abc"},
        "project_id must be a Google Cloud project id (6-30 lowercase letters, digits and hyphens, "
        "starting with a letter), got 'abc'",
    ),
    ("project-upper", {"project_id": "My-Project"}, "project_id must be a Google Cloud project id"),
    (
        "poll-interval-zero",
        {"poll_interval": 0},
        "poll_interval must be greater than 0 and at most 3600 seconds, got 0",
    ),
    ("poll-interval-str", {"poll_interval": "30"}, "poll_interval must be a number of seconds, got '30'"),
    ("deferrable-yes", {"deferrable": "yes"}, "deferrable must be True or False, got 'yes'"),
    ("cancel-on-kill-int", {"cancel_on_kill": 0}, "cancel_on_kill must be True or False, got 0"),
    ("network-empty", {"network": ""}, "network must be a non-empty string, got ''"),
    ("subnetwork-int", {"subnetwork": 5}, "subnetwork must be a non-empty string, got 5"),
    ("service-account", {"service_account": "trainer"}, "service_account must be a service account email"),
    ("gcp-conn-id-empty", {"gcp_conn_id": ""}, "gcp_conn_id must be a non-empty connection id, got ''"),
    (
        "impersonation-empty-list",
        {"impersonation_chain": []},
        "impersonation_chain must be a service account email or a list of them, got []",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), [pytest.param(k, m, id=i) for i, k, m in BAD])
def test_bad_parameter_is_refused_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^CreateTPUQueuedResourceOperator 't': .*" + re.escape(message)):
        make(**kwargs)


def test_there_are_enough_bad_cases() -> None:
    assert len(BAD) >= 20


# Found while writing these tests: Python's "$" also matches before a trailing newline, so these
# values pass the "^...$" patterns (zone, accelerator type, queued resource id) and only fail later
# at the API. Fix: anchor the patterns with "\Z" or use re.fullmatch.


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        pytest.param({"zone": "us-west4-a\n"}, "zone", id="zone"),
        pytest.param({"accelerator_type": "v5litepod-16\n"}, "accelerator_type", id="accel"),
        pytest.param({"queued_resource_id": "my-qr\n"}, "queued_resource_id", id="qr-id"),
    ],
)
def test_trailing_newline_is_refused(kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(ValueError, match=param):
        make(**kwargs)


def test_delete_trailing_newline_id_is_refused() -> None:
    with pytest.raises(ValueError, match="queued_resource_id"):
        make_delete(queued_resource_id="my-qr\n")


@pytest.mark.parametrize(
    "accel",
    [
        "v5litepod-1",
        "v5litepod-256",
        "v6e-1",
        "v6e-8",
        "v6e-256",
        "v5p-8",
        "v5p-8192",
        "v4-8",
        "v4-8192",
        "v3-8",
        "v3-2048",
        "v2-8",
        "v2-512",
    ],
)
def test_valid_accelerator_types(accel: str) -> None:
    assert make(accelerator_type=accel).accelerator_type == accel


def test_largest_v5p_slice_is_accepted() -> None:
    assert make(accelerator_type="v5p-12288").accelerator_type == "v5p-12288"


def test_valid_parameters_are_kept() -> None:
    op = make(
        node_count=4,
        guaranteed=True,
        max_wait=3600,
        valid_after=timedelta(minutes=30),
        labels={"team": "ml"},
        project_id="my-project",
        queued_resource_id="q" * 63,
        poll_interval=5,
        deferrable=False,
    )
    assert op.max_wait == timedelta(hours=1)
    assert op.valid_after == timedelta(minutes=30)
    assert op.node_count == 4
    assert op.queued_resource_id == "q" * 63


def test_defaults() -> None:
    op = make()
    assert op.max_wait == timedelta(hours=24)
    assert op.valid_after is None
    assert op.node_count == 1
    assert op.spot is False and op.guaranteed is False
    # [operators] default_deferrable, as every provider does (Airflow ships it as false).
    assert op.deferrable is conf.getboolean("operators", "default_deferrable")
    assert op.cancel_on_kill is True
    assert op.poll_interval == 30.0


def test_seven_days_is_the_longest_wait() -> None:
    assert make(max_wait=timedelta(days=7)).max_wait == timedelta(days=7)
    assert make(max_wait=7 * 86400, valid_after=7 * 86400).valid_after == timedelta(days=7)


def test_valid_operator_inside_a_dag() -> None:
    with DAG("d", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        op = make(node_count=2, spot=True)
    assert op.dag is dag


def test_validation_also_fails_inside_a_dag() -> None:
    with DAG("d", schedule=None, start_date=datetime(2026, 1, 1)), pytest.raises(ValueError, match="zone"):
        make(zone="nowhere")


def test_templated_values_are_not_rejected_at_construction() -> None:
    op = make(
        zone="{{ params.zone }}",
        accelerator_type="{{ params.accel }}",
        runtime_version="{{ params.runtime }}",
        project_id="{{ var.value.project }}",
        queued_resource_id="{{ params.qr_id }}",
        reservation_name="{{ params.reservation }}",
        network="{{ params.net }}",
        service_account="{{ params.sa }}",
        labels={"team": "{{ params.team }}", "{{ params.k }}": "v"},
    )
    assert op.zone == "{{ params.zone }}"
    assert op.accelerator_type == "{{ params.accel }}"
    assert op.labels == {"team": "{{ params.team }}", "{{ params.k }}": "v"}


def test_templated_values_are_checked_after_rendering() -> None:
    op = make(zone="{{ params.zone }}", accelerator_type="{{ params.accel }}")
    op.check_parameters(rendered=False)
    op.zone = "us-west4-b"
    op.accelerator_type = "v5litepod-12"
    with pytest.raises(ValueError, match="is not a v5litepod slice Cloud TPU offers"):
        op.check_parameters(rendered=True)
    op.accelerator_type = "v6e-8"
    op.check_parameters(rendered=True)
    op.zone = "Nowhere"
    with pytest.raises(ValueError, match="zone must be a Cloud TPU zone"):
        op.check_parameters(rendered=True)


def test_template_fields() -> None:
    assert set(CreateTPUQueuedResourceOperator.template_fields) >= {
        "project_id",
        "zone",
        "accelerator_type",
        "runtime_version",
        "queued_resource_id",
        "reservation_name",
        "labels",
        "impersonation_chain",
    }
    assert set(DeleteTPUQueuedResourceOperator.template_fields) >= {
        "project_id",
        "zone",
        "queued_resource_id",
    }


def test_operator_extra_links() -> None:
    for cls in (CreateTPUQueuedResourceOperator, DeleteTPUQueuedResourceOperator):
        assert [type(link) for link in cls.operator_extra_links] == [TPUQueuedResourceLink]


# -- building the request --------------------------------------------------------------------


def test_build_single_slice() -> None:
    qr = build(labels={"team": "ml"}, max_wait=timedelta(hours=2))
    assert isinstance(qr, QueuedResource)
    (spec,) = qr.tpu.node_spec
    assert spec.parent == PARENT
    assert spec.node_id == NODE_ID
    assert "multislice_params" not in spec
    node = spec.node
    assert node.accelerator_type == "v5litepod-16"
    assert node.runtime_version == "v2-alpha-tpuv5-lite"
    assert dict(node.labels) == {"team": "ml", **IDENTITY.labels()}
    assert qr.queueing_policy.valid_until_duration == timedelta(hours=2)
    assert "valid_after_duration" not in qr.queueing_policy
    # On-demand: no tier, no reservation, no spot scheduling, no service account.
    assert qr._pb.WhichOneof("tier") is None
    assert not qr.reservation_name
    assert not node.scheduling_config.spot
    assert "service_account" not in node
    assert not node.network_config.enable_external_ips
    assert not node.network_config.network
    # The request is not named here: the API takes the id separately.
    assert not qr.name


def test_build_default_max_wait() -> None:
    assert build().queueing_policy.valid_until_duration == timedelta(hours=24)


def test_identity_labels_win_over_user_labels() -> None:
    op = make(labels={"team": "ml"})
    op.labels = {"team": "ml", "dws_key": "forged"}  # e.g. after rendering
    qr = op.adapter().build(IDENTITY.labels(), PARENT, NODE_ID)
    assert qr.tpu.node_spec[0].node.labels["dws_key"] == IDENTITY.key


def test_build_multislice() -> None:
    qr = build(node_count=4, accelerator_type="v5p-8")
    (spec,) = qr.tpu.node_spec
    assert spec.multislice_params.node_count == 4
    assert spec.multislice_params.node_id_prefix == NODE_ID
    assert not spec.node_id
    assert qr._pb.tpu.node_spec[0].WhichOneof("name_strategy") == "multislice_params"
    assert spec.node.accelerator_type == "v5p-8"


def test_build_spot() -> None:
    qr = build(spot=True)
    assert qr._pb.WhichOneof("tier") == "spot"
    assert "spot" in qr
    assert qr.tpu.node_spec[0].node.scheduling_config.spot is True


def test_build_guaranteed() -> None:
    qr = build(guaranteed=True)
    assert qr._pb.WhichOneof("tier") == "guaranteed"
    assert not qr.tpu.node_spec[0].node.scheduling_config.spot


def test_build_reservation() -> None:
    qr = build(reservation_name=RESERVATION)
    assert qr.reservation_name == RESERVATION
    assert qr._pb.WhichOneof("tier") is None
    qr = build(reservation_name=RESERVATION, guaranteed=True)
    assert qr.reservation_name == RESERVATION
    assert qr._pb.WhichOneof("tier") == "guaranteed"


def test_build_valid_after_keeps_the_max_wait_as_an_interval() -> None:
    # valid_until_* and valid_after_* share one oneof: a delayed start with a deadline is an interval.
    before = datetime.now(timezone.utc)
    qr = build(valid_after=timedelta(hours=1), max_wait=timedelta(hours=3))
    after = datetime.now(timezone.utc)
    policy = QueuedResource.QueueingPolicy.pb(qr.queueing_policy)
    assert policy.WhichOneof("start_timing_constraints") == "valid_interval"
    start = policy.valid_interval.start_time.ToDatetime(timezone.utc)
    end = policy.valid_interval.end_time.ToDatetime(timezone.utc)
    assert before + timedelta(hours=1) - timedelta(seconds=1) <= start <= after + timedelta(hours=1)
    assert end - start == timedelta(hours=3)


def test_build_without_valid_after_uses_valid_until_duration() -> None:
    qr = build(max_wait=timedelta(hours=3))
    policy = QueuedResource.QueueingPolicy.pb(qr.queueing_policy)
    assert policy.WhichOneof("start_timing_constraints") == "valid_until_duration"
    assert qr.queueing_policy.valid_until_duration == timedelta(hours=3)


def test_build_service_account() -> None:
    qr = build(service_account="trainer@my-project.iam.gserviceaccount.com")
    assert qr.tpu.node_spec[0].node.service_account.email == "trainer@my-project.iam.gserviceaccount.com"


def test_build_network() -> None:
    qr = build(
        network="projects/my-project/global/networks/vpc",
        subnetwork="projects/my-project/regions/us-west4/subnetworks/tpu",
        enable_external_ips=True,
    )
    config = qr.tpu.node_spec[0].node.network_config
    assert config.network == "projects/my-project/global/networks/vpc"
    assert config.subnetwork == "projects/my-project/regions/us-west4/subnetworks/tpu"
    assert config.enable_external_ips is True


# -- DeleteTPUQueuedResourceOperator ---------------------------------------------------------

BAD_DELETE = [
    ("neither", {}, "pass exactly one of setup_task_id and queued_resource_id"),
    (
        "both",
        {"setup_task_id": "ask", "queued_resource_id": "my-qr"},
        "pass exactly one of setup_task_id and queued_resource_id",
    ),
    ("setup-empty", {"setup_task_id": ""}, "setup_task_id must be a task id, got ''"),
    ("setup-int", {"setup_task_id": 5}, "setup_task_id must be a task id, got 5"),
    (
        "zone-region",
        {"setup_task_id": "ask", "zone": "us-west4"},
        "zone must be a Cloud TPU zone such as 'us-west4-a', got 'us-west4'",
    ),
    ("zone-upper", {"setup_task_id": "ask", "zone": "US-WEST4-A"}, "zone must be a Cloud TPU zone"),
    ("id-upper", {"queued_resource_id": "My-QR"}, f"{QR_ID_RULE} and '-', not end with '-'"),
    ("id-64", {"queued_resource_id": "q" * 64}, "have at most 63 characters"),
    ("id-digit-first", {"queued_resource_id": "9q"}, "got '9q'"),
    ("force-str", {"setup_task_id": "ask", "force": "yes"}, "force must be True or False, got 'yes'"),
    ("force-none", {"setup_task_id": "ask", "force": None}, "force must be True or False, got None"),
    (
        "project-bad",
        {"setup_task_id": "ask", "project_id": "abc"},
        "project_id must be a Google Cloud project id",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), [pytest.param(k, m, id=i) for i, k, m in BAD_DELETE])
def test_delete_bad_parameter_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^DeleteTPUQueuedResourceOperator 'd': .*" + re.escape(message)):
        make_delete(**kwargs)


def test_delete_valid_parameters() -> None:
    op = make_delete(setup_task_id="ask_for_tpu")
    assert op.setup_task_id == "ask_for_tpu"
    assert op.queued_resource_id is None
    assert op.force is True
    op = make_delete(queued_resource_id="my-qr", force=False, project_id="my-project")
    assert op.queued_resource_id == "my-qr"
    assert op.force is False


def test_delete_templated_values_are_not_rejected() -> None:
    op = make_delete(zone="{{ params.zone }}", queued_resource_id="{{ ti.xcom_pull('ask') }}")
    assert op.zone == "{{ params.zone }}"
    op.zone = "Nowhere"
    with pytest.raises(ValueError, match="zone must be a Cloud TPU zone"):
        op.check_parameters(rendered=True)


FLEX = {"provisioning_model": "flex_start", "max_run": timedelta(hours=4)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"provisioning_model": "flex"}, "provisioning_model must be 'flex_start'", id="model"),
        pytest.param(
            {"provisioning_model": "flex_start"}, "provisioning_model='flex_start' needs max_run", id="no-run"
        ),
        pytest.param({"max_run": 3600}, "max_run is a flex-start slice's run", id="run-alone"),
        pytest.param({**FLEX, "max_run": timedelta(days=8)}, "max_run", id="too-long"),
        pytest.param(
            {**FLEX, "spot": True}, "a flex-start slice takes no tier and no reservation", id="spot"
        ),
        pytest.param(
            {**FLEX, "reservation_name": "projects/p/locations/us-west4-a/reservations/r"},
            "takes no tier and no reservation",
            id="reservation",
        ),
        pytest.param(
            {**FLEX, "accelerator_type": "v5p-8"},
            "flex-start is offered on TPU v5litepod, v6e only",
            id="family",
        ),
        pytest.param(
            {**FLEX, "failover": [Placement("us-east5-a", tier="spot")], "capacity_retry": 1},
            "a flex-start slice has no tier",
            id="failover-tier",
        ),
    ],
)
def test_flex_start_parameters_are_checked_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**kwargs)


def test_a_flex_start_slice_asks_v2alpha1_for_its_run() -> None:
    from airflow_provider_dws.backends.tpu_flex import TpuFlexStartBackend
    from airflow_provider_dws.scheduling.identity import RequestIdentity

    task = make(**FLEX, accelerator_type="v6e-8", project_id="my-project")
    adapter = task.adapter()
    assert isinstance(adapter.backend(), TpuFlexStartBackend) and adapter.backend().kind == "tpu_flex_start"
    spec = adapter.request_spec(RequestIdentity("d", "t", "r"))
    assert spec["run_duration"] == {"maxRunDuration": "14400s"}
    assert "spot" not in spec["queued_resource"] and "guaranteed" not in spec["queued_resource"]
    assert "run_duration" not in make(project_id="my-project").adapter().request_spec(
        RequestIdentity("d", "t", "r")
    )


def test_the_deferral_line_says_a_flex_start_slice_runs_max_run() -> None:
    assert make(**FLEX, accelerator_type="v6e-8").adapter().deferral_note() == (
        "; a flex-start slice: once ACTIVE it runs 4:00:00, then Cloud TPU deletes its VMs"
    )
    assert make().adapter().deferral_note() == ""
