"""Score a batch of inputs with a Vertex AI model on GPUs obtained through DWS flex-start (Preview)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import registry
from airflow_provider_dws.links import VertexAIBatchPredictionLink
from airflow_provider_dws.operators.base import DwsQueuedRequestOperator
from airflow_provider_dws.operators.checks import Check, duration, matches
from airflow_provider_dws.operators.inference_checks import (
    INFERENCE_CHECKS,
    MODEL_PATTERN,
    InferenceOperatorChecks,
    check_replicas,
)
from airflow_provider_dws.specs.vertex_inference import (
    INSTANCES_FORMATS,
    MAX_RUNTIME_LIMIT,
    PREDICTIONS_FORMATS,
)

if TYPE_CHECKING:
    pass

__all__ = ["CreateVertexAIFlexStartBatchPredictionOperator"]

_GCS_URI = r"gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/\S*)?"
#: ``bq://project.dataset.table`` (a source) or ``bq://project[.dataset]`` (a destination).
_BQ_TABLE = r"bq://[a-z][a-z0-9-]{4,28}[a-z0-9]\.[A-Za-z0-9_]{1,1024}\.[^\s.]{1,1024}"
_BQ_DESTINATION = r"bq://[a-z][a-z0-9-]{4,28}[a-z0-9](\.[A-Za-z0-9_]{1,1024})?"


def _uris_ok(value: Any) -> bool:
    uris = [value] if isinstance(value, str) else value
    return (
        isinstance(uris, (list, tuple))
        and 0 < len(uris) <= 100
        and all(isinstance(u, str) and matches(_GCS_URI)(u) for u in uris)
    )


class CreateVertexAIFlexStartBatchPredictionOperator(InferenceOperatorChecks, DwsQueuedRequestOperator):
    """Run a Vertex AI batch prediction job on flex-start GPUs, waiting in the triggerer.

    The job (``aiplatform.v1beta1``, Preview) asks for ``replica_count`` machines of
    ``machine_type`` with ``dedicated_resources.flex_start``: Dynamic Workload Scheduler starts it
    when the whole set is free, it runs at most ``max_run`` (``flexStart.maxRuntimeDuration``, 7
    days at most), and it is billed only while it runs. The API has no max wait for it: the
    provider keeps ``max_wait`` and cancels a job still queued then, failing the task with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError`. Off-peak windows,
    deadlines, capacity retries and failover to another machine type of the same region are the
    scheduling core's. A retried or re-run task finds its job by identity labels instead of
    submitting a second one; a job that already succeeded is taken as the result.

    Returns the ``BatchPredictionJob`` as a dict (``output_info`` says where the predictions are);
    pushes ``wait_seconds``, ``run_seconds`` and ``dws_request`` like every DWS operator. A job that
    ran and failed raises :class:`~airflow_provider_dws.exceptions.WorkloadFailedError`.

    :param region: the Vertex AI region of the job (and of the model).
    :param model: the model, ``projects/P/locations/R/models/M[@version]`` (templated).
    :param machine_type: an accelerator-optimized machine type; its GPUs come with it (templated).
    :param replica_count: machines the job starts with, all obtained at once (default 1).
    :param max_replica_count: machines it may scale to (default: ``replica_count``).
    :param gcs_source: ``gs://`` URI (wildcards allowed) or a list of them; or
    :param bigquery_source: ``bq://project.dataset.table`` (then the formats are ``bigquery``).
    :param instances_format: the inputs' format (default ``jsonl``; ``bigquery`` for a table).
    :param gcs_destination_prefix: ``gs://`` prefix for the predictions; or
    :param bigquery_destination_prefix: ``bq://project[.dataset]``.
    :param predictions_format: the predictions' format (default ``jsonl``; ``bigquery`` for a table).
    :param max_run: how long the job may run once started (default and maximum 7 days).
    :param display_name: the job's display name (default ``<dag_id>.<task_id>``).
    :param model_parameters: the model's prediction parameters (templated, JSON).
    :param service_account: the service account the job runs as.

    The parameters every queued request takes (``project_id``, ``max_wait``, ``labels``,
    ``gcp_conn_id``, ``impersonation_chain``, ``poll_interval``, ``deferrable``, ``cancel_on_kill``,
    ``window``, ``deadline``, ``capacity_retry``, ``failover``) are
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`'s.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "region",
        "model",
        "machine_type",
        "display_name",
        "gcs_source",
        "bigquery_source",
        "gcs_destination_prefix",
        "bigquery_destination_prefix",
        "model_parameters",
        "labels",
        "service_account",
        "impersonation_chain",
    )
    template_fields_renderers = {"model_parameters": "json", "labels": "json"}
    ADAPTER = registry.VERTEX_BATCH_PREDICTION_ADAPTER
    operator_extra_links = (VertexAIBatchPredictionLink(),)
    ui_color = "#c5e1f5"
    REQUEST_NOUN = "batch prediction job"
    CHECKS: tuple[Check, ...] = (
        *INFERENCE_CHECKS,
        Check(
            "model",
            matches(MODEL_PATTERN),
            "must be a model's resource name 'projects/<project>/locations/<region>/models/<id>' (or "
            "'publishers/<publisher>/models/<id>')",
            templated=True,
        ),
        Check(
            "gcs_source",
            _uris_ok,
            "must be a 'gs://' URI or a list of 1 to 100 of them",
            templated=True,
            optional=True,
        ),
        Check(
            "bigquery_source",
            matches(_BQ_TABLE),
            "must be a table 'bq://project.dataset.table'",
            templated=True,
            optional=True,
        ),
        Check(
            "gcs_destination_prefix",
            matches(_GCS_URI),
            "must be a 'gs://' URI",
            templated=True,
            optional=True,
        ),
        Check(
            "bigquery_destination_prefix",
            matches(_BQ_DESTINATION),
            "must be 'bq://project' or 'bq://project.dataset'",
            templated=True,
            optional=True,
        ),
        Check(
            "instances_format", INSTANCES_FORMATS.__contains__, f"must be one of {sorted(INSTANCES_FORMATS)}"
        ),
        Check(
            "predictions_format",
            PREDICTIONS_FORMATS.__contains__,
            f"must be one of {sorted(PREDICTIONS_FORMATS)}",
        ),
    )

    def __init__(
        self,
        *,
        region: str,
        model: str,
        machine_type: str,
        replica_count: int = 1,
        max_replica_count: int | None = None,
        gcs_source: str | Sequence[str] | None = None,
        bigquery_source: str | None = None,
        instances_format: str | None = None,
        gcs_destination_prefix: str | None = None,
        bigquery_destination_prefix: str | None = None,
        predictions_format: str | None = None,
        max_run: timedelta | int | float = MAX_RUNTIME_LIMIT,
        display_name: str | None = None,
        model_parameters: Mapping[str, Any] | None = None,
        service_account: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.region = region
        self.model = model
        self.machine_type = machine_type
        self.replica_count = replica_count
        self.max_replica_count = max_replica_count
        self.gcs_source = gcs_source
        self.bigquery_source = bigquery_source
        self.instances_format = instances_format or ("bigquery" if bigquery_source else "jsonl")
        self.gcs_destination_prefix = gcs_destination_prefix
        self.bigquery_destination_prefix = bigquery_destination_prefix
        self.predictions_format = predictions_format or (
            "bigquery" if bigquery_destination_prefix else "jsonl"
        )
        self.max_run = duration(self, "max_run", max_run, MAX_RUNTIME_LIMIT)
        self.display_name = display_name
        self.model_parameters = model_parameters
        self.service_account = service_account
        self._check_choices()
        self.check_parameters(rendered=False)
        self.check_policies()

    def _check_choices(self) -> None:
        """One source and one destination, each with its format; replicas in order."""
        if (self.gcs_source is None) == (self.bigquery_source is None):
            raise self._param_error("pass exactly one of gcs_source and bigquery_source")
        if (self.gcs_destination_prefix is None) == (self.bigquery_destination_prefix is None):
            raise self._param_error(
                "pass exactly one of gcs_destination_prefix and bigquery_destination_prefix"
            )
        if (self.bigquery_source is not None) != (self.instances_format == "bigquery"):
            raise self._param_error(
                f"instances_format 'bigquery' goes with bigquery_source (and only with it), got {self.instances_format!r}"
            )
        if (self.bigquery_destination_prefix is not None) != (self.predictions_format == "bigquery"):
            raise self._param_error(
                "predictions_format 'bigquery' goes with bigquery_destination_prefix (and only with it), "
                f"got {self.predictions_format!r}"
            )
        check_replicas(self)
