"""Run DAGs one after another in this one process with ``dag.test()``, as ``airflow dags test`` does each.

    python scripts/run_dags.py DAGS_FOLDER DAG_ID [DAG_ID ...]

Airflow's ``airflow dags test`` is ``dag.test()`` in a process of its own, and most of its CPU is that
process's start: Airflow, the providers' configuration, the client libraries its first trigger loads
(measured on two cores: 8.7 CPU-s for one system-test DAG alone, 0.5 for the next one in the same
process). Running the DAGs of ``make demo`` and of ``tests/system`` here, one process for all of them,
runs each exactly as that command would (Airflow's own system tests call ``dag.test()`` the same way)
at a fraction of the cost. The folder is parsed once, with the folder on ``sys.path`` as Airflow puts
it for a DAG file. Before each DAG a ``==> dag.test() DAG_ID`` line, after it ``==> DAG_ID: STATE``
(``success``, ``failed``, or ``error`` when ``dag.test()`` raised: its traceback is printed and the
next DAG runs); the last line is every DAG's state as JSON. Exit status 1 unless all succeeded.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def dag_bag(folder: str) -> Any:
    """The DAGs of ``folder``, parsed as the CLI parses them (Airflow 3.1 keeps ``DagBag`` in
    ``airflow.models``, 3.2 and later in ``airflow.dag_processing``)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef,attr-defined,unused-ignore]
    return DagBag(dag_folder=folder)


def run(folder: str, dag_ids: list[str]) -> dict[str, str]:
    """Each DAG's final state (``error`` if ``dag.test()`` raised or the DAG did not parse)."""
    from airflow.providers_manager import ProvidersManager

    # As the CLI's commands do before they run: the providers' configuration defaults.
    ProvidersManager().initialize_providers_configuration()
    sys.path.insert(0, folder)
    bag = dag_bag(folder)
    for path, error in bag.import_errors.items():
        print(f"==> {path} did not parse:\n{error}", flush=True)
    states: dict[str, str] = {}
    for dag_id in dag_ids:
        print(f"==> dag.test() {dag_id}", flush=True)
        try:
            done = bag.dags[dag_id].test().state
            state = str(getattr(done, "value", done))
        except Exception:
            traceback.print_exc()
            state = "error"
        states[dag_id] = state
        print(f"==> {dag_id}: {state}", flush=True)
    return states


def main(argv: list[str]) -> int:
    """Run the DAGs named in ``argv`` (after the folder); 0 if every one succeeded."""
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    states = run(argv[0], argv[1:])
    print(json.dumps(states), flush=True)
    return 0 if all(state == "success" for state in states.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
