"""The request record: one shape, for every DWS surface, of what a task instance asked for and got.

Every capacity request the provider makes is described by a :class:`RequestRecord`, kept in the
XCom :data:`XCOM_KEY` of the task instance that made it: a JSON list, one record per request
(attempts in order, the latest last). The shared attempt loop writes it for every operator
(``runtime/recording.py``): when a request is submitted or adopted (phase ``waiting``, pushed
before the task defers) and again when the attempt ends (its final phase; a TPU slice that became
ACTIVE stays ``running`` with ``holds=True``). Every capacity attempt and every try accumulates:
Airflow clears a task instance's XComs when a new try starts, so the loop also keeps the list in
the task state store (same key) and a new try starts from it.

Who writes a request's record is not always who made it: ``DeleteTPUQueuedResourceOperator``
writes the record of each slice it deletes (same ``request_name``, ``holds=False``, ``released``
set, a final phase) into *its own* task instance's list. The merge rule for a reader: records of
one ``request_name`` found in several task instances' lists are one request, and the latest write
wins: the record from the XCom written last (an XCom row keeps its write time). A release is
always written after the record it releases, so a record with ``released`` set wins over one
without. The Airflow UI page (``plugins/web``) and the savings report read only this; trigger
keyword arguments cannot serve (the API blanks them) and the task log is not data.

This module is pure data (no Airflow, no client library): the dag-processor may import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from typing import Any

#: The XCom key holding a task instance's records (a JSON list of :meth:`RequestRecord.to_dict`).
XCOM_KEY = "dws_requests"
#: The shape's version, in every record as ``v``; a reader skips records of a newer major version.
RECORD_VERSION = 1
#: Phases a record may be in (the values of ``scheduling.phases.Phase`` but ``provisioning``,
#: which a record calls ``waiting``: the capacity is not usable yet).
PHASES = ("waiting", "running", "succeeded", "failed", "not_obtained", "cancelled")
#: Phases in which the request waits for capacity or holds it.
LIVE_PHASES = ("waiting", "running")
#: The readable name of each API a record names (``RequestRecord.api``), as the DWS page shows it.
API_NAMES = {
    "vertex_custom_job": "Vertex AI custom job",
    "tpu_queued_resource": "Cloud TPU queued resource",
    # A flex-start slice is a queued resource too: its records say tpu_queued_resource (so the
    # release's record joins them); the name is here for the trigger's kind.
    "tpu_flex_start": "Cloud TPU flex-start queued resource",
    "batch_job": "Cloud Batch job",
    "compute_resize_request": "Compute Engine flex-start VMs",
    "compute_instance_set": "Compute Engine flex-start VMs (no MIG)",
    "compute_future_reservation": "Compute Engine calendar block",
    "gke_provisioning_request": "GKE ProvisioningRequest",
    "gke_kueue_job": "GKE Kueue Job",
    "gke_flex_start_job": "GKE flex-start Job",
    "vertex_batch_prediction": "Vertex AI batch prediction job",
    "vertex_endpoint_deployment": "Vertex AI endpoint deployment",
}
#: A calendar block's record: its API, and its pricing model (it holds its capacity for its whole
#: length, from a start the user chose); the pricing model of work that runs on a block's
#: reservation (billed with the block, waiting for nothing).
BLOCK_API = "compute_future_reservation"
BLOCK_PRICING = "calendar"
ON_BLOCK_PRICING = "reservation"
#: The outcome of a record ended from outside the attempt loop (the task killed, timed out, failed).
TASK_ENDED = "task_ended"
#: The records: in the task state store's value beside the request a deferred try waits on
#: (``runtime/recording.py``), and in a deferral's ``resume``, handed back so the resumed run need
#: not read them again (each read is a call to the API server), or so its trigger can write the
#: final one when it ends the task itself (``triggers/finish.py``).
RECORDS = "records"


def api_name(api: str) -> str:
    """The readable name of ``api`` (the record's own value when it has none)."""
    return API_NAMES.get(api, api)


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"a record's times carry a time zone, got {value!r}")
    return value.astimezone(timezone.utc).isoformat()


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string of a record back to an aware UTC datetime (``None`` when unset or bad)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(timezone.utc)


@dataclass(frozen=True)
class RequestRecord:
    """What one capacity request asked for, where, and what became of it.

    Times are ISO-8601 UTC strings (JSON as stored); :func:`parse_time` reads them back.
    ``accelerator_count`` is the request's whole count (GPUs or TPU chips over every VM or node),
    so accelerator-hours are ``accelerator_count`` x hours. ``holds`` is true while the request
    holds capacity that outlives the task that made it (an ACTIVE TPU slice not yet deleted), and
    ``held_since`` / ``released`` time that holding. ``reservation`` names the reservation a request
    ran on (calendar mode: a delivered block's), so the block's release can tell what used it.
    ``held_until`` is when held capacity ends by itself whatever the tasks do (a calendar block's
    end): a reader stops counting it as held, run or waited there. ``max_run_seconds`` is the
    longest the capacity may run once obtained (the operator's ``max_run``; ``None``: no bound).
    ``expected_wait_*`` is what the wait forecast (:mod:`~airflow_provider_dws.forecast`) said when
    the request was made: p50 and p90 time to capacity from ``expected_wait_basis`` similar
    requests (``None``: too little history), ``expected_wait_p50_lower_bound`` and
    ``expected_wait_p90_lower_bound`` when the figure was only known to exceed the longest wait seen; ``obtainability`` the capacity advice's score for
    its placement, where the advice was asked.
    """

    api: str
    kind: str
    project: str
    location: str
    request_name: str
    phase: str
    accelerator_type: str | None = None
    accelerator_count: int = 0
    machine_type: str | None = None
    pricing_model: str = "flex_start"
    console_url: str | None = None
    attempt: int = 1
    try_number: int = 1
    submitted: str | None = None
    started: str | None = None
    ended: str | None = None
    max_wait_seconds: float | None = None
    wait_deadline: str | None = None
    deadline: str | None = None
    window: str | None = None
    outcome: str | None = None
    message: str = ""
    holds: bool = False
    held_since: str | None = None
    released: str | None = None
    reservation: str | None = None
    held_until: str | None = None
    max_run_seconds: float | None = None
    expected_wait_p50_seconds: float | None = None
    expected_wait_p90_seconds: float | None = None
    expected_wait_p50_lower_bound: bool = False
    expected_wait_p90_lower_bound: bool = False
    expected_wait_basis: int = 0
    obtainability: float | None = None
    v: int = RECORD_VERSION

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")

    @property
    def live(self) -> bool:
        """Waiting for capacity or holding it."""
        return self.phase in LIVE_PHASES or self.holds

    def to_dict(self) -> dict[str, Any]:
        """The JSON-friendly form stored in XCom."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord | None:
        """A stored record back; ``None`` for one this release cannot read (newer version, broken).

        Unknown keys are ignored (a newer minor release may add some) and missing optional ones
        take their defaults, so a page never fails on one odd record.
        """
        version = data.get("v", RECORD_VERSION)
        if not isinstance(version, int) or version > RECORD_VERSION:
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except (TypeError, ValueError):
            return None

    def with_times(
        self,
        *,
        submitted: datetime | None = None,
        started: datetime | None = None,
        ended: datetime | None = None,
    ) -> RequestRecord:
        """A copy with the given times set (the others kept)."""
        return replace(
            self,
            submitted=_iso(submitted) if submitted else self.submitted,
            started=_iso(started) if started else self.started,
            ended=_iso(ended) if ended else self.ended,
        )


def phase_of(phase: str) -> str:
    """A record's phase for a request phase (``Phase.value``): ``provisioning`` (capacity found, not
    yet usable) is still ``waiting`` to a reader of records, whose phases are :data:`PHASES`."""
    return phase if phase in PHASES else "waiting"


def iso(value: datetime | None) -> str | None:
    """A time as a record stores it (ISO-8601 UTC); ``None`` stays ``None``."""
    return _iso(value)


def end_record(record: RequestRecord, *, phase: str, message: str, at: datetime) -> RequestRecord:
    """``record`` ended at ``at`` from outside the attempt loop (a kill, a timeout, its task's end),
    in ``phase``, with outcome :data:`TASK_ENDED` and ``message`` saying why; a record already
    ended keeps its own end. Held capacity stops being held there too."""
    if not record.live:
        return record
    return replace(
        record,
        phase=phase,
        outcome=TASK_ENDED,
        message=message,
        ended=_iso(at),
        holds=False,
        released=record.released or (_iso(at) if record.holds else None),
    )


def attempt_end(
    record: RequestRecord,
    *,
    phase: str,
    success: bool,
    target: str,
    started: datetime | None,
    finished: datetime | None,
    failure: str | None,
    message: str,
    now: datetime,
) -> RequestRecord:
    """``record`` at the end of its attempt, as the attempt loop (or, for a success it ends
    itself, the trigger) writes it: ``phase`` is the request's (``Phase.value``), ``success``
    whether it gave what the task waits for (``target``: ``"end"``, ``"running"`` or
    ``"provisioning"``), ``failure`` the classified reason of one that did not.

    A success that holds capacity (a slice ACTIVE, a request Provisioned) stays held, not ended; a
    wait that ends on a promise (a calendar block approved, delivered weeks later) leaves the
    request ``waiting``, until a later task sees it delivered.
    """
    started_at = _iso(started) or record.started
    if success and phase == "provisioning":
        return replace(record, phase="waiting", started=started_at, message=message)
    holds = success and target != "end" and phase == "running"
    return replace(
        record,
        phase=phase_of(phase),
        started=started_at,
        ended=None if holds else _iso(finished or now),
        outcome="succeeded" if success else (failure or phase),
        message=message,
        holds=holds,
        held_since=(started_at or _iso(now)) if holds else record.held_since,
    )


def read_records(value: Any) -> list[RequestRecord]:
    """The records of one XCom value (a list of dicts); what cannot be read is skipped."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return []
    out = []
    for item in value:
        if isinstance(item, Mapping):
            record = RequestRecord.from_dict(item)
            if record is not None:
                out.append(record)
    return out


def upsert(records: Iterable[RequestRecord], record: RequestRecord) -> list[dict[str, Any]]:
    """The XCom value with ``record`` in place of the one of the same request (or appended), so
    the records stay in the order the requests were made."""
    out = list(records)
    for index, existing in enumerate(out):
        if existing.request_name == record.request_name:
            out[index] = record
            break
    else:
        out.append(record)
    return [r.to_dict() for r in out]
