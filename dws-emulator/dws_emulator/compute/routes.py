"""The Compute Engine REST routes (paths as the ``compute_v1`` REST transports send them).

``state`` is the :class:`~.state.ComputeState` (typed ``Any``: the state imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.rest import RestCall, RestRoute

ROOT = "/compute/v1/projects/{project}"

Handler = Callable[[RestCall], Any]


def _scope(kind: str) -> Callable[[RestCall], str]:
    """``projects/P/zones/Z`` (or regions, global) of a call."""
    if kind == "global":
        return lambda call: f"projects/{call.params['project']}/global"
    key = "zone" if kind == "zones" else "region"
    return lambda call: f"projects/{call.params['project']}/{kind}/{call.params[key]}"


def _mig_routes(state: Any, kind: str) -> list[RestRoute]:
    """Instance group managers and their resize requests, zonal (``zones``) or regional (``regions``)."""
    scope = _scope(kind)
    key = "zone" if kind == "zones" else "region"
    igm = "compute.instanceGroupManagers" if kind == "zones" else "compute.regionInstanceGroupManagers"
    rr = (
        "compute.instanceGroupManagerResizeRequests"
        if kind == "zones"
        else "compute.regionInstanceGroupManagerResizeRequests"
    )
    base = f"{ROOT}/{kind}/{{{key}}}/instanceGroupManagers"
    one = f"{base}/{{igm}}"
    req = f"{one}/resizeRequests/{{rr}}"

    def rid(call: RestCall) -> str:
        return call.query.get("requestId", "")

    return [
        RestRoute(
            "POST",
            base,
            f"{igm}.insert",
            lambda c: state.insert_mig(c.params["project"], kind, c.params[key], c.body, rid(c)),
        ),
        RestRoute("GET", base, f"{igm}.list", lambda c: state.list_migs(scope(c), c.query)),
        RestRoute("GET", one, f"{igm}.get", lambda c: state.get_mig(scope(c), c.params["igm"])),
        RestRoute(
            "DELETE", one, f"{igm}.delete", lambda c: state.delete_mig(scope(c), c.params["igm"], rid(c))
        ),
        RestRoute(
            "POST",
            f"{one}/listManagedInstances",
            f"{igm}.listManagedInstances",
            lambda c: state.list_managed(scope(c), c.params["igm"], c.query),
        ),
        RestRoute(
            "POST",
            f"{one}/deleteInstances",
            f"{igm}.deleteInstances",
            lambda c: state.delete_instances(scope(c), c.params["igm"], c.body, rid(c)),
        ),
        RestRoute(
            "POST",
            f"{one}/resizeRequests",
            f"{rr}.insert",
            lambda c: state.insert_resize(scope(c), c.params["igm"], c.body, rid(c)),
        ),
        RestRoute(
            "GET",
            f"{one}/resizeRequests",
            f"{rr}.list",
            lambda c: state.list_resize(scope(c), c.params["igm"], c.query),
        ),
        RestRoute(
            "GET", req, f"{rr}.get", lambda c: state.get_resize(scope(c), c.params["igm"], c.params["rr"])
        ),
        RestRoute(
            "POST",
            f"{req}/cancel",
            f"{rr}.cancel",
            lambda c: state.cancel_resize(scope(c), c.params["igm"], c.params["rr"], rid(c)),
        ),
        RestRoute(
            "DELETE",
            req,
            f"{rr}.delete",
            lambda c: state.delete_resize(scope(c), c.params["igm"], c.params["rr"], rid(c)),
        ),
    ]


def _operation_routes(state: Any, kind: str, service: str) -> list[RestRoute]:
    scope = _scope(kind)
    prefix = (
        f"{ROOT}/global"
        if kind == "global"
        else f"{ROOT}/{kind}/{{{'zone' if kind == 'zones' else 'region'}}}"
    )
    path = f"{prefix}/operations/{{operation}}"
    return [
        RestRoute(
            "GET", path, f"{service}.get", lambda c: state.get_operation(scope(c), c.params["operation"])
        ),
        RestRoute(
            "POST",
            f"{path}/wait",
            f"{service}.wait",
            lambda c: state.wait_operation(scope(c), c.params["operation"], c.stopping),
        ),
    ]


def compute_routes(state: Any) -> list[RestRoute]:
    """Every Compute Engine route the emulator serves."""
    templates = f"{ROOT}/global/instanceTemplates"
    regional_templates = f"{ROOT}/regions/{{region}}/instanceTemplates"
    return [
        RestRoute(
            "POST",
            templates,
            "compute.instanceTemplates.insert",
            lambda c: state.insert_template(c.params["project"], None, c.body, c.query.get("requestId", "")),
        ),
        RestRoute(
            "GET",
            f"{templates}/{{name}}",
            "compute.instanceTemplates.get",
            lambda c: state.get_template(c.params["project"], None, c.params["name"]),
        ),
        RestRoute(
            "POST",
            regional_templates,
            "compute.regionInstanceTemplates.insert",
            lambda c: state.insert_template(
                c.params["project"], c.params["region"], c.body, c.query.get("requestId", "")
            ),
        ),
        RestRoute(
            "GET",
            f"{regional_templates}/{{name}}",
            "compute.regionInstanceTemplates.get",
            lambda c: state.get_template(c.params["project"], c.params["region"], c.params["name"]),
        ),
        *_mig_routes(state, "zones"),
        *_mig_routes(state, "regions"),
        *_operation_routes(state, "zones", "compute.zoneOperations"),
        *_operation_routes(state, "regions", "compute.regionOperations"),
        *_operation_routes(state, "global", "compute.globalOperations"),
        RestRoute(
            "GET",
            f"{ROOT}/zones/{{zone}}/instances/{{name}}",
            "compute.instances.get",
            lambda c: state.get_instance(c.params["project"], c.params["zone"], c.params["name"]),
        ),
        RestRoute(
            "POST",
            f"{ROOT}/regions/{{region}}/advice/capacity",
            "compute.advice.capacity",
            lambda c: state.capacity_advice(c.params["project"], c.params["region"], c.body),
        ),
        RestRoute(
            "POST",
            f"{ROOT}/zones/{{zone}}/instances",
            "compute.instances.insert",
            lambda c: state.insert_instance(
                c.params["project"], c.params["zone"], c.body, c.query.get("requestId", "")
            ),
        ),
        RestRoute(
            "GET",
            f"{ROOT}/zones/{{zone}}/instances",
            "compute.instances.list",
            lambda c: state.list_instances(c.params["project"], c.params["zone"], c.query),
        ),
        RestRoute(
            "DELETE",
            f"{ROOT}/zones/{{zone}}/instances/{{name}}",
            "compute.instances.delete",
            lambda c: state.delete_instance(
                c.params["project"], c.params["zone"], c.params["name"], c.query.get("requestId", "")
            ),
        ),
    ]
