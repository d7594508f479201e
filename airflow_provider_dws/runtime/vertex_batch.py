"""Vertex AI batch prediction jobs on flex-start in the attempt loop: build the job; the rest is
:class:`~.vertex_ai.VertexJobAdapter`'s."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.console import CONSOLE
from airflow_provider_dws.links import VertexAIBatchPredictionLink
from airflow_provider_dws.runtime.vertex_ai import VertexJobAdapter
from airflow_provider_dws.specs.vertex_inference import (
    VERTEX_BATCH_KIND,
    machine_spec,
    parse_batch_job_name,
    spec_shape,
)
from airflow_provider_dws.specs.vertex_pools import duration, jsonable

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.vertex_batch import VertexBatchPredictionBackend
    from airflow_provider_dws.operators.vertex_inference import CreateVertexAIFlexStartBatchPredictionOperator
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement


def batch_console_url(project_id: str, region: str, job_id: str) -> str:
    """The console page of one batch prediction job."""
    return f"{CONSOLE}/vertex-ai/locations/{region}/batch-predictions/{job_id}?project={project_id}"


class VertexBatchPredictionAdapter(VertexJobAdapter["VertexBatchPredictionBackend"]):
    """A flex-start ``BatchPredictionJob`` per attempt; the wait ends when the job ends. The API has
    no max wait for it: the trigger cancels one still queued at the provider's max wait."""

    label = "flex-start batch prediction"
    noun = "batch prediction job"
    link = VertexAIBatchPredictionLink
    wait_grace = timedelta(0)
    op: CreateVertexAIFlexStartBatchPredictionOperator
    parse_name = staticmethod(parse_batch_job_name)
    console_url = staticmethod(batch_console_url)

    def backend(self, location: str | None = None) -> VertexBatchPredictionBackend:
        """The backend of ``location`` (default: the operator's region)."""
        from airflow_provider_dws.backends.vertex_batch import VertexBatchPredictionBackend

        return self.cached_backend(VertexBatchPredictionBackend, location or self.op.region)

    def message_of(self, spec: dict[str, Any]) -> Any:
        """The ``BatchPredictionJob`` of a JSON spec."""
        from airflow_provider_dws.backends.vertex_batch import batch_from_spec

        return batch_from_spec(spec)

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The ``BatchPredictionJob`` to submit, as JSON: the model, inputs and outputs, the machines
        with ``flex_start`` and its max runtime, and the identity labels. A failover ``placement``
        may name another machine type (of the same region)."""
        op = self.op
        machine = (placement.machine_type if placement else None) or op.machine_type
        resources: dict[str, Any] = {
            "machine_spec": machine_spec(machine),
            "starting_replica_count": op.replica_count,
            "max_replica_count": op.max_replica_count or op.replica_count,
            "flex_start": {"max_runtime_duration": duration(op.max_run)},
        }
        job: dict[str, Any] = {
            "display_name": op.display_name or identity.display_name(),
            "model": op.model,
            "input_config": self._input(),
            "output_config": self._output(),
            "dedicated_resources": resources,
            "labels": {**(op.labels or {}), **identity.labels()},
        }
        if op.model_parameters is not None:
            job["model_parameters"] = jsonable(op.model_parameters)
        if op.service_account:
            job["service_account"] = op.service_account
        return job

    def _input(self) -> dict[str, Any]:
        op = self.op
        if op.bigquery_source:
            return {
                "instances_format": op.instances_format,
                "bigquery_source": {"input_uri": op.bigquery_source},
            }
        uris = [op.gcs_source] if isinstance(op.gcs_source, str) else list(op.gcs_source or ())
        return {"instances_format": op.instances_format, "gcs_source": {"uris": uris}}

    def _output(self) -> dict[str, Any]:
        op = self.op
        where: dict[str, Any]
        if op.bigquery_destination_prefix:
            where = {"bigquery_destination": {"output_uri": op.bigquery_destination_prefix}}
        else:
            where = {"gcs_destination": {"output_uri_prefix": op.gcs_destination_prefix}}
        return {"predictions_format": op.predictions_format, **where}

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The ``BatchPredictionJob`` as a dict; a partial success says how many predictions failed."""
        job = super().result(context, status)
        if status.state == "JOB_STATE_PARTIALLY_SUCCEEDED":
            stats = (job or {}).get("completion_stats") or {}
            self.log.warning(
                "%s partially succeeded: %s predictions failed, %s succeeded (see its error and %s)",
                status.name,
                stats.get("failed_count", "some"),
                stats.get("successful_count", "the other"),
                ((job or {}).get("output_info") or {}).get("gcs_output_directory") or "its output",
            )
        return job

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The job's GPUs over the replicas it starts with, its machine type, its console page."""
        resources = {
            "machine_spec": machine_spec(placement.machine_type or self.op.machine_type),
            "starting_replica_count": self.op.replica_count,
        }
        total, accelerator, machine = spec_shape(resources, "starting_replica_count")
        _, page = self.console_page(status.name, placement)
        return {
            "api": VERTEX_BATCH_KIND,
            "kind": "Vertex AI batch prediction job",
            "accelerator_type": accelerator or None,
            "accelerator_count": total,
            "machine_type": machine or None,
            "pricing_model": "flex_start",
            "console_url": page,
        }
