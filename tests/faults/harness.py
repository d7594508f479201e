"""A real Airflow deployment on PostgreSQL against a ``dws-emulator``, for the fault matrix.

:class:`Deployment` creates a throwaway database on the local PostgreSQL server and a temporary
``AIRFLOW_HOME``, runs ``airflow db migrate``, and starts ``airflow api-server``, ``airflow
scheduler``, ``airflow dag-processor`` and one or more ``airflow triggerer`` processes, each in
its own process group with its log in a file. Every process gets ``DWS_EMULATOR_HOST`` of one
emulator started first. :class:`AirflowApi` drives it through the public REST API (``/api/v2``);
no login is needed (SimpleAuthManager, all admins).

The executor is LocalExecutor (task processes run under the scheduler) or CeleryExecutor: the
local Redis server as broker (a queue and key prefix of the deployment's own, removed at the
end), the deployment's PostgreSQL database as result backend, and ``airflow celery worker``
processes of their own (:data:`CELERY_WORKERS`), which run the task processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg2

from dws_emulator.kube.connection import airflow_connection
from dws_emulator.process import EmulatorProcess

DAGS_FOLDER = Path(__file__).resolve().parent / "dags"
BIN = Path(sys.executable).parent
#: The cncf-kubernetes connection of the emulated GKE cluster (as `make demo` names it).
GKE_CONN_ID = "dws_gke_emulator"

PG_HOST = os.environ.get("DWS_FAULTS_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("DWS_FAULTS_PG_PORT", "5432"))
PG_USER = os.environ.get("DWS_FAULTS_PG_USER", "postgres")
#: Databases to connect to for CREATE/DROP DATABASE, in order of preference.
PG_ADMIN_DBS = ("postgres", "test")
#: The Redis server CeleryExecutor deployments use as broker (no auth).
REDIS_URL = os.environ.get("DWS_FAULTS_REDIS_URL", "redis://127.0.0.1:6379/0")

EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
#: ``airflow celery worker`` processes per Celery deployment, and task processes each runs at once.
CELERY_WORKERS = 2
CELERY_CONCURRENCY = 8
#: Under Celery, a task whose worker died without a word is failed (and retried) by the scheduler
#: once its heartbeat is this old (Airflow's default is 300 s). At 30 s a healthy task was failed
#: (the execution_timeout row, 2026-12-06): with every shared row's task process starting at once
#: on two cores, its heartbeat came later than that.
TASK_HEARTBEAT_TIMEOUT = 90

#: How often the triggerer heartbeats, and after how long without one it is taken for dead and
#: its triggers are handed to another triggerer (the takeover scenario waits about this long).
TRIGGERER_HEARTBEAT = 1
TRIGGERER_HEALTH_THRESHOLD = 10

#: Where every Airflow process of a deployment reads and writes its bytecode, as the Makefile's
#: ``PYTEST_ENV`` has it for the tests (a prefix the caller set wins): a pip-installed Airflow comes
#: with compiled bytecode, and with the shell's ``PYTHONDONTWRITEBYTECODE=1`` (and uv, which does
#: not compile on install) each process compiled every module it imported from source, several
#: CPU seconds per task process.
PYCACHE_PREFIX = Path(os.environ.get("PYTHONPYCACHEPREFIX") or Path(sys.prefix) / "pycache")
#: What :func:`compile_bytecode` leaves out: the standard library's tests and tools no Airflow process imports.
NOT_IMPORTED = re.compile(r"/python3\.\d+/(test|idlelib|lib2to3|ensurepip|turtledemo)/")

T = TypeVar("T")


def bytecode_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with bytecode written and read under :data:`PYCACHE_PREFIX`, as a user's deployment has it."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(PYCACHE_PREFIX)
    return out


def compile_bytecode(*trees: Path) -> float:
    """Compile the standard library, the virtualenv's packages and ``trees`` into
    :data:`PYCACHE_PREFIX` (what is up to date is only checked); the seconds it took.

    Once the prefix is set, Python looks for bytecode there only (not in ``__pycache__``), so the
    standard library is compiled there too. Without this, the first process to import a module
    compiles it: a measured one, for a benchmark.
    """
    import sysconfig

    began = time.monotonic()
    paths = sysconfig.get_paths()
    roots = dict.fromkeys([paths["stdlib"], paths["purelib"], paths["platlib"], *map(str, trees)])
    command = [sys.executable, "-m", "compileall", "-q", "-j", "2", "-x", NOT_IMPORTED.pattern, *roots]
    env = bytecode_environment(os.environ)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    # compileall exits 1 when a file does not compile (a template, a Python-2 file of some
    # package): no process imports those, so only a crash is an error.
    if done.returncode not in (0, 1):
        raise HarnessError(f"compileall failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return time.monotonic() - began


class HarnessError(RuntimeError):
    """The deployment could not do what the harness asked (not a scenario verdict)."""


def free_port() -> int:
    """A free loopback TCP port (bound once and released; good enough on a test machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``predicate`` until it returns something truthy; raise :class:`HarnessError` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# -- PostgreSQL -----------------------------------------------------------------------------------


def _admin_connection() -> Any:
    errors = []
    for dbname in PG_ADMIN_DBS:
        try:
            conn = psycopg2.connect(
                host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=dbname, connect_timeout=5
            )
        except psycopg2.OperationalError as err:
            errors.append(f"{dbname}: {err}".strip())
            continue
        conn.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
        return conn
    raise HarnessError(f"cannot reach PostgreSQL at {PG_HOST}:{PG_PORT} as {PG_USER}: {'; '.join(errors)}")


def probe_postgres() -> str | None:
    """None if the PostgreSQL server accepts the harness, else why not."""
    try:
        _admin_connection().close()
    except HarnessError as err:
        return str(err)
    return None


# -- Redis (the Celery broker) ---------------------------------------------------------------------


def _redis() -> Any:
    import redis  # only Celery deployments need it (apache-airflow-providers-celery brings it)

    return redis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=5)


def probe_redis() -> str | None:
    """None if the Redis server answers a PING, else why not."""
    try:
        _redis().ping()
    except Exception as err:  # the client's connection and import errors alike
        return f"cannot reach Redis at {REDIS_URL}: {type(err).__name__}: {err}"
    return None


def drop_redis_keys(prefix: str) -> None:
    """Delete every key under ``prefix`` (a Celery deployment's queues, unacked messages)."""
    client = _redis()
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))
    if keys:
        client.delete(*keys)


class Database:
    """A fresh PostgreSQL database ``dws_faults_<random>``, dropped by :meth:`drop`."""

    def __init__(self) -> None:
        self.name = f"dws_faults_{secrets.token_hex(6)}"
        with contextlib.closing(_admin_connection()) as conn, conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{self.name}"')
        self.url = f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{self.name}"

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one read query on the deployment's database (what the REST API does not show)."""
        with (
            contextlib.closing(
                psycopg2.connect(
                    host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=self.name, connect_timeout=5
                )
            ) as conn,
            conn.cursor() as cur,
        ):
            cur.execute(sql, params)
            return list(cur.fetchall())

    def drop(self) -> None:
        with contextlib.closing(_admin_connection()) as conn, conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# -- processes ------------------------------------------------------------------------------------


class Service:
    """One long-running ``airflow`` command in its own process group, logging to a file."""

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(BIN / "airflow"), *args],
            env=dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self.job_id: int | None = None  # the TriggererJob id, for triggerers

    def alive(self) -> bool:
        return self.proc.poll() is None

    def descendants(self) -> list[Any]:
        """Every live process under this one (``psutil.Process``), whatever its process group."""
        import psutil

        with contextlib.suppress(psutil.Error):
            return list(psutil.Process(self.pid).children(recursive=True))
        return []

    def kill(self) -> None:
        """SIGKILL the group and every descendant at once, like a machine dying: no cleanup runs.

        Airflow's supervisor puts each task process in a process group of its own, so the group
        alone would miss it.
        """
        children = self.descendants()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        _kill_all(children)
        self.proc.wait()
        self._log.close()

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the group, then SIGKILL whatever is left after ``grace`` seconds."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        # Children (task supervisors, the trigger runner) may outlive the group leader.
        children = self.descendants()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        _kill_all(children)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self._log.close()

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def _kill_all(processes: Sequence[Any]) -> None:
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


# -- REST API -------------------------------------------------------------------------------------


class AirflowApi:
    """The few public REST API calls the matrix needs (``/api/v2``)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.client = httpx.Client(base_url=f"{base_url}/api/v2", timeout=30.0)
        #: One dag-run POST at a time: every scenario starts at once, and 32 POSTs together (each
        #: holding one of the api-server's database connections while it loads the DAG) emptied its
        #: pool, so requests waited out the pool's 30 s and the tasks' own calls failed with them.
        self.trigger_lock = threading.Lock()
        #: Whether the API asked for a token: Airflow 3.1 and 3.2's simple auth manager lets no
        #: request in without one, even with every user an admin (3.3 does); it hands one out.
        self.needs_token = False

    def _take_token(self) -> None:
        token = httpx.get(f"{self.base_url}/auth/token", timeout=30.0).json()["access_token"]
        self.client.headers["Authorization"] = f"Bearer {token}"
        self.needs_token = True

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        # The API server answers slowly or not at all while the machine is busy starting tasks;
        # a dropped connection is retried, an HTTP error is not.
        for attempt in range(5):
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TransportError:
                if attempt == 4:
                    raise
                time.sleep(1 + attempt)
                continue
            if response.status_code == 401 and not self.needs_token:
                self._take_token()
                continue
            if response.status_code >= 400:
                raise HarnessError(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")
            return response.json() if response.content else None
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        try:
            response = self.client.get("/monitor/health", timeout=5.0)
        except httpx.TransportError:
            return {}
        return dict(response.json()) if response.status_code == 200 else {}

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        response = self.client.get(f"/dags/{dag_id}")
        if response.status_code == 401 and not self.needs_token:
            self._take_token()
            response = self.client.get(f"/dags/{dag_id}")
        return dict(response.json()) if response.status_code == 200 else None

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/importErrors")["import_errors"])

    def trigger(self, dag_id: str, run_id: str, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Trigger ``run_id``, once: a POST the client gave up on (a timeout, then a retry) may have
        made the run, which the retry's 409 then says; the run is read back instead of failing."""
        # The examples template ``ds_nodash``, which a run without a logical date does not have.
        now = datetime.now(timezone.utc).isoformat()
        body = {"dag_run_id": run_id, "logical_date": now, "conf": dict(conf or {})}
        with self.trigger_lock:
            try:
                return dict(self._call("POST", f"/dags/{dag_id}/dagRuns", json=body))
            except HarnessError as err:
                if "HTTP 409" not in str(err):
                    raise
                return dict(self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's task instances by task id."""
        data = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in data["task_instances"]}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of one task instance, oldest first."""
        data = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return sorted(data["task_instances"], key=lambda t: t["try_number"])

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> Any:
        """What a user does with "mark failed" / "mark success" on one task instance."""
        return self._call(
            "PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}", json={"new_state": state}
        )

    def clear_task(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """What a user does with "clear" on one task instance (downstream too, run reset to queued)."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": [task_id],
            "only_failed": False,
            "include_downstream": True,
            "reset_dag_runs": True,
        }
        return self._call("POST", f"/dags/{dag_id}/clearTaskInstances", json=body)

    def close(self) -> None:
        self.client.close()


# -- the deployment -------------------------------------------------------------------------------


class Deployment:
    """Emulator + PostgreSQL + api-server, scheduler, dag-processor and triggerers; see the module doc.

    ``pools`` are the emulator's capacity pools (``{"us-central1/NVIDIA_H100_80GB": 0}``), ``dag_ids``
    the DAGs to wait for before :meth:`start` returns, ``executor`` one of :data:`EXECUTORS`.
    """

    def __init__(
        self,
        pools: Mapping[str, int],
        dag_ids: Sequence[str],
        workdir: Path | None = None,
        seed: int = 11,
        executor: str = "local",
    ) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {sorted(EXECUTORS)}, got {executor!r}")
        self.executor = executor
        # The deployment's own Celery queue and Redis key prefix: other users of the server (another
        # deployment, another project) neither take its tasks nor see its keys.
        self.celery_queue = f"dws_faults_{secrets.token_hex(4)}"
        self.workers: list[Service] = []
        self._worker_seq = 0
        self.pools = dict(pools)
        self.dag_ids = list(dag_ids)
        self.seed = seed
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="dws-faults-"))
        self.home = self.workdir / "airflow-home"
        self.log_dir = self.workdir / "logs"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.db: Database | None = None
        self.emulator: EmulatorProcess | None = None
        self.api: AirflowApi | None = None
        self.services: dict[str, Service] = {}
        self.triggerers: list[Service] = []
        self._triggerer_seq = 0
        self.env: dict[str, str] = {}
        self.startup_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> Deployment:
        """Create everything and wait until all components are healthy and every DAG is parsed."""
        began = time.monotonic()
        try:
            if self.executor == "celery":
                unreachable = probe_redis()
                if unreachable:
                    raise HarnessError(f"CeleryExecutor needs the Redis broker: {unreachable}")
            self.db = Database()
            self.emulator = EmulatorProcess(self.pools, self.seed, self.log_dir / "emulator.log")
            port = free_port()
            self.env = self._environment(port)
            migrate = subprocess.run(
                [str(BIN / "airflow"), "db", "migrate"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            (self.log_dir / "db-migrate.log").write_text(migrate.stdout + migrate.stderr)
            if migrate.returncode != 0:
                raise HarnessError(f"airflow db migrate failed:\n{(migrate.stdout + migrate.stderr)[-3000:]}")
            self.services["api-server"] = Service(
                "api-server",
                ["api-server", "--host", "127.0.0.1", "--port", str(port)],
                self.env,
                self.log_dir,
            )
            self.services["scheduler"] = Service(
                "scheduler", ["scheduler", "--skip-serve-logs"], self.env, self.log_dir
            )
            self.services["dag-processor"] = Service(
                "dag-processor", ["dag-processor"], self.env, self.log_dir
            )
            self.start_triggerer()
            if self.executor == "celery":
                for _ in range(CELERY_WORKERS):
                    self.start_worker(wait=False)
            self.api = AirflowApi(f"http://127.0.0.1:{port}")
            self._wait_ready(began + timeout)
            for worker in self.workers:
                self._wait_worker_ready(worker, began + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _environment(self, port: int) -> dict[str, str]:
        assert self.db is not None and self.emulator is not None
        # Nothing of the caller's Airflow or emulator settings may leak into the deployment.
        env = bytecode_environment(
            {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "DWS_EMULATOR", "DWS_EXAMPLE"))
            }
        )
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__EXECUTOR": EXECUTORS[self.executor],
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db.url,
                # Airflow derives an asyncpg URL for its async engine (asyncpg: the test extra); 3.1
                # refuses an empty one at start, which 3.3 would take as "no async engine".
                "AIRFLOW__CORE__PARALLELISM": "16",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                # A worker parses the DAG file before it runs a task; on a loaded 2-core machine
                # with a fresh virtualenv, several parsing at once can pass the 30 s default.
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
                "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                # Every process signs or checks the task tokens: they must share one secret.
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__EXPOSE_CONFIG": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
                "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
                # Parse once at start-up; re-parsing every file every 30 s only costs CPU here.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": str(TRIGGERER_HEARTBEAT),
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(TRIGGERER_HEALTH_THRESHOLD),
                "DWS_EMULATOR_HOST": self.emulator.address,
                # cncf-kubernetes' operators (a GKE example's workload) reach the emulated cluster
                # through a Kubernetes connection.
                f"AIRFLOW_CONN_{GKE_CONN_ID.upper()}": airflow_connection(self.emulator.address),
                "DWS_EXAMPLE_KUBERNETES_CONN_ID": GKE_CONN_ID,
                "DWS_EXAMPLE_POLL_INTERVAL": "1",
                "DWS_EXAMPLE_MAX_WAIT_SECONDS": "900",
                "DWS_EXAMPLE_TPU_MAX_WAIT_SECONDS": "900",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.executor == "celery":
            env.update(self._celery_environment())
        return env

    def _celery_environment(self) -> dict[str, str]:
        assert self.db is not None
        return {
            "AIRFLOW__CELERY__BROKER_URL": REDIS_URL,
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": f"{self.celery_queue}:",
            # A message a SIGKILLed worker held comes back only after this; no run lasts that long.
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "86400",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{self.db.name}",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.celery_queue,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(CELERY_CONCURRENCY),
            # Sending a task to the broker gets 1 s by default, which a loaded machine can miss.
            "AIRFLOW__CELERY__OPERATION_TIMEOUT": "15",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TASK_HEARTBEAT_TIMEOUT),
        }

    def _wait_ready(self, deadline: float) -> None:
        assert self.api is not None
        api = self.api

        def healthy() -> bool:
            self._check_alive()
            health = api.health()
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return bool(health) and all((health.get(p) or {}).get("status") == "healthy" for p in parts)

        wait_for(healthy, deadline - time.monotonic(), "every Airflow component to report healthy", 1.0)

        def parsed() -> bool:
            self._check_alive()
            errors = api.import_errors()
            if errors:
                raise HarnessError(f"DAG import errors: {errors}")
            return all(api.dag(dag_id) is not None for dag_id in self.dag_ids)

        wait_for(parsed, deadline - time.monotonic(), f"DAGs {self.dag_ids} to be parsed", 1.0)

    def _check_alive(self) -> None:
        for service in [*self.services.values(), *self.triggerers, *self.workers]:
            if not service.alive():
                raise HarnessError(f"{service.name} exited ({service.proc.returncode}):\n{service.tail()}")

    def stop(self) -> None:
        """Stop every process, drop the database; the work directory stays only if it was given."""
        for service in [*self.workers, *self.triggerers, *reversed(self.services.values())]:
            with contextlib.suppress(Exception):
                service.stop()
        if self.executor == "celery":
            with contextlib.suppress(Exception):
                drop_redis_keys(f"{self.celery_queue}:")
        if self.api is not None:
            self.api.close()
        if self.emulator is not None:
            with contextlib.suppress(Exception):
                self.emulator.stop()
        if self.db is not None:
            with contextlib.suppress(Exception):
                self.db.drop()

    # -- triggerers ----------------------------------------------------------------------------

    def _triggerer_jobs(self) -> set[int]:
        assert self.db is not None
        rows = self.db.query("SELECT id FROM job WHERE job_type = 'TriggererJob' AND end_date IS NULL")
        return {row[0] for row in rows}

    def start_triggerer(self, timeout: float = 120.0) -> Service:
        """Start another ``airflow triggerer`` and wait for its job row; ``service.job_id`` is its id.

        No log server: two triggerers would fight over its port.
        """
        before = self._triggerer_jobs()
        self._triggerer_seq += 1
        service = Service(
            f"triggerer-{self._triggerer_seq}", ["triggerer", "--skip-serve-logs"], self.env, self.log_dir
        )
        self.triggerers.append(service)

        def registered() -> int | None:
            if not service.alive():
                raise HarnessError(f"{service.name} exited:\n{service.tail()}")
            new = self._triggerer_jobs() - before
            return min(new) if new else None

        service.job_id = wait_for(registered, timeout, f"{service.name} to register its job")
        return service

    def trigger_assignments(self, dag_id: str, run_id: str) -> dict[str, int | None]:
        """For each deferred task of a run: the TriggererJob id running its trigger (None: unassigned)."""
        assert self.db is not None
        rows = self.db.query(
            "SELECT ti.task_id, t.triggerer_id FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
            "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.state = 'deferred'",
            (dag_id, run_id),
        )
        return dict(rows)

    def kill_triggerer(self, service: Service) -> None:
        """SIGKILL a triggerer's whole process group (its trigger runner too)."""
        service.kill()
        self.triggerers.remove(service)

    def stop_triggerer(self, service: Service) -> None:
        """Stop a triggerer the polite way (SIGTERM: it hands its triggers back)."""
        service.stop()
        self.triggerers.remove(service)

    # -- Celery workers ------------------------------------------------------------------------

    def start_worker(self, wait: bool = True, timeout: float = 180.0) -> Service:
        """Start another ``airflow celery worker`` on the deployment's queue (``wait``: until ready).

        No log server (the harness reads task logs from the shared ``AIRFLOW_HOME``), no mingle or
        gossip (the workers need nothing from each other).
        """
        self._worker_seq += 1
        name = f"celery-worker-{self._worker_seq}"
        service = Service(
            name,
            [
                "celery",
                "worker",
                "--queues",
                self.celery_queue,
                "--celery-hostname",
                f"{name}-{self.celery_queue}@%h",
                "--skip-serve-logs",
                "--without-mingle",
                "--without-gossip",
            ],
            self.env,
            self.log_dir,
        )
        self.workers.append(service)
        if wait:
            self._wait_worker_ready(service, time.monotonic() + timeout)
        return service

    def _wait_worker_ready(self, service: Service, deadline: float) -> None:
        def ready() -> bool:
            if not service.alive():
                raise HarnessError(f"{service.name} exited ({service.proc.returncode}):\n{service.tail()}")
            # Celery's own line once the worker consumes from its queue.
            return " ready." in service.log_path.read_text(errors="replace")

        wait_for(ready, deadline - time.monotonic(), f"{service.name} to be ready", 1.0)

    def worker_running(self, pid: int) -> Service | None:
        """The Celery worker whose process tree holds ``pid`` (a task process), if any."""
        for worker in self.workers:
            if pid == worker.pid or pid in {p.pid for p in worker.descendants()}:
                return worker
        return None

    def kill_worker(self, service: Service) -> None:
        """SIGKILL a Celery worker and every process under it (its pool and task processes)."""
        service.kill()
        self.workers.remove(service)

    def task_pid(self, dag_id: str, run_id: str, task_id: str) -> int | None:
        """The process id Airflow recorded for a running task instance (its task process)."""
        assert self.db is not None
        rows = self.db.query(
            "SELECT pid FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s "
            "AND map_index = -1",
            (dag_id, run_id, task_id),
        )
        return rows[0][0] if rows and rows[0][0] else None

    def remove_workdir(self) -> None:
        """Delete the work directory (logs included) if the deployment made it itself."""
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
