"""The example DAGs as ``make demo`` runs them (``scripts/demo.py``), then the DWS page in a browser.

``make demo`` runs every example DAG with ``dag.test()`` (what ``airflow dags test`` runs, all in one
process: ``scripts/run_dags.py``) against a ``dws-emulator``; with
``--home`` it keeps its Airflow home, whose SQLite database then holds the runs, their task
instances and the request records the provider wrote. An api-server started on that home serves
the Airflow UI and the DWS page; Debian's Chromium reads them (``tests/airflow/browser.py``).
Nothing here is seeded: every row comes from a real run. With ``--emulator`` the demo runs on the
test's emulator, so each example's module also checks its run there (``check_example``): the one
run of each example in the suite.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.airflow import (
    test_batch_flex_start_dag,
    test_calendar_reservation_dag,
    test_compute_flex_start_instances_dag,
    test_compute_flex_start_vms_dag,
    test_gke_flex_start_job_dag,
    test_gke_kueue_job_dag,
    test_gke_provisioning_request_dag,
    test_tpu_flex_start_dag,
    test_tpu_queued_resource_dag,
    test_vertex_flex_start_dag,
    test_vertex_inference_dag,
)
from tests.airflow.browser import IMAGES, MISSING, open_page
from tests.airflow.conftest import ROOT, ExampleRun, split_by_dag
from tests.airflow.dws_page_server import Server, api_server
from tests.airflow.test_task_logs import assert_no_error_lines

# The first test waits for the whole demo: about 1.5 min alone, several on a loaded 2-core machine.
pytestmark = [pytest.mark.airflow, pytest.mark.emulator, pytest.mark.timeout(1500)]

#: Each example DAG's task that asks for capacity, its API and its request's final phase.
DEMO = {
    "dws_vertex_flex_start": ("fine_tune", "vertex_custom_job", "succeeded"),
    "dws_tpu_queued_resource": ("request_tpu_slice", "tpu_queued_resource", "succeeded"),
    "dws_tpu_flex_start": ("request_flex_slice", "tpu_queued_resource", "succeeded"),
    "dws_batch_flex_start": ("infer", "batch_job", "succeeded"),
    "dws_compute_flex_start_vms": ("ask_for_vms", "compute_resize_request", "succeeded"),
    "dws_compute_flex_start_instances": ("ask_for_vms", "compute_instance_set", "succeeded"),
    # Delivered and held until its end: calendar mode gives no block back early.
    "dws_calendar_reservation": ("reserve_block", "compute_future_reservation", "running"),
    # Provisioned, used by the Job's pods, then deleted by the teardown.
    "dws_gke_provisioning_request": ("request_nodes", "gke_provisioning_request", "succeeded"),
    "dws_gke_kueue_job": ("finetune", "gke_kueue_job", "succeeded"),
    "dws_gke_flex_start_job": ("evaluate", "gke_flex_start_job", "succeeded"),
    "dws_vertex_inference": ("score_inputs", "vertex_batch_prediction", "succeeded"),
}
#: The phases the page lists under "Running or held" (the others under "Ended").
HELD = {"running"}
#: Each example's own checks of its run (in its module, beside that example's other tests).
CHECKS = {
    "dws_vertex_flex_start": test_vertex_flex_start_dag.check_example,
    "dws_tpu_queued_resource": test_tpu_queued_resource_dag.check_example,
    "dws_tpu_flex_start": test_tpu_flex_start_dag.check_example,
    "dws_batch_flex_start": test_batch_flex_start_dag.check_example,
    "dws_compute_flex_start_vms": test_compute_flex_start_vms_dag.check_example,
    "dws_compute_flex_start_instances": test_compute_flex_start_instances_dag.check_example,
    "dws_calendar_reservation": test_calendar_reservation_dag.check_example,
    "dws_gke_provisioning_request": test_gke_provisioning_request_dag.check_example,
    "dws_gke_kueue_job": test_gke_kueue_job_dag.check_example,
    "dws_gke_flex_start_job": test_gke_flex_start_job_dag.check_example,
    "dws_vertex_inference": test_vertex_inference_dag.check_example,
}


@dataclass
class Demo:
    server: Server
    log: str
    #: dag_id -> the demo's request record of that DAG's task in :data:`DEMO`, as the page's JSON
    #: serves it.
    requests: dict[str, dict[str, Any]]
    #: How many requests the page lists (the calendar example records several).
    listed: int
    #: dag_id -> that example's run, for its module's ``check_example``.
    runs: dict[str, ExampleRun]
    #: How many of them are held still (the calendar example's delivered blocks, until their end).
    held: int


@contextlib.contextmanager
def demo_ran(home: Path, emulator: Any) -> Iterator[Demo]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DWS_"))}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "demo.py"),
            "--home",
            str(home),
            "--emulator",
            emulator.address,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
    )
    log = done.stdout
    assert done.returncode == 0, f"make demo failed:\n{log[-6000:]}"
    by_dag = split_by_dag(log)
    assert sorted(by_dag) == sorted(DEMO), by_dag.keys()
    runs = {dag_id: ExampleRun(text, emulator, home) for dag_id, text in by_dag.items()}
    with api_server(home, dags_folder=ROOT / "example_dags") as server:
        items = server.json("/dws/api/requests")["requests"]
        mine = {item["dag_id"]: item for item in items if item["task_id"] == DEMO[item["dag_id"]][0]}
        held = sum(1 for item in items if item["section"] == "running")
        yield Demo(server, log, mine, len(items), runs, held)


def check_the_json_lists_each_demo_request_with_its_phase(demo: Demo) -> None:
    assert demo.held == 2  # the calendar example's GPU and TPU blocks, delivered until their end
    for dag_id, (task_id, api, phase) in DEMO.items():
        item = demo.requests[dag_id]
        assert (item["task_id"], item["record"]["api"], item["record"]["phase"]) == (task_id, api, phase)
        # The name the emulator gave it is the one the demo printed.
        assert item["record"]["request_name"] in demo.log


def check_the_page_lists_the_demo_requests_with_their_phases(browser: Any, demo: Demo) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, demo.server.base, demo.server.tokens["admin"])
    page.goto(demo.server.base + "/plugin/dws")
    frame = page.frame_locator("iframe")
    held = demo.held
    expect(frame.get_by_role("heading", name=f"Ended ({demo.listed - held})")).to_be_visible()
    expect(frame.get_by_role("heading", name="Waiting now (0)")).to_be_visible()
    expect(frame.get_by_role("heading", name=f"Running or held ({held})")).to_be_visible()
    ended = frame.locator("table", has=frame.locator("caption", has_text="Requests that ended"))
    running = frame.locator("table", has=frame.locator("caption", has_text="still run or hold it"))
    for dag_id, (_, _, phase) in DEMO.items():
        short = demo.requests[dag_id]["record"]["request_name"].rsplit("/", 1)[-1]
        row = (running if phase in HELD else ended).locator("tr", has_text=short)
        expect(row).to_have_count(1)
        expect(row).to_contain_text(dag_id)
        expect(row).to_contain_text(phase)
    page.screenshot(path=str(IMAGES / "dws-page-after-demo.png"))
    page.context.close()


def check_a_filter_by_api_keeps_only_that_api(browser: Any, demo: Demo) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, demo.server.base, demo.server.tokens["admin"])
    page.goto(demo.server.base + "/dws/")
    page.get_by_label("API").select_option("batch_job")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**api=batch_job**")
    expect(page.get_by_role("heading", name="Ended (1)")).to_be_visible()
    ended = page.locator("table", has=page.locator("caption", has_text="Requests that ended"))
    expect(ended.locator("tbody tr")).to_have_count(1)
    expect(ended).to_contain_text("dws_batch_flex_start / infer")
    expect(ended).not_to_contain_text("dws_vertex_flex_start")
    page.context.close()


def check_the_task_instance_tab_shows_its_request(browser: Any, demo: Demo) -> None:
    from playwright.sync_api import expect

    item = demo.requests["dws_vertex_flex_start"]
    page = open_page(browser, demo.server.base, demo.server.tokens["admin"])
    page.goto(f"{demo.server.base}/dags/{item['dag_id']}/runs/{item['run_id']}/tasks/{item['task_id']}")
    page.locator('a[href*="dws_ti"]').first.click()
    expect(page.locator("iframe")).to_have_attribute("src", re.compile(r"dws/ti/"))
    frame = page.frame_locator("iframe")
    expect(frame.get_by_text(item["record"]["request_name"].rsplit("/", 1)[-1])).to_be_visible()
    expect(frame.get_by_text("succeeded").first).to_be_visible()
    page.context.close()


def test_the_examples_and_the_page_after_the_demo_dags_ran(
    tmp_path: Path, dws_emulator_factory: Any, request: pytest.FixtureRequest
) -> None:
    """One test, so the demo runs once (pytest-xdist would run a shared fixture once per worker):
    each example's own checks of its run, then the DWS page in a browser."""
    emulator = dws_emulator_factory(seed=7)  # the default inventory, as ``make demo`` starts it
    with demo_ran(tmp_path / "home", emulator) as demo:
        for dag_id, check in CHECKS.items():
            check(demo.runs[dag_id])
            # A healthy run logs no error-level line (test_task_logs.py says why that needs saying).
            assert_no_error_lines(demo.runs[dag_id].log)
        check_the_json_lists_each_demo_request_with_its_phase(demo)
        if MISSING:
            pytest.skip(f"the examples' checks passed; the browser's need a browser: {MISSING}")
        browser = request.getfixturevalue("browser")
        check_the_page_lists_the_demo_requests_with_their_phases(browser, demo)
        check_a_filter_by_api_keeps_only_that_api(browser, demo)
        check_the_task_instance_tab_shows_its_request(browser, demo)


def test_the_screenshot_dir_is_not_the_work_tree_by_default() -> None:
    if os.environ.get("DWS_SCREENSHOTS") != "docs":
        assert not Path(IMAGES).is_relative_to(ROOT)
