"""The backend contract (sync and async halves), the phase table it derives from, and the
Google boilerplate written once, against fake clients."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import Node, QueuedResource, QueuedResourceState

from airflow_provider_dws import errors
from airflow_provider_dws.backends import vertex_ai
from airflow_provider_dws.backends.base import AsyncRequestBackend, BackendCache, RequestBackend
from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend
from airflow_provider_dws.backends.vertex_ai import VERTEX_JOB_STATES, VertexCustomJobBackend
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Phase

ZONE = "us-west4-a"
PARENT = f"projects/p/locations/{ZONE}"


@pytest.mark.parametrize("cls", [VertexCustomJobBackend, TpuQueuedResourceBackend])
def test_both_backends_implement_both_halves(cls: type) -> None:
    backend = cls("p", "somewhere")
    assert isinstance(backend, RequestBackend) and isinstance(backend, AsyncRequestBackend)
    assert backend.parent == "projects/p/locations/somewhere"
    spec = backend.spec()
    assert cls(**spec).spec() == spec  # rebuilt in the triggerer from its spec


def test_vertex_live_states_come_from_the_phase_table() -> None:
    """D7: PAUSED, UPDATING and UNSPECIFIED are live in the table; a hand-written list left them
    out, and those jobs were read with one GET per interval instead of riding the list."""
    assert set(vertex_ai.LIVE_STATES) == {s for s, p in VERTEX_JOB_STATES.phases.items() if p.live}
    assert {"JOB_STATE_PAUSED", "JOB_STATE_UPDATING", "JOB_STATE_CANCELLING"} <= set(vertex_ai.LIVE_STATES)
    assert "JOB_STATE_SUCCEEDED" not in vertex_ai.LIVE_STATES
    assert VERTEX_JOB_STATES.phase("JOB_STATE_FROM_THE_FUTURE") is Phase.WAITING
    assert 'state="JOB_STATE_PAUSED"' in vertex_ai.LIVE_FILTER


def test_a_task_builds_each_backend_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DWS_EMULATOR_HOST", "127.0.0.1:8470")
    cache = BackendCache()
    a = cache.get(VertexCustomJobBackend, "p", "us-central1", "gc", ["sa@x"])
    assert cache.get(VertexCustomJobBackend, "p", "us-central1", "gc", ["sa@x"]) is a
    assert cache.get(VertexCustomJobBackend, "p", "us-east4", "gc", ["sa@x"]) is not a
    assert a.hook is a.hook  # and its hook (connection lookup, clients) once too
    import copy

    assert copy.deepcopy(cache).get(VertexCustomJobBackend, "p", "us-central1", "gc", ["sa@x"]) is not a


def qr(qr_id: str, key: str, state: Any = QueuedResourceState.State.WAITING_FOR_RESOURCES) -> QueuedResource:
    node = Node(accelerator_type="v5litepod-4", labels={"dws_key": key, "dws_attempt": qr_id[-1]})
    spec = QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id=qr_id, node=node)
    return QueuedResource(
        name=f"{PARENT}/queuedResources/{qr_id}",
        tpu=QueuedResource.Tpu(node_spec=[spec]),
        state=QueuedResourceState(state=state),
    )


class TpuClient:
    def __init__(self, resources: list[QueuedResource], delete_error: Exception | None = None) -> None:
        self.resources = resources
        self.delete_error = delete_error
        self.calls: list[str] = []

    def list_queued_resources(self, request: Any, timeout: Any = None) -> list[QueuedResource]:
        self.calls.append("list")
        return self.resources

    def get_queued_resource(self, name: str, timeout: Any = None) -> QueuedResource:
        self.calls.append("get")
        for r in self.resources:
            if r.name == name:
                return r
        raise gexc.NotFound(name)

    def delete_queued_resource(self, request: Any, timeout: Any = None) -> Any:
        self.calls.append("delete")
        if self.delete_error:
            raise self.delete_error
        raise AssertionError("not scripted")


def tpu_backend(client: TpuClient) -> TpuQueuedResourceBackend:
    backend = TpuQueuedResourceBackend("p", ZONE)
    backend._client = lambda: client  # type: ignore[method-assign]
    return backend


def test_tpu_find_is_one_zone_list_by_identity_or_by_prefix() -> None:
    identity = RequestIdentity("d", "t", "r")
    client = TpuClient([qr("mine-a1", identity.key), qr("mine-a2", identity.key), qr("other-a1", "x" * 32)])
    backend = tpu_backend(client)
    found = backend.find(identity)
    assert [s.name.rsplit("/", 1)[1] for s in found] == ["mine-a1", "mine-a2"]
    assert [s.details["attempt"] for s in found] == [1, 2]
    assert [s.name.rsplit("/", 1)[1] for s in backend.find_by_prefix("mine-")] == ["mine-a1", "mine-a2"]
    assert client.calls == ["list", "list"]


def test_tpu_release_of_a_resource_already_being_deleted_is_success() -> None:
    deleting = qr("q-a1", "k", QueuedResourceState.State.DELETING)
    client = TpuClient([deleting], gexc.FailedPrecondition("QueuedResource q-a1 is already being deleted."))
    assert tpu_backend(client).release(deleting.name) is True
    assert client.calls == ["delete", "get"]


def test_tpu_release_refused_for_another_reason_still_fails() -> None:
    active = qr("q-a1", "k", QueuedResourceState.State.ACTIVE)
    client = TpuClient([active], gexc.FailedPrecondition("it still has node(s)"))
    with pytest.raises(errors.ConflictError, match="still has node"):
        tpu_backend(client).delete(active.name, force=False, wait=False)


def test_tpu_release_of_a_gone_resource_is_false() -> None:
    client = TpuClient([], gexc.NotFound("gone"))
    assert tpu_backend(client).release(f"{PARENT}/queuedResources/q") is False


def test_vertex_release_is_idempotent() -> None:
    class Client:
        def __init__(self, error: Exception | None) -> None:
            self.error = error

        async def cancel_custom_job(self, name: str, timeout: Any = None) -> None:
            assert timeout == 60.0
            if self.error:
                raise self.error

    backend = VertexCustomJobBackend("p", "us-central1")
    current: list[Any] = []

    async def get_client(region: str) -> Any:
        return current[-1]

    backend.async_hook.get_job_service_client = get_client  # type: ignore[method-assign]
    cases = ((None, True), (gexc.FailedPrecondition("ended"), False), (gexc.NotFound("x"), False))
    for error, expected in cases:
        current.append(Client(error))
        assert asyncio.run(backend.arelease("projects/p/locations/us-central1/customJobs/1")) is expected
