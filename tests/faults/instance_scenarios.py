"""The fault matrix's rows for standalone flex-start VMs (no MIG): the worker SIGKILLed right after
its VMs were created, the user marking the waiting task failed, and the only triggerer SIGKILLed
while the VMs wait.

Each side-by-side row asks for 2 x a3-highgpu-8g in zone ``<its region>-a`` (16 H100s of its own
pool); the triggerer row runs alone, in the example's zone.
"""

from __future__ import annotations

from tests.faults.context import VERTEX_POOL, Scenario, ScenarioContext

INSTANCES_DAG = "dws_fault_compute_instances"
INSTANCES_KILL_DAG = "dws_fault_compute_instances_kill_after_submit"
INSTANCES_TASK = "ask_for_vms"
#: Two a3-highgpu-8g VMs: 16 H100s, a whole scenario pool.
INSTANCES_GPUS = 16


def _zone(ctx: ScenarioContext) -> str:
    return f"{ctx.region}-a" if ctx.region is not None else "us-central1-a"


def instances_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after its VMs were created: the retry must adopt them (never a second
    set), and the teardown delete them."""
    from tests.faults.scenarios import _retry_adopts_after_kill

    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger(
        INSTANCES_KILL_DAG, "vms", INSTANCES_TASK, "1+0 RELEASED run=success", {"zone": _zone(ctx)}
    )
    # Capacity 10 s after try 2 deferred: see compute_worker_sigkill_after_submit (apache/airflow#72716).
    _retry_adopts_after_kill(ctx, ref, ctx.pool, INSTANCES_GPUS, delay=10, finish=240)


def instances_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting ``ask_for_vms`` failed: the VMs its trigger made must be deleted
    (none ever runs)."""
    from tests.faults.scenarios import _mark_failed_while_waiting

    ctx.emulator.set_capacity({ctx.pool: 0})
    ref = ctx.trigger(INSTANCES_DAG, "vms", INSTANCES_TASK, "1 DELETED run=failed", {"zone": _zone(ctx)})
    _mark_failed_while_waiting(ctx, ref)


def instances_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the VMs wait; a new one must pick the wait up."""
    from tests.faults.scenarios import _kill_the_triggerer_while_waiting, _only_triggerer

    old = _only_triggerer(ctx)
    ctx.emulator.set_capacity({VERTEX_POOL: 0})
    ref = ctx.trigger(INSTANCES_DAG, "vms", INSTANCES_TASK, "1 RELEASED run=success", {"zone": _zone(ctx)})
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    ctx.give(VERTEX_POOL, INSTANCES_GPUS)
    ctx.wait_finished(240)


INSTANCE_SCENARIOS = [
    Scenario(
        "instances_worker_sigkill_after_submit",
        "Compute VMs, no MIG: SIGKILL the worker after the VMs",
        instances_worker_sigkill_after_submit,
    ),
    Scenario(
        "instances_user_marks_failed",
        "Compute VMs, no MIG: user marks the waiting task failed",
        instances_user_marks_failed,
    ),
    Scenario(
        "instances_triggerer_sigkill",
        "Compute VMs, no MIG: SIGKILL the triggerer while the VMs wait",
        instances_triggerer_sigkill,
        shared=True,
    ),
]
INSTANCES_DAG_IDS = [INSTANCES_DAG, INSTANCES_KILL_DAG]
