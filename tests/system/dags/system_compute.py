"""System test: one Compute Engine flex-start VM (g2-standard-4, 1 x L4) through a MIG resize
request, held for a workload, then deleted with its group.

Setup ``request_vm`` makes the resize request and waits for the VM in the triggerer; ``use_vm``
reads its address; the teardown ``release_vm`` deletes the VM, the request and what the setup
made; the sweep releases what is still queued or held; the watcher fails the run if any task
failed.
"""

from __future__ import annotations

from airflow.sdk import task
from system_common import LABELS, MAX_RUN, MAX_WAIT, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator

ZONE = "us-central1-a"

with system_dag("dws_system_compute") as dag:
    request_vm = CreateComputeFlexStartVMsOperator(
        task_id="request_vm",
        project_id=PROJECT_ID,
        zone=ZONE,
        machine_type="g2-standard-4",
        image="projects/debian-cloud/global/images/family/debian-12",
        resize_by=1,
        max_run=MAX_RUN,
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def use_vm(vms: dict) -> None:
        """The VM is there, with its address."""
        assert len(vms["instances"]) == 1 and vms["internal_ips"], vms
        print(
            f"DWS SYSTEM TEST: {vms['resize_request']} gave {vms['instances'][0]['name']} {vms['internal_ips']}"
        )

    release_vm = DeleteComputeFlexStartVMsOperator(
        task_id="release_vm", project_id=PROJECT_ID, setup_task_id="request_vm"
    )

    used = use_vm(request_vm.output)
    request_vm >> used >> release_vm.as_teardown(setups=request_vm)
    release_vm >> sweep(["request_vm"])
    watch(dag)
