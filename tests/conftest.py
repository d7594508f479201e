"""Shared pytest fixtures.

The emulator's fixtures (``dws_emulator``, ``dws_emulator_factory``: a ``dws-emulator serve``
subprocess; ``dws_emulator_server``, ``dws_emulator_server_factory``: a server in the test's own
process) come from its pytest plugin, :mod:`dws_emulator.testing.fixtures`, which the emulator's own
tests use too; :mod:`dws_emulator.testing` has ``FakeClock``, ``InProcessEmulator`` and ``wait_until``.
"""

from __future__ import annotations

from typing import Any

import pytest

from dws_emulator.testing import InProcessEmulator

pytest_plugins = ["dws_emulator.testing.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--system``: run tests/system against the real project SYSTEM_TESTS_GCP_PROJECT."""
    parser.addoption(
        "--system",
        action="store_true",
        default=False,
        help="run the system tests against a real Google Cloud project (docs/system-tests.md)",
    )


# -- the provider's clients on an in-process emulator ---------------------------------------------


@pytest.fixture
def vertex_emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    """Start an in-process emulator (optionally with capacity) and point every hook at it."""

    def start(capacity: dict[str, int] | None = None) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        return emulator

    return start


# -- every REST call to an in-process emulator, against Google's discovery documents ---------------


@pytest.fixture(autouse=True)
def _discovery_conformance(dws_discovery_conformance: Any) -> Any:
    """Every test: the provider's request bodies and the emulator's answers, as Google's discovery
    documents describe them (:mod:`dws_emulator.testing.discovery`)."""
    return dws_discovery_conformance


# -- the fast lane: what ``-m "not slow"`` (``make test-fast``) leaves out ------------------------

#: Tests marked ``slow`` by where they live: real Airflow processes (``airflow dags test``, a
#: scheduler, an api-server) in every test of these folders.
SLOW_PATHS = ("tests/airflow/", "tests/faults/", "tests/system/")

#: And by node-id prefix, the ones that took over about 5 s on two cores (``pytest --durations``):
#: Airflow's own parser on every benchmark row (it imports the Google provider), and provider waits
#: on an emulator that sit through several poll rounds. (The fresh-interpreter import checks are
#: not here: on the shared probe interpreter of ``tests/probe.py`` they take one to three seconds.)
SLOW_NODES = (
    "tests/unit/test_bench_parse_model.py::test_every_row_parses_as_the_dag_processor_parses_it",
    # The docs site's strict build (mkdocs and the API reference from every module's docstrings).
    "tests/unit/test_docs.py::test_the_site_builds_with_no_broken_link",
    "tests/emulator/test_calendar_provider_on_emulator.py::test_a_partial_delivery_fails_the_wait",
    "tests/emulator/test_calendar_provider_on_emulator.py::test_find_reserve_wait_and_release",
    "tests/emulator/test_provider_compute_on_emulator.py::test_poller_lists_each_mig_once_per_round",
    "tests/emulator/test_provider_compute_on_emulator.py::test_an_outage_is_a_transient_error",
    "tests/emulator/test_calendar_consumers_provider.py::test_each_consumer_runs_on_the_delivered_block",
    "tests/emulator/test_calendar_consumers_provider.py::test_a_consumer_started_before_the_delivery",
    "tests/emulator/test_calendar_consumers_provider.py::test_a_deferred_consumer_waits_on_the_block",
    "tests/emulator/test_records_on_emulator.py::test_a_deferred_batch_job_is_waiting_in_xcom",
    "tests/emulator/test_provider_tpu_on_emulator.py::test_valid_after_delays_the_slice",
    "tests/emulator/test_provider_tpu_on_emulator.py::test_trigger_waits_until_active_then_on_kill_deletes",
    "tests/emulator/test_metrics_otel.py::test_a_trigger_run_and_task_runs_reach_an_otlp_receiver",
)


def _mark_slow(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW_PATHS + SLOW_NODES):
            item.add_marker(pytest.mark.slow)


# -- ordering for parallel runs -----------------------------------------------------------------

#: Tests that take a minute or more on two cores (real Airflow deployments and ``airflow dags
#: test`` runs, mostly waiting on real processes), by node-id prefix (the first that matches), with
#: a rough weight each: one ``airflow dags test`` run, about 20 s, is 1 (a fresh clone's
#: ``make test --durations``: the fault matrix 256 s, the demo and the page 120 s, the off-peak
#: window's wait 100 s and its deadline's 55 s, the seven system DAGs in one process 41 s).
SLOW_TESTS: dict[str, int] = {
    "tests/faults/test_fault_matrix.py::test_ci_fault_matrix": 12,
    "tests/airflow/test_dws_page_after_demo.py::test_the_examples_and_the_page_after_the_demo_dags_ran": 6,
    "tests/airflow/test_offpeak_pipeline_dag.py::test_task_outside_its_window_defers": 5,
    "tests/airflow/test_offpeak_pipeline_dag.py::test_a_passing_deadline_ends_the_task": 3,
    "tests/airflow/": 1,
    # The seven system-test DAGs in one process: about two `airflow dags test` runs of CPU.
    "tests/system/test_system.py::test_on_emulator": 2,
}


#: Session fixtures that start a real deployment once per worker (an api-server and its database):
#: the tests using one are kept together in one worker's part, weighing this much in all.
SHARED_FIXTURES: dict[str, int] = {"dws_page_server": 3}


def _weight(item: pytest.Item) -> int:
    return next((w for prefix, w in SLOW_TESTS.items() if item.nodeid.startswith(prefix)), 0)


def _units(items: list[pytest.Item]) -> list[tuple[int, list[pytest.Item]]]:
    """The slow tests as (weight, tests) units: one per test, but one for all the tests of a
    :data:`SHARED_FIXTURES` fixture (split over workers, each would start its own deployment)."""
    shared: dict[str, list[pytest.Item]] = {}
    units: list[tuple[int, list[pytest.Item]]] = []
    for item in items:
        fixture = next((f for f in SHARED_FIXTURES if f in getattr(item, "fixturenames", ())), None)
        if fixture is not None:
            shared.setdefault(fixture, []).append(item)
        elif _weight(item):
            units.append((_weight(item), [item]))
    units += [(SHARED_FIXTURES[f], group) for f, group in shared.items()]
    return sorted(units, key=lambda unit: unit[0], reverse=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, start every worker on its share of the slow tests.

    ``make test`` runs ``--dist worksteal``, which hands each worker one contiguous part of the
    collection and lets an idle worker take half of a busy one's queue. Left in file order, the
    slow tests all sat in one worker's part and ran one after another while the other worker
    finished early; here each part begins with slow tests of about equal weight, then fast ones.
    The order is the same on every worker (xdist requires it). First, the ``slow`` marks
    (:data:`SLOW_PATHS`, :data:`SLOW_NODES`).
    """
    _mark_slow(items)
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers < 2:
        return
    units = _units(items)
    placed = {id(item) for _, unit in units for item in unit}
    fast = [item for item in items if id(item) not in placed]
    groups: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for weight, unit in units:  # heaviest first, each to the lightest part so far
        lightest = loads.index(min(loads))
        groups[lightest].extend(unit)
        loads[lightest] += weight
    # Part sizes as worksteal cuts them: what remains split evenly over the nodes left.
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for index, group in enumerate(groups):
        size = remaining // (workers - index)
        while len(group) < size and fast:
            group.append(fast.pop(0))
        ordered.extend(group)
        remaining -= len(group)
    ordered.extend(fast)
    items[:] = ordered
