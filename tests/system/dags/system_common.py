"""What every system-test DAG shares: where it runs, how its resources are named, the watcher and
the final sweep.

A system-test DAG runs against a real Google Cloud project when ``SYSTEM_TESTS_GCP_PROJECT`` is
set (``pytest --system tests/system``, docs/system-tests.md), and against ``dws-emulator``
otherwise (``make test`` runs every one of them there, so they cannot rot). Everything it makes is
labelled ``dws_system_test=<SYSTEM_TESTS_ENV_ID>``, and the final sweep releases whatever of the
run's requests is still queued or held, whatever happened before it.
"""

from __future__ import annotations

import contextlib
import os
import re
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

#: Set by a real-project run; the emulator's runs use a made-up project.
PROJECT_ID = os.environ.get("SYSTEM_TESTS_GCP_PROJECT") or "dws-system-tests"
ON_EMULATOR = not os.environ.get("SYSTEM_TESTS_GCP_PROJECT")
#: Names this run's resources apart from another's (a CI job id, a developer's name).
ENV_ID = re.sub(r"[^a-z0-9-]", "-", (os.environ.get("SYSTEM_TESTS_ENV_ID") or "local").lower())[:20]
#: On every request, so the sweep and a person in the console can find what a run made.
LABELS = {"dws_system_test": ENV_ID}
#: A real run polls at the operators' default; the emulator's runs at once.
POLL_INTERVAL = 1.0 if ON_EMULATOR else 30.0
#: Sized for a real bill: a short wait, then give up (the request is cancelled).
MAX_WAIT = timedelta(minutes=2) if ON_EMULATOR else timedelta(minutes=30)
#: The most a workload may hold its accelerators.
MAX_RUN = timedelta(minutes=10)
#: A container a real project can pull and that ends at once (override with SYSTEM_TESTS_DWS_IMAGE).
IMAGE = os.environ.get("SYSTEM_TESTS_DWS_IMAGE") or "us-docker.pkg.dev/cloudrun/container/job:latest"
#: Read by the emulator only (how long a fake workload runs); a real container ignores them.
EMULATOR_ENV = {"DWS_EMULATOR_RUN_SECONDS": "2", "DWS_EMULATOR_EXIT_CODE": "0"}


def system_dag(dag_id: str) -> DAG:
    """A system-test DAG: run by hand or by the test, never on a schedule."""
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "system-test"],
    )


@task(trigger_rule="one_failed", retries=0)
def watcher() -> None:
    """Fails the run when any task failed: a teardown's failure would not fail it otherwise."""
    raise RuntimeError("a task of this system test failed; see its log")


def watch(dag: Any) -> None:
    """Put :func:`watcher` after every task of ``dag`` but its setups (Airflow lets only
    all-success tasks follow a setup; a failed setup fails the tasks after it, which the watcher
    sees).
    """
    [t for t in dag.tasks if not t.is_setup] >> watcher()


@task(trigger_rule="all_done", retries=0)
def sweep(task_ids: list[str], **context: Any) -> dict[str, list[str]]:
    """Release every request the run's DWS tasks made that is still queued or held.

    It finds each task instance's requests as a retry of the task would (the provider's own
    lookup by identity labels, in every location the task may use; a location only known at
    run time, such as a calendar block's zone chosen by the advice, from the name the task
    pushed), and releases each one that has not ended. On a healthy run, where the DAG's own
    teardowns did their work, it releases nothing. A request the API will not give back (an
    approved calendar block) is reported as kept.
    """
    dag, run_id, ti = context["dag"], context["run_id"], context["ti"]
    live: dict[str, Any] = {}
    for task_id in task_ids:
        op = dag.get_task(task_id)
        adapter = op.adapter()
        for backend in _backends(op, adapter, ti.xcom_pull(task_ids=task_id, key=adapter.name_key)):
            for status in _requests(backend, dag.dag_id, task_id, run_id):
                if not status.phase.terminal:
                    live[status.name] = backend
    released, kept = [], []
    for name, backend in live.items():
        try:
            (released if backend.release(name) else kept).append(name)
        except Exception as error:  # refused (a block past its lock time): say so, sweep the rest
            print(f"DWS SWEEP: {name} was not released: {error}")
            kept.append(name)
    print(f"DWS SWEEP: released {len(released)} request(s) still queued or held: {released}; kept {kept}")
    return {"released": released, "kept": kept}


def _backends(op: Any, adapter: Any, pushed: str | None) -> list[Any]:
    """The backends of every location the task may have used."""
    locations = {adapter.location_of(pushed)} if pushed else set()
    # A location resolved only when the task ran raises here: the pushed name has it.
    with contextlib.suppress(ValueError):
        locations |= {p.location for p in op.placements()}
    return [adapter.backend(location) for location in sorted(locations)]


def _requests(backend: Any, dag_id: str, task_id: str, run_id: str) -> list[Any]:
    """The task instance's requests in ``backend``'s location, found by identity."""
    from airflow_provider_dws.scheduling.identity import RequestIdentity

    return list(backend.find(RequestIdentity(dag_id, task_id, run_id)))
