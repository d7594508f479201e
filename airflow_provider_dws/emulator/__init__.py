"""``dws-emulator``: a local emulator of Vertex AI's JobService with a GPU capacity model.

It serves the real gRPC protocols (``google.cloud.aiplatform.v1.JobService`` CustomJob methods
and ``google.longrunning.Operations``) on one loopback port, so the unmodified google client
libraries, sync and async, talk to it over an insecure channel. A JSON control service on the
same port (``dws.emulator.v1.Control``: ``ListRequests``, ``GetCapacity``, ``SetCapacity``) lets
tests and users inspect every request ever created and resize pools while it runs.

Default inventory (:data:`DEFAULT_CAPACITY`, used when ``serve`` gets no ``--capacity``):

* ``us-central1``: ``NVIDIA_H100_80GB=16``, ``NVIDIA_A100_80GB=16``, ``NVIDIA_TESLA_A100=16``,
  ``NVIDIA_L4=16``
* ``us-east4``: ``NVIDIA_H100_80GB=8``
* TPU pools, in chips (reserved for TPU queued resources): ``us-west4-a/v5litepod=64``,
  ``us-central1-a/v5litepod=32``, ``us-east5-a/v5p=64``, ``us-east1-d/v6e=64``

Python API::

    from airflow_provider_dws.emulator import EmulatorServer, EmulatorControl

    with EmulatorServer({"us-central1/NVIDIA_H100_80GB": 8}, seed=0) as server:
        control = EmulatorControl(server.address)
        control.set_capacity({"us-central1/NVIDIA_H100_80GB": 16})

Modules: :mod:`.capacity` (pools and FIFO queue), :mod:`.state` (job life cycle),
:mod:`.validation`, :mod:`.filters` (AIP-160 list filters), :mod:`.server` (gRPC),
:mod:`.control` (control client), :mod:`.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .control import EmulatorControl

if TYPE_CHECKING:
    from .server import EmulatorServer

DEFAULT_CAPACITY: dict[str, int] = {
    "us-central1/NVIDIA_H100_80GB": 16,
    "us-central1/NVIDIA_A100_80GB": 16,
    "us-central1/NVIDIA_TESLA_A100": 16,
    "us-central1/NVIDIA_L4": 16,
    "us-east4/NVIDIA_H100_80GB": 8,
    "us-west4-a/v5litepod": 64,
    "us-central1-a/v5litepod": 32,
    "us-east5-a/v5p": 64,
    "us-east1-d/v6e": 64,
}

__all__ = ["DEFAULT_CAPACITY", "EmulatorControl", "EmulatorServer"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the server pulls in the aiplatform types, which the control client and the
    # CLI's client subcommands do not need.
    if name == "EmulatorServer":
        from .server import EmulatorServer

        return EmulatorServer
    raise AttributeError(name)
