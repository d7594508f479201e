"""Get 4 a3-highgpu-8g VMs (32 H100s) through DWS flex-start for at most 6 hours, use them, give them back.

``ask_for_vms`` creates a flex-start-ready instance template and managed instance group (MIG, at
target size 0) for this task, then a Compute Engine resize request of ``resize_by=4`` with a
``requested_run_duration`` of 6 hours, and defers until DWS has created all four VMs at once
(waiting at most 2 hours; the provider cancels the request then, since the API would wait
forever). ``work_on_hosts`` reads the VMs' names and internal IPs from XCom and would start the
distributed job on them (a launcher over ssh, ``torchrun --rdzv-endpoint``...); it only prints
them here. ``release_vms`` is a real Airflow teardown: it deletes exactly the VMs this request
created, then the request, even when the work fails. An idle H100 is money burning; the VMs
are deleted at the end of the run duration anyway.

Run it locally against the bundled emulator with ``make demo``. The ``DWS_EXAMPLE_*`` variables
exist only so the demo and the tests can run it in seconds (``make demo`` runs it at full size:
the emulator's default inventory has 32 H100s in us-central1); a real DAG would write its values
directly.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
ZONE = os.environ.get("DWS_EXAMPLE_COMPUTE_ZONE", "us-central1-a")
VMS = int(os.environ.get("DWS_EXAMPLE_COMPUTE_VMS", 4))
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_COMPUTE_MAX_WAIT_SECONDS", 2 * 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_compute_flex_start_vms",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "compute", "example"],
    params={"fail_workload": False},
) as dag:
    ask_for_vms = CreateComputeFlexStartVMsOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="ask_for_vms",
        project_id=PROJECT_ID,
        zone=ZONE,
        machine_type="a3-highgpu-8g",  # 8 x NVIDIA H100 80GB each
        image="projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310",
        boot_disk_size_gb=200,
        boot_disk_type="pd-ssd",
        resize_by=VMS,
        max_run=timedelta(hours=6),
        max_wait=MAX_WAIT,
        labels={"team": "research", "pipeline": "multi-node-train"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def work_on_hosts(vms: dict, params: dict | None = None) -> str:
        """The workload: here it only prints the hosts it would run on."""
        print(
            f"DWS VMS: {vms['resize_request']} gave {len(vms['instances'])} x {vms['machine_type']} "
            f"({vms['gpus']} GPUs) in {', '.join(vms['zones'])}; waited {vms['wait_seconds'] or 0:.1f}s"
        )
        for vm in vms["instances"]:
            print(f"  host {vm['name']} {vm['zone']} {vm['internal_ip']} {vm['accelerators']}")
        if params and params.get("fail_workload"):
            raise RuntimeError("the training step failed (simulated); the VMs are still released")
        return f"trained on {len(vms['internal_ips'])} hosts: {' '.join(vms['internal_ips'])}"

    release_vms = DeleteComputeFlexStartVMsOperator(
        task_id="release_vms",
        project_id=PROJECT_ID,
        setup_task_id="ask_for_vms",
    )

    work = work_on_hosts(ask_for_vms.output)
    ask_for_vms >> work >> release_vms.as_teardown(setups=ask_for_vms)
