"""`make ui`: a local Airflow with the DWS page, against a dws-emulator, running the example DAGs.

Reuses the fault matrix's deployment (``tests/faults/harness.py``): a throwaway database on the
local PostgreSQL server (127.0.0.1:5432, trust auth), ``airflow api-server``, ``scheduler``,
``dag-processor`` and ``triggerer`` (LocalExecutor), each logging under ``.airflow/ui/logs``, and a
``dws-emulator`` with its default inventory. The DAG folder is ``example_dags/``. Every user is an
admin (SimpleAuthManager ``all_admins``): the UI needs no login. The example DAGs are triggered
once; the script then prints the DWS page's URL and keeps everything running until Ctrl-C, when
it stops the processes and drops the database.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dws_emulator.defaults import DEFAULT_CAPACITY  # noqa: E402
from tests.faults.harness import Deployment, HarnessError, probe_postgres  # noqa: E402

EXAMPLE_DAGS = (
    "dws_vertex_flex_start",
    "dws_tpu_queued_resource",
    "dws_tpu_flex_start",
    "dws_batch_flex_start",
    "dws_compute_flex_start_vms",
    "dws_compute_flex_start_instances",
    "dws_calendar_reservation",
    "dws_gke_provisioning_request",
    "dws_gke_kueue_job",
    "dws_gke_flex_start_job",
    "dws_vertex_inference",
)
WORKDIR = ROOT / ".airflow" / "ui"


class UiDeployment(Deployment):
    """The fault matrix's deployment with ``example_dags/`` as its DAG folder."""

    def _environment(self, port: int) -> dict[str, str]:
        env = super()._environment(port)
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
        # A visible wait in the page: the examples poll every 2 s and may wait up to an hour.
        env["DWS_EXAMPLE_POLL_INTERVAL"] = "2"
        env["DWS_EXAMPLE_MAX_WAIT_SECONDS"] = "3600"
        env["DWS_EXAMPLE_TPU_MAX_WAIT_SECONDS"] = "3600"
        env["DWS_EXAMPLE_COMPUTE_MAX_WAIT_SECONDS"] = "3600"
        # The calendar example's blocks start two minutes after its Find task runs (delivered then,
        # held a week): time enough for a busy machine's scheduler to start the reserve tasks before
        # that (one that starts later finds a block again, once).
        env["DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS"] = "120"
        return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-wait", action="store_true", help="print the URL and stop at once (a smoke test)"
    )
    args = parser.parse_args(argv)
    unreachable = probe_postgres()
    if unreachable:
        print(f"make ui needs the local PostgreSQL server: {unreachable}", file=sys.stderr)
        return 2
    WORKDIR.mkdir(parents=True, exist_ok=True)
    print(f"==> starting Airflow (api-server, scheduler, dag-processor, triggerer) in {WORKDIR}", flush=True)
    deployment = UiDeployment(pools=DEFAULT_CAPACITY, dag_ids=list(EXAMPLE_DAGS), workdir=WORKDIR)
    try:
        deployment.start(timeout=420)
    except HarnessError as err:
        print(f"Airflow did not start: {err}\nlogs: {deployment.log_dir}", file=sys.stderr)
        return 1
    try:
        assert deployment.api is not None and deployment.emulator is not None
        base = str(deployment.api.client.base_url).rstrip("/").removesuffix("/api/v2")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for dag_id in EXAMPLE_DAGS:
            deployment.api.trigger(dag_id, f"ui__{stamp}")
            print(f"==> triggered {dag_id} (run ui__{stamp})", flush=True)
        print()
        print(f"dws-emulator:  {deployment.emulator.address}")
        print(f"Airflow UI:    {base}/  (no login: every user is an admin in this local deployment)")
        print(f"DWS page:      {base}/plugin/dws  (in the UI; the page alone: {base}/dws/)")
        print(f"JSON:          {base}/dws/api/requests, {base}/dws/api/summary")
        print(f"logs:          {deployment.log_dir}")
        print("Ctrl-C stops everything and drops the database.", flush=True)
        if args.no_wait:
            return 0
        stop: dict[str, Any] = {}
        signal.signal(signal.SIGTERM, lambda *_: stop.setdefault("signal", True))
        while not stop:
            time.sleep(1)
            deployment._check_alive()
    except KeyboardInterrupt:
        pass
    except HarnessError as err:
        print(f"an Airflow process stopped: {err}", file=sys.stderr)
        return 1
    finally:
        print("==> stopping", flush=True)
        deployment.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
