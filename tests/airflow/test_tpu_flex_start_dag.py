"""Ring 3: the TPU flex-start example (setup, work, teardown) as `make demo` ran it
(`test_dws_page_after_demo.py` calls :func:`check_example`): the slice was asked for with the
FLEX_START model and its 2-hour run through ``v2alpha1``, handed to the work and deleted by the
teardown before its run ended; nothing is left and the v6e pool is whole again."""

from __future__ import annotations

from typing import Any

from tests.airflow.conftest import ExampleRun, no_record_warnings, records

DAG_ID = "dws_tpu_flex_start"
V6E = "us-east5-a/v6e"


def check_example(run: ExampleRun) -> None:
    """The example's run: its log, the emulator's queued resource, the setup's and release's records."""
    line = next(line for line in run.log.splitlines() if "TPU FLEX-START SLICE:" in line)
    assert "v6e-8 (8 chips) on 1 host(s)" in line
    assert "a flex-start slice: once ACTIVE it runs 2:00:00" in run.log
    assert "(flex-start v6e-8 (8 chips) in us-east5-a)" in run.log  # the trigger's lines say it too
    [made] = [r for r in _queued(run.emulator) if r["labels"].get("dws_dag") == DAG_ID]
    assert (made["provisioning_model"], made["max_run_seconds"]) == ("FLEX_START", 7200)
    assert made["deleted"] and "ACTIVE" in [step["state"] for step in made["history"]]
    assert "SUSPENDED" not in [step["state"] for step in made["history"]]  # released before its end
    pool = run.emulator.control.capacity()[V6E]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    no_record_warnings(run.log)
    by_task = records(run.home, DAG_ID)
    [held] = by_task["request_flex_slice"]
    [released] = by_task["release_flex_slice"]
    assert held.kind == "TPU flex-start queued resource" and held.pricing_model == "flex_start"
    assert released.request_name == held.request_name == made["name"]
    assert (released.phase, released.holds) == ("succeeded", False)


def _queued(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "QueuedResource"]
