"""Vertex AI's long-running operations: named under their resource
(``projects/P/locations/L/endpoints/E/operations/ID``), with a ``*OperationMetadata`` whose
``generic_metadata`` carries create and update times ([aiplatform.v1beta1]
``GenericOperationMetadata``: update_time is the finish time once the operation is done).

They live in the core's operation store, so ``google.longrunning.Operations`` serves them; the
client's future polls GetOperation until ``done``.
"""

from __future__ import annotations

from typing import Any

from google.longrunning import operations_pb2
from google.rpc import status_pb2

from ..core.api import Core
from ..core.clock import timestamp


def start(
    core: Core, resource: str, metadata: Any, now: float, stage: int | None = None
) -> operations_pb2.Operation:
    """Store a new, not yet done operation under ``resource``; returns a copy for the reply.

    ``metadata`` is the request's ``*OperationMetadata`` protobuf class; ``stage``, its
    ``deployment_stage`` for those that have one.
    """
    meta = metadata()
    meta.generic_metadata.create_time.CopyFrom(timestamp(now))
    meta.generic_metadata.update_time.CopyFrom(timestamp(now))
    if stage is not None:
        meta.deployment_stage = stage
    op = operations_pb2.Operation(name=f"{resource}/operations/{core.new_operation_id()}", done=False)
    op.metadata.Pack(meta)
    core.operations[op.name] = op
    return copy(op)


def copy(op: operations_pb2.Operation) -> operations_pb2.Operation:
    """A copy of ``op`` to hand to a client."""
    out = operations_pb2.Operation()
    out.CopyFrom(op)
    return out


def update(core: Core, name: str, metadata: Any, now: float, stage: int | None = None) -> None:
    """Touch a stored operation's update time (and deployment stage); a deleted one is left alone."""
    op = core.operations.get(name)
    if op is None:
        return
    meta = metadata()
    op.metadata.Unpack(meta)
    meta.generic_metadata.update_time.CopyFrom(timestamp(now))
    if stage is not None:
        meta.deployment_stage = stage
    op.metadata.Pack(meta)


def finish(
    core: Core,
    name: str,
    metadata: Any,
    now: float,
    *,
    response: Any = None,
    error: tuple[int, str] | None = None,
    stage: int | None = None,
) -> None:
    """Mark a stored operation done with ``response`` (a message) or ``error`` (code, message)."""
    op = core.operations.get(name)
    if op is None or op.done:
        return
    update(core, name, metadata, now, stage)
    if error is not None:
        op.error.CopyFrom(status_pb2.Status(code=error[0], message=error[1]))
    elif response is not None:
        op.response.Pack(response)
    op.done = True
