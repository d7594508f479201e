"""The system-test DAGs of ``tests/system/dags``, each run to its end.

Two targets. ``emulator``: all eleven against one ``dws-emulator``, in every ``make test`` (so the
files cannot rot), one after another in one process (``scripts/run_dags.py``: ``dag.test()``, what
``airflow dags test`` runs, without a process start per DAG, which was most of their CPU): each run
succeeds, its workload check ran, the sweep found nothing left to release (the DAG's own teardowns
did their work) and the emulator holds nothing of it. ``project``: each DAG against
the real Google Cloud project ``SYSTEM_TESTS_GCP_PROJECT``, only with ``pytest --system``
(docs/system-tests.md); skipped, with one line saying how to run it, otherwise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import BIN, DAG_RUN_TIMEOUT, ROOT, AirflowHome, emulator_env, split_by_dag

DAGS = Path(__file__).parent / "dags"
#: Each system-test DAG by its id, and what a real project needs for it beyond SYSTEM_TESTS_GCP_PROJECT
#: and SYSTEM_TESTS_ENV_ID.
SYSTEM_DAGS: dict[str, tuple[str, ...]] = {
    "dws_system_vertex_ai": (),
    "dws_system_vertex_inference": ("SYSTEM_TESTS_VERTEX_MODEL", "SYSTEM_TESTS_VERTEX_BUCKET"),
    "dws_system_batch": (),
    "dws_system_compute": (),
    "dws_system_compute_instances": (),
    "dws_system_tpu": (),
    "dws_system_tpu_flex": (),
    "dws_system_calendar": (),
    "dws_system_gke": ("SYSTEM_TESTS_GKE_LOCATION", "SYSTEM_TESTS_GKE_CLUSTER"),
    "dws_system_kueue": (
        "SYSTEM_TESTS_GKE_LOCATION",
        "SYSTEM_TESTS_GKE_CLUSTER",
        "SYSTEM_TESTS_GKE_KUEUE_QUEUE",
    ),
    "dws_system_gke_flex": ("SYSTEM_TESTS_GKE_LOCATION", "SYSTEM_TESTS_GKE_FLEX_CLUSTER"),
}
HOW = (
    "a real-project system test: run it with `pytest --system tests/system`, SYSTEM_TESTS_GCP_PROJECT "
    "and SYSTEM_TESTS_ENV_ID set (docs/system-tests.md)"
)
#: Kinds of emulator records that must be deleted at the end (the others must have ended).
DELETED_KINDS = ("QueuedResource", "ResizeRequest", "ProvisioningRequest", "Instance")
ENDED_STATES = ("JOB_STATE_SUCCEEDED", "SUCCEEDED", "CANCELLED", "JOB_STATE_CANCELLED")

pytestmark = [pytest.mark.airflow]


def run_succeeded(dag_id: str, log: str) -> bool:
    """Whether the run ended successful, read from its log (``airflow dags test``'s or
    ``dag.test()``'s), not from another ``airflow`` process: one per DAG costs seconds of CPU."""
    return re.search(rf"Marking run <DagRun {re.escape(dag_id)} @ .*> successful", log) is not None


def check_run(dag_id: str, log: str, returncode: int) -> None:
    """The run succeeded, its checks ran and its sweep had nothing to release."""
    assert returncode == 0, log[-4000:]
    assert run_succeeded(dag_id, log), log[-4000:]
    assert "DWS SYSTEM TEST:" in log, log[-4000:]
    if "DWS SWEEP:" in log:  # a calendar run that only asks the advice has no sweep
        assert "DWS SWEEP: released 0 request(s)" in log, log[-4000:]


def left_on_emulator(emulator: Any, dag_id: str) -> list[tuple[str, str, str]]:
    """What the run made that the emulator still holds."""
    left = []
    for record in emulator.control.requests():
        if (record.get("labels") or {}).get("dws_dag") != dag_id:
            continue
        kind = record["kind"]
        held = kind in DELETED_KINDS and not record["deleted"]
        running = (
            kind in ("CustomJob", "BatchJob", "BatchPredictionJob") and record["state"] not in ENDED_STATES
        )
        # A model still deployed, or a deployment still waiting for its machines.
        running = running or (
            kind == "ModelDeployment" and record["state"] in ("WAITING", "STARTING", "DEPLOYED")
        )
        # A flex-start node may stay up, empty, until the autoscaler scales it down (as on GKE); a
        # node still asked for, or one still running a pod of the run, is left behind.
        waiting = kind == "FlexStartNode" and (
            record["state"] == "WAITING" or bool(record.get("active_pods"))
        )
        if held or running or waiting:
            left.append((kind, record["name"], record["state"]))
    return left


@pytest.mark.emulator
@pytest.mark.timeout(900)
def test_on_emulator(dws_emulator: Any, tmp_path: Path) -> None:
    """All of them in one process, each checked on its own; every failure is reported."""
    (tmp_path / "home").mkdir()
    home = AirflowHome(tmp_path / "home", DAGS)
    # The DAGs decide where they run from SYSTEM_TESTS_*: a shell's own must not leak in.
    env = {k: v for k, v in home.env.items() if not k.startswith("SYSTEM_TESTS_")}
    env.update(emulator_env(dws_emulator.address))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_dags.py"), str(DAGS), *SYSTEM_DAGS],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=DAG_RUN_TIMEOUT * 3,
    )
    by_dag = split_by_dag(done.stdout)
    assert list(by_dag) == list(SYSTEM_DAGS), done.stdout[-4000:]
    failures = []
    for dag_id, log in by_dag.items():
        try:
            check_run(dag_id, log, 0 if f"==> {dag_id}: success" in log else 1)
            assert left_on_emulator(dws_emulator, dag_id) == []
        except AssertionError as err:
            failures.append(f"{dag_id}: {err}")
    assert not failures, "\n\n".join(failures)
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.parametrize("dag_id", list(SYSTEM_DAGS))
def test_on_project(
    dag_id: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    needs = ("SYSTEM_TESTS_GCP_PROJECT", "SYSTEM_TESTS_ENV_ID", *SYSTEM_DAGS[dag_id])
    missing = [name for name in needs if not os.environ.get(name)]
    if not request.config.getoption("--system"):
        pytest.skip(HOW)
    if missing:
        pytest.skip(f"set {', '.join(missing)} to run it against a real project (docs/system-tests.md)")
    home = AirflowHome(tmp_path_factory.mktemp("airflow-system-project"), DAGS)
    for name in (*needs, "SYSTEM_TESTS_DWS_IMAGE"):
        if os.environ.get(name):
            home.env[name] = os.environ[name]
    # The Google connection every operator uses by default: Application Default Credentials.
    home.env.setdefault(
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT",
        json.dumps(
            {
                "conn_type": "google_cloud_platform",
                "extra": {"project": os.environ["SYSTEM_TESTS_GCP_PROJECT"]},
            }
        ),
    )
    # A real wait: up to the DAGs' max wait (30 min) and the work, with room to spare.
    done = subprocess.run(
        [str(BIN / "airflow"), "dags", "test", dag_id],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=3 * 3600,
    )
    check_run(dag_id, done.stdout + done.stderr, done.returncode)
