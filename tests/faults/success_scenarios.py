"""The fault matrix's row of a success its trigger ended (issue 36), then cleared by a user.

The trigger of a task whose request it made ends a success itself: it writes the task's XComs
and final record, and no worker resumes the task (``triggers/finish.py``). It cannot write the
task state store, which still says try 1 waits on its job. A user who clears the succeeded task
then starts try 2 on that store: try 2 must keep try 1's job (never cancel it, never make a
second), take it as its result, and the page must show it succeeded, as written by the provider.
"""

from __future__ import annotations

from tests.faults.context import Scenario, ScenarioContext
from tests.faults.harness import HarnessError, wait_for
from tests.faults.page_view import check_page_shows_succeeded

#: What the trigger logs when it ends the task itself.
ENDED_HERE = "The task ends here, in the triggerer"


def user_clears_succeeded_task(ctx: ScenarioContext) -> None:
    """Try 1 succeeds, ended by its trigger; a user clears it; try 2 takes the same job again."""
    ctx.emulator.set_capacity({ctx.pool: 8})
    ref = ctx.trigger(
        "dws_fault_user_action", "vx", "fine_tune", "1+0 SUCCEEDED run=success", {"run_seconds": 2}
    )
    ctx.wait_finished(240)
    ended = ctx.trigger_logs(ref).count(ENDED_HERE)
    ctx.check("try 1 ended by its trigger", f"{ended} end(s) in the triggerer", ended == 1)
    ctx.api.clear_task(ref.dag_id, ref.run_id, ref.request_task)
    ctx.log("cleared the succeeded fine_tune through the REST API")

    def try_2_ended() -> bool:
        ti = ctx.task(ref)
        return ti.get("try_number", 0) >= 2 and ti.get("state") in ("success", "failed")

    try:
        wait_for(try_2_ended, 240, "try 2 to end", 1.0)
    except HarnessError as err:
        ctx.problems.append(str(err))
    ctx.wait_finished(240)
    ended = ctx.trigger_logs(ref).count(ENDED_HERE)
    ctx.check("try 2 ended by its trigger too", f"{ended} end(s) in the triggerer", ended == 2)
    ctx.after_settle.append(lambda: check_page_shows_succeeded(ctx, ref))


SUCCESS_SCENARIOS = [
    Scenario(
        "user_clears_succeeded_task",
        "user clears a task its trigger ended with success",
        user_clears_succeeded_task,
        ci=True,
    ),
]
