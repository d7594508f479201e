"""The stock burst of ``benchmarks/triggerer_airflow.py``: N tasks deferred on Airflow's own trigger.

``dws_bench_stock`` maps a minimal operator ``DWS_BENCH_TASKS`` times; each task defers on
``airflow.providers.standard``'s ``DateTimeTrigger`` until the moment given as ``fire_at`` in the
run's conf, and resumes in a worker (``execute_complete``) as the Flex Start task does. All N fire
at that one moment: the same burst of events as capacity arriving for N jobs at once, with a stock
trigger and a small payload. ``dws_bench_stock_family`` is the same mapped ``DWS_BENCH_FAMILY_TASKS``
times: the stock side of the per-family rows.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import DAG, BaseOperator

TASKS = int(os.environ.get("DWS_BENCH_TASKS", 500))
FAMILY_TASKS = int(os.environ.get("DWS_BENCH_FAMILY_TASKS", 50))


class WaitUntilFireAt(BaseOperator):
    """Defer on ``DateTimeTrigger(fire_at)``; resume in a worker and return nothing."""

    def __init__(self, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index

    def execute(self, context: Any) -> None:
        moment = datetime.fromisoformat(context["dag_run"].conf["fire_at"])
        self.defer(trigger=DateTimeTrigger(moment), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> None:
        """Back from the trigger: nothing left to do."""


for _dag_id, _tasks in (("dws_bench_stock", TASKS), ("dws_bench_stock_family", FAMILY_TASKS)):
    with DAG(
        dag_id=_dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "benchmark"],
    ):
        WaitUntilFireAt.partial(task_id="wait").expand(index=list(range(_tasks)))
