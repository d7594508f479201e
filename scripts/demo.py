"""`make demo`: run the example DAGs against a local dws-emulator, then show what happened.

Starts ``dws-emulator`` on a free loopback port with its default inventory, prepares a throwaway
Airflow home (SQLite), runs the Vertex AI Flex Start example and then the TPU queued-resource,
Cloud Batch, Compute Engine flex-start VM, calendar-mode, GKE (ProvisioningRequest, Kueue,
flex-start) and Vertex AI inference examples with ``dag.test()`` (what ``airflow dags test`` runs), one after another in one process
(``scripts/run_dags.py``: a process per DAG cost several times the CPU of the runs), prints
every request's final state with its wait and run times
as the emulator recorded them, and stops the emulator (``--emulator HOST:PORT`` uses a running one and
leaves it running).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from dws_emulator.kube.connection import airflow_connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DAG_IDS = (
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


#: The cncf-kubernetes connection of the emulated GKE cluster.
GKE_CONN_ID = "dws_gke_emulator"


def start_emulator(bin_dir: Path = BIN, **popen: Any) -> tuple[subprocess.Popen[str], str]:
    """``dws-emulator serve`` (of ``bin_dir``) on a free loopback port: the process and its address.
    ``popen``: more arguments for the process (its ``stderr``, ``env``, ``cwd``)."""
    proc = subprocess.Popen(
        [str(bin_dir / "dws-emulator"), "serve", "--port", "0", "--seed", "7"],
        stdout=subprocess.PIPE,
        text=True,
        **popen,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"dws-emulator did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1]


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None

    # The emulator's RFC 3339 times end in "Z", which Python 3.10's fromisoformat does not read.
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def run_examples(env: dict[str, str]) -> dict[str, str]:
    """Run :data:`DAG_IDS` in one process (``scripts/run_dags.py``), its output passed through; each
    DAG's final state (``error`` for all if the runner ended without its summary line)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "run_dags.py"), str(ROOT / "example_dags"), *DAG_IDS],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    last = ""
    for line in proc.stdout:
        print(line, end="", flush=True)
        if line.startswith("{"):  # the runner's summary: each DAG's state as JSON
            last = line
    proc.wait()
    try:
        states: dict[str, str] = json.loads(last)
    except ValueError:
        return dict.fromkeys(DAG_IDS, "error")
    return states


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--home",
        type=Path,
        help="the Airflow home to create and keep (default: a throwaway one); its SQLite database "
        "then holds the runs, so an api-server started on it shows them (the browser tests do)",
    )
    parser.add_argument(
        "--emulator",
        metavar="HOST:PORT",
        help="use this running dws-emulator (default inventory) instead of starting one; it is left "
        "running, so its requests can be read afterwards (the end-to-end tests do)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    emulator, address = (None, args.emulator) if args.emulator else start_emulator()
    print(f"==> dws-emulator on {address} (default inventory)", flush=True)
    if args.home:
        args.home.mkdir(parents=True, exist_ok=True)
    home = args.home or Path(tempfile.mkdtemp(prefix="dws-demo-airflow-"))
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "example_dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            # Airflow's 30 s limit on a DAG file's import is wall-clock time: `make test` runs this
            # demo at nice 19 beside the main ring, where a file that imports cncf-kubernetes once
            # took over 30 s (CI, Airflow 3.1) for lack of a core. The parse cost is measured by
            # `make bench-parse`, not by this limit.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
            "DWS_EMULATOR_HOST": address,
            "DWS_EXAMPLE_POLL_INTERVAL": "1",
            # The calendar example's blocks may start 45 s ahead (the emulator delivers at the start).
            # Less is too little beside `make test`'s main ring: at nice 19 on Airflow 3.1 a reserve
            # task once began 18 s after the Find task, and its block, due 20 s after the Find, was
            # declined for being still pending at its start.
            "DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS": "45",
            # The GKE example's workload runs on cncf-kubernetes' own operator, which takes a
            # Kubernetes connection: this one is the emulated cluster.
            f"AIRFLOW_CONN_{GKE_CONN_ID.upper()}": airflow_connection(address),
            "DWS_EXAMPLE_KUBERNETES_CONN_ID": GKE_CONN_ID,
        }
    )
    try:
        print(f"==> airflow db migrate (SQLite, home {home})", flush=True)
        subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        states = run_examples(env)
        port = address.rsplit(":", 1)[1]
        listing = subprocess.run(
            [str(BIN / "dws-emulator"), "requests", "--port", port, "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        requests = json.loads(listing.stdout)
    finally:
        if emulator is not None:
            emulator.terminate()
            emulator.wait(timeout=10)
    print()
    print("==> what the emulator saw")
    for req in requests:
        history = [step["state"].removeprefix("JOB_STATE_") for step in req["history"]]
        print(f"{req['kind']} {req['name']}")
        print(f"    {' -> '.join(history)}")
        if req["kind"] in ("CustomJob", "BatchJob"):
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            ran = _seconds(req["start_time"], req["end_time"]) or 0.0
            print(f"    final state {req['state']}: waited {waited:.1f}s for capacity, ran {ran:.1f}s")
        elif req["kind"] == "ResizeRequest":
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            print(
                f"    {req['resize_by']} x {req['machine_type']} ({req['accelerator_count']} GPUs): waited "
                f"{waited or 0:.1f}s for capacity, VMs deleted: {req['vms_deleted']}, request deleted: "
                f"{req['deleted']}"
            )
        elif req["kind"] == "Instance":
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            print(
                f"    {req['machine_type']} ({req['accelerator_count']} GPUs), standalone flex-start VM: "
                f"waited {waited or 0:.1f}s for capacity, final state {req['state']}"
                + (f" ({req['why_deleted']})" if req["why_deleted"] else "")
            )
        elif req["kind"] == "FutureReservation":
            print(
                f"    a block of {req['accelerator_count']} x {req['accelerator_type']} in "
                f"{req['location']} from {req['block_start']}: delivered {req['start_time'] or 'never'}, "
                + (
                    "released"
                    if req["deleted"]
                    else f"kept until its end {req['block_end']} (calendar mode gives none back early)"
                )
            )
        elif req["kind"] == "FlexStartNode":
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            print(
                f"    a flex-start node of {req['node_pool']} ({req['accelerator_count']} x "
                f"{req['accelerator_type']}) for pod {req['display_name']}: waited {waited or 0:.1f}s for "
                f"capacity, ran pods {', '.join(req['pods']) or 'none'}, state {req['state']}"
            )
        elif req["kind"] == "BatchPredictionJob":
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            ran = _seconds(req["start_time"], req["end_time"]) or 0.0
            print(
                f"    flex-start batch prediction on {req['accelerator_count']} x {req['accelerator_type']}: "
                f"waited {waited or 0:.1f}s for capacity, ran {ran:.1f}s, final state {req['state']}"
            )
        elif req["kind"] == "ModelDeployment":
            waited = _seconds(req["create_time"], req["deploy_time"] or req["end_time"])
            served = _seconds(req["deploy_time"], req["end_time"])
            print(
                f"    model {req['deployed_model_id']} on {req['accelerator_count']} x {req['accelerator_type']} "
                f"(flex-start): waited {waited or 0:.1f}s to deploy, served {served or 0:.1f}s, final state "
                f"{req['state']}"
            )
        elif req["kind"] == "ProvisioningRequest":
            waited = _seconds(req["create_time"], req["start_time"] or req["end_time"])
            print(
                f"    {req['pods']} pod(s), {req['accelerator_count']} x {req['accelerator_type']} on "
                f"{len(req['nodes'])} node(s) of {req['node_pool']}: waited {waited or 0:.1f}s for "
                f"capacity, final state {req['state']}, deleted: {req['deleted']}"
            )
        else:
            times = {step["state"]: step["time"] for step in req["history"]}
            waited = _seconds(req["create_time"], times.get("ACTIVE"))
            held = _seconds(times.get("ACTIVE"), times.get("DELETED") or times.get("DELETING"))
            print(
                f"    {req['accelerator_type']} ({req['chips']} chips): waited {waited or 0:.1f}s for capacity, "
                f"held the slice {held or 0:.1f}s, deleted: {req['deleted']}"
            )
    print(f"==> demo finished in {time.monotonic() - started:.1f}s (DAG run states {states})")
    jobs = [r for r in requests if r["kind"] == "CustomJob"]
    slices = [r for r in requests if r["kind"] == "QueuedResource"]
    batch_jobs = [r for r in requests if r["kind"] == "BatchJob"]
    resizes = [r for r in requests if r["kind"] == "ResizeRequest"]
    standalone = [r for r in requests if r["kind"] == "Instance"]
    blocks = [r for r in requests if r["kind"] == "FutureReservation"]
    # The ProvisioningRequest example's and the one Kueue made for the Kueue example's Job.
    provisioning = [r for r in requests if r["kind"] == "ProvisioningRequest"]
    flex_nodes = [r for r in requests if r["kind"] == "FlexStartNode"]
    inference = [r for r in requests if r["kind"] in ("BatchPredictionJob", "ModelDeployment")]
    # The Vertex AI example's job and the calendar example's training job; its TPU slice, the
    # TPU example's and the flex-start example's; the calendar example's GPU and TPU blocks.
    ok = (
        all(states.get(dag_id) == "success" for dag_id in DAG_IDS)
        and [j["state"] for j in jobs] == ["JOB_STATE_SUCCEEDED"] * 2
        and [j["state"] for j in batch_jobs] == ["SUCCEEDED"]
        and len(slices) == 3
        and all(s["deleted"] for s in slices)
        and [s["provisioning_model"] for s in slices].count("FLEX_START") == 1
        and [r["state"] for r in resizes] == ["SUCCEEDED"]
        and all(r["deleted"] and r["vms_deleted"] for r in resizes)
        # The standalone example's two VMs: both ran, and the teardown deleted them.
        and len(standalone) == 2
        and all(r["start_time"] and r["why_deleted"] == "deleted" for r in standalone)
        and len(blocks) == 2
        # Delivered, and kept until their end (billed whatever the release does), nothing left on them.
        and all(b["start_time"] and b["reservation_live"] and not b["reservation_in_use"] for b in blocks)
        # Both consumed by their pods, then deleted (the teardown; Kueue once the Job finished).
        and [r["state"] for r in provisioning] == ["CONSUMED"] * 2
        and all(r["deleted"] for r in provisioning)
        # The flex-start example's two nodes, one per pod, each came up and ran its pod (empty
        # now, until the autoscaler scales them down).
        and len(flex_nodes) == 2
        and all(r["start_time"] and len(r["pods"]) == 1 and not r["active_pods"] for r in flex_nodes)
        # The inference example's batch job ran to its end; its model was deployed, then undeployed
        # by the teardown (long before its max runtime).
        # (in either order: the two tasks do not depend on each other).
        and sorted((r["kind"], r["state"]) for r in inference)
        == [("BatchPredictionJob", "JOB_STATE_SUCCEEDED"), ("ModelDeployment", "UNDEPLOYED")]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
