"""What a flex-start resize request needs around it: the instance template, the managed instance group
(MIG) and the VMs, through the same hook, deadline and retry policy as the requests themselves.

* :func:`flex_start_template`: an ``InstanceTemplate`` built for flex-start VMs (FLEX_START
  provisioning model, TERMINATE on host maintenance, no automatic restart, deleted at the end of
  the run duration), :func:`reservation_bound_template` one for VMs on a calendar block's
  reservation; :func:`ensure_template` and :func:`ensure_group` create them, or adopt those of
  the same name (a retried task finds its own).
* :func:`managed_instances`, :func:`instance_summary`: the VMs of a MIG and what a workload needs
  of each (name, zone, internal IP, machine type, GPUs).
* :func:`delete_instances`: ``deleteInstances`` on the MIG for exactly the given VMs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.errors import RequestAlreadyExistsError, RequestNotFoundError

if TYPE_CHECKING:
    from google.cloud.compute_v1 import InstanceTemplate

    from airflow_provider_dws.backends.compute import ComputeResizeRequestBackend

log = logging.getLogger(__name__)

#: The boot image when the spec names none (a public image family).
DEFAULT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
DEFAULT_NETWORK = "global/networks/default"


@dataclass(frozen=True)
class VmSpec:
    """The VMs of a MIG the operator creates: machine type, GPUs, boot disk, network, identity."""

    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    image: str = DEFAULT_IMAGE
    boot_disk_size_gb: int | None = None
    boot_disk_type: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    labels: Mapping[str, str] | None = None
    metadata: Mapping[str, str] | None = None

    def gpus(self) -> tuple[str, int] | None:
        """The GPUs of one VM: a GPU machine's own, else ``accelerator_count`` x ``accelerator_type``."""
        own = catalog.batch_machine_gpus(self.machine_type)
        if own is not None:
            return own
        return (self.accelerator_type, self.accelerator_count or 1) if self.accelerator_type else None


def flex_start_template(name: str, spec: VmSpec) -> InstanceTemplate:
    """The instance template of flex-start VMs: FLEX_START, TERMINATE on host maintenance, no automatic
    restart, DELETE at the end of the run duration; the machine's GPUs attached when the machine type
    does not come with them."""
    from google.cloud import compute_v1

    scheduling = compute_v1.Scheduling(
        provisioning_model="FLEX_START",
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
        instance_termination_action="DELETE",
    )
    return _template(name, spec, scheduling, "flex-start VMs of airflow-provider-dws")


def reservation_bound_template(name: str, spec: VmSpec, reservation: str) -> InstanceTemplate:
    """The instance template of VMs bound to one reservation (a calendar block's): RESERVATION_BOUND,
    TERMINATE on host maintenance, and a specific reservation affinity to ``reservation`` (its name,
    or ``projects/P/reservations/R`` for another project's); they live as long as the reservation."""
    from google.cloud import compute_v1

    from airflow_provider_dws.facts import RESERVATION_AFFINITY_KEY

    scheduling = compute_v1.Scheduling(
        provisioning_model="RESERVATION_BOUND", on_host_maintenance="TERMINATE"
    )
    template = _template(name, spec, scheduling, f"VMs of airflow-provider-dws on reservation {reservation}")
    template.properties.reservation_affinity = compute_v1.ReservationAffinity(
        consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_AFFINITY_KEY, values=[reservation]
    )
    return template


def _template(name: str, spec: VmSpec, scheduling: Any, description: str) -> InstanceTemplate:
    from google.cloud import compute_v1

    properties = vm_properties(spec, scheduling)
    return compute_v1.InstanceTemplate(name=name, description=description, properties=properties)


def vm_properties(spec: VmSpec, scheduling: Any, zone: str | None = None) -> Any:
    """The ``InstanceProperties`` of ``spec``'s VMs: boot disk, network, GPUs when the machine type
    does not come with them, service account, metadata, labels. With ``zone`` the machine, disk and
    GPU types are zonal URLs, as a VM (not a template) names them."""
    from google.cloud import compute_v1

    def zonal(kind: str, value: str) -> str:
        return value if zone is None or "/" in value else f"zones/{zone}/{kind}/{value}"

    boot = compute_v1.AttachedDiskInitializeParams(source_image=spec.image)
    if spec.boot_disk_size_gb:
        boot.disk_size_gb = spec.boot_disk_size_gb
    if spec.boot_disk_type:
        boot.disk_type = zonal("diskTypes", spec.boot_disk_type)
    interface = compute_v1.NetworkInterface(network=spec.network or DEFAULT_NETWORK)
    if spec.subnetwork:
        interface.subnetwork = spec.subnetwork
    properties = compute_v1.InstanceProperties(
        machine_type=zonal("machineTypes", spec.machine_type),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=boot)],
        network_interfaces=[interface],
        scheduling=scheduling,
        labels=dict(spec.labels or {}),
    )
    gpus = spec.gpus()
    if gpus and catalog.batch_machine_gpus(spec.machine_type) is None:
        properties.guest_accelerators = [
            compute_v1.AcceleratorConfig(
                accelerator_type=zonal("acceleratorTypes", gpus[0]), accelerator_count=gpus[1]
            )
        ]
    if spec.service_account:
        properties.service_accounts = [
            compute_v1.ServiceAccount(
                email=spec.service_account, scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
        ]
    if spec.metadata:
        properties.metadata = compute_v1.Metadata(
            items=[compute_v1.Items(key=k, value=v) for k, v in spec.metadata.items()]
        )
    return properties


def _adopt(backend: ComputeResizeRequestBackend, what: str, get: Any, insert: Any) -> Any:
    """``get()``, else ``insert()`` (an operation, waited for) then ``get()``; ALREADY_EXISTS is adoption."""
    try:
        return backend._rpc(f"get {what}", get)
    except RequestNotFoundError:
        pass
    try:
        backend.wait_operation(backend._rpc(f"create {what}", insert), f"create {what}")
        log.info("Created %s", what)
    except RequestAlreadyExistsError:
        log.info("%s was created meanwhile: adopting it", what)
    return backend._rpc(f"get {what}", get)


def ensure_template(backend: ComputeResizeRequestBackend, template: InstanceTemplate) -> str:
    """The URL of ``template`` (global), created unless one of its name exists (then adopted as is)."""
    client = backend.hook.get_instance_templates_client()
    project = backend.project_id
    found = _adopt(
        backend,
        f"instance template {template.name}",
        lambda **kw: client.get(project=project, instance_template=template.name, **kw),
        lambda **kw: client.insert_unary(project=project, instance_template_resource=template, **kw),
    )
    return str(found.self_link or f"projects/{project}/global/instanceTemplates/{template.name}")


def _groups(backend: ComputeResizeRequestBackend) -> Any:
    hook = backend.hook
    return (
        hook.get_region_instance_group_managers_client()
        if backend.regional
        else hook.get_instance_group_managers_client()
    )


def ensure_group(backend: ComputeResizeRequestBackend, name: str, template_url: str) -> Any:
    """The MIG ``name`` here, created at target size 0 on ``template_url`` unless it exists (adopted)."""
    from google.cloud import compute_v1

    group = compute_v1.InstanceGroupManager(
        name=name,
        base_instance_name=name[:50].rstrip("-"),
        instance_template=template_url,
        target_size=0,
        description="flex-start VMs of airflow-provider-dws; grown by resize requests",
        instance_lifecycle_policy=compute_v1.InstanceGroupManagerInstanceLifecyclePolicy(
            default_action_on_failure="DO_NOTHING"
        ),
    )
    client, project, scope = _groups(backend), backend.project_id, backend.scope
    return _adopt(
        backend,
        f"managed instance group {backend.mig_path(name)}",
        lambda **kw: client.get(project=project, instance_group_manager=name, **scope, **kw),
        lambda **kw: client.insert_unary(
            project=project, instance_group_manager_resource=group, **scope, **kw
        ),
    )


def get_group(backend: ComputeResizeRequestBackend, name: str) -> Any | None:
    """The MIG ``name`` here, ``None`` when it does not exist."""
    client = _groups(backend)
    try:
        return backend._rpc(
            f"get {backend.mig_path(name)}",
            client.get,
            project=backend.project_id,
            instance_group_manager=name,
            **backend.scope,
        )
    except RequestNotFoundError:
        return None


def template_shape(
    backend: ComputeResizeRequestBackend, mig: str
) -> tuple[str | None, tuple[str, int] | None]:
    """The machine type and GPUs per VM (Compute name, count) of ``mig``'s instance template."""
    group = get_group(backend, mig)
    if group is None or not group.instance_template:
        return None, None
    parts = str(group.instance_template).split("/")
    name = parts[-1]
    if "regions" in parts:
        client: Any = backend.hook._compute("RegionInstanceTemplatesClient")
        where = {"region": parts[parts.index("regions") + 1]}
    else:
        client, where = backend.hook.get_instance_templates_client(), {}
    template = backend._rpc(
        f"get instance template {name}",
        client.get,
        project=backend.project_id,
        instance_template=name,
        **where,
    )
    machine = str(template.properties.machine_type).rsplit("/", 1)[-1] or None
    attached = list(template.properties.guest_accelerators)
    if attached:
        gpu = attached[0]
        return machine, (str(gpu.accelerator_type).rsplit("/", 1)[-1], int(gpu.accelerator_count))
    return machine, catalog.batch_machine_gpus(machine) if machine else None


def managed_instances(backend: ComputeResizeRequestBackend, mig: str) -> list[Any]:
    """Every managed instance of ``mig`` (all pages; none when the MIG is gone)."""
    client = _groups(backend)

    def list_all() -> list[Any]:
        pager = client.list_managed_instances(
            project=backend.project_id,
            instance_group_manager=mig,
            timeout=backend.rpc_timeout,
            **backend.scope,
        )
        return list(pager)

    try:
        return backend._call(f"list the instances of {backend.mig_path(mig)}", list_all)
    except RequestNotFoundError:
        return []


def get_instance(backend: ComputeResizeRequestBackend, url: str) -> Any | None:
    """The VM of ``url`` (``.../projects/P/zones/Z/instances/NAME``); ``None`` when gone."""
    parts = url.split("/")
    zone, name = parts[parts.index("zones") + 1], parts[-1]
    client = backend.hook.get_instances_client()
    try:
        return backend._rpc(
            f"get instance {name}", client.get, project=backend.project_id, zone=zone, instance=name
        )
    except RequestNotFoundError:
        return None


def instance_summary(instance: Any) -> dict[str, Any]:
    """What a workload task needs of a VM: name, zone, status, internal (and external) IPs, machine
    type and GPUs (JSON-friendly)."""
    machine = str(instance.machine_type).rsplit("/", 1)[-1]
    accelerators = [
        {"type": str(a.accelerator_type).rsplit("/", 1)[-1], "count": int(a.accelerator_count)}
        for a in instance.guest_accelerators
    ]
    if not accelerators:
        own = catalog.batch_machine_gpus(machine)
        accelerators = [{"type": own[0], "count": own[1]}] if own else []
    interfaces = list(instance.network_interfaces)
    return {
        "name": instance.name,
        "zone": str(instance.zone).rsplit("/", 1)[-1],
        "self_link": instance.self_link,
        "status": instance.status,
        "internal_ip": interfaces[0].network_i_p if interfaces else None,
        "external_ips": [c.nat_i_p for i in interfaces for c in i.access_configs if c.nat_i_p],
        "machine_type": machine,
        "accelerators": accelerators,
        "creation_timestamp": instance.creation_timestamp,
    }


def delete_instances(backend: ComputeResizeRequestBackend, mig: str, urls: Sequence[str]) -> bool:
    """``deleteInstances`` on ``mig`` for exactly ``urls`` (gone ones are skipped); waits for the
    operation. False when there was nothing to delete (no URL, or the MIG is gone)."""
    from google.cloud import compute_v1

    if not urls:
        return False
    client, scope = _groups(backend), backend.scope
    if backend.regional:
        body: dict[str, Any] = {
            "region_instance_group_managers_delete_instances_request_resource": (
                compute_v1.RegionInstanceGroupManagersDeleteInstancesRequest(
                    instances=list(urls), skip_instances_on_validation_error=True
                )
            )
        }
    else:
        body = {
            "instance_group_managers_delete_instances_request_resource": (
                compute_v1.InstanceGroupManagersDeleteInstancesRequest(
                    instances=list(urls), skip_instances_on_validation_error=True
                )
            )
        }
    what = f"delete {len(urls)} VM(s) of {backend.mig_path(mig)}"
    try:
        operation = backend._rpc(
            what,
            client.delete_instances_unary,
            project=backend.project_id,
            instance_group_manager=mig,
            **scope,
            **body,
        )
    except RequestNotFoundError:
        return False
    backend.wait_operation(operation, what)
    return True
