"""The ``v2alpha1`` wrapper of flex-start slices: ``v2`` messages in and out, v2alpha1's field
names and flex-start fields on the wire, Google API errors as ``google.api_core`` exceptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.api_core import exceptions

from airflow_provider_dws.hooks.tpu_flex import FlexTpuClient, alpha_body, queued_resource_of


def test_a_multislice_request_travels_as_multi_node_params_with_its_run() -> None:
    from google.cloud.tpu_v2 import QueuedResource

    request = QueuedResource.from_json(
        '{"tpu": {"nodeSpec": [{"parent": "projects/p/locations/z", "node": {"acceleratorType": "v6e-8"},'
        ' "multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "s"}}]},'
        ' "queueingPolicy": {"validUntilDuration": "3600s"}}'
    )
    body = alpha_body(request, {"maxRunDuration": "7200s"})
    spec = body["tpu"]["nodeSpec"][0]
    assert spec["multiNodeParams"] == {"nodeCount": 2, "nodeIdPrefix": "s"} and "multisliceParams" not in spec
    assert (body["provisioningModel"], body["runDuration"]) == ("FLEX_START", {"maxRunDuration": "7200s"})

    answer = {**body, "name": "projects/p/locations/z/queuedResources/q", "state": {"state": "ACTIVE"}}
    back = queued_resource_of(answer)  # the flex-start fields dropped, the names of v2
    assert back.tpu.node_spec[0].multislice_params.node_count == 2
    assert (
        back.state.state.name == "ACTIVE"
        and back.queueing_policy.valid_until_duration.total_seconds() == 3600
    )


class _Refusing:
    """A discovery request whose ``execute`` answers with an HTTP error (``name``: its body's status)."""

    def __init__(self, status: int, name: str = "") -> None:
        self.status, self.name = status, name

    def execute(self, **_: Any) -> Any:
        from googleapiclient.errors import HttpError
        from httplib2 import Response

        body = {
            "error": {"code": self.status, "message": "no", **({"status": self.name} if self.name else {})}
        }
        raise HttpError(Response({"status": self.status}), json.dumps(body).encode())


class _Api:
    def __init__(self, status: int, name: str = "") -> None:
        self.status, self.name = status, name

    def projects(self) -> Any:
        return self

    def locations(self) -> Any:
        return self

    def queuedResources(self) -> Any:  # the discovery client's name
        return self

    def get(self, **_: Any) -> _Refusing:
        return _Refusing(self.status, self.name)


@pytest.mark.parametrize(
    ("status", "name", "error"),
    [
        (404, "NOT_FOUND", exceptions.NotFound),
        # Both 409: only the status says which, and the backend adopts on one, not the other.
        (409, "ALREADY_EXISTS", exceptions.AlreadyExists),
        (409, "ABORTED", exceptions.Aborted),
        # A 400: only the status tells it from a bad request (a delete while DELETING).
        (400, "FAILED_PRECONDITION", exceptions.FailedPrecondition),
        (400, "INVALID_ARGUMENT", exceptions.InvalidArgument),
        (429, "", exceptions.TooManyRequests),
        (503, "", exceptions.ServiceUnavailable),
    ],
)
def test_http_errors_become_the_api_core_exceptions_of_the_grpc_client(
    status: int, name: str, error: type
) -> None:
    with pytest.raises(error):
        FlexTpuClient(_Api(status, name)).get_queued_resource(name="projects/p/locations/z/queuedResources/q")
