"""The one place a class or function is named by a ``"module:Name"`` string, and the one function that
loads it.

A string route is for laziness only: an operator module is imported at every parse of a DAG file
and must not import what runs when the task runs (an adapter, a client), nor a check's long
explanation that only a wrong value needs; a trigger is rebuilt in the triggerer from a backend's
``kind``. Anywhere else a plain import (at module level, or in the function that needs it) says the
same and tools can follow it. Each entry below is named by what it is, and the modules that use an
entry refer to it by that name; ``tests/unit/test_layers.py`` counts each use as an import of the
module the entry names, so the layers hold for these too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_dws.backends.base import AsyncRequestBackend

# -- adapters: an operator's ``ADAPTER``, built when its task runs -----------------------------------

VERTEX_FLEX_START_ADAPTER = "airflow_provider_dws.runtime.vertex_ai:VertexFlexStartAdapter"
VERTEX_RESERVED_ADAPTER = "airflow_provider_dws.runtime.vertex_ai_reserved:VertexReservedAdapter"
VERTEX_BATCH_PREDICTION_ADAPTER = "airflow_provider_dws.runtime.vertex_batch:VertexBatchPredictionAdapter"
VERTEX_DEPLOYMENT_ADAPTER = "airflow_provider_dws.runtime.vertex_endpoint:VertexDeploymentAdapter"
TPU_ADAPTER = "airflow_provider_dws.runtime.tpu:TPUQueuedResourceBlockAdapter"
BATCH_FLEX_START_ADAPTER = "airflow_provider_dws.runtime.batch:BatchFlexStartAdapter"
BATCH_RESERVED_ADAPTER = "airflow_provider_dws.runtime.batch_reserved:BatchReservedAdapter"
COMPUTE_FLEX_START_ADAPTER = "airflow_provider_dws.runtime.compute:ComputeFlexStartAdapter"
COMPUTE_RESERVED_ADAPTER = "airflow_provider_dws.runtime.compute_reserved:ComputeReservedAdapter"
COMPUTE_INSTANCES_ADAPTER = "airflow_provider_dws.runtime.compute_instances:ComputeInstancesAdapter"
CALENDAR_RESERVE_ADAPTER = "airflow_provider_dws.runtime.calendar:CalendarReserveAdapter"
CALENDAR_WAIT_ADAPTER = "airflow_provider_dws.runtime.calendar:CalendarWaitAdapter"
GKE_PROVISIONING_REQUEST_ADAPTER = "airflow_provider_dws.runtime.gke:GKEProvisioningRequestAdapter"
KUEUE_JOB_ADAPTER = "airflow_provider_dws.runtime.gke_kueue:KueueJobAdapter"
FLEX_START_JOB_ADAPTER = "airflow_provider_dws.runtime.gke_flex:FlexStartJobAdapter"
FLEX_START_JOB_HANDOVER_ADAPTER = "airflow_provider_dws.runtime.gke_flex:FlexStartJobHandOverAdapter"

# -- explanations: a ``Check``'s ``explain``, imported only when its quick rule refuses --------------

CHECK_LABELS = "airflow_provider_dws.specs.labels:check_labels"
CHECK_WORKER_POOL_SPECS = "airflow_provider_dws.specs.vertex_pools:check_worker_pool_specs"
CHECK_CUSTOM_JOB = "airflow_provider_dws.specs.vertex_pools:check_custom_job"
CHECK_BATCH_LABELS = "airflow_provider_dws.specs.batch_job:check_batch_labels"
CHECK_BATCH_JOB = "airflow_provider_dws.specs.batch_job:check_job"
CHECK_POD_TEMPLATE = "airflow_provider_dws.specs.pod_template:check_pod_template"
CHECK_KUEUE_JOB = "airflow_provider_dws.specs.kueue_job:check_job"
CHECK_KUEUE_ENV_VARS = "airflow_provider_dws.specs.kueue_job:check_env_vars"

# -- backends: a trigger's ``kind``, rebuilt in the triggerer from its serialized spec ------------

#: kind -> its backend class.
BACKENDS: dict[str, str] = {
    "vertex_custom_job": "airflow_provider_dws.backends.vertex_ai:VertexCustomJobBackend",
    "vertex_batch_prediction": "airflow_provider_dws.backends.vertex_batch:VertexBatchPredictionBackend",
    "vertex_endpoint_deployment": "airflow_provider_dws.backends.vertex_endpoint:VertexDeploymentBackend",
    "tpu_queued_resource": "airflow_provider_dws.backends.tpu:TpuQueuedResourceBackend",
    "tpu_flex_start": "airflow_provider_dws.backends.tpu_flex:TpuFlexStartBackend",
    "batch_job": "airflow_provider_dws.backends.batch:BatchJobBackend",
    "compute_resize_request": "airflow_provider_dws.backends.compute:ComputeResizeRequestBackend",
    "compute_instance_set": "airflow_provider_dws.backends.compute_instances:ComputeInstanceSetBackend",
    "compute_future_reservation": "airflow_provider_dws.backends.calendar:FutureReservationBackend",
    "gke_provisioning_request": "airflow_provider_dws.backends.kubernetes:ProvisioningRequestBackend",
    "gke_kueue_job": "airflow_provider_dws.backends.kueue:KueueJobBackend",
    "gke_flex_start_job": "airflow_provider_dws.backends.gke_flex:FlexStartJobBackend",
}


def load(entry: str) -> Any:
    """The class or function an entry (``"module:Name"``) names, importing its module."""
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def backend_from_spec(kind: str, spec: dict[str, Any]) -> AsyncRequestBackend:
    """Rebuild a backend from its ``kind`` and :meth:`AsyncRequestBackend.spec`."""
    try:
        entry = BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown DWS backend kind {kind!r}; known: {sorted(BACKENDS)}") from None
    backend: AsyncRequestBackend = load(entry)(**spec)
    return backend
