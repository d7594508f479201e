"""Cloud TPU flex-start (Preview): ``v2alpha1`` queued resources on the REST front.

Flex-start exists only in the ``v2alpha1`` API: ``QueuedResource.provisioningModel = FLEX_START``
with ``runDuration`` (``maxRunDuration`` or ``terminationTime``). Google's pages say: the request
persists until capacity is available, the TPU VMs then run for the duration asked (at most 7
days), and at the end the VMs are deleted and the queued resource goes to ``SUSPENDED``; only TPU
v5e (``v5litepod``) and v6e, on preemptible quota. google-cloud-tpu's ``tpu_v2alpha1`` types lack
both fields (1.28.0), so this surface is served over REST, in the JSON of the ``tpu.v2alpha1``
discovery document, by the same model as the ``v2`` gRPC service (one queue, one capacity pool).

What the emulator decides where Google's pages are silent (say so in the provider's docs):

* ``runDuration`` without ``provisioningModel = FLEX_START`` is refused (only flex-start has a
  run duration), and FLEX_START without it too; a tier (``spot``, ``guaranteed``,
  ``bestEffort``) or a reservation beside FLEX_START is refused;
* the run starts when the queued resource is ACTIVE; a ``terminationTime`` that passes before
  then fails the request (nothing ran);
* at the run's end: SUSPENDING, its nodes deleted and the chips released; SUSPENDED on the next
  tick (the same path a calendar block's end takes, with the nodes gone rather than preempted).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format

from ..core.clock import iso
from ..core.errors import EmulatorError
from ..core.rest import RestCall, RestRoute, status_errors

if TYPE_CHECKING:
    # The state module imports this one: what it hands over is named here by what it has.
    from typing import Protocol

    class QueuedResourceRecord(Protocol):
        qr: Any
        flex: FlexRun | None

    class TpuState(Protocol):
        core: Any
        resources: dict[str, Any]

        def create(self, parent: str, queued_resource_id: str, qr: Any, *, flex: FlexRun | None) -> Any: ...
        def get(self, name: str) -> Any: ...
        def list_resources(
            self, parent: str, page_size: int = 0, page_token: str = ""
        ) -> tuple[list[Any], str]: ...
        def delete(self, name: str, force: bool = False) -> Any: ...
        def get_node(self, name: str) -> Any: ...


REST_SERVICE = "tpu.v2alpha1"
PROVISIONING_MODELS = (
    "PROVISIONING_MODEL_UNSPECIFIED",
    "STANDARD",
    "SPOT",
    "RESERVATION_BOUND",
    "FLEX_START",
)
FLEX_FAMILIES = ("v5litepod", "v6e")
MAX_RUN_SECONDS = 7 * 24 * 3600.0
_DURATION = re.compile(r"(\d+(?:\.\d{1,9})?)s")
_ALPHA_ONLY = ("provisioningModel", "runDuration", "bestEffort")
_PREFIX = "/v2alpha1/projects/{project}/locations/{zone}"
_METHOD = "tpu.projects.locations."


def _invalid(field: str, message: str) -> EmulatorError:
    return EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid value for field '{field}': {message}")


@dataclass(frozen=True)
class FlexRun:
    """A flex-start request's run: its model and when its run ends (one of the two is set)."""

    model: str
    max_run: float | None = None
    terminate_at: float | None = None

    def ends_at(self, active_at: float) -> float:
        """When a run that became ACTIVE at ``active_at`` ends."""
        ends = [t for t in (self.terminate_at,) if t is not None]
        if self.max_run is not None:
            ends.append(active_at + self.max_run)
        return min(ends)

    def to_json(self) -> dict[str, Any]:
        """The request's own fields, as the API returns them."""
        run: dict[str, str] = {}
        if self.max_run is not None:
            run["maxRunDuration"] = f"{self.max_run:g}s"
        if self.terminate_at is not None:
            run["terminationTime"] = str(iso(self.terminate_at))
        model = {} if self.model == "PROVISIONING_MODEL_UNSPECIFIED" else {"provisioningModel": self.model}
        return {**model, **({"runDuration": run} if run else {})}


def _seconds(field: str, value: Any) -> float:
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _invalid(field, f"{value!r} is not a duration such as '3600s'.")
    return float(match[1])


def _instant(field: str, value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise _invalid(field, f"{value!r} is not an RFC 3339 time.") from None


def parse_flex(body: dict[str, Any], now: float) -> FlexRun:
    """The provisioning model and run of a ``v2alpha1`` create body, checked."""
    model = body.get("provisioningModel", "PROVISIONING_MODEL_UNSPECIFIED")
    if model not in PROVISIONING_MODELS:
        raise _invalid(
            "queued_resource.provisioning_model", f"{model!r} is not one of {PROVISIONING_MODELS}."
        )
    run = body.get("runDuration")
    if model != "FLEX_START":
        if run is not None:
            raise _invalid(
                "queued_resource.run_duration", "a run duration needs provisioningModel FLEX_START."
            )
        if body.get("bestEffort") is not None:
            raise _invalid(
                "queued_resource.best_effort", "the best-effort tier is not served by this emulator."
            )
        return FlexRun(model)  # made through v2alpha1 (its nodes say so), whatever the model
    for tier in ("spot", "guaranteed", "bestEffort", "reservationName"):
        if body.get(tier) is not None:
            raise _invalid(f"queued_resource.{tier}", "FLEX_START takes no tier and no reservation.")
    if not isinstance(run, dict) or not run.keys() & {"maxRunDuration", "terminationTime"}:
        raise _invalid("queued_resource.run_duration", "FLEX_START needs maxRunDuration or terminationTime.")
    unknown = sorted(run.keys() - {"maxRunDuration", "terminationTime"})
    if unknown:
        raise _invalid(f"queued_resource.run_duration.{unknown[0]}", "not a field of RunDuration.")
    max_run = (
        _seconds("queued_resource.run_duration.max_run_duration", run["maxRunDuration"])
        if "maxRunDuration" in run
        else None
    )
    until = (
        _instant("queued_resource.run_duration.termination_time", run["terminationTime"])
        if "terminationTime" in run
        else None
    )
    if max_run is not None and not 0 < max_run <= MAX_RUN_SECONDS:
        raise _invalid(
            "queued_resource.run_duration.max_run_duration", "a flex-start run lasts at most 7 days."
        )
    if until is not None and not now < until <= now + MAX_RUN_SECONDS:
        raise _invalid(
            "queued_resource.run_duration.termination_time", "must be in the future, at most 7 days ahead."
        )
    return FlexRun(model, max_run, until)


def check_family(flex: FlexRun | None, family: str) -> None:
    """Flex-start is offered on TPU v5e and v6e only."""
    if flex is not None and flex.model == "FLEX_START" and family not in FLEX_FAMILIES:
        raise _invalid(
            "queued_resource.tpu.node_spec[0].node.accelerator_type",
            f"flex-start is offered for {', '.join(FLEX_FAMILIES)} only, not {family}.",
        )


def _node_specs(body: dict[str, Any], old: str, new: str) -> None:
    """Rename each node spec's multi-node field: ``v2alpha1`` says ``multiNodeParams`` where ``v2``
    says ``multisliceParams`` (same ``nodeCount`` and ``nodeIdPrefix``)."""
    for spec in (body.get("tpu") or {}).get("nodeSpec") or ():
        if isinstance(spec, dict) and old in spec:
            spec[new] = spec.pop(old)


def queued_resource_json(rec: QueuedResourceRecord) -> dict[str, Any]:
    """A queued resource as ``v2alpha1`` JSON: the ``v2`` message's fields and the flex-start ones."""
    out: dict[str, Any] = json_format.MessageToDict(rec.qr)
    _node_specs(out, "multisliceParams", "multiNodeParams")
    if rec.flex is not None:
        out.update(rec.flex.to_json())
    return out


def operation_json(state: TpuState, op: Any) -> dict[str, Any]:
    """A long-running operation as ``v2alpha1`` JSON (``@type`` names the v2alpha1 messages)."""
    out: dict[str, Any] = {"name": op.name, "done": op.done}
    meta = json_format.MessageToDict(op.metadata)
    meta["@type"] = "type.googleapis.com/google.cloud.tpu.v2alpha1.OperationMetadata"
    meta["apiVersion"] = "v2alpha1"
    out["metadata"] = meta
    if op.HasField("error"):
        out["error"] = json_format.MessageToDict(op.error)
    elif op.HasField("response"):
        if op.response.type_url.endswith(".QueuedResource"):
            rec = state.resources.get(json_format.MessageToDict(op.response).get("name", ""))
            body = queued_resource_json(rec) if rec is not None else {}
            out["response"] = {
                "@type": "type.googleapis.com/google.cloud.tpu.v2alpha1.QueuedResource",
                **body,
            }
        else:
            out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
    return out


def _parent(call: RestCall) -> str:
    return f"projects/{call.params['project']}/locations/{call.params['zone']}"


def _named(call: RestCall, collection: str, key: str) -> str:
    """The full name of the route's resource: ``projects/P/locations/Z/<collection>/<id>``."""
    return f"{_parent(call)}/{collection}/{call.params[key]}"


def _create(state: TpuState, call: RestCall) -> dict[str, Any]:
    from google.cloud.tpu_v2.types import cloud_tpu

    body = dict(call.body or {})
    parent = _parent(call)
    flex = parse_flex(body, state.core.clock())
    v2 = copy.deepcopy({k: v for k, v in body.items() if k not in _ALPHA_ONLY})  # the call's own stays
    _node_specs(v2, "multiNodeParams", "multisliceParams")
    try:
        qr = json_format.ParseDict(v2, cloud_tpu.QueuedResource.pb()())
    except json_format.ParseError as err:
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT, f"Invalid JSON payload received. {err}"
        ) from None
    op = state.create(parent, call.query.get("queuedResourceId", ""), qr, flex=flex)
    return operation_json(state, op)


def _list(state: TpuState, call: RestCall) -> dict[str, Any]:
    parent = _parent(call)
    size = call.query.get("pageSize", "0")
    if not size.isdigit():
        raise _invalid("page_size", f"{size!r} is not a number.")
    page, token = state.list_resources(parent, int(size), call.query.get("pageToken", ""))
    with state.core.lock:
        found = [queued_resource_json(state.resources[qr.name]) for qr in page]
    return {"queuedResources": found, **({"nextPageToken": token} if token else {})}


def _get(state: TpuState, call: RestCall) -> dict[str, Any]:
    name = _named(call, "queuedResources", "qr")
    state.get(name)  # ticks, and raises NOT_FOUND as the gRPC method does
    with state.core.lock:
        return queued_resource_json(state.resources[name])


def _delete(state: TpuState, call: RestCall) -> dict[str, Any]:
    name = _named(call, "queuedResources", "qr")
    op = state.delete(name, force=call.query.get("force", "").lower() == "true")
    return operation_json(state, op)


def _node(state: TpuState, call: RestCall) -> dict[str, Any]:
    name = _named(call, "nodes", "node")
    node: dict[str, Any] = json_format.MessageToDict(state.get_node(name))
    if node.get("apiVersion") == "V2":  # made through v2: v2alpha1's enum has no name for it
        node["apiVersion"] = "API_VERSION_UNSPECIFIED"
    return node


def _operation(state: TpuState, call: RestCall) -> dict[str, Any]:
    name = _named(call, "operations", "op")
    with state.core.lock:
        state.core.tick()
        op = state.core.operations.get(name)
        if op is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Operation {name} does not exist.")
        return operation_json(state, op)


def flex_routes(state: TpuState) -> list[RestRoute]:
    """The ``v2alpha1`` routes: queued resources (create, get, list, delete), their nodes (get) and
    operations (get)."""
    resources = f"{_PREFIX}/queuedResources"
    routes = [
        ("POST", resources, "queuedResources.create", _create),
        ("GET", resources, "queuedResources.list", _list),
        ("GET", f"{resources}/{{qr}}", "queuedResources.get", _get),
        ("DELETE", f"{resources}/{{qr}}", "queuedResources.delete", _delete),
        ("GET", f"{_PREFIX}/nodes/{{node}}", "nodes.get", _node),
        ("GET", f"{_PREFIX}/operations/{{op}}", "operations.get", _operation),
    ]
    return [
        RestRoute(verb, path, _METHOD + method, _bound(state, handler), errors=status_errors)
        for verb, path, method, handler in routes
    ]


def _bound(state: TpuState, handler: Any) -> Any:
    return lambda call: handler(state, call)
