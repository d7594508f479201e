"""Ring 3: the standalone flex-start VMs example (setup, work, teardown) as `make demo` ran it
(`test_dws_page_after_demo.py` calls :func:`check_example`): both VMs ran, were handed to the work
and deleted by the teardown; nothing is left running and the H100 pool is whole again."""

from __future__ import annotations

from typing import Any

from tests.airflow.conftest import ExampleRun, no_record_warnings, records

DAG_ID = "dws_compute_flex_start_instances"
H100 = "us-central1/NVIDIA_H100_80GB"


def standalone_vms(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "Instance"]


def check_example(run: ExampleRun) -> None:
    """The example's run: its log, the emulator's VMs, the DWS records of the setup and release."""
    line = next(line for line in run.log.splitlines() if "DWS VM SET:" in line)
    assert "gave 2 x a3-highgpu-8g (16 GPUs) in us-central1-a" in line
    hosts = [line for line in run.log.splitlines() if line.startswith("  host ")]
    assert len(hosts) >= 2
    made = standalone_vms(run.emulator)
    assert len(made) == 2 and all(vm["deleted"] for vm in made), made
    assert {vm["why_deleted"] for vm in made} == {"deleted"}  # by the teardown, not the run's end
    assert {vm["max_run_duration_seconds"] for vm in made} == {4 * 3600}
    pool = run.emulator.control.capacity()[H100]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    no_record_warnings(run.log)
    by_task = records(run.home, DAG_ID)
    [held] = by_task["ask_for_vms"]
    [released] = by_task["release_vms"]
    assert held.api == "compute_instance_set" and held.accelerator_count == 16
    assert released.request_name == held.request_name
    assert (released.phase, released.holds) == ("succeeded", False)
