"""Parse-time checks of a Cloud TPU flex-start slice (``provisioning_model="flex_start"``), in a
module of their own so that a DAG that does not ask for flex-start never compiles them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_dws import facts
from airflow_provider_dws.specs.templates import has_template

if TYPE_CHECKING:
    from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
    from airflow_provider_dws.scheduling.policies import Placement


def check_flex_start(op: CreateTPUQueuedResourceOperator) -> None:
    """``max_run`` goes with flex-start and flex-start with it; no tier, no reservation; v5e or v6e."""
    if not op.flex_start:
        if op.max_run is not None:
            raise op._param_error("max_run is a flex-start slice's run: pass provisioning_model='flex_start'")
        return
    if op.max_run is None:
        raise op._param_error(
            f"provisioning_model='flex_start' needs max_run (how long the slice runs, at most "
            f"{facts.TPU_FLEX_START_MAX_RUN})"
        )
    if op.spot or op.guaranteed or op.reservation_name or op.on_block:
        raise op._param_error(
            "a flex-start slice takes no tier and no reservation (spot, guaranteed, reservation_name, "
            "a calendar block): it is its own provisioning model"
        )
    check_flex_family(op, op.accelerator_type)


def check_flex_family(op: CreateTPUQueuedResourceOperator, accelerator_type: str) -> None:
    """Flex-start is offered on TPU v5e (``v5litepod``) and v6e only (a template is checked by the API)."""
    if has_template(accelerator_type):
        return
    family = str(accelerator_type).rsplit("-", 1)[0]
    if family not in facts.TPU_FLEX_START_FAMILIES:
        raise op._param_error(
            f"flex-start is offered on TPU {', '.join(facts.TPU_FLEX_START_FAMILIES)} only, not "
            f"{accelerator_type!r}"
        )


def check_flex_placement(op: CreateTPUQueuedResourceOperator, placement: Placement) -> None:
    """A failover placement of a flex-start slice: another zone or family, never a tier."""
    if placement.tier is not None:
        raise op._param_error(f"failover placement {placement}: a flex-start slice has no tier")
    if placement.accelerator_type:
        check_flex_family(op, placement.accelerator_type)
