"""Capacity advice (``regions.advice.capacity``, compute v1): how likely ``size`` VMs of each
machine type the request allows are to be obtained now, in each zone it allows.

From the discovery document (revision 20261106): the request gives ``size``,
``instanceProperties.scheduling.provisioningModel``, ``instanceFlexibilityPolicy.instanceSelections``
(a map of named selections, each ``machineTypes`` and a ``rank``) and ``distributionPolicy``
(``targetShape``, ``zones``); the answer lists ``recommendations``, each ``scores``
(``obtainability`` 0 to 1; ``estimatedUptime``, documented for Spot VMs) and ``shards`` (zone,
machine type, instance count, provisioning model).

The emulator's model, its own: a zone's obtainability for ``size`` VMs of ``g`` GPUs each is the
share of them its region's pool could give now, after what is queued ahead
(``min(1, free / (size * g))``), times the zone's factor: a deterministic value from 0.6 to 1.0
derived from the zone's name, or what the control API set (``SetCapacityAdvice``), so a test can
rank zones as it likes. A machine type without GPUs scores 1.0; one whose GPU has no pool in the
region is not recommended. Every target shape is answered as ANY_SINGLE_ZONE (one recommendation
per zone and machine type, all ``size`` VMs there), best first; the emulator does not split a
request across zones. No ``estimatedUptime`` (not modelled).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..core.capacity import PoolKey
from ..facts import MACHINE_GPUS
from .resources import invalid, parse_body, region_of, strip_link

#: A zone's factor when none was set: from 0.6 to 1.0, by its name.
MIN_FACTOR = 0.6


def zone_factor(zone: str, factors: dict[str, float]) -> float:
    """The factor of ``zone``: the control API's, else one derived from its name."""
    if zone in factors:
        return factors[zone]
    digest = int(hashlib.sha256(zone.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return round(MIN_FACTOR + (1.0 - MIN_FACTOR) * digest, 2)


def _pool_share(core: Any, region: str, machine: str, size: int) -> float | None:
    """The share of ``size`` VMs of ``machine`` the region's pool could give now; None: no pool."""
    row = MACHINE_GPUS.get(machine)
    if row is None:
        return 1.0
    accelerator, gpus = row
    key = PoolKey(region, accelerator)
    capacity = core.capacity
    if not capacity.has_pool(key):
        return None
    total, in_use = capacity.pool_usage(key)
    queued = sum(d.count for h in capacity.queue(key) if (d := capacity.demand(h)) is not None)
    return min(1.0, max(0, total - in_use - queued) / (size * gpus))


def capacity_advice(core: Any, region: str, body: Any, factors: dict[str, float]) -> dict[str, Any]:
    """The ``CapacityAdviceResponse`` JSON for ``body`` in ``region``."""
    from google.cloud.compute_v1.types import compute as gce

    request = parse_body(body, gce.CapacityAdviceRequest.pb(), "capacityAdviceRequestResource")
    if request.size <= 0:
        raise invalid("capacityAdviceRequestResource.size", request.size, "Must be greater than 0.")
    selections = request.instance_flexibility_policy.instance_selections
    if not selections or not any(s.machine_types for s in selections.values()):
        raise invalid(
            "capacityAdviceRequestResource.instanceFlexibilityPolicy.instanceSelections",
            "",
            "At least one instance selection with machine types is required.",
        )
    zones = [strip_link(z.zone).rsplit("/", 1)[-1] for z in request.distribution_policy.zones]
    for zone in zones:
        if region_of(zone) != region:
            raise invalid(
                "capacityAdviceRequestResource.distributionPolicy.zones", zone, f"Not a zone of {region}."
            )
    zones = zones or [f"{region}-{suffix}" for suffix in "abc"]
    model = request.instance_properties.scheduling.provisioning_model or "STANDARD"
    found: list[tuple[float, int, str, str]] = []
    for selection in selections.values():
        for machine in selection.machine_types:
            share = _pool_share(core, region, machine, request.size)
            if share is None:
                continue
            for zone in zones:
                found.append((round(share * zone_factor(zone, factors), 2), selection.rank, zone, machine))
    found.sort(key=lambda f: (-f[0], f[1], f[2], f[3]))
    return {
        "recommendations": [
            {
                "scores": {"obtainability": score},
                "shards": [
                    {
                        "zone": zone,
                        "machineType": machine,
                        "instanceCount": request.size,
                        "provisioningModel": model,
                    }
                ],
            }
            for score, _, zone, machine in found
        ]
    }
