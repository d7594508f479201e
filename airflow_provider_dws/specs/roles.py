"""What a task is to another task of its DAG, named once, so one finds the other without importing
its operator.

A release, a reserve reading its Find task, a wait following its reserve: each looks a task of its
DAG up by id, must know what kind of task it found, and reads what that task pushed (the XCom keys
below). The code that does it runs when the task
runs (``runtime``), below the operators, so it cannot ask ``isinstance(task, SomeOperator)``. Each
operator class says what it is in its ``ROLE`` (a subclass inherits it, as ``isinstance`` would
answer), and :func:`task_in_role` asks.
"""

from __future__ import annotations

from typing import Any

#: ``CreateTPUQueuedResourceOperator``: a TPU slice's queued resource.
TPU_QUEUED_RESOURCE = "tpu_queued_resource"
#: The XCom key under which it pushes the name of the queued resource it waits on.
QUEUED_RESOURCE_NAME_KEY = "queued_resource_name"
#: ``CreateComputeFlexStartVMsOperator``: flex-start VMs through a MIG resize request.
COMPUTE_FLEX_START_VMS = "compute_flex_start_vms"
#: The XCom key under which it pushes the name of the resize request it waits on.
RESIZE_REQUEST_NAME_KEY = "resize_request_name"
#: ``CreateComputeFlexStartInstancesOperator``: a set of standalone flex-start VMs (no MIG).
COMPUTE_INSTANCE_SET = "compute_instance_set"
#: The XCom key under which it pushes the name of the set of VMs it waits on.
INSTANCE_SET_NAME_KEY = "instance_set_name"
#: ``CreateGKEProvisioningRequestOperator``: GKE nodes through a ProvisioningRequest.
GKE_PROVISIONING_REQUEST = "gke_provisioning_request"
#: ``CreateGKEFlexStartJobOperator``: a Job on flex-start nodes (its release deletes it).
GKE_FLEX_START_JOB = "gke_flex_start_job"
#: ``DeployVertexAIFlexStartModelOperator``: a model deployed on flex-start (its teardown undeploys).
VERTEX_DEPLOYMENT = "vertex_deployment"
#: The XCom key under which the Job operators push the name of the Job they wait on.
JOB_NAME_KEY = "job_name"
#: ``FindCalendarBlockOperator``: the advice's choice of a calendar block.
CALENDAR_FIND = "calendar_find"
#: ``ReserveCalendarBlockOperator``: a calendar block booked.
CALENDAR_RESERVE = "calendar_reserve"
#: The XCom key under which it pushes the name of its block (its future reservation).
FUTURE_RESERVATION_NAME_KEY = "future_reservation_name"
#: ``WaitForCalendarBlockOperator``: the wait for a block's delivery.
CALENDAR_WAIT = "calendar_wait"


def is_in_role(task: Any, role: str) -> bool:
    """Whether ``task`` is a task of the ``role`` (its operator's ``ROLE``)."""
    return getattr(task, "ROLE", None) == role


def task_in_role(op: Any, task_id: str | None, role: str) -> Any | None:
    """The task ``task_id`` of ``op``'s DAG if it is a ``role`` (``None``: no DAG, no such task, or a
    task of another kind)."""
    dag = getattr(op, "dag", None) if op.has_dag() else None
    if dag is None or not task_id or not dag.has_task(task_id):
        return None
    task = dag.get_task(task_id)
    return task if is_in_role(task, role) else None
