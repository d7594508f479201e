"""Validation of v1beta1 CreateBatchPredictionJob, CreateEndpoint and DeployModel requests.

Errors are INVALID_ARGUMENT in Vertex AI's format (``List of found errors: 1.Field: <path>;
Message: <text>``), as :mod:`..vertex` answers for CustomJobs. Each rule names its source:

* [aiplatform.v1beta1]: Google's discovery document (google-api-python-client's
  ``aiplatform.v1beta1.json``, revision 20261106), schemas ``GoogleCloudAiplatformV1beta1``
  ``BatchPredictionJob``, ``BatchDedicatedResources``, ``DedicatedResources``, ``FlexStart``,
  ``DeployedModel``, ``Endpoint``, ``MachineSpec``, ``DeployModelRequest``, ``GcsDestination``,
  ``BigQueryDestination``, ``BigQuerySource``;
* [proto]: the message docs of ``google.cloud.aiplatform_v1beta1.types`` (``endpoint_id`` of
  ``CreateEndpointRequest``; the model name forms of ``BatchPredictionJob.model``);
* [flex-start inference], [gpus], [gke tpus]: as cited in :mod:`...facts`, whose machine tables
  these checks read.

A rule no document settles says "emulator choice".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.aiplatform_v1beta1.types import accelerator_type as gca_accelerator_type

from ..core.capacity import CapacityModel, PoolKey
from ..core.errors import EmulatorError, check_labels
from ..core.state import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from ..core.workload import EXIT_CODE_ENV, RUN_SECONDS_ENV, parse_workload
from ..facts import (
    GPU_SERIES,
    MACHINE_GPUS,
    N1_GPUS,
    VERTEX_BATCH_DEFAULT_MAX_REPLICAS,
    VERTEX_DEFAULT_DEPLOY_MACHINE,
    VERTEX_FLEX_MAX_RUNTIME_SECONDS,
    VERTEX_TPU_MACHINES,
)

AcceleratorType = gca_accelerator_type.AcceleratorType

#: A batch job built from a ``model`` has no container environment: its labels carry the workload.
RUN_SECONDS_LABEL = "dws-emulator-run-seconds"
EXIT_CODE_LABEL = "dws-emulator-exit-code"
REQUIRED = "Required field is not set."
MAX_DISPLAY_NAME = 128  # Endpoint.display_name "can be up to 128 characters long" [aiplatform.v1beta1]

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_VERSION = rf"(?:@{_SEGMENT})?"
# [proto] BatchPredictionJob.model: projects/P/locations/L/models/M[@version], publishers/P/models/M
# or projects/P/locations/L/publishers/P/models/M; DeployedModel.model names the same things.
_REGISTRY_MODEL_RE = re.compile(rf"projects/[^/]+/locations/([^/]+)/models/{_SEGMENT}{_VERSION}")
_PUBLISHER_MODEL_RE = re.compile(
    rf"(?:projects/[^/]+/locations/([^/]+)/)?publishers/{_SEGMENT}/models/{_SEGMENT}{_VERSION}"
)
# GKE's TPU machine types are ct<version>-<kind>-<chips>t [gke tpus]; cloud-tpu is training's.
_TPU_MACHINE_RE = re.compile(r"ct\d[a-z0-9]*-[a-z]+-\d+t|cloud-tpu")
# [proto] CreateEndpointRequest.endpoint_id.
_ENDPOINT_ID_RE = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?|[1-9][0-9]{0,8}")
# [aiplatform.v1beta1] DeployedModel.id: "1-10 characters, and valid characters are /[0-9]/".
_DEPLOYED_MODEL_ID_RE = re.compile(r"[0-9]{1,10}")
_PARENT_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_GCS_RE = re.compile(r"gs://[^/]+(?:/.*)?")
# [aiplatform.v1beta1] BigQueryDestination.output_uri: bq://projectId[.bqDatasetId[.bqTableId]].
BQ_DESTINATION_RE = re.compile(r"bq://([^.]+)(?:\.([^.]+)(?:\.([^.]+))?)?")
_BQ_TABLE_RE = re.compile(r"bq://[^.]+\.[^.]+\.[^.]+")  # BigQuerySource.input_uri


def invalid(field: str, message: str) -> EmulatorError:
    """INVALID_ARGUMENT naming ``field`` the way Vertex AI does."""
    return EmulatorError(
        grpc.StatusCode.INVALID_ARGUMENT, f"List of found errors:\t1.Field: {field}; Message: {message}\t"
    )


@dataclass(frozen=True)
class Resources:
    """What a request takes from the capacity model: ``replicas`` machines of ``per_replica``
    accelerators each (GPUs, or TPU chips) from the pool ``LOCATION/accelerator``, all at once."""

    machine_type: str = ""
    accelerator: str | None = None  # the pool's accelerator name; None: no accelerator, no pool
    per_replica: int = 0
    replicas: int = 1
    max_runtime: float | None = None  # flex_start.max_runtime_duration in seconds; None: no flex-start
    spot: bool = False
    dedicated: bool = True  # False: automatic resources (or none), which the emulator gives no pool

    @property
    def count(self) -> int:
        """Accelerators the whole set needs."""
        return self.replicas * self.per_replica

    @property
    def flex_start(self) -> bool:
        return self.max_runtime is not None

    @property
    def strategy(self) -> str:
        """How the set is obtained, in the words of the control records (v1's Scheduling.Strategy)."""
        if not self.dedicated:
            return "AUTOMATIC"
        return "FLEX_START" if self.flex_start else "SPOT" if self.spot else "STANDARD"


@dataclass(frozen=True)
class BatchPlan:
    """What the emulator needs to schedule and run a validated BatchPredictionJob."""

    resources: Resources
    run_seconds: float
    exit_code: int
    inputs: int  # input sources: Cloud Storage URIs, or 1 BigQuery table


# -- names -----------------------------------------------------------------------------------------


def parse_parent(parent: str) -> tuple[str, str]:
    """``(project, location)`` of ``projects/P/locations/L``, or INVALID_ARGUMENT."""
    match = _PARENT_RE.fullmatch(parent)
    if not match:
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Invalid parent {parent!r}: expected projects/{{project}}/locations/{{location}}.",
        )
    return match.group(1), match.group(2)


def page_size_of(page_size: int) -> int:
    """The page size a list call uses (INVALID_ARGUMENT when negative)."""
    if page_size < 0:
        raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative.")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def check_model_name(name: str, field: str, location: str | None = None) -> None:
    """A well-formed Model or publisher model name [proto]; the emulator has no model registry, so
    any such name is accepted. ``location``: the name must share it when it has one ([aiplatform.v1beta1]
    BatchPredictionJob.model "must share the same ancestor Location")."""
    match = _REGISTRY_MODEL_RE.fullmatch(name) or _PUBLISHER_MODEL_RE.fullmatch(name)
    if match is None:
        raise invalid(
            field,
            f"Invalid model name {name!r}: expected projects/{{project}}/locations/{{location}}/models/"
            "{model}[@version] or [projects/{project}/locations/{location}/]publishers/{publisher}/"
            "models/{model}.",
        )
    if location is not None and match.group(1) not in (None, location):
        raise invalid(field, f"The model must be in the job's location {location}, got {match.group(1)}.")


def check_endpoint_id(endpoint_id: str) -> None:
    """[proto] CreateEndpointRequest.endpoint_id: a letter then up to 62 of [a-z0-9-] ending in a
    letter or digit, or up to 9 digits without a leading zero."""
    if not _ENDPOINT_ID_RE.fullmatch(endpoint_id):
        raise invalid(
            "endpoint_id",
            f"Invalid endpoint_id {endpoint_id!r}: starting with a letter it may be up to 63 characters "
            "of [a-z0-9-] and must end with a letter or number; starting with a number it may be up "
            "to 9 digits with no leading zero.",
        )


# -- machines and resources ------------------------------------------------------------------------


def _accelerator(machine: Any, field: str) -> str | None:
    value = int(machine.accelerator_type)
    try:
        name = AcceleratorType(value).name
    except ValueError:
        raise invalid(f"{field}.accelerator_type", f"Unknown accelerator type {value}.") from None
    return None if value == 0 else name


def _is_tpu(machine_type: str, accelerator: str | None) -> bool:
    return bool(_TPU_MACHINE_RE.fullmatch(machine_type)) or (accelerator or "").startswith("TPU_")


def check_machine(machine: Any, machine_type: str, field: str) -> tuple[str | None, int]:
    """``(pool accelerator, accelerators per machine)`` of a MachineSpec whose accelerator agrees
    with ``machine_type`` by the emulator's machine tables (:mod:`...facts`)."""
    if machine.accelerator_count < 0:
        raise invalid(f"{field}.accelerator_count", "Must not be negative.")
    accelerator = _accelerator(machine, field)
    if machine_type in VERTEX_TPU_MACHINES:
        return _tpu_machine(machine, machine_type, accelerator, field)
    if machine_type in MACHINE_GPUS:
        return _gpu_machine(machine, machine_type, accelerator, field)
    _check_known_machine(machine_type, field)
    if accelerator is None:
        if machine.accelerator_count:
            raise invalid(
                f"{field}.accelerator_type",
                f"A valid accelerator type is required when accelerator_count is {machine.accelerator_count}.",
            )
        return None, 0
    return _attached_gpu(machine, machine_type, accelerator, field)


def _check_known_machine(machine_type: str, field: str) -> None:
    """A TPU or accelerator-optimized machine type the tables do not list is refused (others, the
    general-purpose series, are taken as named: the emulator does not list them)."""
    if _TPU_MACHINE_RE.fullmatch(machine_type):
        raise invalid(
            f"{field}.machine_type",
            f"{machine_type} is not a TPU machine type Vertex AI serves on; one of: "
            f"{', '.join(VERTEX_TPU_MACHINES)}.",
        )
    for series in GPU_SERIES:
        if machine_type.startswith(f"{series.name}-"):
            raise invalid(
                f"{field}.machine_type",
                f"Machine type {machine_type} does not exist; the {series.name} series has: "
                f"{', '.join(series.machine_types())}.",
            )


def _gpu_machine(machine: Any, machine_type: str, accelerator: str | None, field: str) -> tuple[str, int]:
    # [gpus] an accelerator-optimized machine comes with its GPUs; [aiplatform.v1beta1] MachineSpec:
    # "One may set the accelerator_count from 1 to N for machine with N GPUs".
    gpu, gpus = MACHINE_GPUS[machine_type]
    if accelerator != gpu:
        raise invalid(
            f"{field}.accelerator_type",
            f"Machine type {machine_type} comes with {gpus} x {gpu}: accelerator_type must be {gpu}, "
            f"got {accelerator or 'ACCELERATOR_TYPE_UNSPECIFIED'}.",
        )
    count = int(machine.accelerator_count)
    if not 1 <= count <= gpus:
        raise invalid(f"{field}.accelerator_count", f"Must be 1 to {gpus} on {machine_type}, got {count}.")
    return gpu, count


def _tpu_machine(machine: Any, machine_type: str, accelerator: str | None, field: str) -> tuple[str, int]:
    # A TPU machine type names its chips; an accelerator given beside it must agree (emulator choice).
    family, chips = VERTEX_TPU_MACHINES[machine_type]
    if accelerator not in (None, family):
        raise invalid(
            f"{field}.accelerator_type",
            f"Machine type {machine_type} has {chips} {family} chips, got accelerator_type {accelerator}.",
        )
    if machine.accelerator_count not in (0, chips):
        raise invalid(
            f"{field}.accelerator_count",
            f"Machine type {machine_type} has {chips} chips, got {machine.accelerator_count}.",
        )
    return family, chips


def _attached_gpu(machine: Any, machine_type: str, accelerator: str, field: str) -> tuple[str, int]:
    # [gpus] only N1 machines take attached GPUs, and only the GPUs of no accelerator-optimized series.
    if accelerator.startswith("TPU_"):
        raise invalid(
            f"{field}.machine_type",
            f"{accelerator} needs a TPU machine type ({', '.join(VERTEX_TPU_MACHINES)}), got {machine_type}.",
        )
    if accelerator not in N1_GPUS:
        own = [m for m, (gpu, _) in MACHINE_GPUS.items() if gpu == accelerator]
        where = f"its own machine types ({', '.join(own)})" if own else "no machine type the emulator knows"
        raise invalid(
            f"{field}.accelerator_type",
            f"{accelerator} comes with {where}, not with {machine_type}.",
        )
    if not machine_type.startswith("n1-"):
        raise invalid(
            f"{field}.machine_type",
            f"{accelerator} GPUs attach to N1 machine types only, got {machine_type}.",
        )
    if machine.accelerator_count < 1:
        raise invalid(
            f"{field}.accelerator_count", f"Must be at least 1 when accelerator_type is {accelerator}."
        )
    return accelerator, int(machine.accelerator_count)


def _flex_runtime(resources: Any, machine_type: str, accelerator: str | None, field: str) -> float | None:
    """``flex_start.max_runtime_duration`` in seconds, or None without flex_start."""
    if not resources.HasField("flex_start"):
        return None
    if resources.spot:
        # Emulator choice: flex-start and Spot VMs are two provisioning models, not one.
        raise invalid(f"{field}.spot", "spot and flex_start cannot both be set.")
    if _is_tpu(machine_type, accelerator):
        raise invalid(  # [flex-start inference]
            f"{field}.flex_start",
            f"Flex-start VMs do not support TPU Pods (machine type {machine_type}).",
        )
    duration = resources.flex_start.max_runtime_duration
    seconds = duration.seconds + duration.nanos / 1e9
    runtime_field = f"{field}.flex_start.max_runtime_duration"
    if seconds <= 0:
        raise invalid(runtime_field, f"Must be greater than 0, got {seconds:g}s.")
    if seconds > VERTEX_FLEX_MAX_RUNTIME_SECONDS:  # [aiplatform.v1beta1] FlexStart, [flex-start inference]
        raise invalid(runtime_field, f"Must be at most 7 days (604800s), got {seconds:g}s.")
    return seconds


def _machine(resources: Any, field: str, default_type: str = "") -> tuple[str, str | None, int, float | None]:
    """``(machine type, accelerator, per machine, max runtime)`` of dedicated resources."""
    if not resources.HasField("machine_spec"):  # Required [aiplatform.v1beta1]
        raise invalid(f"{field}.machine_spec", REQUIRED)
    machine = resources.machine_spec
    machine_type = machine.machine_type or default_type
    if not machine_type:
        raise invalid(f"{field}.machine_spec.machine_type", REQUIRED)
    accelerator = _accelerator(machine, f"{field}.machine_spec")
    max_runtime = _flex_runtime(resources, machine_type, accelerator, field)
    accelerator, per_machine = check_machine(machine, machine_type, f"{field}.machine_spec")
    return machine_type, accelerator, per_machine, max_runtime


def batch_resources(job: Any, prefix: str = "batch_prediction_job") -> Resources:
    """A BatchPredictionJob's dedicated resources: ``machine_spec.machine_type`` is required for a
    BatchPredictionJob, ``max_replica_count`` defaults to 10, and the job starts on
    ``starting_replica_count`` machines, at most the maximum [aiplatform.v1beta1]. Without them,
    Vertex AI picks (automatic resources): no pool (emulator choice)."""
    if not job.HasField("dedicated_resources"):
        return Resources(dedicated=False)
    field = f"{prefix}.dedicated_resources"
    res = job.dedicated_resources
    machine_type, accelerator, per_machine, max_runtime = _machine(res, field)
    for name in ("starting_replica_count", "max_replica_count"):
        if getattr(res, name) < 0:
            raise invalid(f"{field}.{name}", "Must not be negative.")
    maximum = res.max_replica_count or VERTEX_BATCH_DEFAULT_MAX_REPLICAS
    if res.starting_replica_count > maximum:
        raise invalid(
            f"{field}.starting_replica_count",
            f"Must not be greater than max_replica_count ({maximum}), got {res.starting_replica_count}.",
        )
    replicas = res.starting_replica_count or maximum
    return Resources(machine_type, accelerator, per_machine, replicas, max_runtime, bool(res.spot))


def deploy_resources(deployed_model: Any, field: str = "deployed_model") -> Resources:
    """A DeployedModel's resources. Dedicated: ``machine_type`` defaults to ``n1-standard-2``,
    ``min_replica_count`` is required and at least 1, ``max_replica_count`` unset means the minimum
    [aiplatform.v1beta1]; the set needed at once is the minimum. Automatic resources: no pool."""
    kind = deployed_model.WhichOneof("prediction_resources")
    if kind == "automatic_resources":
        auto = deployed_model.automatic_resources
        if auto.min_replica_count < 0:
            raise invalid(f"{field}.automatic_resources.min_replica_count", "Must not be negative.")
        return Resources(replicas=max(1, auto.min_replica_count), dedicated=False)
    if kind is not None and kind != "dedicated_resources":
        raise EmulatorError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"dws-emulator does not model {kind} (deployment resource pools, fine-tuned models); "
            "deploy with dedicated_resources or automatic_resources.",
        )
    if kind is None:
        # Emulator choice: without a model registry no default resources can be looked up.
        raise invalid(
            f"{field}.dedicated_resources", "One of dedicated_resources or automatic_resources is required."
        )
    res = deployed_model.dedicated_resources
    where = f"{field}.dedicated_resources"
    machine_type, accelerator, per_machine, max_runtime = _machine(res, where, VERTEX_DEFAULT_DEPLOY_MACHINE)
    if res.min_replica_count < 1:
        raise invalid(f"{where}.min_replica_count", f"Must be at least 1, got {res.min_replica_count}.")
    if res.max_replica_count and res.max_replica_count < res.min_replica_count:
        raise invalid(
            f"{where}.max_replica_count",
            f"Must not be less than min_replica_count ({res.min_replica_count}), got {res.max_replica_count}.",
        )
    return Resources(
        machine_type, accelerator, per_machine, res.min_replica_count, max_runtime, bool(res.spot)
    )


def resolve_pool(capacity: CapacityModel, location: str, resources: Resources, field: str) -> PoolKey | None:
    """The pool ``LOCATION/ACCELERATOR`` a request draws on (None without accelerators); an
    accelerator the location has no pool of is INVALID_ARGUMENT, as :mod:`..vertex` answers."""
    if resources.accelerator is None or resources.count == 0:
        return None
    pool = PoolKey(location, resources.accelerator)
    if not capacity.has_pool(pool):
        elsewhere = capacity.locations_for(resources.accelerator)
        hint = f" Available in: {', '.join(elsewhere)}." if elsewhere else ""
        raise invalid(
            f"{field}.machine_spec.accelerator_type",
            f"Accelerator type {resources.accelerator} is not available in {location}.{hint}",
        )
    return pool


# -- requests --------------------------------------------------------------------------------------


def validate_batch_prediction_job(job: Any, location: str) -> BatchPlan:
    """Check a raw ``BatchPredictionJob`` protobuf created in ``location``; return its plan."""
    prefix = "batch_prediction_job"
    if not job.display_name:
        raise invalid(f"{prefix}.display_name", REQUIRED)
    check_labels(job.labels, f"{prefix}.labels", invalid)
    _check_model_source(job, location, prefix)
    inputs = _check_input(job, f"{prefix}.input_config")
    _check_output(job, f"{prefix}.output_config")
    resources = batch_resources(job, prefix)
    run_seconds, exit_code = _batch_workload(job, prefix)
    return BatchPlan(resources, run_seconds, exit_code, inputs)


def _check_model_source(job: Any, location: str, prefix: str) -> None:
    # [proto]: exactly one of model, unmanaged_container_model or endpoint.
    given = [
        name
        for name, present in (
            ("model", bool(job.model)),
            ("unmanaged_container_model", job.HasField("unmanaged_container_model")),
            # Not in every client version's message (google-cloud-aiplatform 1.145 lacks it).
            ("endpoint", "endpoint" in job.DESCRIPTOR.fields_by_name and bool(job.endpoint)),
        )
        if present
    ]
    if not given:
        raise invalid(f"{prefix}.model", f"{REQUIRED} One of model or unmanaged_container_model must be set.")
    if len(given) > 1:
        raise invalid(
            f"{prefix}.{given[1]}",
            f"Exactly one of model, unmanaged_container_model or endpoint must be set, got {' and '.join(given)}.",
        )
    if given == ["endpoint"]:
        raise EmulatorError(
            grpc.StatusCode.UNIMPLEMENTED,
            "dws-emulator does not serve bring-your-own-endpoint batch prediction "
            f"({prefix}.endpoint); set model or unmanaged_container_model.",
        )
    if job.model:
        check_model_name(job.model, f"{prefix}.model", location)
    elif not job.unmanaged_container_model.container_spec.image_uri:  # ModelContainerSpec: Required
        raise invalid(f"{prefix}.unmanaged_container_model.container_spec.image_uri", REQUIRED)


def _check_input(job: Any, field: str) -> int:
    if not job.HasField("input_config"):
        raise invalid(field, REQUIRED)
    config = job.input_config
    if not config.instances_format:
        raise invalid(f"{field}.instances_format", REQUIRED)
    source = config.WhichOneof("source")
    if source == "gcs_source":
        uris = list(config.gcs_source.uris)
        if not uris:
            raise invalid(f"{field}.gcs_source.uris", REQUIRED)
        for uri in uris:
            if not _GCS_RE.fullmatch(uri):
                raise invalid(
                    f"{field}.gcs_source.uris", f"Must be Cloud Storage URIs (gs://...), got {uri!r}."
                )
        return len(uris)
    if source == "bigquery_source":
        uri = config.bigquery_source.input_uri
        if not _BQ_TABLE_RE.fullmatch(uri):
            raise invalid(
                f"{field}.bigquery_source.input_uri",
                f"Must be a BigQuery table, bq://projectId.bqDatasetId.bqTableId, got {uri!r}.",
            )
        return 1
    raise invalid(field, "One of gcs_source or bigquery_source is required.")


def _check_output(job: Any, field: str) -> None:
    if not job.HasField("output_config"):
        raise invalid(field, REQUIRED)
    config = job.output_config
    if not config.predictions_format:
        raise invalid(f"{field}.predictions_format", REQUIRED)
    destination = config.WhichOneof("destination")
    if destination == "gcs_destination":
        prefix = config.gcs_destination.output_uri_prefix
        if not _GCS_RE.fullmatch(prefix):
            raise invalid(
                f"{field}.gcs_destination.output_uri_prefix",
                f"Must be a Cloud Storage URI (gs://...), got {prefix!r}.",
            )
    elif destination == "bigquery_destination":
        uri = config.bigquery_destination.output_uri
        if not BQ_DESTINATION_RE.fullmatch(uri):
            raise invalid(
                f"{field}.bigquery_destination.output_uri",
                f"Must be bq://projectId, bq://projectId.bqDatasetId or bq://projectId.bqDatasetId.bqTableId, got {uri!r}.",
            )
    else:
        raise invalid(field, "One of gcs_destination or bigquery_destination is required.")


def _batch_workload(job: Any, prefix: str) -> tuple[float, int]:
    """Run time and exit code, each from the container env if it has it, else from the labels."""
    env: dict[str, str] = {}
    if job.HasField("unmanaged_container_model"):
        env = {e.name: e.value for e in job.unmanaged_container_model.container_spec.env}
    env_field = f"{prefix}.unmanaged_container_model.container_spec.env"
    labels_field = f"{prefix}.labels"

    def source(env_name: str, label: str) -> tuple[str | None, str]:
        if env_name in env:
            return env[env_name], env_field
        return job.labels.get(label), labels_field

    run_text, run_field = source(RUN_SECONDS_ENV, RUN_SECONDS_LABEL)
    exit_text, exit_field = source(EXIT_CODE_ENV, EXIT_CODE_LABEL)
    run_seconds, _ = parse_workload(run_text, None, run_field, invalid)
    _, exit_code = parse_workload(None, exit_text, exit_field, invalid)
    return run_seconds, exit_code


def validate_endpoint(endpoint: Any, endpoint_id: str) -> None:
    """CreateEndpoint: ``display_name`` required, up to 128 characters [aiplatform.v1beta1]; labels;
    ``endpoint_id`` [proto]. A traffic split on a new endpoint, which has no models, is refused."""
    if not endpoint.display_name:
        raise invalid("endpoint.display_name", REQUIRED)
    if len(endpoint.display_name) > MAX_DISPLAY_NAME:
        raise invalid(
            "endpoint.display_name",
            f"Must be at most {MAX_DISPLAY_NAME} characters, got {len(endpoint.display_name)}.",
        )
    check_labels(endpoint.labels, "endpoint.labels", invalid)
    if endpoint_id:
        check_endpoint_id(endpoint_id)
    if endpoint.traffic_split:
        raise invalid("endpoint.traffic_split", "Must be empty: a new endpoint has no deployed models.")


def check_traffic_split(split: Mapping[str, int], field: str, known: Collection[str]) -> None:
    """Percentages by DeployedModel id, adding up to 100 when given [aiplatform.v1beta1]
    ``DeployModelRequest.traffic_split``; ``known``: the ids it may name ("0" is the new model)."""
    for key, value in split.items():
        if key not in known:
            raise invalid(field, f"DeployedModel {key!r} is not deployed on the endpoint.")
        if not 0 <= value <= 100:
            raise invalid(field, f"Percentages must be 0 to 100, got {value} for {key!r}.")
    total = sum(split.values())
    if split and total != 100:
        raise invalid(field, f"The traffic percentages must add up to 100, got {total}.")


def validate_deploy_model(request: Any, deployed_ids: Collection[str]) -> Resources:
    """DeployModel: a well-formed ``deployed_model.model``, an optional numeric ``id``, its
    resources, and a traffic split over ``deployed_ids`` and "0" [aiplatform.v1beta1]."""
    if not request.HasField("deployed_model"):
        raise invalid("deployed_model", REQUIRED)
    deployed_model = request.deployed_model
    if not deployed_model.model:
        raise invalid("deployed_model.model", REQUIRED)
    check_model_name(deployed_model.model, "deployed_model.model")
    if deployed_model.id and not _DEPLOYED_MODEL_ID_RE.fullmatch(deployed_model.id):
        raise invalid(
            "deployed_model.id",
            f"Must be 1-10 characters, valid characters are [0-9], got {deployed_model.id!r}.",
        )
    resources = deploy_resources(deployed_model)
    check_traffic_split(request.traffic_split, "traffic_split", {"0", *deployed_ids})
    return resources
