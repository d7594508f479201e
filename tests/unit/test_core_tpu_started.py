"""D6: a TPU slice found ACTIVE is timed from when its nodes were created, not from when the
provider happened to see it (a re-run task finding a slice ACTIVE for hours reported those hours
as waiting)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

from google.cloud.tpu_v2 import Node, QueuedResource, QueuedResourceState

from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend

PARENT = "projects/p/locations/us-west4-a"
NAME = f"{PARENT}/queuedResources/dws-t-0123456789abcdef"
CREATED = datetime(2026, 1, 1, 8, 0, tzinfo=timezone.utc)
ACTIVE_SINCE = CREATED + timedelta(minutes=20)  # capacity came after 20 minutes


def active_qr() -> QueuedResource:
    spec = QueuedResource.Tpu.NodeSpec(
        parent=PARENT, node_id="dws-t-0123456789abcdef", node=Node(accelerator_type="v5litepod-4")
    )
    return QueuedResource(
        name=NAME,
        create_time=CREATED,
        tpu=QueuedResource.Tpu(node_spec=[spec]),
        state=QueuedResourceState(state=QueuedResourceState.State.ACTIVE),
    )


class Client:
    """The two calls the backend makes, as the sync and the async client answer them."""

    def __init__(self) -> None:
        self.timeouts: list[Any] = []

    def get_queued_resource(self, name: str, timeout: Any = None) -> QueuedResource:
        self.timeouts.append(timeout)
        return active_qr()

    def get_node(self, name: str, timeout: Any = None) -> Node:
        self.timeouts.append(timeout)
        return Node(name=name, create_time=ACTIVE_SINCE, state=Node.State.READY)


class AsyncClient(Client):
    async def get_queued_resource(self, name: str, timeout: Any = None) -> QueuedResource:  # type: ignore[override]
        return super().get_queued_resource(name, timeout)

    async def get_node(self, name: str, timeout: Any = None) -> Node:  # type: ignore[override]
        return super().get_node(name, timeout)


def test_reattaching_to_an_active_slice_counts_the_wait_until_it_became_active() -> None:
    backend = TpuQueuedResourceBackend("p", "us-west4-a")
    client = Client()
    backend._client = lambda: client  # type: ignore[method-assign]
    status = backend.get_status(NAME)
    assert status is not None and status.state == "ACTIVE"
    assert status.timings.started == ACTIVE_SINCE
    assert status.timings.wait_seconds == 20 * 60
    assert client.timeouts == [60.0, 60.0]  # every call has its deadline


def test_a_trigger_that_first_sees_it_active_reports_the_same_wait() -> None:
    backend = TpuQueuedResourceBackend("p", "us-west4-a")
    client = AsyncClient()

    async def get_tpu_client() -> AsyncClient:
        return client

    backend.async_hook.get_tpu_client = get_tpu_client  # type: ignore[method-assign]

    async def scenario() -> Any:
        seen = await backend.aget_status(NAME)  # timed when seen: hours later, say
        return seen, await backend.aended(seen)

    seen, ended = asyncio.run(scenario())
    assert seen.timings.started is not None and seen.timings.started > ACTIVE_SINCE
    assert ended.timings.started == ACTIVE_SINCE
    assert ended.timings.wait_seconds == 20 * 60
