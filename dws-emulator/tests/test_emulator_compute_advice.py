"""Capacity advice (``regions.advice.capacity``) in the emulator, through the unmodified
``compute_v1.AdviceClient``: zones ranked by obtainability from the pools and the zones' factors."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_emulator.compute.advice import MIN_FACTOR, zone_factor
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

P = "advice-test"
REGION = "us-central1"
H100 = f"{REGION}/NVIDIA_H100_80GB"


@pytest.fixture
def emulator(dws_emulator_server_factory: Any) -> Any:
    return dws_emulator_server_factory({H100: 16}, clock=FakeClock())


@pytest.fixture
def advice(emulator: Any) -> compute_v1.AdviceClient:
    return compute_v1.AdviceClient(
        client_options=ClientOptions(api_endpoint=emulator.server.rest_url),
        credentials=AnonymousCredentials(),
    )


def ask(
    advice: compute_v1.AdviceClient, size: int, machines: list[str], zones: list[str] | None = None
) -> list[tuple[str, str, float]]:
    request = compute_v1.CapacityAdviceRequest(
        size=size,
        instance_properties=compute_v1.CapacityAdviceRequestInstanceProperties(
            scheduling=compute_v1.CapacityAdviceRequestInstancePropertiesScheduling(
                provisioning_model="FLEX_START"
            )
        ),
        instance_flexibility_policy=compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicy(
            instance_selections={
                "first": compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicyInstanceSelection(
                    machine_types=machines
                )
            }
        ),
        distribution_policy=compute_v1.CapacityAdviceRequestDistributionPolicy(
            target_shape="ANY_SINGLE_ZONE",
            zones=[
                compute_v1.CapacityAdviceRequestDistributionPolicyZoneConfiguration(zone=f"zones/{z}")
                for z in zones or []
            ],
        ),
    )
    answer = advice.capacity(project=P, region=REGION, capacity_advice_request_resource=request)
    out = []
    for rec in answer.recommendations:
        [shard] = rec.shards
        assert shard.instance_count == size and shard.provisioning_model == "FLEX_START"
        out.append((shard.zone, shard.machine_type, rec.scores.obtainability))
    return out


def test_zones_are_ranked_by_their_factor_and_the_pool(advice: Any, emulator: Any) -> None:
    emulator.control.set_capacity_advice({f"{REGION}-a": 0.3, f"{REGION}-b": 0.8, f"{REGION}-c": 0.5})
    assert ask(advice, 2, ["a3-highgpu-8g"]) == [
        (f"{REGION}-b", "a3-highgpu-8g", 0.8),
        (f"{REGION}-c", "a3-highgpu-8g", 0.5),
        (f"{REGION}-a", "a3-highgpu-8g", 0.3),
    ]
    # 4 VMs need 32 H100s, 16 are free: half as likely everywhere.
    assert [score for _, _, score in ask(advice, 4, ["a3-highgpu-8g"])] == [0.4, 0.25, 0.15]


def test_what_is_queued_ahead_counts_and_a_machine_without_gpus_always_fits(
    advice: Any, emulator: Any
) -> None:
    zone = f"{REGION}-b"
    emulator.control.set_capacity_advice({zone: 1.0})
    emulator.control.set_capacity({H100: 8})
    assert ask(advice, 1, ["a3-highgpu-8g", "n2-standard-8", "a2-ultragpu-8g"], [zone]) == [
        (zone, "a3-highgpu-8g", 1.0),
        (zone, "n2-standard-8", 1.0),
    ]  # no A100 80GB pool in the region: not recommended
    emulator.control.set_capacity({H100: 0})
    assert ask(advice, 1, ["a3-highgpu-8g"], [zone]) == [(zone, "a3-highgpu-8g", 0.0)]


def test_an_unset_factor_is_derived_from_the_zone_name() -> None:
    factor = zone_factor("us-east4-b", {})
    assert MIN_FACTOR <= factor <= 1.0 and factor == zone_factor("us-east4-b", {})
    assert zone_factor("us-east4-b", {"us-east4-b": 0.1}) == 0.1


@pytest.mark.parametrize(
    ("size", "machines", "zones", "found"),
    [
        (0, ["a3-highgpu-8g"], None, "size"),
        (1, [], None, "instanceSelections"),
        (1, ["a3-highgpu-8g"], ["us-east4-b"], "Not a zone of us-central1"),
    ],
)
def test_what_the_advice_refuses(advice: Any, size: int, machines: list[str], zones: Any, found: str) -> None:
    with pytest.raises(exceptions.BadRequest, match=found):
        ask(advice, size, machines, zones)


def test_the_control_api_refuses_a_factor_out_of_range(emulator: Any) -> None:
    with pytest.raises(Exception, match="factors 0 to 1"):
        emulator.control.set_capacity_advice({"us-central1-a": 2.0})
