"""A real ``airflow api-server`` with DWS request records of a few DAGs, for the DWS page's tests.

One api-server (SQLite, its own AIRFLOW_HOME) with the test auth manager
:class:`tests.airflow.dws_auth_manager.DagScopedAuthManager` (SimpleAuthManager plus per-user DAG
lists: the simple manager has roles only). First, with nothing written, :func:`running_server`
reads the page as the admin (the empty deployment); then it writes DAGs, runs, task instances and
their ``dws_requests`` XComs through Airflow's ORM (``tests/airflow/dws_page_seed.py``). Tests read
over HTTP with bearer tokens from ``/auth/token``.

Users: ``admin`` (Admin role, every DAG), ``alice`` (Viewer, DAG ``dws_dag_a`` only), ``bob``
(Viewer, no DAG). The price table comes from ``AIRFLOW_VAR_DWS_PRICES`` (with its ``_source`` and
``_as_of``); the carbon table is the shipped one, the forecast window the default 30 days.
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

DAG_A, DAG_B, DAG_C, DAG_D = "dws_dag_a", "dws_dag_b", "dws_dag_c", "dws_dag_d"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
PRICE_NOTE, PRICE_DATE = "example prices of the DWS page test", "2026-11-01"
PRICES: dict[str, Any] = {
    "_source": PRICE_NOTE,
    "_as_of": PRICE_DATE,
    "NVIDIA_H100_80GB": {"flex_start": 4.0, "reserved": 10.0, "on_demand": 8.0, "spot": 2.5, "calendar": 3.0},
    "v5litepod-8": {"flex_start": 1.0, "reserved": 2.0},
}
NOW = datetime.now(timezone.utc).replace(microsecond=0)
HAS_SAVINGS = importlib.util.find_spec("airflow_provider_dws.savings") is not None


def _t(text: str) -> str:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).isoformat()


def _ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).isoformat()


def _in(**delta: float) -> str:
    return (NOW + timedelta(**delta)).isoformat()


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
        *forecast_items(),
    ]  # fmt: skip


#: DAG D's group of similar requests (``forecast.group_key``): Vertex AI, us-east4, 8 H100s.
GROUP_D = "vertex|us-east4|nvidia_h100_80gb|5-8"
#: DAG D's ended requests: (name, days ago submitted, wait s, run s or None, phase, given p50, p90,
#: p90 a lower bound). d5 and d6 ended without capacity (censored waits); d4 and d5 waited past
#: the p90 they were given; d3's p90 was only a lower bound (not judged).
HISTORY_D = (
    ("d2", 1, 900, 3600, "succeeded", 1800, 3600, False),
    ("d3", 2, 1800, 7200, "succeeded", 900, 1200, True),
    ("d4", 3, 3600, 1800, "succeeded", 1800, 2700, False),
    ("d5", 4, 5400, None, "not_obtained", 1800, 3600, False),
    ("d6", 5, 2700, None, "cancelled", None, None, False),
    ("d7", 6, 7200, 3600, "succeeded", 3600, 9000, False),
)


def _history_item(
    name: str, days: int, wait: int, run: int | None, phase: str, *given: Any
) -> dict[str, Any]:
    submitted = NOW - timedelta(days=days)
    started = submitted + timedelta(seconds=wait) if run is not None else None
    ended = (started + timedelta(seconds=run)) if started and run else submitted + timedelta(seconds=wait)
    p50, p90, lower = given
    record = _rec(
        api="vertex",
        location="us-east4",
        request_name=f"jobs/{name}",
        phase=phase,
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        submitted=submitted.isoformat(),
        started=started.isoformat() if started else None,
        ended=ended.isoformat(),
        max_wait_seconds=wait if phase == "not_obtained" else 7200,
        max_run_seconds=14400,
        expected_wait_p50_seconds=p50,
        expected_wait_p90_seconds=p90,
        expected_wait_p90_lower_bound=lower,
        expected_wait_basis=5 if p50 is not None else 0,
    )
    return {
        "dag_id": DAG_D, "run_id": f"run_{name}", "task_id": "train",
        "state": "success" if phase == "succeeded" else "failed",
        "start": submitted.isoformat(), "end": ended.isoformat(), "written": ended.isoformat(),
        "records": [record],
    }  # fmt: skip


def forecast_items() -> list[dict[str, Any]]:
    """DAG D: the history of :data:`GROUP_D` (:data:`HISTORY_D`), a request of that group waiting
    now with the capacity advice's obtainability and the forecast it was given, and a calendar
    block held for 96 hours, 24 of them gone."""
    waiting = _rec(
        api="vertex",
        location="us-east4",
        request_name="jobs/d1",
        phase="waiting",
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        submitted=_ago(minutes=20),
        max_wait_seconds=14400,
        max_run_seconds=28800,
        obtainability=0.72,
        expected_wait_p50_seconds=3600,
        expected_wait_p90_seconds=7200,
        expected_wait_basis=6,
    )
    block = _rec(
        api="compute_future_reservation",
        kind="FutureReservation",
        location="us-central1-a",
        request_name="projects/proj/zones/us-central1-a/futureReservations/d8",
        phase="running",
        pricing_model="calendar",
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        submitted=_ago(days=2),
        started=_ago(hours=24),
        holds=True,
        held_since=_ago(hours=24),
        held_until=_in(hours=72),
    )
    return [
        *(_history_item(*entry) for entry in HISTORY_D),
        {"dag_id": DAG_D, "run_id": "run_d1", "task_id": "train", "state": "deferred",
         "start": _ago(minutes=20), "written": _ago(minutes=20), "records": [waiting]},
        {"dag_id": DAG_D, "run_id": "run_d8", "task_id": "reserve", "state": "success",
         "start": _ago(hours=25), "end": _ago(hours=24), "written": _ago(hours=24), "records": [block]},
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
