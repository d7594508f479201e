"""The parse-time checks both Vertex AI inference operators take (batch prediction, deploy), in a
module of their own so that a DAG file with one of them loads only its own operator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    WAIT_CHECKS,
    display_name_check,
    vertex_region_check,
)
from airflow_provider_dws.operators.checks import Check, int_in
from airflow_provider_dws.specs.templates import has_template
from airflow_provider_dws.specs.vertex_inference import INFERENCE_MACHINES

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.policies import Placement

#: A model by resource name (``projects/P/locations/R/models/M``, with ``@version`` or not) or a
#: publisher's model (``publishers/google/models/gemma``).
MODEL_PATTERN = r"(projects/[^/\s]+/locations/[a-z0-9-]+/models/[^/\s]+|publishers/[^/\s]+/models/[^/\s]+)"
#: What ``DeployModel`` takes: a model of the project's registry (a publisher's model is not one).
REGISTRY_MODEL_PATTERN = r"projects/[^/\s]+/locations/[a-z0-9-]+/models/[^/\s]+"


def _machine_ok(value: Any) -> bool:
    return value in INFERENCE_MACHINES


def machine_message() -> str:
    """What ``machine_type`` must be."""
    gpus = sorted({gpu for gpu, _ in INFERENCE_MACHINES.values()})
    return (
        "must be an accelerator-optimized machine type that flex-start inference takes (its GPUs "
        f"come with it: {', '.join(gpus)}; no TPU, no A4X), e.g. 'g2-standard-48' or 'a3-highgpu-8g'"
    )


#: What the flex-start inference operators share: connection, wait, region, machines and replicas,
#: display name.
INFERENCE_CHECKS: tuple[Check, ...] = (
    *CONNECTION_CHECKS,
    *WAIT_CHECKS,
    vertex_region_check(),
    Check("machine_type", _machine_ok, machine_message(), templated=True),
    Check("replica_count", int_in(1, 1000), "must be an integer from 1 to 1000"),
    Check("max_replica_count", int_in(1, 1000), "must be an integer from 1 to 1000", optional=True),
    display_name_check(),
)


def check_replicas(op: Any) -> None:
    """``max_replica_count`` is at least ``replica_count`` (the machines obtained at once)."""
    most, least = op.max_replica_count, op.replica_count
    if type(most) is int and type(least) is int and most < least:
        raise op._param_error(f"max_replica_count ({most}) must be at least replica_count ({least})")


def check_model_region(op: Any) -> None:
    """A model ``projects/P/locations/R/models/M`` must be in the operator's region."""
    model, region = op.model, op.region
    if (
        not isinstance(model, str)
        or not isinstance(region, str)
        or has_template(model)
        or has_template(region)
    ):
        return
    if model.startswith("projects/") and model.split("/")[3] != region:
        raise op._param_error(
            f"model {model!r} is in {model.split('/')[3]!r}, not in region {region!r}: Vertex AI serves "
            "a model only in its own region"
        )


def check_machine_placement(op: Any, placement: Placement, what: str) -> None:
    """A failover placement of a flex-start inference request: the same region (the model's), an
    accelerator-optimized machine type flex-start inference takes, no tier."""
    if not has_template(op.region) and placement.location != op.region:
        raise op._param_error(
            f"failover placement {placement}: a {what} stays in its model's region {op.region!r}; "
            "fail over to another machine_type there (Placement(location=region, machine_type=...))"
        )
    if placement.tier is not None:
        raise op._param_error(f"failover placement {placement}: a {what} has no tier")
    if placement.machine_type not in INFERENCE_MACHINES:
        raise op._param_error(f"failover placement {placement}: machine_type {machine_message()}")
    if (
        placement.accelerator_type
        and placement.accelerator_type != INFERENCE_MACHINES[placement.machine_type][0]
    ):
        raise op._param_error(
            f"failover placement {placement}: {placement.machine_type} comes with "
            f"{INFERENCE_MACHINES[placement.machine_type][0]}, not {placement.accelerator_type}"
        )


class InferenceOperatorChecks:
    """What the two inference operators check beyond their tables: a regional model in their region,
    failover only to another machine type of that region, their home placement. Mixed in before
    :class:`~airflow_provider_dws.operators.base.DwsQueuedRequestOperator`."""

    #: What the request is called in a refused placement's message.
    REQUEST_NOUN: ClassVar[str]
    region: Any

    def check_parameters(self, *, rendered: bool) -> None:
        """Run the operator's checks, then check that a regional model lives in the region."""
        super().check_parameters(rendered=rendered)  # type: ignore[misc]
        check_model_region(self)

    def check_placement(self, placement: Placement) -> None:
        """A failover placement is another machine type of the same region (the model's)."""
        check_machine_placement(self, placement, self.REQUEST_NOUN)

    def home_placement(self) -> Placement:
        """The operator's own region (with its own machine type)."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.region)
