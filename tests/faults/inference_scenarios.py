"""The fault matrix's Vertex AI inference rows: a flex-start batch prediction job and a model
deployed on flex-start (its teardown undeploys it), each with the worker SIGKILLed right after the
create, the user marking the waiting task failed, and the triggerer SIGKILLed.

Each side-by-side row asks in a region of its own, whose L4 pool (``<region>/NVIDIA_L4``) it empties
first, so the request waits; capacity arrives when the row gives the pool 4 L4s. The triggerer
rows share the deployment's triggerers and run one at a time, in :data:`SHARED_REGION`, whose pool
no other row uses. A deployment is the emulator's ``ModelDeployment`` record (its name is the
deploy operation's); after every row no endpoint of it may hold a deployed model.
"""

from __future__ import annotations

from tests.faults.context import L4, RunRef, Scenario, ScenarioContext

BATCH_DAG = "dws_fault_vertex_batch"
SERVE_DAG = "dws_fault_vertex_serve"
#: One g2-standard-48: what every row asks for.
GPUS = 4
#: The triggerer rows' region (its L4 pool no other row uses).
SHARED_REGION = "us-west3"


def _pool(ctx: ScenarioContext) -> tuple[str, dict[str, str]]:
    """The row's L4 pool, emptied, and the conf naming its region."""
    region = ctx.region or SHARED_REGION
    pool = f"{region}/{L4}"
    ctx.emulator.set_capacity({pool: 0})
    return pool, {"region": region}


def _check_nothing_deployed(ctx: ScenarioContext, ref: RunRef) -> None:
    """No endpoint of the run holds a deployed model or a deployment still waiting."""
    held = [
        (endpoint["name"], record["deployed_model_id"], record["state"])
        for endpoint in ctx.emulator.vertex_deployments()
        for record in [*endpoint["deployed_models"], *endpoint["waiting"]]
        if record["labels"].get("dws_run") == ref.run_id
    ]
    ctx.check("no model deployed, none waiting", f"{held or 'none'}", not held)


def _worker_sigkill_after_submit(ctx: ScenarioContext, dag_id: str, task: str, expected: str) -> RunRef:
    from tests.faults.scenarios import _retry_adopts_after_kill

    pool, conf = _pool(ctx)
    # 10 s of run time, for the reason worker_sigkill_after_submit gives (apache/airflow#72716).
    ref = ctx.trigger(f"{dag_id}_kill_after_submit", "vx", task, expected, {**conf, "run_seconds": 10})
    _retry_adopts_after_kill(ctx, ref, pool, GPUS, delay=10)
    return ref


def vertex_batch_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the batch job was created: the retry must find that job by its
    identity labels and wait on it (never a second job)."""
    _worker_sigkill_after_submit(ctx, BATCH_DAG, "score", "1+0 SUCCEEDED run=success")


def vertex_serve_worker_sigkill_after_submit(ctx: ScenarioContext) -> None:
    """The worker dies right after the deploy operation started: the retry must find it on the task
    instance's endpoint and wait on it (never a second deployment), and the teardown undeploy it."""
    ref = _worker_sigkill_after_submit(ctx, SERVE_DAG, "serve", "1+0 RELEASED run=success")
    ctx.after_settle.append(lambda: _check_nothing_deployed(ctx, ref))


def _user_marks_failed(ctx: ScenarioContext, dag_id: str, task: str, expected: str) -> RunRef:
    from tests.faults.scenarios import _mark_failed_while_waiting

    pool, conf = _pool(ctx)
    ref = ctx.trigger(dag_id, "vx", task, expected, conf)
    _mark_failed_while_waiting(ctx, ref)
    # Capacity that comes later must not deploy or run anything of the given-up request.
    ctx.after_settle.append(lambda: ctx.give(pool, GPUS))
    return ref


def vertex_batch_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting batch prediction task failed: its job must be cancelled."""
    _user_marks_failed(ctx, BATCH_DAG, "score", "1 CANCELLED run=failed")


def vertex_serve_user_marks_failed(ctx: ScenarioContext) -> None:
    """A user marks the waiting deploy task failed: its deploy operation must be cancelled, and no
    model deployed later."""
    ref = _user_marks_failed(ctx, SERVE_DAG, "serve", "1 CANCELLED run=failed")
    ctx.after_settle.append(lambda: _check_nothing_deployed(ctx, ref))


def _triggerer_sigkill(ctx: ScenarioContext, dag_id: str, task: str, expected: str) -> RunRef:
    from tests.faults.scenarios import _kill_the_triggerer_while_waiting, _only_triggerer

    old = _only_triggerer(ctx)
    pool, conf = _pool(ctx)
    ref = ctx.trigger(dag_id, "vx", task, expected, conf)
    _kill_the_triggerer_while_waiting(ctx, ref, old)
    ctx.give(pool, GPUS)
    ctx.wait_finished(300)
    return ref


def vertex_batch_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the batch job waits; a new one must follow it to its end."""
    _triggerer_sigkill(ctx, BATCH_DAG, "score", "1 SUCCEEDED run=success")


def vertex_serve_triggerer_sigkill(ctx: ScenarioContext) -> None:
    """SIGKILL the only triggerer while the deployment waits; a new one must follow it until the
    model is deployed, and the teardown undeploy it."""
    ref = _triggerer_sigkill(ctx, SERVE_DAG, "serve", "1 RELEASED run=success")
    ctx.after_settle.append(lambda: _check_nothing_deployed(ctx, ref))


INFERENCE_SCENARIOS = [
    Scenario(
        "vertex_batch_worker_sigkill_after_submit",
        "Vertex batch prediction: SIGKILL the worker after the job",
        vertex_batch_worker_sigkill_after_submit,
    ),
    Scenario(
        "vertex_batch_user_marks_failed",
        "Vertex batch prediction: user marks the waiting task failed",
        vertex_batch_user_marks_failed,
    ),
    Scenario(
        "vertex_batch_triggerer_sigkill",
        "Vertex batch prediction: SIGKILL the triggerer while the job waits",
        vertex_batch_triggerer_sigkill,
        shared=True,
    ),
    Scenario(
        "vertex_serve_worker_sigkill_after_submit",
        "Vertex deployment: SIGKILL the worker after the deploy",
        vertex_serve_worker_sigkill_after_submit,
    ),
    Scenario(
        "vertex_serve_user_marks_failed",
        "Vertex deployment: user marks the waiting task failed",
        vertex_serve_user_marks_failed,
    ),
    Scenario(
        "vertex_serve_triggerer_sigkill",
        "Vertex deployment: SIGKILL the triggerer while the deployment waits",
        vertex_serve_triggerer_sigkill,
        shared=True,
    ),
]
INFERENCE_DAG_IDS = [BATCH_DAG, f"{BATCH_DAG}_kill_after_submit", SERVE_DAG, f"{SERVE_DAG}_kill_after_submit"]
