"""What a fault-matrix scenario works with: the runs it drives, its view of the deployment, the facts.

A scenario triggers one or more DAG runs in a shared :class:`~tests.faults.harness.Deployment`
through a :class:`ScenarioContext`, injects its fault, and waits for the runs to end. The
signature of a run, ``<requests per try> <final request states> run=<state>``, and the counts of
orphans and duplicates are computed here from the emulator's request records; see
:mod:`tests.faults.matrix` for what they mean.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tests.faults.harness import Deployment, HarnessError, wait_for
from tests.faults.request_sets import flex_job_sets, instance_sets

VERTEX_DAG = "dws_vertex_flex_start"
TPU_DAG = "dws_tpu_queued_resource"
BATCH_DAG = "dws_batch_flex_start"
COMPUTE_DAG = "dws_compute_flex_start_vms"
H100 = "NVIDIA_H100_80GB"
#: The Batch example's GPU (``nvidia-l4``), as the emulator's pools, shared with Vertex AI, spell it.
L4 = "NVIDIA_L4"
#: The pools the example DAGs ask in (region and accelerator; zone and TPU family). The Batch
#: example asks in the Vertex example's region, but for L4s: a pool no other example uses.
VERTEX_POOL = f"us-central1/{H100}"
TPU_POOL = "us-west4-a/v5litepod"
BATCH_REGION = "us-central1"
BATCH_POOL = f"{BATCH_REGION}/{L4}"
#: Enough for two of the example's 8-GPU jobs (16-chip slices, 16-VM Batch jobs of one L4 each):
#: a leftover cannot starve a run.
VERTEX_FULL, TPU_FULL, BATCH_FULL = 16, 32, 32

LIVE_STATES = {
    "CustomJob": {"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING"},
    "QueuedResource": {
        "CREATING",
        "ACCEPTED",
        "WAITING_FOR_RESOURCES",
        "PROVISIONING",
        "ACTIVE",
        "SUSPENDING",
    },
    "BatchJob": {"QUEUED", "SCHEDULED", "RUNNING", "CANCELLATION_IN_PROGRESS", "DELETION_IN_PROGRESS"},
    # A SUCCEEDED resize request stays SUCCEEDED: it is live while its VMs are (see is_live).
    "ResizeRequest": {"CREATING", "ACCEPTED"},
    # A delivered block stays FULFILLED: it is live while its reservation is (see is_live).
    "FutureReservation": {"DRAFTING", "PENDING_APPROVAL", "APPROVED", "PROCURING", "PROVISIONING"},
    # A GKE ProvisioningRequest: queued, then holding its nodes (consumed or not) until deleted.
    "ProvisioningRequest": {"ACCEPTED", "PROVISIONED", "CONSUMED"},
    # Standalone flex-start VMs, one record per set (see instance_sets).
    "InstanceSet": {"PENDING", "RUNNING"},
    # A Job's flex-start nodes, one record per Job (see flex_job_sets).
    "FlexStartJob": {"WAITING", "RUNNING"},
    # Vertex AI inference: a batch prediction job, and a model deployment (waiting, then deployed
    # until its teardown or its max runtime undeploys it).
    "BatchPredictionJob": {
        "JOB_STATE_QUEUED",
        "JOB_STATE_PENDING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_CANCELLING",
    },
    "ModelDeployment": {"WAITING", "STARTING", "DEPLOYED"},
}
#: For duplicates, a request stops counting once it was given up: CANCELLING holds no new capacity.
GIVEN_UP_STATES = {"JOB_STATE_CANCELLING", "SUSPENDING", "CANCELLATION_IN_PROGRESS", "DELETION_IN_PROGRESS"}
HELD_STATES = {kind: states - GIVEN_UP_STATES for kind, states in LIVE_STATES.items()}
#: The state in which a request holds its result: a later one of the same attempt is a duplicate.
SUCCESS_STATES = {
    "CustomJob": "JOB_STATE_SUCCEEDED",
    "QueuedResource": "ACTIVE",
    "BatchJob": "SUCCEEDED",
    "ResizeRequest": "SUCCEEDED",
    # Booked: a block made after an approved one of the same attempt is a second booking.
    "FutureReservation": "APPROVED",
    "ProvisioningRequest": "PROVISIONED",
    "InstanceSet": "RUNNING",
    "FlexStartJob": "RUNNING",
    "BatchPredictionJob": "JOB_STATE_SUCCEEDED",
    "ModelDeployment": "DEPLOYED",
}
#: Waiting for capacity (a Flex Start Batch job stays QUEUED until its VMs can be created).
WAITING_STATES = {
    "JOB_STATE_QUEUED",
    "JOB_STATE_PENDING",
    "CREATING",
    "ACCEPTED",
    "WAITING_FOR_RESOURCES",
    "QUEUED",
    # A set of standalone flex-start VMs some of which wait PENDING.
    "PENDING",
    # A Job's pods waiting for flex-start nodes.
    "WAITING",
    # A calendar block waits for its approval, then for its start and delivery.
    "PENDING_APPROVAL",
    "APPROVED",
    "PROCURING",
    "PROVISIONING",
}
#: The first state that shows a request was being cancelled.
CANCEL_STATES = {"JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED", "CANCELLATION_IN_PROGRESS", "CANCELLED"}
TERMINAL_RUN_STATES = {"success", "failed"}
#: How long after its runs ended a scenario's requests may take to stop (cancel, delete).
SETTLE_SECONDS = 60.0
#: How long a kill-after-submit row may take from its trigger until try 2 waits deferred. Under
#: ``make test`` a dozen rows start at once beside the end-to-end tests on two cores: try 1 of the
#: Vertex and Compute rows once took 136 s from its start to its first API call (2026-12-03), past
#: the 180 s this was; try 2 then needs its own start-up, the retry delay and its scheduling.
KILLED_TRY_WAIT = 420.0


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def log_tail(log: str, lines: int = 25) -> str:
    """The last lines of a task log, for a row that failed before the harness could look (an empty
    log says the worker never wrote one)."""
    kept = [line[:600] for line in log.strip().splitlines()[-lines:]]
    return "\n".join(kept) if kept else "(no task log was written)"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# -- what a scenario drives and expects -----------------------------------------------------------


@dataclass
class RunRef:
    """One DAG run a scenario triggered, the task in it that asks for capacity, and what it expects."""

    label: str
    dag_id: str
    run_id: str
    request_task: str
    expected: str = ""


@dataclass
class Check:
    """A scenario-specific condition: what was expected, what was seen, whether it held."""

    expected: str
    seen: str
    ok: bool


@dataclass
class RunFacts:
    """What Airflow and the emulator show about one run."""

    ref: RunRef
    run_state: str
    task_states: dict[str, str]
    per_try: list[int]
    requests: list[dict[str, Any]]

    def signature(self) -> str:
        return signature(self.per_try, [final_state(r) for r in self.requests], self.run_state)


@dataclass
class Row:
    """One line of the table."""

    scenario: str
    requests_per_try: str
    orphans: int
    duplicates: int
    task_states: str
    expected: str
    seen: str
    passed: bool
    seconds: float
    problems: list[str] = field(default_factory=list)


def signature(per_try: Sequence[int], finals: Sequence[str], run_state: str) -> str:
    """``1+0 SUCCEEDED run=success``: requests created per try, their final states, the run's state."""
    tries = "+".join(str(n) for n in per_try) or "0"
    return f"{tries} {','.join(finals) or '-'} run={run_state}"


def final_state(record: dict[str, Any]) -> str:
    """A request's final state, short: ``SUCCEEDED``; a TPU slice released after ACTIVE is ``RELEASED``,
    a deleted Batch job ``DELETED`` (its record keeps the state DELETION_IN_PROGRESS)."""
    state = str(record["state"]).removeprefix("JOB_STATE_")
    if record["kind"] == "QueuedResource" and record["deleted"]:
        reached = {h["state"] for h in record["history"]}
        return "RELEASED" if "ACTIVE" in reached else "DELETED"
    if record["kind"] == "BatchJob" and record["deleted"]:
        return "DELETED"
    if record["kind"] == "ModelDeployment" and state == "UNDEPLOYED":
        # Released: deployed, then undeployed (by the teardown, or its max runtime).
        return "RELEASED"
    if record["kind"] == "ResizeRequest":
        # Released: its VMs were deleted after it SUCCEEDED (by the teardown or the run duration).
        if state == "SUCCEEDED" and record["vms_deleted"]:
            return "RELEASED"
        if record["deleted"] and state not in {"CANCELLED", "FAILED"}:
            return "DELETED"
    if record["kind"] == "ProvisioningRequest" and record["deleted"]:
        # Released: deleted after its nodes were Provisioned (the teardown, or Kueue when its Job
        # ended); deleted while queued: DELETED; a Failed one keeps FAILED.
        reached = {h["state"] for h in record["history"]}
        if state == "FAILED":
            return state
        return "RELEASED" if reached & {"PROVISIONED", "CONSUMED"} else "DELETED"
    if record["kind"] == "FutureReservation" and record["deleted"]:
        # Released: its delivered block was given back (deleted, its reservation with it).
        return "RELEASED" if state == "FULFILLED" else "DELETED" if state not in {"CANCELLED"} else state
    return state


def is_live(record: dict[str, Any]) -> bool:
    """Waiting, running or holding capacity; a resize request also while any of its VMs exists, a
    future reservation while its delivered reservation does."""
    if record["kind"] == "ResizeRequest" and record["state"] == "SUCCEEDED":
        return not record["vms_deleted"]
    if record["kind"] == "FutureReservation" and record["state"] == "FULFILLED":
        return bool(record["reservation_live"])
    return not record["deleted"] and record["state"] in LIVE_STATES[record["kind"]]


#: Kinds without labels, whose name is derived from the task instance (their identity).
NAMED_KINDS = {"ResizeRequest", "FutureReservation"}
#: The ProvisioningRequest Kueue makes for a Job's Workload: ``job-<Job>-<5 hex>-<check>-<n>``, the
#: Job's name the provider's (``<base>-t<try>-a<attempt>``). It has none of the Job's labels.
KUEUE_REQUEST = re.compile(r"^job-(?P<base>.+)-t(?P<try>\d+)-a(?P<attempt>\d+)-[0-9a-f]{5}-.+-\d+$")


def logged_name(record: dict[str, Any]) -> str:
    """How the trigger's log lines name the request: its resource name; a ProvisioningRequest
    without its namespace; one Kueue made, by its Job's name (the trigger follows the Job)."""
    if record["kind"] == "FlexStartJob":
        return str(record["display_name"])
    if record["kind"] != "ProvisioningRequest":
        return str(record["name"])
    match = KUEUE_REQUEST.match(record["display_name"]) if not record["labels"].get("dws_key") else None
    if match is not None:
        return f"{match['base']}-t{match['try']}-a{match['attempt']}"
    return str(record["display_name"])


def _kueue_identity(record: dict[str, Any]) -> tuple[str, int] | None:
    """A Kueue-made ProvisioningRequest's identity: its Job's base name and attempt."""
    if record["kind"] != "ProvisioningRequest" or record["labels"].get("dws_key"):
        return None
    match = KUEUE_REQUEST.match(record["display_name"])
    return None if match is None else (match["base"], int(match["attempt"]))


def _resize_identity(record: dict[str, Any]) -> tuple[str, int] | None:
    """A resize request or a future reservation has no labels: its name is its identity (base and
    attempt)."""
    from airflow_provider_dws.scheduling.identity import parse_attempt_name

    parsed = parse_attempt_name(record["display_name"])
    return None if parsed is None else (parsed[0], parsed[2])


def own_requests(records: Iterable[dict[str, Any]], ref: RunRef) -> list[dict[str, Any]]:
    """The requests one run's request task created (identity labels; TPU: on the slice's nodes;
    a resize request or a future reservation: its name, derived from the task instance; a set of
    standalone VMs as one request, :func:`instance_sets`)."""
    from airflow_provider_dws.scheduling.identity import RequestIdentity

    task_identity = RequestIdentity(ref.dag_id, ref.request_task, ref.run_id)
    base = task_identity.queued_resource_base()
    out = []
    for r in flex_job_sets(instance_sets(records)):
        kueue = _kueue_identity(r)
        if kueue is not None:
            if kueue[0] == base:
                out.append(r)
        elif r["kind"] == "ProvisioningRequest":
            # Kubernetes label values are spelled apart (lower case, no colon): the key is the same.
            if r["labels"].get("dws_key") == task_identity.key:
                out.append(r)
        elif r["kind"] in NAMED_KINDS:
            identity = _resize_identity(r)
            if identity is not None and identity[0] == base:
                out.append(r)
        elif (
            r["labels"].get("dws_dag") == ref.dag_id
            and r["labels"].get("dws_run") == ref.run_id
            and r["labels"].get("dws_task") == ref.request_task
        ):
            out.append(r)
    return out


def requests_per_try(records: Sequence[dict[str, Any]], tries: Sequence[dict[str, Any]]) -> list[int]:
    """How many requests each try created: a request belongs to the last try started before it."""
    starts = [(t["try_number"], parse_time(t.get("start_date"))) for t in tries]
    counts = {number: 0 for number, _ in starts} or {1: 0}
    first = min(counts)
    for record in records:
        created = parse_time(record["create_time"])
        owner = first
        for number, started in starts:
            if started is not None and created is not None and started <= created:
                owner = max(owner, number)
        counts[owner] = counts.get(owner, 0) + 1
    return [counts[n] for n in sorted(counts)]


def _live_until(record: dict[str, Any]) -> datetime | None:
    """When a request stopped counting (None: still live, or it succeeded and holds the result)."""
    for step in record["history"]:
        state = step["state"]
        if state == SUCCESS_STATES[record["kind"]]:
            return None
        if state not in HELD_STATES[record["kind"]]:
            return parse_time(step["time"])
    return None


def count_duplicates(records: Sequence[dict[str, Any]]) -> int:
    """Requests created while another of the same identity and attempt was live or had succeeded."""
    by_identity: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        key = (record["labels"].get("dws_key", record["name"]), record["labels"].get("dws_attempt", "1"))
        resize = _resize_identity(record) if record["kind"] in NAMED_KINDS else _kueue_identity(record)
        if resize is not None:
            key = (resize[0], str(resize[1]))
        by_identity.setdefault(key, []).append(record)
    duplicates = 0
    for group in by_identity.values():
        group.sort(key=lambda r: r["create_time"])
        for index, record in enumerate(group[1:], start=1):
            created = parse_time(record["create_time"])
            for earlier in group[:index]:
                until = _live_until(earlier)
                if until is None or (created is not None and created < until):
                    duplicates += 1
                    break
    return duplicates


# -- the scenario's view of the deployment ----------------------------------------------------------


class Scenario:
    """A named fault with its procedure; ``ci`` ones also run in ``make test`` (LocalExecutor).

    ``executors`` are those it runs on (keys of :data:`tests.faults.harness.EXECUTORS`): a fault
    that only one executor has, such as a whole Celery worker dying, runs only there.
    """

    def __init__(
        self,
        name: str,
        title: str,
        procedure: Callable[[ScenarioContext], None],
        *,
        shared: bool = False,
        ci: bool = False,
        executors: tuple[str, ...] = ("local", "celery"),
    ) -> None:
        self.name = name
        self.title = title
        self.procedure = procedure
        self.shared = shared
        self.ci = ci
        self.executors = executors


class ScenarioContext:
    """What a scenario procedure gets: the deployment, its own region, and helpers to act and wait."""

    def __init__(self, deployment: Deployment, scenario: Scenario, region: str | None) -> None:
        self.deployment = deployment
        self.scenario = scenario
        self.region = region
        self.runs: list[RunRef] = []
        self.checks: list[Check] = []
        self.after_settle: list[Callable[[], None]] = []
        self.problems: list[str] = []
        self.started = time.monotonic()

    @property
    def api(self) -> Any:
        assert self.deployment.api is not None
        return self.deployment.api

    @property
    def emulator(self) -> Any:
        assert self.deployment.emulator is not None
        return self.deployment.emulator.control

    @property
    def pool(self) -> str:
        """The scenario's own Vertex pool (its region)."""
        assert self.region is not None, f"{self.scenario.name} is shared: it uses the examples' pools"
        return f"{self.region}/{H100}"

    @property
    def l4_pool(self) -> str:
        """The scenario's own pool of L4 GPUs (its region), for Batch jobs."""
        assert self.region is not None, f"{self.scenario.name} is shared: it uses the examples' pools"
        return f"{self.region}/{L4}"

    def log(self, message: str) -> None:
        print(f"  [{self.scenario.name} +{time.monotonic() - self.started:5.1f}s] {message}", flush=True)

    def trigger(
        self, dag_id: str, label: str, request_task: str, expected: str, conf: dict[str, Any] | None = None
    ) -> RunRef:
        """Start a DAG run whose run id (a valid label value) marks the scenario's requests."""
        run_id = f"fm-{self.scenario.name.replace('_', '-')}-{label}-{secrets.token_hex(3)}"
        conf = dict(conf or {})
        if self.region is not None:
            conf.setdefault("region", self.region)
        self.api.trigger(dag_id, run_id, conf)
        ref = RunRef(label, dag_id, run_id, request_task, expected)
        self.runs.append(ref)
        self.log(f"triggered {dag_id} run {run_id}")
        return ref

    def check(self, expected: str, seen: str, ok: bool) -> None:
        self.checks.append(Check(expected, seen, ok))

    def task(self, ref: RunRef, task_id: str | None = None) -> dict[str, Any]:
        return self.api.task_instances(ref.dag_id, ref.run_id).get(task_id or ref.request_task, {})

    def requests(self, ref: RunRef) -> list[dict[str, Any]]:
        return own_requests(self.emulator.requests(), ref)

    def wait_waiting(self, ref: RunRef, timeout: float = 300.0, try_number: int = 1) -> dict[str, Any]:
        """Until the request task's try is deferred on a request that waits for capacity (generous:
        a worker on two busy cores has taken 90 s from its start to its first API call)."""

        def ready() -> dict[str, Any] | None:
            ti = self.task(ref)
            if ti.get("state") in ("failed", "success", "upstream_failed"):
                raise HarnessError(
                    f"{ref.request_task} ended {ti['state']} before it was waiting; the end of its log:\n"
                    + log_tail(self.task_log(ref, max(1, ti.get("try_number", 1))))
                )
            if ti.get("state") != "deferred" or ti.get("try_number", 0) < try_number:
                return None
            waiting = [r for r in self.requests(ref) if r["state"] in WAITING_STATES]
            return ti if waiting else None

        ti = wait_for(ready, timeout, f"{ref.request_task} of {ref.run_id} to wait deferred", 1.0)
        self.log(f"{ref.request_task} try {ti['try_number']} is deferred, its request waits for capacity")
        return ti

    def task_log(self, ref: RunRef, try_number: int) -> str:
        """The task log of one try of the request task (the worker's side)."""
        path = (
            self.deployment.home
            / "logs"
            / f"dag_id={ref.dag_id}"
            / f"run_id={ref.run_id}"
            / f"task_id={ref.request_task}"
            / f"attempt={try_number}.log"
        )
        return path.read_text(errors="replace") if path.exists() else ""

    def check_killed_after_submit(self, ref: RunRef) -> None:
        """Check that try 1 really died of SIGKILL right after its submit (the DAG's fault fired)."""
        log = self.task_log(ref, 1)
        fired = "FAULT: SIGKILL" in log
        killed = '"signal":-9' in log.replace(" ", "")
        seen = (
            "try 1 SIGKILLed after submit" if fired and killed else f"fault fired={fired}, signal 9={killed}"
        )
        self.check("try 1 SIGKILLed after submit", seen, fired and killed)

    def trigger_logs(self, ref: RunRef) -> str:
        """The trigger logs of the request task (every try and trigger), as Airflow wrote them."""
        base = self.deployment.home / "logs" / f"dag_id={ref.dag_id}" / f"run_id={ref.run_id}"
        files = sorted((base / f"task_id={ref.request_task}").glob("attempt=*.log.trigger.*.log"))
        return "".join(f.read_text(errors="replace") for f in files)

    def wait_polled(self, ref: RunRef, starts: int = 1, timeout: float = 120.0) -> None:
        """Until the trigger logged a status of its request ``starts`` times (once per trigger start).

        Only then is the request "waiting" as a user sees it: the trigger runs and has read it.
        """

        def polled() -> bool:
            names = [logged_name(r) for r in self.requests(ref)]
            lines = [line for line in self.trigger_logs(ref).splitlines() if any(n in line for n in names)]
            # "Waiting on NAME" opens every trigger start; the first status line follows it.
            opened = [i for i, line in enumerate(lines) if "Waiting on " in line]
            return len(opened) >= starts and len(lines) > opened[starts - 1] + 1

        wait_for(polled, timeout, f"the trigger of {ref.run_id} to read its request", 1.0)

    def wait_trigger_running(self, refs: Sequence[RunRef], job_ids: set[int], timeout: float = 120.0) -> None:
        """Until every deferred request task's trigger is assigned to one of ``job_ids``."""

        def assigned() -> bool:
            for ref in refs:
                owners = self.deployment.trigger_assignments(ref.dag_id, ref.run_id)
                if owners.get(ref.request_task) not in job_ids:
                    return False
            return True

        wait_for(assigned, timeout, f"the triggers to run on triggerer job(s) {sorted(job_ids)}", 0.5)

    def wait_finished(self, timeout: float, refs: Sequence[RunRef] | None = None) -> bool:
        """Until every run (or ``refs``) ended; False when ``timeout`` passed first."""
        refs = list(refs or self.runs)

        def done() -> bool:
            return all(self.api.dag_run(r.dag_id, r.run_id)["state"] in TERMINAL_RUN_STATES for r in refs)

        try:
            wait_for(done, timeout, "the runs to end", 1.0)
        except HarnessError:
            self.log(f"runs still not finished after {timeout:.0f}s")
            return False
        return True

    def give(self, pool: str, count: int = 8) -> None:
        """Capacity arrives: ``count`` accelerators in ``pool``."""
        self.emulator.set_capacity({pool: count})
        self.log(f"capacity arrives in {pool}")

    def check_cancelled_within(
        self, ref: RunRef, since: datetime, limit: float, first_only: bool = False
    ) -> None:
        """Check that the run's requests (only the first, with ``first_only``) were cancelled in time."""
        records = self.requests(ref)[:1] if first_only else self.requests(ref)
        stamps = [cancel_time(r) for r in records]
        if not records or None in stamps:
            self.check(f"cancelled <= {limit:.0f}s", "not cancelled", False)
            return
        latency = max((s - since).total_seconds() for s in stamps if s is not None)
        self.check(f"cancelled <= {limit:.0f}s", f"cancelled after {latency:.1f}s", latency <= limit)


def cancel_time(record: dict[str, Any]) -> datetime | None:
    """When a request's cancellation shows first in its history (None: never); a ProvisioningRequest
    and a queued resource have no cancel: they are deleted."""
    extra = {
        "ProvisioningRequest": {"DELETED"},
        "QueuedResource": {"DELETING", "DELETED"},
        "InstanceSet": {"DELETED"},
        "FlexStartJob": {"DELETED"},
    }
    cancelled = CANCEL_STATES | extra.get(record["kind"], set())
    for step in record["history"]:
        if step["state"] in cancelled:
            return parse_time(step["time"])
    return None
