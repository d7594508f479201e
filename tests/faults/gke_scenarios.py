"""The fault matrix's GKE rows: a ProvisioningRequest and a Kueue Job, each with the worker SIGKILLed
right after the create, the user marking the waiting task failed, and the triggerer SIGKILLed.

Each side-by-side row adds a queued H100 node pool of its own to the emulated cluster, drawing on
its region's pool (``gke-<region>=nvidia-h100-80gb@<region>``), and makes it a stock-out the way a
busy cluster is one: another request (of no DAG) holds its only node, so the row's request queues
behind it (a pool with no GPUs at all would fail the request at once: it could never fit). When
the row wants capacity to arrive, that holder is deleted.

The requests the matrix counts are the emulator's ProvisioningRequests: the provider's (by their
identity labels) and those Kueue made for a row's Job (by the Job's name in theirs). For Kueue rows
the Jobs are counted too, through the Kubernetes API: one per run, none left running.

The flex-start rows add a flex-start node pool beside the row's queued one, on the same capacity
pool, so the holder's node keeps the row's pod waiting for a node of its own. Their requests are
the emulator's flex-start node records of the row's pods, one request per Job
(``request_sets.flex_job_sets``); the Jobs are counted through the Kubernetes API as for Kueue.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.faults.context import H100, KILLED_TRY_WAIT, VERTEX_POOL, RunRef, Scenario, ScenarioContext
from tests.kube_view import free_capacity, hold_capacity, jobs_of

#: What makes a row's node pool (and holds its capacity): its name.
PoolMaker = Callable[[ScenarioContext], str]

REQUEST_DAG = "dws_fault_gke_request"
KUEUE_DAG = "dws_fault_gke_kueue"
FLEX_DAG = "dws_fault_gke_flex"
#: One a3-highgpu-8g node: what every GKE row asks for.
NODE_GPUS = 8
#: Long enough that no holder or waiting request loses its booking while a row runs.
BOOKING_SECONDS = 3600
#: The cluster's own H100 node pool (in us-central1, the Vertex example's pool): for shared rows.
CLUSTER_POOL = "dws-nvidia-h100-80gb"
#: The cluster's own flex-start H100 node pool, on the same capacity pool.
CLUSTER_FLEX_POOL = "dws-flex-nvidia-h100-80gb"


def _node_pool(ctx: ScenarioContext) -> tuple[str, str]:
    """The row's node pool and the capacity pool it draws on, with one node there, held."""
    address = ctx.deployment.emulator.address
    ctx.emulator.set_kube_booking_window(BOOKING_SECONDS)
    if ctx.region is None:
        name, pool = CLUSTER_POOL, VERTEX_POOL
    else:
        name, pool = f"gke-{ctx.region}", f"{ctx.region}/{H100}"
        ctx.emulator.set_kube_node_pools([f"{name}=nvidia-h100-80gb@{ctx.region}"])
    ctx.emulator.set_capacity({pool: NODE_GPUS})
    hold_capacity(address, name, NODE_GPUS, _holder(ctx))
    ctx.log(f"node pool {name} ({pool}): its one node held by {_holder(ctx)}")
    return name, pool


def _flex_node_pool(ctx: ScenarioContext) -> str:
    """The row's flex-start node pool, on the capacity pool of the row's queued one (held): the
    cluster's own H100 one for a shared row, one of its region's (selected by name) otherwise.
    Empty flex-start nodes go at once: a pod of a later row or run never lands on a node an earlier
    one left for the autoscaler (it would ask for no node, and the row's fault would not happen)."""
    _node_pool(ctx)
    ctx.emulator.set_kube_flex_start(scale_down_seconds=0)
    if ctx.region is None:
        return CLUSTER_FLEX_POOL
    name = f"flex-{ctx.region}"
    ctx.emulator.set_kube_node_pools([f"{name}=nvidia-h100-80gb@{ctx.region}"], flex_start=True)
    ctx.log(f"flex-start node pool {name} beside it")
    return name


def _holder(ctx: ScenarioContext) -> str:
    return f"holder-{ctx.scenario.name.replace('_', '-')}"


def _capacity_arrives(ctx: ScenarioContext) -> None:
    free_capacity(ctx.deployment.emulator.address, _holder(ctx))
    ctx.log("the holder is deleted: capacity arrives")


def _check_one_job(ctx: ScenarioContext, ref: RunRef, labels: dict[str, str]) -> None:
    """A Kueue row: one Job for the run, and none of its pods left running."""
    jobs = jobs_of(ctx.deployment.emulator.address, labels)
    running = [j["metadata"]["name"] for j in jobs if (j.get("status") or {}).get("active")]
    ctx.check(
        "one Job, none running",
        f"{len(jobs)} Job(s), running: {running or 'none'}",
        len(jobs) <= 1 and not running,
    )


def _job_labels(ref: RunRef) -> dict[str, str]:
    from airflow_provider_dws.scheduling.identity import RequestIdentity

    return {"dws_key": RequestIdentity(ref.dag_id, ref.request_task, ref.run_id).key}


def _queued_pool(ctx: ScenarioContext) -> str:
    return _node_pool(ctx)[0]


def _worker_sigkill_after_submit(
    ctx: ScenarioContext, dag_id: str, task: str, expected: str, pool: PoolMaker = _queued_pool
) -> RunRef:
    """Try 1 kills itself right after its create; once try 2 waits deferred on the same request (or
    Job), capacity arrives (10 s later: see compute_worker_sigkill_after_submit on airflow#72716)."""
    name = pool(ctx)
    ref = ctx.trigger(f"{dag_id}_kill_after_submit", "gke", task, expected, {"node_pool": name})
    ctx.wait_waiting(ref, timeout=KILLED_TRY_WAIT, try_number=2)
    time.sleep(10)
    _capacity_arrives(ctx)
    ctx.wait_finished(300)
    ctx.check_killed_after_submit(ref)
    return ref


def gke_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the ProvisioningRequest was created: the retry must adopt it (409
    on its name, never a second request), and the teardown delete it."""
    _worker_sigkill_after_submit(ctx, REQUEST_DAG, "request_nodes", "1+0 RELEASED run=success")


def kueue_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the suspended Job was created: the retry must adopt that Job
    (never submit a second one), which Kueue admits once capacity arrives."""
    ref = _worker_sigkill_after_submit(ctx, KUEUE_DAG, "train", "1+0 RELEASED run=success")
    ctx.after_settle.append(lambda: _check_one_job(ctx, ref, _job_labels(ref)))


def _user_marks_failed(
    ctx: ScenarioContext, dag_id: str, task: str, expected: str, pool: PoolMaker = _queued_pool
) -> RunRef:
    from tests.faults.scenarios import _mark_failed_while_waiting

    name = pool(ctx)
    ref = ctx.trigger(dag_id, "gke", task, expected, {"node_pool": name})
    _mark_failed_while_waiting(ctx, ref)
    ctx.after_settle.append(lambda: _capacity_arrives(ctx))
    return ref


def gke_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting ``request_nodes`` failed: its ProvisioningRequest must be deleted."""
    _user_marks_failed(ctx, REQUEST_DAG, "request_nodes", "1 DELETED run=failed")


def kueue_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting Kueue task failed: its Job must be deleted, and with it its
    Workload and ProvisioningRequest."""
    ref = _user_marks_failed(ctx, KUEUE_DAG, "train", "1 DELETED run=failed")
    ctx.after_settle.append(lambda: _check_no_job(ctx, ref))


def _check_no_job(ctx: ScenarioContext, ref: RunRef) -> None:
    jobs = jobs_of(ctx.deployment.emulator.address, _job_labels(ref))
    ctx.check("the Job deleted", f"{len(jobs)} Job(s) left", not jobs)


def _triggerer_sigkill(
    ctx: ScenarioContext, dag_id: str, task: str, expected: str, pool: PoolMaker = _queued_pool
) -> RunRef:
    from tests.faults.scenarios import _kill_the_triggerer_while_waiting, _only_triggerer

    old = _only_triggerer(ctx)
    name = pool(ctx)
    ref = ctx.trigger(dag_id, "gke", task, expected, {"node_pool": name})
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    _capacity_arrives(ctx)
    ctx.wait_finished(300)
    return ref


def gke_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the ProvisioningRequest waits; a new one must take it over."""
    _triggerer_sigkill(ctx, REQUEST_DAG, "request_nodes", "1 RELEASED run=success")


def kueue_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the Kueue Job waits for admission; a new one must follow it
    to its end."""
    ref = _triggerer_sigkill(ctx, KUEUE_DAG, "train", "1 RELEASED run=success")
    ctx.after_settle.append(lambda: _check_one_job(ctx, ref, _job_labels(ref)))


def flex_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the flex-start Job was created: the retry must adopt that Job
    (never a second one, whose pod would ask for a second node), which runs once its node comes."""
    ref = _worker_sigkill_after_submit(ctx, FLEX_DAG, "evaluate", "1+0 RELEASED run=success", _flex_node_pool)
    ctx.after_settle.append(lambda: _check_one_job(ctx, ref, _job_labels(ref)))


def flex_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting flex-start task failed: its Job must be deleted with its pod, and the
    node asked for it withdrawn (nothing comes up later for a workload that gave up)."""
    ref = _user_marks_failed(ctx, FLEX_DAG, "evaluate", "1 DELETED run=failed", _flex_node_pool)
    ctx.after_settle.append(lambda: _check_no_job(ctx, ref))


def flex_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the flex-start Job's pod waits for a node; a new one must
    follow the Job to its end."""
    ref = _triggerer_sigkill(ctx, FLEX_DAG, "evaluate", "1 RELEASED run=success", _flex_node_pool)
    ctx.after_settle.append(lambda: _check_one_job(ctx, ref, _job_labels(ref)))


GKE_SCENARIOS = [
    Scenario(
        "gke_worker_sigkill_after_submit",
        "GKE: SIGKILL the worker after the ProvisioningRequest",
        gke_worker_sigkill_after_submit,
        ci=True,
    ),
    Scenario("gke_user_marks_failed", "GKE: user marks the waiting task failed", gke_user_marks_failed),
    Scenario(
        "gke_triggerer_sigkill",
        "GKE: SIGKILL the triggerer while the ProvisioningRequest waits",
        gke_triggerer_sigkill,
        shared=True,
    ),
    Scenario(
        "kueue_worker_sigkill_after_submit",
        "Kueue: SIGKILL the worker after the suspended Job",
        kueue_worker_sigkill_after_submit,
    ),
    Scenario(
        "kueue_user_marks_failed",
        "Kueue: user marks the waiting task failed",
        kueue_user_marks_failed,
        ci=True,
    ),
    Scenario(
        "kueue_triggerer_sigkill",
        "Kueue: SIGKILL the triggerer while the Job waits for admission",
        kueue_triggerer_sigkill,
        shared=True,
    ),
    Scenario(
        "flex_worker_sigkill_after_submit",
        "GKE flex-start: SIGKILL the worker after the Job",
        flex_worker_sigkill_after_submit,
    ),
    Scenario(
        "flex_user_marks_failed",
        "GKE flex-start: user marks the waiting task failed",
        flex_user_marks_failed,
    ),
    Scenario(
        "flex_triggerer_sigkill",
        "GKE flex-start: SIGKILL the triggerer while the Job's pod waits for a node",
        flex_triggerer_sigkill,
        shared=True,
    ),
]
GKE_DAG_IDS = [
    REQUEST_DAG,
    f"{REQUEST_DAG}_kill_after_submit",
    KUEUE_DAG,
    f"{KUEUE_DAG}_kill_after_submit",
    FLEX_DAG,
    f"{FLEX_DAG}_kill_after_submit",
]
