"""The fault matrix's Cloud TPU rows beside the shared ``triggerer_sigkill`` (which waits on the TPU
example too): the worker SIGKILLed right after its own create, and the user marking the waiting
task failed while its trigger holds the request it made.

Each row asks for a v5litepod-4 slice in zone ``<its region>-a``: a TPU pool of its own,
:data:`TPU_CHIPS` chips once capacity arrives.
"""

from __future__ import annotations

from tests.faults.context import Scenario, ScenarioContext

TPU_FAULT_DAG = "dws_fault_tpu_slice"
TPU_KILL_DAG = "dws_fault_tpu_kill_after_submit"
TPU_TASK = "request_tpu_slice"
#: Enough for two of the rows' v5litepod-4 slices: a leftover cannot starve a run.
TPU_CHIPS = 8


def tpu_pool(region: str) -> str:
    """The emulator pool a row's slice draws on: v5e chips of zone ``<region>-a``."""
    return f"{region}-a/v5litepod"


def _pool(ctx: ScenarioContext) -> str:
    assert ctx.region is not None, f"{ctx.scenario.name} runs side by side: it has a region"
    return tpu_pool(ctx.region)


def tpu_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after its create returned: the retry must adopt that queued resource
    (never a second one), and the teardown delete it."""
    from tests.faults.scenarios import _retry_adopts_after_kill

    ctx.emulator.set_capacity({_pool(ctx): 0})
    ref = ctx.trigger(TPU_KILL_DAG, "tpu", TPU_TASK, "1+0 RELEASED run=success")
    # Capacity 10 s after try 2 deferred: see compute_worker_sigkill_after_submit (apache/airflow#72716).
    _retry_adopts_after_kill(ctx, ref, _pool(ctx), TPU_CHIPS, delay=10, finish=240)


def tpu_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting ``request_tpu_slice`` failed: the queued resource its trigger made
    must be deleted (no slice ever comes up)."""
    from tests.faults.scenarios import _mark_failed_while_waiting

    ctx.emulator.set_capacity({_pool(ctx): 0})
    ref = ctx.trigger(TPU_FAULT_DAG, "tpu", TPU_TASK, "1 DELETED run=failed")
    _mark_failed_while_waiting(ctx, ref)


TPU_SCENARIOS = [
    Scenario(
        "tpu_worker_sigkill_after_submit",
        "TPU: SIGKILL the worker after the queued resource",
        tpu_worker_sigkill_after_submit,
    ),
    Scenario("tpu_user_marks_failed", "TPU: user marks the waiting task failed", tpu_user_marks_failed),
]
TPU_DAG_IDS = [TPU_FAULT_DAG, TPU_KILL_DAG]
