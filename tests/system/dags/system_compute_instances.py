"""System test: one standalone Compute Engine flex-start VM (g2-standard-4, 1 x L4), no MIG, held
for a workload, then deleted.

Setup ``request_vm`` inserts the VM and waits for it in the triggerer; ``use_vm`` reads its address;
the teardown ``release_vm`` deletes it; the sweep releases what is still queued or held; the
watcher fails the run if any task failed. On a real project this is also where the provider's
reading of what Google does not document is checked: that ``instances.list`` shows a PENDING VM,
and that a waiting set is not read as INCOMPLETE.
"""

from __future__ import annotations

from airflow.sdk import task
from system_common import LABELS, MAX_RUN, MAX_WAIT, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.compute_instances_release import DeleteComputeFlexStartInstancesOperator

ZONE = "us-central1-a"

with system_dag("dws_system_compute_instances") as dag:
    request_vm = CreateComputeFlexStartInstancesOperator(
        task_id="request_vm",
        project_id=PROJECT_ID,
        zone=ZONE,
        machine_type="g2-standard-4",
        image="projects/debian-cloud/global/images/family/debian-12",
        count=1,
        max_run=MAX_RUN,
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def use_vm(vms: dict) -> None:
        """The VM is there, with its address."""
        assert vms["count"] == 1 and len(vms["instances"]) == 1 and vms["internal_ips"], vms
        print(f"DWS SYSTEM TEST: {vms['instance_set']} gave {vms['instance_names'][0]} {vms['internal_ips']}")

    release_vm = DeleteComputeFlexStartInstancesOperator(
        task_id="release_vm", project_id=PROJECT_ID, setup_task_id="request_vm"
    )

    used = use_vm(request_vm.output)
    request_vm >> used >> release_vm.as_teardown(setups=request_vm)
    release_vm >> sweep(["request_vm"])
    watch(dag)
