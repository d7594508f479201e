"""Get 2 a3-highgpu-8g VMs (16 H100s) as standalone flex-start VMs for at most 4 hours, all or
nothing, use them, give them back: no instance template, no managed instance group.

``ask_for_vms`` inserts two VMs with the FLEX_START provisioning model, each allowed to wait up to
2 hours for capacity (``requestValidForDuration``, the most one VM may wait; a longer ``max_wait``
is kept by asking again) and to run 4 hours
(``maxRunDuration``, then Compute Engine deletes it), and defers until both are RUNNING. If one
runs and the other's wait ends without capacity, the task deletes the one it got and fails: no GPU
is paid for a two-host job that cannot start. ``work_on_hosts`` reads the VMs' names and internal
IPs from XCom and would start the distributed job on them; it only prints them here.
``release_vms`` is a real Airflow teardown: it deletes the VMs even when the work fails.

Run it locally against the bundled emulator with ``make demo``. The ``DWS_EXAMPLE_*`` variables
exist only so the demo and the tests can run it in seconds; a real DAG would write its values
directly.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.compute_instances_release import DeleteComputeFlexStartInstancesOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
ZONE = os.environ.get("DWS_EXAMPLE_COMPUTE_ZONE", "us-central1-a")
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_compute_flex_start_instances",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "compute", "example"],
    params={"fail_workload": False},
) as dag:
    ask_for_vms = CreateComputeFlexStartInstancesOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="ask_for_vms",
        project_id=PROJECT_ID,
        zone=ZONE,
        count=2,
        machine_type="a3-highgpu-8g",  # 8 x NVIDIA H100 80GB each
        image="projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310",
        boot_disk_size_gb=200,
        boot_disk_type="pd-ssd",
        max_run=timedelta(hours=4),
        max_wait=timedelta(hours=2),
        labels={"team": "research", "pipeline": "two-host-eval"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def work_on_hosts(vms: dict, params: dict | None = None) -> str:
        """The workload: here it only prints the hosts it would run on."""
        print(
            f"DWS VM SET: {vms['instance_set']} gave {vms['count']} x {vms['machine_type']} "
            f"({vms['gpus']} GPUs) in {vms['zone']}"
        )
        for vm in vms["instances"]:
            print(f"  host {vm['name']} {vm['zone']} {vm['internal_ip']} {vm['accelerators']}")
        if params and params.get("fail_workload"):
            raise RuntimeError("the evaluation failed (simulated); the VMs are still released")
        return f"evaluated on {len(vms['internal_ips'])} hosts: {' '.join(vms['internal_ips'])}"

    release_vms = DeleteComputeFlexStartInstancesOperator(
        task_id="release_vms",
        project_id=PROJECT_ID,
        setup_task_id="ask_for_vms",
    )

    work = work_on_hosts(ask_for_vms.output)
    ask_for_vms >> work >> release_vms.as_teardown(setups=ask_for_vms)
