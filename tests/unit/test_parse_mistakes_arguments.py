"""A required argument left out names the operator and the task, and failover without a capacity retry
says so in retries, as ``capacity_retry`` counts them (issue 27, section 3).

Airflow's operator metaclass says only "missing keyword argument 'region'"; the provider's operators
share one metaclass (``operators/base.py``) that names the operator class and the task too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.operators.base import DwsBaseOperator
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.operators.calendar import FindCalendarBlockOperator, ReleaseCalendarBlockOperator
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator
from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.policies import CapacityRetry


def in_dag(cls: type[DwsBaseOperator], **kwargs: Any) -> Any:
    """The operator as a DAG file builds it."""
    with DAG("args", schedule=None, start_date=datetime(2026, 1, 1)):
        return cls(**kwargs)


def test_a_missing_region_names_the_operator_and_the_task() -> None:
    with pytest.raises(TypeError) as err:
        in_dag(
            CreateBatchFlexStartJobOperator, task_id="infer", image_uri="i:1", machine_type="g2-standard-8"
        )
    assert str(err.value) == "CreateBatchFlexStartJobOperator 'infer': missing required argument 'region'"


@pytest.mark.parametrize(
    ("cls", "missing"),
    [
        (CreateVertexAIFlexStartJobOperator, "argument 'region'"),
        (CreateTPUQueuedResourceOperator, "arguments 'accelerator_type', 'runtime_version'"),
        (CreateComputeFlexStartVMsOperator, "arguments 'max_run', 'resize_by'"),
        (DeleteComputeFlexStartVMsOperator, "argument 'setup_task_id'"),
        (FindCalendarBlockOperator, "arguments 'duration', 'latest_start', 'zones'"),
        (ReleaseCalendarBlockOperator, "argument 'setup_task_id'"),
        (CreateGKEProvisioningRequestOperator, "arguments 'location', 'pod_template'"),
        (CreateGKEQueuedJobOperator, "arguments 'location', 'queue_name'"),
    ],
)
def test_every_dws_operator_names_itself(cls: type[DwsBaseOperator], missing: str) -> None:
    with pytest.raises(TypeError) as err:
        in_dag(cls, task_id="t")
    assert str(err.value) == f"{cls.__name__} 't': missing required {missing}"


def test_default_args_still_fill_a_required_argument() -> None:
    with DAG("args", schedule=None, start_date=datetime(2026, 1, 1), default_args={"region": "us-east4"}):
        op = CreateBatchFlexStartJobOperator(task_id="infer", image_uri="i:1", machine_type="g2-standard-8")
    assert op.region == "us-east4"


def test_other_type_errors_are_airflows_own() -> None:
    with pytest.raises(TypeError, match="Use keyword arguments"):
        CreateBatchFlexStartJobOperator("us-central1")  # type: ignore[misc]


# -- failover and capacity_retry ---------------------------------------------------------------------


def batch(**kw: Any) -> CreateBatchFlexStartJobOperator:
    args = {"task_id": "infer", "region": "us-central1", "image_uri": "i:1", "machine_type": "g2-standard-8"}
    return in_dag(CreateBatchFlexStartJobOperator, **{**args, **kw})


def test_failover_without_a_retry_is_said_in_retries() -> None:
    with pytest.raises(ValueError) as err:
        batch(failover=["us-east4", "us-west1"], capacity_retry=0)
    assert str(err.value) == (
        "CreateBatchFlexStartJobOperator 'infer': failover (fail over to us-east4, then us-west1) is tried "
        "only on capacity retries, so it needs at least 1 retry: pass capacity_retry=2 (retries; "
        "CapacityRetry(attempts=3) counts the first submission too) to try each failover placement once, "
        "got capacity_retry with 0 retries"
    )
    with pytest.raises(ValueError, match=r"got no capacity_retry$"):
        batch(failover="us-east4")
    with pytest.raises(ValueError, match=r"got capacity_retry with 0 retries$"):
        batch(failover="us-east4", capacity_retry=CapacityRetry(attempts=1))


def test_one_retry_is_enough_for_failover() -> None:
    assert batch(failover="us-east4", capacity_retry=1).capacity_retry.retries == 1  # type: ignore[union-attr]
