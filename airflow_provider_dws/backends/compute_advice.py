"""Compute Engine's capacity advice (``regions.advice.capacity``, v1): how likely ``size`` flex-start
VMs of a machine type are to be obtained now, per zone, to order the placements an ``Advised``
failover may use (:class:`~airflow_provider_dws.scheduling.policies.Advised`).

One call per region, for every candidate zone and machine type there, at once. A placement that
is a region (a regional MIG) takes the best score of the region's zones the advice lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.google import translated

if TYPE_CHECKING:
    from airflow_provider_dws.backends.compute_base import ComputeBackend
    from airflow_provider_dws.scheduling.policies import Placement

#: What the advice is asked for: the provisioning model of every Flex Start operator.
PROVISIONING_MODEL = "FLEX_START"


def region_of(location: str) -> str:
    """``us-east4-b`` -> ``us-east4``; a region is its own."""
    head, _, tail = location.rpartition("-")
    return head if len(tail) == 1 else location


def capacity_scores(
    backend: ComputeBackend, region: str, zones: Sequence[str], machine_types: Sequence[str], size: int
) -> dict[tuple[str, str], float]:
    """``(zone, machine type) -> obtainability`` in ``region`` for ``size`` VMs; one call, not
    retried (the written order is the fallback, and it should not wait)."""
    from google.cloud import compute_v1

    request = compute_v1.CapacityAdviceRequest(
        size=size,
        instance_properties=compute_v1.CapacityAdviceRequestInstanceProperties(
            scheduling=compute_v1.CapacityAdviceRequestInstancePropertiesScheduling(
                provisioning_model=PROVISIONING_MODEL
            )
        ),
        instance_flexibility_policy=compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicy(
            instance_selections={
                "candidates": compute_v1.CapacityAdviceRequestInstanceFlexibilityPolicyInstanceSelection(
                    machine_types=list(dict.fromkeys(machine_types))
                )
            }
        ),
        distribution_policy=compute_v1.CapacityAdviceRequestDistributionPolicy(
            target_shape="ANY_SINGLE_ZONE",
            zones=[
                compute_v1.CapacityAdviceRequestDistributionPolicyZoneConfiguration(zone=f"zones/{zone}")
                for zone in dict.fromkeys(zones)
            ],
        ),
    )
    with translated():
        answer = backend.hook.get_advice_client().capacity(
            project=backend.project_id,
            region=region,
            capacity_advice_request_resource=request,
            timeout=backend.rpc_timeout,
        )
    scores: dict[tuple[str, str], float] = {}
    for recommendation in answer.recommendations:
        for shard in recommendation.shards:
            key = (str(shard.zone).rsplit("/", 1)[-1], str(shard.machine_type).rsplit("/", 1)[-1])
            scores[key] = max(scores.get(key, 0.0), float(recommendation.scores.obtainability))
    return scores


def rank_placements(
    placements: Sequence[Placement],
    backend_of: Callable[[str], Any],
    machine_of: Callable[[Placement], str],
    size: int,
) -> list[tuple[Placement, float]]:
    """``placements`` with their scores, most obtainable first (the written order breaks ties);
    a placement the advice says nothing of scores 0. Raises what a call raises."""
    by_region: dict[str, list[Placement]] = {}
    for placement in placements:
        by_region.setdefault(region_of(placement.location), []).append(placement)
    scored: dict[Placement, float] = {}
    for region, group in by_region.items():
        zones = [p.location for p in group if p.location != region]
        scores = capacity_scores(
            backend_of(group[0].location), region, zones, [machine_of(p) for p in group], size
        )
        for placement in group:
            machine = machine_of(placement)
            if placement.location == region:  # a region: its best zone
                scored[placement] = max((s for (_, m), s in scores.items() if m == machine), default=0.0)
            else:
                scored[placement] = scores.get((placement.location, machine), 0.0)
    order = {placement: index for index, placement in enumerate(placements)}
    return sorted(scored.items(), key=lambda item: (-item[1], order[item[0]]))
