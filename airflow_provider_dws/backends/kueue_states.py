"""What the Kueue backend knows of Kueue: its state table (a Job and its Workload into the shared
phases) and which API version of its Workloads to read.

Read only by :mod:`.kueue` (``KueueJobBackend``), so it lives beside it; a module of its own only
for length (the backend is about 590 lines without it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, StateTable

WORKLOAD_GROUP = "kueue.x-k8s.io"
#: The Workload versions the provider reads, newest first: Kueue 0.15 added v1beta2 and 0.16 stores
#: it (v1beta1 deprecated, to be removed); a Kueue before 0.15 serves v1beta1 only. The fields read
#: here (conditions, admission checks, ``spec.active``, labels, owners) are the same at both.
WORKLOAD_VERSIONS = ("v1beta2", "v1beta1")
#: When discovery cannot say (refused, or no Kueue group): what every Kueue release has served.
FALLBACK_WORKLOAD_VERSION = "v1beta1"


def newest_workload_version(groups: Mapping[str, Any]) -> str:
    """The Workload version to read from an ``APIGroupList`` (``GET /apis``): the newest of
    :data:`WORKLOAD_VERSIONS` the ``kueue.x-k8s.io`` group serves, else its preferred version (a
    Kueue newer than the provider), else :data:`FALLBACK_WORKLOAD_VERSION` (no Kueue group: the
    Workload list then says what is missing)."""
    for group in groups.get("groups") or []:
        if group.get("name") != WORKLOAD_GROUP:
            continue
        served = [str(v.get("version")) for v in group.get("versions") or []]
        for version in WORKLOAD_VERSIONS:
            if version in served:
                return version
        preferred = (group.get("preferredVersion") or {}).get("version")
        return str(preferred) if preferred else FALLBACK_WORKLOAD_VERSION
    return FALLBACK_WORKLOAD_VERSION


# The one table of a Kueue Job: the Job (``batch/v1``) is the request, and its state is read from
# the Job and its Kueue Workload together (``job_state`` in :mod:`.kueue` names it):
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
