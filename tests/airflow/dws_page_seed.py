"""Write DAGs, runs, task instances and their ``dws_requests`` XComs through Airflow's own ORM models.

Run as ``python -m tests.airflow.dws_page_seed`` with the deployment's environment (AIRFLOW_HOME,
the database URL), a JSON list of task instances on stdin::

    [{"dag_id", "run_id", "task_id", "map_index", "state", "try_number", "start", "end",
      "written", "records": [RequestRecord.to_dict(), ...]}]

The XCom value is stored the way Airflow stores one (``XComModel.serialize_value``).
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime
from typing import Any


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def seed(items: list[dict[str, Any]]) -> None:
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert, select

    with create_session() as session:
        if session.get(DagBundleModel, "dags-folder") is None:
            session.add(DagBundleModel(name="dags-folder"))
            session.flush()
        for dag_id in sorted({item["dag_id"] for item in items}):
            if session.get(DagModel, dag_id) is None:
                session.add(
                    DagModel(
                        dag_id=dag_id,
                        bundle_name="dags-folder",
                        fileloc=f"/dags/{dag_id}.py",
                        is_stale=False,
                        is_paused=False,
                        max_active_tasks=16,
                        max_active_runs=16,
                        max_consecutive_failed_dag_runs=0,
                        has_task_concurrency_limits=False,
                    )
                )
        session.flush()
        runs: dict[tuple[str, str], int] = {}
        for item in items:
            key = (item["dag_id"], item["run_id"])
            if key in runs:
                continue
            existing = session.scalar(
                select(DagRun.id).where(DagRun.dag_id == key[0], DagRun.run_id == key[1])
            )
            if existing is None:
                run = DagRun(
                    dag_id=key[0],
                    run_id=key[1],
                    run_type="manual",
                    logical_date=None,
                    run_after=datetime.fromisoformat(item["written"]),
                    state="running",
                )
                session.add(run)
                session.flush()
                existing = run.id
            runs[key] = existing
        for item in items:
            session.execute(
                insert(TaskInstance.__table__).values(
                    id=uuid.uuid4(),
                    dag_id=item["dag_id"],
                    run_id=item["run_id"],
                    task_id=item["task_id"],
                    map_index=item.get("map_index", -1),
                    state=item["state"],
                    try_number=item.get("try_number", 1),
                    start_date=_time(item.get("start")),
                    end_date=_time(item.get("end")),
                    pool="default_pool",
                    pool_slots=1,
                    max_tries=0,
                    priority_weight=1,
                )
            )
            session.execute(
                insert(XComModel.__table__).values(
                    dag_run_id=runs[(item["dag_id"], item["run_id"])],
                    task_id=item["task_id"],
                    map_index=item.get("map_index", -1),
                    key="dws_requests",
                    dag_id=item["dag_id"],
                    run_id=item["run_id"],
                    value=XComModel.serialize_value(item["records"]),
                    timestamp=datetime.fromisoformat(item["written"]),
                )
            )


if __name__ == "__main__":
    seed(json.load(sys.stdin))
