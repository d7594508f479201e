"""The ProvisioningRequest state table: its conditions into the shared phases.

Read only by :mod:`.kubernetes` (``ProvisioningRequestBackend``), so it lives beside it; a module of
its own only because the backend with it would pass 600 lines.
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
