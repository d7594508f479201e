"""The phase tables of GKE queued provisioning: ProvisioningRequest conditions and Kueue Jobs.

Kept apart from :mod:`~airflow_provider_dws.scheduling.phases` (the shared phases and the Google
APIs' tables) only for length; the same :class:`~airflow_provider_dws.scheduling.phases.StateTable`
maps them into the shared phases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, StateTable

# GKE queued provisioning: a ProvisioningRequest (``autoscaling.x-k8s.io``) has no state field, only
# conditions; its state here is the type of its True condition latest in the life cycle
# (:func:`provisioning_request_state`), ``Pending`` when none is True yet.
# * Pending, Accepted: WAITING (queued by DWS until the whole pod set fits at once).
# * Provisioned: RUNNING. The nodes are being created or exist and are booked for this request's
#   pods (the ones naming it in their annotations): the capacity is held and billed, and the
#   booking lasts only a few minutes if no pod comes.
# * Failed: NOT_OBTAINED (capacity), unless its reason or message says the request itself was wrong
#   (a bad request: resubmitting it cannot help).
# * BookingExpired: NOT_OBTAINED. The capacity was obtained, but no pod came within the booking
#   window, so it was given back: pods must be created within minutes of Provisioned.
# * CapacityRevoked: FAILED, PREEMPTED: ``maxRunDurationSeconds`` was reached or the nodes went away.
# Refined by :func:`classify_provisioning_request`.
PROVISIONING_REQUEST_PENDING = "Pending"
PROVISIONING_REQUEST_CONDITION_PHASES: dict[str, Phase] = {
    PROVISIONING_REQUEST_PENDING: Phase.WAITING,
    "Accepted": Phase.WAITING,
    "Provisioned": Phase.RUNNING,
    "Failed": Phase.NOT_OBTAINED,
    "BookingExpired": Phase.NOT_OBTAINED,
    "CapacityRevoked": Phase.FAILED,
}
#: Which True condition is the state: the later in the life cycle.
_CONDITION_RANK = {name: rank for rank, name in enumerate(PROVISIONING_REQUEST_CONDITION_PHASES)}
#: Reasons of a Failed ProvisioningRequest saying the request was wrong (the cluster autoscaler's
#: and GKE's spellings as far as they are documented, and the emulator's; NOT VERIFIED exhaustively
#: against GKE: any other reason is capacity not obtained, and a capacity retry is bounded).
PROVISIONING_REQUEST_BAD_REQUEST_REASONS = frozenset(
    {
        "FailedToCreatePods",
        "InvalidSpec",
        "InvalidRequest",
        "BadRequest",
        "PodTemplateNotFound",
        "NotSupported",
        "ClassNotSupported",
        "UnsupportedProvisioningClass",
        "InvalidParameters",
        "Forbidden",
    }
)
#: Words of a Failed condition's message that say the same.
PROVISIONING_REQUEST_BAD_REQUEST_MESSAGE = re.compile(
    r"\binvalid\b|\bnot supported\b|\bunsupported\b|\bforbidden\b|\bpermission\b|\bdoes not exist\b"
    r"|\bpod ?template\b[^;]*\bnot found\b|\bno (queued )?node ?pool\b|\bcannot be satisfied\b",
    re.IGNORECASE,
)


def provisioning_request_state(conditions: Sequence[Mapping[str, Any]] | None) -> str:
    """The state of a ProvisioningRequest: of its True conditions of a known type, the one latest in
    the life cycle (Accepted, Provisioned, then the ends), the newer ``lastTransitionTime`` between
    two of one rank; :data:`PROVISIONING_REQUEST_PENDING` when none is True.

    Not simply the newest: a condition type added to the API later, or one stamped again, must not
    hide a Provisioned request (it would read as waiting, and be deleted at its max wait)."""
    best: tuple[int, str] | None = None
    state = PROVISIONING_REQUEST_PENDING
    for condition in conditions or ():
        kind = str(condition.get("type", ""))
        if str(condition.get("status", "")) != "True" or kind not in _CONDITION_RANK:
            continue
        order = (_CONDITION_RANK[kind], str(condition.get("lastTransitionTime") or ""))
        if best is None or order >= best:
            best, state = order, kind
    return state


def provisioning_request_condition(
    conditions: Sequence[Mapping[str, Any]] | None, kind: str
) -> Mapping[str, Any] | None:
    """The condition of type ``kind``, if the request has it."""
    return next((c for c in conditions or () if c.get("type") == kind), None)


def classify_provisioning_request(state_name: str, *, reason: str = "", message: str = "") -> Outcome:
    """Classify a ProvisioningRequest's state (:func:`provisioning_request_state`) and the ``reason``
    and ``message`` of that condition into a phase and, for failures, a reason for the user."""
    phase = PROVISIONING_REQUEST_CONDITION_PHASES.get(state_name, Phase.WAITING)
    said = f"{reason}: {message}" if reason and message else reason or message
    if state_name == "Failed":
        if (
            reason in PROVISIONING_REQUEST_BAD_REQUEST_REASONS
            or PROVISIONING_REQUEST_BAD_REQUEST_MESSAGE.search(message)
        ):
            return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, said or "the request was refused")
        return Outcome(
            Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, said or "capacity was not obtained"
        )
    if state_name == "BookingExpired":
        what = (
            "the capacity was provisioned but no pod consumed it within the booking window, so it was "
            "given back: create the workload's pods right after Provisioned"
        )
        return Outcome(
            Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, f"{what} ({said})" if said else what
        )
    if state_name == "CapacityRevoked":
        what = "the capacity was revoked (maxRunDurationSeconds reached, or the nodes went away)"
        return Outcome(Phase.FAILED, FailureKind.PREEMPTED, f"{what}: {said}" if said else what)
    return Outcome(phase, None, said if phase is Phase.RUNNING else "")


#: GKE ProvisioningRequests (the True condition latest in the life cycle); facts: ``reason``, ``message``.
PROVISIONING_REQUEST_CONDITIONS = StateTable(
    "gke_provisioning_request", PROVISIONING_REQUEST_CONDITION_PHASES, classify_provisioning_request
)


# -- Kueue Jobs (GKE queued provisioning through Kueue) ------------------------------------------

# The one table of a Kueue Job: the Job (``batch/v1``) is the request, and its state is read from
# the Job and its Kueue Workload together (``backends/kueue.job_state`` names it):
# * Suspended (the Job is suspended and Kueue has made no Workload yet), Queued (a Workload waits in
#   its LocalQueue for quota), AwaitingCapacity (quota reserved, an admission check, the
#   ProvisioningRequest, is still pending or being retried), Requeued (evicted, e.g. preempted by a
#   higher priority, and queued again): WAITING, the only phase the provider's max wait cancels.
# * Admitted (every check Ready, the Job not yet unsuspended): PROVISIONING, capacity found.
# * Running (admitted and unsuspended): RUNNING. Complete: SUCCEEDED. Failed: FAILED (the workload).
# * Rejected (an admission check Rejected, or the Workload deactivated for one: Kueue gave up on
#   the ProvisioningRequest): NOT_OBTAINED with its message; CapacityRevoked (evicted, or
#   deactivated, because the ProvisioningRequest's capacity was revoked: its maxRunDurationSeconds
#   passed or its nodes went away): FAILED, preempted, never a workload failure.
# * Deleting (the Job has a deletion timestamp): CANCELLED.
KUEUE_JOB_STATE_PHASES: dict[str, Phase] = {
    "Suspended": Phase.WAITING,
    "Queued": Phase.WAITING,
    "AwaitingCapacity": Phase.WAITING,
    "Requeued": Phase.WAITING,
    "Admitted": Phase.PROVISIONING,
    "Running": Phase.RUNNING,
    "Complete": Phase.SUCCEEDED,
    "Failed": Phase.FAILED,
    "Rejected": Phase.NOT_OBTAINED,
    "CapacityRevoked": Phase.FAILED,
    "Deleting": Phase.CANCELLED,
}

#: Words of a Kueue message (an admission check's, an eviction's) saying the capacity of the
#: ProvisioningRequest was revoked (its condition ``CapacityRevoked``, whose message Kueue copies
#: into the check it rejects): the condition's name or reason, or "the capacity ... was revoked" (the
#: dws-emulator's words; GKE's own message is NOT VERIFIED: a revocation it words otherwise is
#: classified as a rejection, capacity not obtained, which a capacity retry also resubmits).
KUEUE_CAPACITY_REVOKED = re.compile(
    r"capacity[ _-]?revoked|\bcapacity\b[^;]{0,200}?\b(?:was|has been) revoked\b|MaxRunDurationReached",
    re.IGNORECASE,
)


def classify_kueue_job(state_name: str, *, message: str = "") -> Outcome:
    """Classify a Kueue Job's state (see :data:`KUEUE_JOB_STATE_PHASES`) into a phase and a reason.

    :param message: what the Job, its Workload or its admission check said (kept for the user).
    """
    phase = KUEUE_JOB_STATE_PHASES.get(state_name, Phase.WAITING)
    if state_name == "Failed":
        return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, message or "the Job failed")
    if state_name == "CapacityRevoked":
        return Outcome(
            Phase.FAILED, FailureKind.PREEMPTED, message or "the ProvisioningRequest's capacity was revoked"
        )
    if state_name == "Rejected":
        return Outcome(
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
            message or "Kueue's admission check rejected the Workload",
        )
    if phase is Phase.CANCELLED:
        return Outcome(Phase.CANCELLED, FailureKind.CANCELLED, message or "the Job is being deleted")
    return Outcome(phase, None, message)


#: Kueue Jobs (a ``batch/v1`` Job and its Workload); facts: ``message``.
KUEUE_JOB_STATES = StateTable("gke_kueue_job", KUEUE_JOB_STATE_PHASES, classify_kueue_job)

__all__ = [
    "KUEUE_CAPACITY_REVOKED",
    "KUEUE_JOB_STATES",
    "KUEUE_JOB_STATE_PHASES",
    "PROVISIONING_REQUEST_BAD_REQUEST_MESSAGE",
    "PROVISIONING_REQUEST_BAD_REQUEST_REASONS",
    "PROVISIONING_REQUEST_CONDITIONS",
    "PROVISIONING_REQUEST_CONDITION_PHASES",
    "PROVISIONING_REQUEST_PENDING",
    "classify_kueue_job",
    "classify_provisioning_request",
    "provisioning_request_condition",
    "provisioning_request_state",
]
