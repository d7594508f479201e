"""``dws-emulator``: a local emulator of Vertex AI custom jobs, batch prediction jobs and model
deployments, Cloud TPU queued resources, Cloud Batch jobs and Compute Engine flex-start VMs (MIG
resize requests).

It serves the real gRPC protocols on one loopback port, so the unmodified google client
libraries, sync and async, talk to it over an insecure channel, and the REST APIs (Compute
Engine) on the next port, ``http://HOST:PORT+1`` (:mod:`.core.rest`):

* ``google.cloud.aiplatform.v1.JobService``: the CustomJob methods;
* ``google.cloud.aiplatform.v1beta1.JobService``: the BatchPredictionJob methods, and
  ``google.cloud.aiplatform.v1beta1.EndpointService``: ``CreateEndpoint``, ``GetEndpoint``,
  ``ListEndpoints``, ``DeleteEndpoint``, ``DeployModel``, ``UndeployModel`` (long-running operations
  named under their resource, ``projects/P/locations/L/endpoints/E/operations/ID``), with
  flex-start deployments undeployed at their max runtime (life cycle in :mod:`.vertex_inference`);
* ``google.cloud.tpu.v2.Tpu``: ``CreateQueuedResource`` / ``DeleteQueuedResource`` (long-running
  operations named ``projects/P/locations/ZONE/operations/operation-ID``),
  ``GetQueuedResource``, ``ListQueuedResources``, ``GetNode``, ``ListNodes``; every other Tpu
  method answers UNIMPLEMENTED;
* ``google.cloud.batch.v1.BatchService``: ``CreateJob``, ``GetJob``, ``ListJobs``, ``CancelJob`` /
  ``DeleteJob`` (long-running operations ``projects/P/locations/REGION/operations/operation-ID``),
  ``ListTasks``, ``GetTask`` (life cycle in :mod:`.batch.state`);
* ``google.longrunning.Operations`` for the operations of all of them (``CancelOperation`` withdraws
  a model deployment still waiting for capacity; the other operations finish on their own);
* Compute Engine REST (``/compute/v1/projects/P/...``, :mod:`.compute`): instance templates,
  zonal and regional instance group managers and their ``resizeRequests``, the VMs, and zone,
  region and global operations; its methods are named by Discovery id
  (``compute.instanceGroupManagerResizeRequests.insert``) under the service ``compute.v1``;
* Compute Engine calendar mode (:mod:`.calendar`, same REST service): future reservations,
  ``advice/calendarMode`` and the reservations they deliver, procured on the emulator's clock from
  a calendar of free capacity; Vertex AI jobs, TPU queued resources, Batch jobs and MIG VMs
  consume a delivered reservation and end with it;
* a JSON control service (``dws.emulator.v1.Control``: ``ListRequests``, ``GetCapacity``,
  ``SetCapacity``, ``Preempt``, ``SetFaults``, ``GetFaults``, ``ClearFaults``, ``Outage``,
  ``GetStats``, ``ResetStats``, and calendar mode's ``ApproveFutureReservation``,
  ``DeclineFutureReservation``, ``PartlyFulfilFutureReservation``, ``EndFutureReservation``,
  ``GetCalendar``, ``SetCalendar``, and Vertex AI inference's ``GetVertexDeployments``,
  ``ExpireVertexDeployment``) that lets tests and users inspect every request ever created,
  resize pools while it runs, preempt Spot TPUs, inject faults and count the calls received.

GPUs and TPUs share one capacity model (:mod:`.core.capacity`): pools keyed ``LOCATION/ACCELERATOR``
with a strict FIFO queue each. GPU pools are a region and a Vertex accelerator type, shared by
Vertex AI, Cloud Batch and Compute Engine VMs (a Batch job's ``nvidia-l4`` x N per VM, or a VM in
``us-central1-a``, draws on ``REGION/NVIDIA_L4``;
the name table is :data:`.facts.VERTEX_NAME`); TPU pools
are a zone and a TPU family counted in **chips** (``v5litepod-16`` and ``v6e-16`` need 16 chips;
``v2``/``v3``/``v4``/``v5p-N`` need N/2; a multislice of k nodes needs k times that, at once;
see :mod:`.tpu`).

Default inventory (:data:`DEFAULT_CAPACITY`, used when ``serve`` gets no ``--capacity``):

* ``us-central1``: ``NVIDIA_H100_80GB=16``, ``NVIDIA_A100_80GB=16``, ``NVIDIA_TESLA_A100=16``,
  ``NVIDIA_L4=16``
* ``us-east4``: ``NVIDIA_H100_80GB=8``
* TPU pools, in chips: ``us-west4-a/v5litepod=64``, ``us-central1-a/v5litepod=32``,
  ``us-east5-a/v5p=64``, ``us-east1-d/v6e=64``

Reservations: a pool spelled ``ZONE/FAMILY@RESERVATION=N`` (``--capacity
us-west4-a/v5litepod@my-res=32``) is a separate pool, used only by queued resources whose
``reservation_name`` is ``projects/P/locations/ZONE/reservations/RESERVATION``; naming a
reservation without such a pool is INVALID_ARGUMENT.

Queued resources go CREATING -> ACCEPTED -> (WAITING_FOR_RESOURCES) -> PROVISIONING (0.5 s) ->
ACTIVE with READY nodes; ``queueing_policy`` valid-until times fail them (RESOURCE_EXHAUSTED in
``failed_data.error``), valid-after times hold them back (life cycle in :mod:`.tpu.state`).

Preemption: ``EmulatorControl.preempt(name)`` or ``dws-emulator preempt --port P NAME`` preempts
an ACTIVE **Spot** queued resource: SUSPENDING, then SUSPENDED, its nodes PREEMPTED and its chips
released (anything else is FAILED_PRECONDITION).

Fault injection (:mod:`.core.faults`): ``serve --faults SPEC ...`` at start, ``dws-emulator faults
--port P SPEC ...`` (or ``EmulatorControl.set_faults``) at run time. A rule is
``METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL]``:

* ``METHOD``: ``*`` (every JobService, EndpointService, Tpu, BatchService, Operations and Compute REST
  method), ``SERVICE/*``
  (``google.cloud.tpu.v2.Tpu/*``), a full name (``google.cloud.aiplatform.v1.JobService/GetCustomJob``)
  or a short one (``GetCustomJob``, ``GetJob``). The control service is never faulted.
* ``EFFECT``: ``UNAVAILABLE``, ``INTERNAL``, ``RESOURCE_EXHAUSTED``, ``DEADLINE_EXCEEDED``,
  ``latency:SECONDS``, or a code and a latency joined by a comma (``UNAVAILABLE,latency:2``).
  ``DEADLINE_EXCEEDED`` is answered *after* the request was applied (the job IS created): the
  unknown outcome a client must resolve by looking the request up before retrying.
* ``@RATE``: probability 0..1 that the rule fires on a matching call (default 1);
  ``xCOUNT``: it fires at most COUNT times; ``+FROM`` / ``..UNTIL``: it is active only from
  FROM until UNTIL seconds after it was set.

Examples: ``GetCustomJob=UNAVAILABLE@0.2``, ``'*=RESOURCE_EXHAUSTED@0.05'``,
``CreateCustomJob=DEADLINE_EXCEEDED@1x1`` (once), ``'*=latency:0.3'``,
``'*=UNAVAILABLE@0.5+10..40'`` (quote ``*`` in a shell). Rules are checked in order: the
latencies of the rules that fire add up and the first error that fires is the answer. Decisions
come from a ``random.Random`` seeded with ``--seed`` (``SetFaults`` may reseed it), so the same
seed and call sequence inject the same faults. ``GetFaults`` (``dws-emulator faults --port P
[--json]``) shows the rules with how often each fired, counts of injected faults per method and
code (delays as ``LATENCY``), the latest 10,000 injections with times, and the outages.
``dws-emulator faults --port P --clear`` removes the rules (the record stays).

Outage: ``dws-emulator outage --port P SECONDS`` (``EmulatorControl.outage``) returns at once,
then stops the gRPC server and the REST listener, so clients see "connection refused"
(UNAVAILABLE), and after SECONDS serves the same state on the same ports again; the control
service is down during it as well.

Call counters (:mod:`.core.stats`): every call to JobService (v1 and v1beta1), EndpointService, Tpu,
BatchService, Operations and a Compute REST route is counted by full
method name when it arrives, before fault injection (so faulted calls count) and even for
methods the emulator does not implement; control calls are not counted.
``EmulatorControl.stats()`` / ``dws-emulator stats --port P [--json]`` return ``{"calls":
{METHOD: n}, "total", "since", "until"}``; ``reset_stats()`` / ``--reset`` also zero them.

Python API::

    from dws_emulator import EmulatorServer, EmulatorControl

    with EmulatorServer({"us-central1/NVIDIA_H100_80GB": 8, "us-west4-a/v5litepod": 16}) as server:
        control = EmulatorControl(server.address)
        control.set_capacity({"us-central1/NVIDIA_H100_80GB": 16})
        control.preempt("projects/p/locations/us-west4-a/queuedResources/my-qr")
        control.set_faults(["GetCustomJob=UNAVAILABLE@0.2", "*=latency:0.1"])
        control.faults()["injected"]  # {"google.cloud.aiplatform.v1.JobService/GetCustomJob": {...}}
        control.clear_faults()
        control.stats()["calls"]  # {"google.cloud.aiplatform.v1.JobService/GetCustomJob": 3, ...}
        control.reset_stats()
        control.outage(30)

Layout: one package per API over one shared core that imports none of them.

* :mod:`.core`: capacity model, clock and tick agenda, long-running operations, fault injection,
  call counters, control service, gRPC plumbing and the server (:class:`~.core.server.ServerCore`);
  an API plugs in as a :class:`~.core.api.Api` subclass (tick hooks, capacity holders it owns,
  gRPC handlers, control contributions).
* :mod:`.vertex` (CustomJobs), :mod:`.tpu` (queued resources and nodes), :mod:`.batch` (jobs
  and tasks): each its ``validation``, ``state`` and ``service``; :mod:`.vertex_inference`
  (v1beta1 BatchPredictionJobs, Endpoints and deployments): ``validation``, ``batch``,
  ``endpoints``, ``deployments``, ``records``, ``lro``, ``state`` and ``service``; :mod:`.compute` (MIGs and
  resize requests, REST): ``validation``, ``state``, ``vms``, ``resources`` and ``routes``.
* the bootstrap: :mod:`.defaults` (default inventory, service names), :mod:`.state`
  (:class:`~.state.EmulatorState`, the core with every API), :mod:`.server`
  (:class:`~.server.EmulatorServer`), :mod:`.control` (client), :mod:`.process`, :mod:`.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .control import EmulatorControl
from .defaults import DEFAULT_CAPACITY

if TYPE_CHECKING:
    from .server import EmulatorServer

__all__ = ["DEFAULT_CAPACITY", "EmulatorControl", "EmulatorServer"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the server pulls in the aiplatform types, which the control client and the
    # CLI's client subcommands do not need.
    if name == "EmulatorServer":
        from .server import EmulatorServer

        return EmulatorServer
    raise AttributeError(name)
