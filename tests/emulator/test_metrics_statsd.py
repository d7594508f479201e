"""The provider's metrics reach a real StatsD socket through Airflow's own stats, configured the
way a deployment configures it (``AIRFLOW__METRICS__STATSD_*``), from a trigger run and a task run
on the in-process emulator.

Both run in this process: Airflow initialises the task SDK's stats only in its real processes
(the task runner's ``main``, and in the triggerer the import of ``airflow.sdk.serde``, which
``airflow.models.trigger`` imports), so the fixture initialises it the way they do, with
``stats_utils.get_stats_factory()``, and restores it afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws import metrics
from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.triggers.capacity_request import first_event
from tests.emulator.test_provider_on_emulator import H100
from tests.emulator.test_records_on_emulator import TI, vertex

pytestmark = pytest.mark.emulator

TAGS = "api=vertex_custom_job,location=us-central1"
GPU_TAGS = f"{TAGS},accelerator_type=NVIDIA_H100_80GB"


class StatsdSocket:
    """A UDP socket standing in for a StatsD server: the lines it received."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []

    def drain(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return
            self.lines += [line for line in data.decode().splitlines() if line]

    def wait_for(self, predicate: Callable[[list[str]], bool], what: str, timeout: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while not predicate(self.lines):
            assert time.monotonic() < deadline, f"no {what} in {self.lines}"
            self.drain()
        return self.lines

    def named(self, name: str) -> list[str]:
        """The lines of metric ``name`` (Airflow's prefix and InfluxDB-style tags: ``airflow.NAME,k=v:value|type``)."""
        return [line for line in self.lines if line.split(",", 1)[0] == f"airflow.{name}"]


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdSocket]:
    server = StatsdSocket()
    for key, value in {
        "STATSD_ON": "True",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(server.port),
        "STATSD_PREFIX": "airflow",
        # Tags on the line (``name,tag=value``), which the StatsD exporter for Prometheus reads.
        "STATSD_INFLUXDB_ENABLED": "True",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    restore = _stats_from_the_environment()
    try:
        yield server
    finally:
        restore()
        server.sock.close()


def _stats_from_the_environment() -> Callable[[], None]:
    """Point Airflow's ``Stats`` at what ``[metrics]`` says now (it reads it once per process), and
    return how to put it back."""
    try:
        from airflow.sdk._shared.observability.metrics import stats
    except ImportError:  # Airflow 3.0 and 3.1: airflow.stats, whose metaclass picks its factory once
        from airflow.metrics import statsd_logger
        from airflow.stats import Stats

        # The factory lives on the metaclass; the logger it made, once used, on the class itself.
        meta: Any = type(Stats)
        saved_meta = (meta.factory, Stats.__dict__.get("instance"))
        meta.factory = statsd_logger.get_statsd_logger
        type.__setattr__(Stats, "instance", None)

        def restore_meta() -> None:
            meta.factory = saved_meta[0]
            type.__setattr__(Stats, "instance", saved_meta[1])

        return restore_meta
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability.metrics import stats_utils

    if not hasattr(stats, "_factory"):  # Airflow 3.2: the factory and logger live on the Stats class
        cls: Any = stats.Stats
        saved_cls = (cls.__dict__.get("factory"), cls.__dict__.get("instance"))
        cls.initialize(factory=stats_utils.get_stats_factory(cls))

        def restore_cls() -> None:
            type.__setattr__(cls, "factory", saved_cls[0])
            type.__setattr__(cls, "instance", saved_cls[1])

        return restore_cls
    saved = (stats._factory, stats._backend, stats._export_legacy_names)
    stats.initialize(
        factory=stats_utils.get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
    )

    def restore() -> None:
        stats._factory, stats._backend, stats._export_legacy_names = saved

    return restore


def test_a_trigger_run_and_a_task_run_send_statsd_lines(statsd: StatsdSocket, vertex_emulator: Any) -> None:
    vertex_emulator()
    ti = TI("metrics_on_emulator", "train")
    with pytest.raises(TaskDeferred) as deferred:
        vertex().execute({"ti": ti})
    # The trigger's run: the shared poller's gauge and call counter, tagged by api and location.
    event = asyncio.run(asyncio.wait_for(first_event(deferred.value.trigger), 120))
    statsd.wait_for(lambda _: statsd.named(metrics.POLLER_CALLS), "poller calls")
    statsd.wait_for(lambda _: statsd.named(metrics.REQUESTS_WAITING), "waiting gauge")
    assert f"airflow.{metrics.REQUESTS_WAITING},{TAGS}:1|g" in statsd.named(metrics.REQUESTS_WAITING)
    for line in statsd.named(metrics.POLLER_CALLS):
        assert line.startswith(f"airflow.{metrics.POLLER_CALLS},{TAGS}:") and line.endswith("|c")
    # The task's run, resumed with the event: the wait and run timers of the request.
    vertex().complete_attempt({"ti": ti.again()}, event)
    statsd.wait_for(lambda _: statsd.named(metrics.REQUEST_RUN), "run timer")
    [wait] = statsd.named(metrics.REQUEST_WAIT)
    [run] = statsd.named(metrics.REQUEST_RUN)
    assert wait.startswith(f"airflow.{metrics.REQUEST_WAIT},{GPU_TAGS}:") and wait.endswith("|ms")
    assert run.startswith(f"airflow.{metrics.REQUEST_RUN},{GPU_TAGS}:") and run.endswith("|ms")
    ran_ms = float(run.rsplit(":", 1)[1].split("|")[0])
    assert ran_ms == pytest.approx(ti.again().xcom["run_seconds"] * 1000, abs=1)


def test_a_task_without_capacity_counts_it(statsd: StatsdSocket, vertex_emulator: Any) -> None:
    vertex_emulator({H100: 0})
    ti = TI("metrics_on_emulator", "no_capacity")
    with pytest.raises(CapacityNotObtainedError):
        vertex(task_id=ti.task_id, max_wait=2, deferrable=False).execute({"ti": ti})
    statsd.wait_for(lambda _: statsd.named(metrics.CAPACITY_NOT_OBTAINED), "capacity counter")
    assert statsd.named(metrics.CAPACITY_NOT_OBTAINED) == [
        f"airflow.{metrics.CAPACITY_NOT_OBTAINED},{GPU_TAGS}:1|c"
    ]
    assert not statsd.named(metrics.REQUEST_RUN)  # it never ran
