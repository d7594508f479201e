"""Compute Engine flex-start VMs on the shared core, served on the REST front (JSON over HTTP).

``google-cloud-compute`` speaks only REST, so this API has no gRPC service: its routes
(:mod:`.routes`) mount under ``/compute/v1/projects/{project}/...`` on the REST front
(:mod:`..core.rest`, the gRPC port + 1). Resources and their JSON are the client library's own
types (``compute_v1`` messages through ``json_format``: camelCase, int64 as strings, enums as
strings, ``kind``, ``id``, ``selfLink``, ``creationTimestamp``, ``Operation`` resources).

* instance templates (global, and regional ``regionInstanceTemplates``): insert, get;
* zonal and regional instance group managers (MIGs): insert (target size 0), get, list (pages),
  delete (its VMs too), ``listManagedInstances``, ``deleteInstances``;
* zonal and regional ``resizeRequests``: insert (``requestId`` replay: the same operation, no
  second request; a duplicate name is 409), get, list (pages, ``name``/``state`` filters),
  cancel, delete;
* zone, region and global operations: get, wait (blocks until DONE, at most
  :data:`~.resources.MAX_WAIT_SECONDS`);
* the VMs: ``instances.get`` (a MIG's or a standalone one), and standalone VMs (flex-start VMs
  without a MIG, :mod:`.instances`): ``instances.insert`` (``requestId`` replay), ``list`` (pages,
  ``name``/``status``/``labels.KEY`` filters; a MIG's VMs too), ``delete``;
* capacity advice, ``regions.advice.capacity`` (:mod:`.advice`): obtainability per zone and
  machine type from the pools, zone factors settable by the control API (``SetCapacityAdvice``).

Life cycle of a resize request (:mod:`.state`): CREATING, then on the next tick ACCEPTED, when it
joins its pool's FIFO queue for all ``resizeBy`` VMs' GPUs at once; when they are free it is
SUCCEEDED with that many RUNNING VMs (the MIG's ``targetSize`` grows). At the end of
``requestedRunDuration`` (10 minutes to 7 days; absent: 7 days, the flex-start VM limit) its
VMs are deleted, capacity freed, and it stays SUCCEEDED. Cancel only in CREATING/ACCEPTED,
delete only in SUCCEEDED/FAILED/CANCELLED (412 ``conditionNotMet`` otherwise); deleting a request
does not delete its VMs. The MIG's template must be flex-start ready (``provisioningModel``
FLEX_START, ``onHostMaintenance`` TERMINATE, ``automaticRestart`` false) or the request FAILS.
Operations are RUNNING when returned and DONE on the next tick (the change they describe is
applied at once, except a resize request's CREATING -> ACCEPTED).

GPU pools: a VM draws its GPUs from its **region's** pool (``us-central1/NVIDIA_H100_80GB`` for a
VM in ``us-central1-a``), the pools Vertex AI and Cloud Batch use, so all three compete for the
same GPUs in one FIFO. The accelerator comes from the machine type
(:data:`~dws_emulator.facts.MACHINE_GPUS`, ``a3-highgpu-8g`` = 8 x H100) or else from
the template's ``guestAccelerators`` (Compute names, :data:`~dws_emulator.facts.VERTEX_NAME`).
A regional MIG's VMs get the zones of its ``distributionPolicy`` (default ``REGION-a/b/c``) in
turn, all in the first one with ``targetShape`` ANY_SINGLE_ZONE. A template without GPUs needs
no pool; a GPU with no pool in the region FAILS the request.

This module stays light (names only): the fault rules and counters use :data:`METHODS`.
"""

#: The REST service the methods below are registered and counted under (``compute.v1/METHOD``).
COMPUTE_SERVICE = "compute.v1"
#: Every emulated method, by its Discovery id (fault rules may use these short names).
METHODS = (
    "compute.instanceTemplates.insert",
    "compute.instanceTemplates.get",
    "compute.regionInstanceTemplates.insert",
    "compute.regionInstanceTemplates.get",
    "compute.instanceGroupManagers.insert",
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.list",
    "compute.instanceGroupManagers.delete",
    "compute.instanceGroupManagers.listManagedInstances",
    "compute.instanceGroupManagers.deleteInstances",
    "compute.regionInstanceGroupManagers.insert",
    "compute.regionInstanceGroupManagers.get",
    "compute.regionInstanceGroupManagers.list",
    "compute.regionInstanceGroupManagers.delete",
    "compute.regionInstanceGroupManagers.listManagedInstances",
    "compute.regionInstanceGroupManagers.deleteInstances",
    "compute.instanceGroupManagerResizeRequests.insert",
    "compute.instanceGroupManagerResizeRequests.get",
    "compute.instanceGroupManagerResizeRequests.list",
    "compute.instanceGroupManagerResizeRequests.cancel",
    "compute.instanceGroupManagerResizeRequests.delete",
    "compute.regionInstanceGroupManagerResizeRequests.insert",
    "compute.regionInstanceGroupManagerResizeRequests.get",
    "compute.regionInstanceGroupManagerResizeRequests.list",
    "compute.regionInstanceGroupManagerResizeRequests.cancel",
    "compute.regionInstanceGroupManagerResizeRequests.delete",
    "compute.zoneOperations.get",
    "compute.zoneOperations.wait",
    "compute.regionOperations.get",
    "compute.regionOperations.wait",
    "compute.globalOperations.get",
    "compute.globalOperations.wait",
    "compute.instances.get",
    "compute.instances.insert",
    "compute.instances.list",
    "compute.instances.delete",
    "compute.advice.capacity",
)
