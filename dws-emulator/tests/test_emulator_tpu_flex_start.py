"""Cloud TPU flex-start queued resources (``v2alpha1``, Preview) on the emulator's REST front,
through google-api-python-client's own ``tpu.v2alpha1`` client: the run duration, the suspension
with the TPU VMs deleted at its end, and what the front refuses. Every exchange is also held
against the ``tpu.v2alpha1`` discovery document (the conformance fixture)."""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator
googleapiclient = pytest.importorskip("googleapiclient")

V6E = "us-east5-a/v6e"
_projects = itertools.count()


def client(emulator: Any) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient.discovery import build

    return build(
        "tpu",
        "v2alpha1",
        credentials=AnonymousCredentials(),
        static_discovery=True,
        cache_discovery=False,
        client_options={"api_endpoint": emulator.server.rest_url},
    )


def parent(zone: str = "us-east5-a") -> str:
    return f"projects/flex-{next(_projects)}-{time.monotonic_ns()}/locations/{zone}"


def body(where: str, accelerator: str = "v6e-8", **fields: Any) -> dict[str, Any]:
    node = {"acceleratorType": accelerator, "runtimeVersion": "v2-alpha-tpuv6e"}
    return {
        "tpu": {"nodeSpec": [{"parent": where, "nodeId": "flex-node", "node": node}]},
        "provisioningModel": "FLEX_START",
        "runDuration": {"maxRunDuration": "3600s"},
        **fields,
    }


def create(api: Any, where: str, qr_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = (
        api.projects()
        .locations()
        .queuedResources()
        .create(parent=where, queuedResourceId=qr_id, body=payload)
        .execute()
    )
    return op


def get(api: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.projects().locations().queuedResources().get(name=name).execute()
    return found


def test_a_flex_start_run_ends_suspended_with_its_vms_deleted(dws_emulator_server_factory: Any) -> None:
    clock = FakeClock()
    emu = dws_emulator_server_factory({V6E: 8}, clock=clock)
    api = client(emu)
    where = parent()
    op = create(api, where, "flex", body(where))
    assert op["metadata"]["verb"] == "create" and not op["done"]
    name = f"{where}/queuedResources/flex"
    clock.advance(1)  # accepted, provisioned (0.5 s), ACTIVE
    for _ in range(3):
        qr = get(api, name)
        clock.advance(1)
    assert qr["state"]["state"] == "ACTIVE"
    assert qr["provisioningModel"] == "FLEX_START" and qr["runDuration"] == {"maxRunDuration": "3600s"}
    done = api.projects().locations().operations().get(name=op["name"]).execute()
    assert done["done"] and done["response"]["name"] == name
    assert done["response"]["@type"].endswith("v2alpha1.QueuedResource")
    [record] = emu.control.requests()
    assert (
        record["nodes"] and record["provisioning_model"] == "FLEX_START" and record["max_run_seconds"] == 3600
    )
    assert emu.control.capacity()[V6E]["in_use"] == 8

    clock.advance(3600)  # the run's end
    # SUSPENDING, then SUSPENDED on the next tick (the emulator's own ticker may make it first).
    assert get(api, name)["state"]["state"] in ("SUSPENDING", "SUSPENDED")
    assert get(api, name)["state"]["state"] == "SUSPENDED"
    [record] = emu.control.requests()
    assert record["nodes"] == [] and [h["state"] for h in record["history"]][-2:] == [
        "SUSPENDING",
        "SUSPENDED",
    ]
    assert emu.control.capacity()[V6E]["in_use"] == 0
    listed = api.projects().locations().queuedResources().list(parent=where).execute()
    assert [q["name"] for q in listed["queuedResources"]] == [name]
    # No node is left, so no force is needed to delete it.
    api.projects().locations().queuedResources().delete(name=name).execute()
    assert emu.control.requests()[0]["state"] == "DELETING"


def test_a_termination_time_that_passes_while_waiting_fails_the_request(
    dws_emulator_server_factory: Any,
) -> None:
    clock = FakeClock()
    emu = dws_emulator_server_factory({V6E: 0}, clock=clock)
    api = client(emu)
    where = parent()
    ends = datetime.fromtimestamp(clock(), timezone.utc) + timedelta(hours=1)
    run = {"terminationTime": ends.isoformat().replace("+00:00", "Z")}
    create(api, where, "until", body(where, runDuration=run))
    name = f"{where}/queuedResources/until"
    clock.advance(1)
    assert get(api, name)["state"]["state"] == "WAITING_FOR_RESOURCES"
    clock.advance(3600)
    qr = get(api, name)
    assert qr["state"]["state"] == "FAILED"
    assert "termination time" in qr["state"]["failedData"]["error"]["message"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"provisioningModel": "STANDARD"}, "a run duration needs provisioningModel FLEX_START"),
        ({"runDuration": None}, "FLEX_START needs maxRunDuration or terminationTime"),
        ({"runDuration": {"maxRunDuration": f"{8 * 24 * 3600}s"}}, "at most 7 days"),
        ({"runDuration": {"maxRunDuration": "1h"}}, "is not a duration"),
        ({"spot": {}}, "FLEX_START takes no tier and no reservation"),
        ({"provisioningModel": "CHEAPEST"}, "is not one of"),
    ],
)
def test_what_the_front_refuses(dws_emulator_server_factory: Any, change: dict[str, Any], says: str) -> None:
    from googleapiclient.errors import HttpError

    emu = dws_emulator_server_factory({V6E: 8})
    api = client(emu)
    where = parent()
    payload = {k: v for k, v in {**body(where), **change}.items() if v is not None}
    with pytest.raises(HttpError) as refused:
        create(api, where, "bad", payload)
    assert refused.value.status_code == 400 and says in str(refused.value)


def test_flex_start_is_offered_on_v5e_and_v6e_only(dws_emulator_server_factory: Any) -> None:
    from googleapiclient.errors import HttpError

    emu = dws_emulator_server_factory({"us-east5-a/v5p": 8})
    api = client(emu)
    where = parent()
    with pytest.raises(HttpError, match="flex-start is offered for v5litepod, v6e only, not v5p"):
        create(api, where, "v5p", body(where, accelerator="v5p-8"))


def test_every_method_served_is_checked_against_the_discovery_document(
    dws_emulator_server_factory: Any, dws_discovery_conformance: Any
) -> None:
    """The conformance fixture sees this surface's calls (an older document is not held against)."""
    from dws_emulator.testing.discovery import available

    if not available("tpu.v2alpha1"):
        pytest.skip("google-api-python-client ships an older tpu.v2alpha1 document")
    emu = dws_emulator_server_factory({V6E: 8})
    api = client(emu)
    where = parent()
    op = create(api, where, "seen", body(where))
    name = f"{where}/queuedResources/seen"
    get(api, name)
    api.projects().locations().queuedResources().list(parent=where).execute()
    api.projects().locations().operations().get(name=op["name"]).execute()
    api.projects().locations().queuedResources().delete(name=name, force=True).execute()
    methods = ("create", "get", "list", "delete")
    assert {
        f"tpu.projects.locations.queuedResources.{m}" for m in methods
    } <= dws_discovery_conformance.checked
    assert "tpu.projects.locations.operations.get" in dws_discovery_conformance.checked


def test_a_multi_node_request_speaks_v2alpha1s_field_names(dws_emulator_server_factory: Any) -> None:
    """``multiNodeParams`` (v2alpha1's name of v2's ``multisliceParams``) in and out."""
    emu = dws_emulator_server_factory({V6E: 16})
    api = client(emu)
    where = parent()
    payload = body(where)
    spec = payload["tpu"]["nodeSpec"][0]
    del spec["nodeId"]
    spec["multiNodeParams"] = {"nodeCount": 2, "nodeIdPrefix": "slice"}
    create(api, where, "two", payload)
    qr = get(api, f"{where}/queuedResources/two")
    assert qr["tpu"]["nodeSpec"][0]["multiNodeParams"] == {"nodeCount": 2, "nodeIdPrefix": "slice"}
    assert emu.control.requests()[0]["node_count"] == 2


def test_errors_carry_the_status_a_client_tells_them_apart_by(dws_emulator_server_factory: Any) -> None:
    """ALREADY_EXISTS is a 409 and FAILED_PRECONDITION a 400, each named in the body's ``status``
    (google.rpc's mapping for resource-oriented APIs, not Compute's 412)."""
    import json

    from googleapiclient.errors import HttpError

    emu = dws_emulator_server_factory({V6E: 8})
    api = client(emu)
    where = parent()
    create(api, where, "twice", body(where))
    with pytest.raises(HttpError) as again:
        create(api, where, "twice", body(where))
    assert again.value.status_code == 409
    assert json.loads(again.value.content)["error"]["status"] == "ALREADY_EXISTS"
    name = f"{where}/queuedResources/twice"
    api.projects().locations().queuedResources().delete(name=name, force=True).execute()
    if emu.control.requests()[0]["state"] == "DELETING":  # gone on the next tick otherwise
        with pytest.raises(HttpError) as refused:
            api.projects().locations().queuedResources().delete(name=name, force=True).execute()
        assert refused.value.status_code in (400, 404)
