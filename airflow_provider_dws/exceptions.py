"""Exceptions a DAG author can tell apart (and catch, or retry on) by kind."""

from __future__ import annotations

from airflow_provider_dws.compat import AirflowException, AirflowFailException


class DwsError(AirflowException):
    """Base class of every failure reported by this provider."""


class CapacityNotObtainedError(DwsError):
    """DWS could not provide the requested capacity within the max wait."""


class CapacityPreemptedError(DwsError):
    """The capacity was obtained and then taken back (a spot slice was preempted)."""


class CapacityRevokedError(CapacityPreemptedError):
    """The reservation a workload ran on (or waited in) ended: a calendar block's end, or the
    reservation was deleted. Its capacity was taken back; the workload itself did not fail."""


class WorkloadFailedError(DwsError):
    """The capacity was obtained and the workload ran, but it failed."""


class RequestCancelledError(DwsError, AirflowFailException):
    """The request was cancelled (by a user, or outside Airflow) before it finished.

    The task fails without Airflow's own ``retries``: retrying would undo whoever cancelled it
    (the provider's ``capacity_retry`` refuses to resubmit it for the same reason).
    """


class BadRequestError(DwsError, AirflowFailException):
    """The API refused the request as invalid; retrying the task cannot help, so it fails at once."""


class WaitFailedError(DwsError):
    """Waiting on a request ended on an error (permission denied, an unexpected answer) before the
    request did. With a retry left the request is kept for the next try to adopt; the last try
    cancels one that still waits or holds capacity for later tasks (the message says which)."""
