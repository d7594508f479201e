"""API-neutral errors that every backend raises in place of its client library's own.

The trigger, the shared poller and the attempt loop know only these, so a backend over gRPC
(Vertex AI, Cloud TPU, Batch), REST (Compute Engine) or the Kubernetes API fits them unchanged.
Each backend translates its client's exceptions in one place; the original is kept as
``__cause__`` for the log.

These are infrastructure errors of one API call. What they mean for the task (fail at once,
retry, report capacity not obtained) is decided by the caller; the user-facing task exceptions
live in :mod:`airflow_provider_dws.exceptions`.
"""

from __future__ import annotations


class ApiError(Exception):
    """One call to a DWS API failed; ``code`` is the API's own error code or HTTP status, if any."""

    def __init__(self, message: str, *, code: int | str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class TransientApiError(ApiError):
    """The call may pass if retried: unavailable, timed out, internal, aborted, overloaded."""


class QuotaExceededError(TransientApiError):
    """A rate or quota limit (429, RESOURCE_EXHAUSTED): retry, but back off harder."""


class RequestNotFoundError(ApiError):
    """The request (or its parent) does not exist: never made, or deleted outside Airflow."""


class RequestAlreadyExistsError(ApiError):
    """A create found a request of that name already there (ours, from an earlier try)."""


class InvalidRequestError(ApiError):
    """The API refused the request as invalid or not possible in its current state."""


class ConflictError(InvalidRequestError):
    """Refused because of the resource's current state (e.g. a delete already in progress)."""


class PermissionDeniedApiError(ApiError):
    """The caller may not do this (credentials, IAM, API not enabled)."""
