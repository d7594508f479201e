"""Pure scheduling decisions shared by every DWS operator and trigger.

Nothing here performs I/O or imports Airflow or Google client libraries: every function is a
value-in, value-out decision that can be tested without a server.
"""

from __future__ import annotations

from airflow_provider_dws.scheduling.budget import (
    DEFAULT_MAX_RUN,
    DEFAULT_MAX_WAIT,
    MAX_RUN_LIMIT,
    MAX_WAIT_LIMIT,
    WaitBudget,
)
from airflow_provider_dws.scheduling.decisions import (
    MIN_WAIT,
    Attempt,
    NextStep,
    SubmitDecision,
    effective_max_wait,
    next_step,
    next_submit,
)
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import (
    FailureKind,
    Outcome,
    Phase,
    RequestTimings,
    classify_vertex_job,
    vertex_phase,
)
from airflow_provider_dws.scheduling.policies import (
    CapacityRetry,
    Deadline,
    Failover,
    OffPeakWindow,
    Placement,
    Window,
    WindowSet,
    parse_window,
)

__all__ = [
    "DEFAULT_MAX_RUN",
    "DEFAULT_MAX_WAIT",
    "MAX_RUN_LIMIT",
    "MAX_WAIT_LIMIT",
    "MIN_WAIT",
    "Attempt",
    "CapacityRetry",
    "Deadline",
    "Failover",
    "FailureKind",
    "NextStep",
    "OffPeakWindow",
    "Outcome",
    "Phase",
    "Placement",
    "RequestIdentity",
    "RequestTimings",
    "SubmitDecision",
    "WaitBudget",
    "Window",
    "WindowSet",
    "classify_vertex_job",
    "effective_max_wait",
    "next_step",
    "next_submit",
    "parse_window",
    "vertex_phase",
]
