"""Compute Engine wire helpers: the ``compute_v1`` message types this package stores, and the REST
conventions it shares with the other ``compute.v1`` APIs (:mod:`..core.gce`, re-exported here).
"""

from __future__ import annotations

from google.cloud.compute_v1.types import compute as gce

from ..core.gce import (
    DEFAULT_MAX_RESULTS,
    MAX_MAX_RESULTS,
    MAX_WAIT_SECONDS,
    SELF_LINK_ROOT,
    check_name,
    check_request_id,
    compile_filter,
    copy,
    invalid,
    link,
    list_json,
    page,
    parse_body,
    region_of,
    strip_link,
    to_json,
)

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "MAX_MAX_RESULTS",
    "MAX_WAIT_SECONDS",
    "SELF_LINK_ROOT",
    "DeleteInstancesPb",
    "InstanceGroupManagerPb",
    "InstancePb",
    "InstanceTemplatePb",
    "ManagedInstancePb",
    "OperationPb",
    "ResizeRequestPb",
    "check_name",
    "check_request_id",
    "compile_filter",
    "copy",
    "invalid",
    "link",
    "list_json",
    "page",
    "parse_body",
    "region_of",
    "stamp_parts",
    "strip_link",
    "to_json",
]

InstanceTemplatePb = gce.InstanceTemplate.pb()
InstanceGroupManagerPb = gce.InstanceGroupManager.pb()
ResizeRequestPb = gce.InstanceGroupManagerResizeRequest.pb()
InstancePb = gce.Instance.pb()
OperationPb = gce.Operation.pb()
ManagedInstancePb = gce.ManagedInstance.pb()
DeleteInstancesPb = gce.InstanceGroupManagersDeleteInstancesRequest.pb()


def stamp_parts(properties: object) -> None:
    """Set the ``kind`` Compute Engine answers on the disks, network interfaces and access configs
    of instance ``properties`` (or an instance): the discovery document gives each its value."""
    for disk in getattr(properties, "disks", ()):
        disk.kind = "compute#attachedDisk"
    for nic in getattr(properties, "network_interfaces", ()):
        nic.kind = "compute#networkInterface"
        for config in nic.access_configs:
            config.kind = "compute#accessConfig"
