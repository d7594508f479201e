"""The discovery-document check every emulator test runs under (``dws_discovery_conformance``):
what it refuses, and that every REST route the emulator serves is a method of Google's documents
with the same verb and path."""

from __future__ import annotations

from typing import Any

import pytest

from dws_emulator.core.rest import Exchange
from dws_emulator.state import EmulatorState
from dws_emulator.testing import discovery

pytestmark = pytest.mark.skipif(
    not discovery.available(),
    reason="no compute.v1 discovery document as new as the emulator's (WRITTEN_AGAINST)",
)

RR = "compute.instanceGroupManagerResizeRequests"
PATH = "/compute/v1/projects/p/zones/us-central1-a/instanceGroupManagers/m/resizeRequests"


def rr(**fields: Any) -> dict[str, Any]:
    return {
        "kind": "compute#instanceGroupManagerResizeRequest",
        "name": "rr",
        "id": "123",
        "state": "ACCEPTED",
        "resizeBy": 2,
        **fields,
    }


def problems(
    method: str, request: Any, response: Any, *, http: str = "GET", path: str = f"{PATH}/rr"
) -> list[str]:
    return discovery.Conformance.problems_of(
        Exchange("compute.v1", method, http, path, request, 200, response)
    )


def test_a_conforming_answer_has_no_problem() -> None:
    assert problems(f"{RR}.get", None, rr(requestedRunDuration={"seconds": "3600"})) == []


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        (rr(colour="red"), "InstanceGroupManagerResizeRequest.colour: not a field"),
        (rr(resizeBy="2"), "resizeBy: an integer expected"),
        (rr(id=123), "id: a string expected"),
        (rr(id="12a"), "id: a uint64 (digits in a string) expected"),
        (rr(state="WAITING"), "state: 'WAITING' is not one of"),
        (
            rr(kind="compute#instanceGroupManagerResizeRequestList"),
            ".kind: 'compute#instanceGroupManagerResizeRequestList'",
        ),
        ({k: v for k, v in rr().items() if k != "kind"}, ".kind: None, the document says"),
        (rr(status={"error": {"errors": [{"code": 7}]}}), "status.error.errors[0].code: a string expected"),
    ],
)
def test_what_an_answer_may_not_be(answer: dict[str, Any], found: str) -> None:
    [problem] = problems(f"{RR}.get", None, answer)
    assert found in problem


def test_a_request_must_carry_what_its_method_requires_and_no_output_field() -> None:
    sent = problems(f"{RR}.insert", {"resizeBy": 1, "state": "ACCEPTED"}, None, http="POST", path=PATH)
    assert any("state: output only, sent in a request" in p for p in sent)
    assert any(
        ".name: required by compute.instanceGroupManagerResizeRequests.insert, missing" in p for p in sent
    )


def test_a_route_must_be_its_methods_verb_and_path() -> None:
    [wrong_verb] = problems(f"{RR}.get", None, rr(), http="POST")
    assert "the document has GET" in wrong_verb
    [unknown] = problems("compute.instanceGroupManagerResizeRequests.teleport", None, {})
    assert "not a method of compute.v1" in unknown


def test_an_enum_value_the_document_gives_elsewhere_is_taken() -> None:
    """Reservation.status lists no INACTIVE; FutureReservation.reservationName documents it."""
    reservation = {"kind": "compute#reservation", "name": "r", "status": "INACTIVE"}
    path = "/compute/v1/projects/p/zones/us-central1-a/reservations/r"
    assert problems("compute.reservations.get", None, reservation, path=path) == []
    assert problems("compute.reservations.get", None, {**reservation, "status": "GONE"}, path=path)


def test_every_rest_route_is_a_method_of_its_document_with_the_same_verb_and_path() -> None:
    state = EmulatorState()
    checked = 0
    for api in state.apis.values():
        doc_name = api.rest_service
        routes = api.rest_routes()
        if not routes or doc_name == "kubernetes":
            continue
        doc = discovery.discovery(doc_name)
        for route in routes:
            method = doc.methods.get(route.name)
            assert method is not None, f"{route.name} is not a method of {doc_name}"
            assert method.http_method == route.method, route.name
            assert discovery.same_path(method.path, route.path), (
                f"{route.name}: {route.path} vs {method.path}"
            )
            checked += 1
    assert checked >= 40  # every Compute Engine route (templates, MIGs, resize requests, calendar...)


def test_the_observer_collects_what_it_checks_and_skips_what_it_cannot() -> None:
    conformance = discovery.Conformance()
    conformance(Exchange("compute.v1", f"{RR}.get", "GET", f"{PATH}/rr", None, 200, rr(colour="red")))
    conformance(Exchange("kubernetes", "discovery.version", "GET", "/version", None, 200, {"x": 1}))
    assert conformance.checked == {f"{RR}.get"} and len(conformance.problems) == 1
    refused = Exchange("compute.v1", f"{RR}.insert", "POST", PATH, {"colour": "red"}, 400, {"error": {}})
    conformance(refused)  # a request the emulator refused is the test's own business
    assert len(conformance.problems) == 1
