"""A real ``airflow api-server`` with DWS request records of a few DAGs, for the DWS page's tests.

One api-server (SQLite, its own AIRFLOW_HOME) with the test auth manager
:class:`tests.airflow.dws_auth_manager.DagScopedAuthManager` (SimpleAuthManager plus per-user DAG
lists: the simple manager has roles only). First, with nothing written, :func:`running_server`
reads the page as the admin (the empty deployment); then it writes DAGs, runs, task instances and
their ``dws_requests`` XComs through Airflow's ORM (``tests/airflow/dws_page_seed.py``). Tests read
over HTTP with bearer tokens from ``/auth/token``.

Users: ``admin`` (Admin role, every DAG), ``alice`` (Viewer, DAG ``dws_dag_a`` only), ``bob``
(Viewer, no DAG). The price table comes from ``AIRFLOW_VAR_DWS_PRICES``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx

from airflow_provider_dws.records import RequestRecord
from tests.airflow.conftest import BIN, ROOT
from tests.faults.harness import Service, free_port, wait_for

DAG_A, DAG_B, DAG_C = "dws_dag_a", "dws_dag_b", "dws_dag_c"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
PRICES = {
    "NVIDIA_H100_80GB": {"flex_start": 4.0, "reserved": 10.0},
    "v5litepod-8": {"flex_start": 1.0, "reserved": 2.0},
}
NOW = datetime.now(timezone.utc).replace(microsecond=0)
HAS_SAVINGS = importlib.util.find_spec("airflow_provider_dws.savings") is not None


def _t(text: str) -> str:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).isoformat()


def _ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).isoformat()


def _rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"project": "proj", "kind": "CustomJob", "pricing_model": "flex_start"}
    base.update(kw)
    return RequestRecord(**base).to_dict()


def seed_items() -> list[dict[str, Any]]:
    """Three DAGs; hand-computed expectations in the tests below."""
    h100 = {"accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
    slice_ = {
        "api": "tpu",
        "kind": "QueuedResource",
        "location": "us-central2-b",
        "request_name": "projects/proj/locations/us-central2-b/queuedResources/qr-1",
        "accelerator_type": "v5litepod-8",
        "accelerator_count": 8,
        "submitted": _t("2026-11-21T00:00:00"),
        "started": _t("2026-11-21T01:00:00"),
        "held_since": _t("2026-11-21T01:00:00"),
    }
    return [
        # DAG A: one waiting now, one succeeded (waited 1 h, ran 2 h, 8 GPUs), one not obtained (2 L4s, 2 h).
        {
            "dag_id": DAG_A, "run_id": "run_a", "task_id": "train", "state": "deferred",
            "start": _ago(minutes=30), "written": _ago(minutes=30),
            "records": [_rec(api="vertex", location="us-central1", request_name="jobs/a1", phase="waiting",
                             submitted=_ago(minutes=30), max_wait_seconds=3600,
                             console_url="https://console.cloud.google.com/vertex-ai/a1", **h100)],
        },
        {
            "dag_id": DAG_A, "run_id": "run_a0", "task_id": "train", "state": "success",
            "start": _t("2026-11-20T10:00:00"), "end": _t("2026-11-20T13:00:00"), "written": _ago(hours=2),
            "records": [_rec(api="vertex", location="us-central1", request_name="jobs/a2", phase="succeeded",
                             submitted=_t("2026-11-20T10:00:00"), started=_t("2026-11-20T11:00:00"),
                             ended=_t("2026-11-20T13:00:00"), outcome="JOB_STATE_SUCCEEDED", **h100)],
        },
        {
            "dag_id": DAG_A, "run_id": "run_a0", "task_id": "batch", "state": "failed",
            "start": _t("2026-11-20T12:00:00"), "end": _t("2026-11-20T14:00:00"), "written": _ago(hours=1),
            "records": [_rec(api="batch", kind="BatchJob", location="us-east1", request_name="batch/a3",
                             phase="not_obtained", accelerator_type="NVIDIA_L4", accelerator_count=2,
                             submitted=_t("2026-11-20T12:00:00"), ended=_t("2026-11-20T14:00:00"),
                             max_wait_seconds=7200)],
        },
        # DAG B: a TPU slice created by one task and deleted by another (merge), a cancelled mapped task.
        {
            "dag_id": DAG_B, "run_id": "run_b", "task_id": "create", "state": "success",
            "start": _t("2026-11-21T00:00:00"), "end": _t("2026-11-21T01:00:00"), "written": _ago(hours=3),
            "records": [_rec(phase="running", holds=True, **slice_)],
        },
        {
            "dag_id": DAG_B, "run_id": "run_b", "task_id": "delete", "state": "success",
            "start": _t("2026-11-21T02:59:00"), "end": _t("2026-11-21T03:00:00"), "written": _ago(hours=2),
            "records": [_rec(phase="succeeded", holds=False, released=_t("2026-11-21T03:00:00"),
                             ended=_t("2026-11-21T03:00:00"), outcome="deleted", **slice_)],
        },
        {
            "dag_id": DAG_B, "run_id": "run_b", "task_id": "train", "map_index": 1, "state": "failed",
            "written": _ago(hours=1),
            "records": [_rec(api="vertex", location="europe-west4", request_name="jobs/b2", phase="cancelled",
                             accelerator_type="NVIDIA_A100_80GB", accelerator_count=4,
                             submitted=_t("2026-11-21T05:00:00"), ended=_t("2026-11-21T06:00:00"))],
        },
        # DAG C: written ten days ago, outside the default 7-day range.
        {
            "dag_id": DAG_C, "run_id": "run_c", "task_id": "train", "state": "success", "written": _ago(days=10),
            "records": [_rec(api="vertex", location="us-central1", request_name="jobs/c1", phase="succeeded",
                             submitted=_t("2026-11-10T00:00:00"), started=_t("2026-11-10T00:10:00"),
                             ended=_t("2026-11-10T01:00:00"), **h100)],
        },
    ]  # fmt: skip


@dataclass
class Server:
    base: str
    env: dict[str, str]
    tokens: dict[str, str] = field(default_factory=dict)
    empty: dict[str, httpx.Response] = field(default_factory=dict)

    def get(self, path: str, user: str | None = "admin", **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}
        return httpx.get(self.base + path, headers=headers, params=params, timeout=60)

    def json(self, path: str, user: str = "admin", **params: Any) -> Any:
        response = self.get(path, user, **params)
        assert response.status_code == 200, response.text[:2000]
        return response.json()


def _token(base: str, user: str) -> str:
    response = httpx.post(
        f"{base}/auth/token", json={"username": user, "password": PASSWORDS[user]}, timeout=60
    )
    assert response.status_code == 201, response.text
    return str(response.json()["access_token"])


@contextlib.contextmanager
def api_server(home: Path, db_url: str | None = None, dags_folder: Path | None = None) -> Iterator[Server]:
    """Start ``airflow api-server`` in ``home`` with the test auth manager and users; stop it at the end.

    The database is SQLite in ``home`` (migrated here: an existing one keeps its runs) unless
    ``db_url`` names another. ``dags_folder`` defaults to an empty ``home/dags``.
    """
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DWS_"))}
    port = free_port()
    if dags_folder is None:
        dags_folder = home / "dags"
        dags_folder.mkdir(exist_ok=True)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.airflow.dws_auth_manager.DagScopedAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,alice:viewer,bob:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            "AIRFLOW_VAR_DWS_PRICES": json.dumps(PRICES),
            "DWS_TEST_DAG_ACCESS": json.dumps({"alice": [DAG_A], "bob": []}),
            # The api-server imports the test auth manager from this checkout.
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        }
    )
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = ""  # no asyncpg here (as in tests/faults)
    subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300
    )
    service = Service("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port)], env, home)
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if not service.alive():
                raise AssertionError(f"api-server exited:\n{service.tail(80)}")
            try:
                return httpx.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 240, "the api-server to answer", 1.0)
        yield Server(base=base, env=env, tokens={u: _token(base, u) for u in PASSWORDS})
    finally:
        service.stop()


@contextlib.contextmanager
def running_server(home: Path, db_url: str | None = None) -> Iterator[Server]:
    """:func:`api_server` on an empty database: read the empty page, then seed :func:`seed_items`."""
    with api_server(home, db_url) as srv:
        srv.empty = {p: srv.get(p) for p in ("/dws/", "/dws/api/requests", "/dws/api/summary")}
        seeded = subprocess.run(
            [sys.executable, "-m", "tests.airflow.dws_page_seed"],
            input=json.dumps(seed_items()),
            env=srv.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert seeded.returncode == 0, seeded.stderr[-3000:]
        yield srv
