"""The operators' earlier names, kept for DAG files that still use them (each warns when built)."""

from __future__ import annotations

import warnings
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator


class FlexStartCustomJobOperator(CreateVertexAIFlexStartJobOperator):
    """Deprecated: the earlier name of :class:`CreateVertexAIFlexStartJobOperator` (same parameters)."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "FlexStartCustomJobOperator is renamed CreateVertexAIFlexStartJobOperator; the old name will be removed",
            AirflowProviderDeprecationWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)


class TPUQueuedResourceOperator(CreateTPUQueuedResourceOperator):
    """Deprecated: the earlier name of :class:`CreateTPUQueuedResourceOperator` (same parameters)."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "TPUQueuedResourceOperator is renamed CreateTPUQueuedResourceOperator; the old name will be removed",
            AirflowProviderDeprecationWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)
