"""The fault matrix's Cloud TPU rows beside the shared ``triggerer_sigkill`` (which waits on the TPU
example too): the worker SIGKILLed right after its own create, and the user marking the waiting
task failed while its trigger holds the request it made; the same two and the triggerer SIGKILLed
for a flex-start slice (``v2alpha1``).

Each side-by-side row asks for a v5litepod-4 (flex-start: v6e-4) slice in zone ``<its region>-a``:
a TPU pool of its own, :data:`TPU_CHIPS` chips once capacity arrives. The flex-start triggerer
row runs alone, in zone ``us-east5-a``.
"""

from __future__ import annotations

from tests.faults.context import Scenario, ScenarioContext

TPU_FAULT_DAG = "dws_fault_tpu_slice"
TPU_KILL_DAG = "dws_fault_tpu_kill_after_submit"
TPU_TASK = "request_tpu_slice"
FLEX_DAG = "dws_fault_tpu_flex_slice"
FLEX_KILL_DAG = "dws_fault_tpu_flex_kill_after_submit"
#: The zone of the flex-start row that runs alone (``params.region`` us-east5).
FLEX_SHARED_POOL = "us-east5-a/v6e"
#: Enough for two of the rows' v5litepod-4 slices: a leftover cannot starve a run.
TPU_CHIPS = 8


def tpu_pool(region: str) -> str:
    """The emulator pool a row's slice draws on: v5e chips of zone ``<region>-a``."""
    return f"{region}-a/v5litepod"


def flex_pool(region: str) -> str:
    """The emulator pool a row's flex-start slice draws on: v6e chips of zone ``<region>-a``."""
    return f"{region}-a/v6e"


def _pool(ctx: ScenarioContext, flex: bool = False) -> str:
    assert ctx.region is not None, f"{ctx.scenario.name} runs side by side: it has a region"
    return flex_pool(ctx.region) if flex else tpu_pool(ctx.region)


def tpu_worker_sigkill_after_submit(ctx: ScenarioContext, flex: bool = False) -> None:
    """The worker dies right after its create returned: the retry must adopt that queued resource
    (never a second one), and the teardown delete it."""
    from tests.faults.scenarios import _retry_adopts_after_kill

    ctx.emulator.set_capacity({_pool(ctx, flex): 0})
    ref = ctx.trigger(FLEX_KILL_DAG if flex else TPU_KILL_DAG, "tpu", TPU_TASK, "1+0 RELEASED run=success")
    # Capacity 10 s after try 2 deferred: see compute_worker_sigkill_after_submit (apache/airflow#72716).
    _retry_adopts_after_kill(ctx, ref, _pool(ctx, flex), TPU_CHIPS, delay=10, finish=240)


def tpu_user_marks_failed(ctx: ScenarioContext, flex: bool = False) -> None:
    """A user marks the waiting ``request_tpu_slice`` failed: the queued resource its trigger made
    must be deleted (no slice ever comes up)."""
    from tests.faults.scenarios import _mark_failed_while_waiting

    ctx.emulator.set_capacity({_pool(ctx, flex): 0})
    ref = ctx.trigger(FLEX_DAG if flex else TPU_FAULT_DAG, "tpu", TPU_TASK, "1 DELETED run=failed")
    _mark_failed_while_waiting(ctx, ref)


def flex_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while a flex-start slice waits; a new one must pick the wait up."""
    from tests.faults.scenarios import _kill_the_triggerer_while_waiting, _only_triggerer

    old = _only_triggerer(ctx)
    ctx.emulator.set_capacity({FLEX_SHARED_POOL: 0})
    ref = ctx.trigger(FLEX_DAG, "tpu", TPU_TASK, "1 RELEASED run=success", {"region": "us-east5"})
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    ctx.give(FLEX_SHARED_POOL, TPU_CHIPS)
    ctx.wait_finished(240)


TPU_SCENARIOS = [
    Scenario(
        "tpu_worker_sigkill_after_submit",
        "TPU: SIGKILL the worker after the queued resource",
        tpu_worker_sigkill_after_submit,
    ),
    Scenario("tpu_user_marks_failed", "TPU: user marks the waiting task failed", tpu_user_marks_failed),
    Scenario(
        "tpu_flex_worker_sigkill_after_submit",
        "TPU flex-start: SIGKILL the worker after the queued resource",
        lambda ctx: tpu_worker_sigkill_after_submit(ctx, flex=True),
    ),
    Scenario(
        "tpu_flex_user_marks_failed",
        "TPU flex-start: user marks the waiting task failed",
        lambda ctx: tpu_user_marks_failed(ctx, flex=True),
    ),
    Scenario(
        "tpu_flex_triggerer_sigkill",
        "TPU flex-start: SIGKILL the triggerer while the slice waits",
        flex_triggerer_sigkill,
        shared=True,
    ),
]
TPU_DAG_IDS = [TPU_FAULT_DAG, TPU_KILL_DAG, FLEX_DAG, FLEX_KILL_DAG]
