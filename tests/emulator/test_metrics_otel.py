"""The provider's metrics reach a real OTLP/HTTP receiver through Airflow's OpenTelemetry metrics,
configured the way a deployment configures them (``AIRFLOW__METRICS__OTEL_*``), from a trigger run
and task runs on the in-process emulator: the path to Cloud Monitoring (docs/metrics.md) starts
with exactly these requests, which an OpenTelemetry Collector's ``otlp`` receiver accepts.

OpenTelemetry's global meter provider is set once per process, so the emitting side runs in a
fresh interpreter (:func:`emit`), which initialises Airflow's stats from ``[metrics]`` as the
triggerer does and ends as a task process ends (Airflow flushes its meter provider at exit). It
keeps a log of every call the provider made to Airflow's stats (a pass-through spy on
``metrics._stats``), and this test compares what the receiver decoded with that log: each series'
name, instrument kind, attributes and final value (a cumulative sum, a gauge's last value, a
timer's count and sum). The series the provider must send here are named below too, so the test
fails if the provider stops sending them or if they stop reaching the receiver.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws import metrics
from airflow_provider_dws.compat import AIRFLOW_V_3_3_PLUS
from tests.emulator.test_provider_on_emulator import H100

pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "airflow"
SERVICE = "airflow-dws-otel-test"
#: A location without capacity, for the attempt that never gets any.
EAST = "us-east4"
TAGS = {"api": "vertex_custom_job", "location": "us-central1"}
GPU_TAGS = {**TAGS, "accelerator_type": "NVIDIA_H100_80GB"}
EAST_GPU_TAGS = {**GPU_TAGS, "location": EAST}

#: How Airflow's OTel logger records a timer: a histogram in ms with exponential buckets from 3.3;
#: before, a gauge holding the last duration in ms.
TIMER_KIND = "exponential_histogram" if AIRFLOW_V_3_3_PLUS else "gauge"
KIND = {"incr": "sum", "gauge": "gauge", "timing": TIMER_KIND}

Attributes = tuple[tuple[str, str], ...]


def attributes(tags: Mapping[str, str]) -> Attributes:
    return tuple(sorted(tags.items()))


@dataclass(frozen=True)
class Point:
    """One data point as the receiver decoded it."""

    name: str
    kind: str  # the metric's data field: sum, gauge, histogram, exponential_histogram
    attributes: Attributes
    time_ns: int
    value: float | None = None  # a sum's or a gauge's
    count: int | None = None  # a histogram's
    total: float | None = None
    monotonic: bool | None = None
    cumulative: bool | None = None
    unit: str = ""
    service: str = ""


def _points(request: Any) -> Iterator[Point]:
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

    for resource_metrics in request.resource_metrics:
        resource = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                common = {"name": metric.name, "kind": kind, "unit": metric.unit}
                common["service"] = resource.get("service.name", "")
                if kind == "sum":
                    common["monotonic"] = data.is_monotonic
                if kind in ("sum", "histogram", "exponential_histogram"):
                    cumulative = data.aggregation_temporality == AggregationTemporality.Value(
                        "AGGREGATION_TEMPORALITY_CUMULATIVE"
                    )
                    common["cumulative"] = cumulative
                for point in data.data_points:
                    attrs = attributes({a.key: a.value.string_value for a in point.attributes})
                    if kind in ("sum", "gauge"):
                        number = getattr(point, point.WhichOneof("value"))
                        yield Point(attributes=attrs, time_ns=point.time_unix_nano, value=number, **common)
                    elif kind in ("histogram", "exponential_histogram"):
                        yield Point(
                            attributes=attrs,
                            time_ns=point.time_unix_nano,
                            count=point.count,
                            total=point.sum,
                            **common,
                        )


class OtlpReceiver:
    """An OTLP/HTTP metrics endpoint on loopback, as a collector's ``otlp`` receiver serves it:
    ``POST /v1/metrics`` with a protobuf ``ExportMetricsServiceRequest``; what it decoded."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        self.points: list[Point] = []
        self.requests = 0
        self.refused: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                content_type = self.headers.get("Content-Type", "")
                if self.path != "/v1/metrics" or content_type != "application/x-protobuf":
                    receiver.refused.append(f"{self.path} {content_type}")
                    self.send_response(404)
                    self.end_headers()
                    return
                decoded = list(_points(ExportMetricsServiceRequest.FromString(body)))
                with receiver._lock:
                    receiver.requests += 1
                    receiver.points += decoded
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def latest(self) -> dict[tuple[str, Attributes], Point]:
        """Each series' newest point (cumulative points: the newest holds everything so far)."""
        with self._lock:
            points = list(self.points)
        out: dict[tuple[str, Attributes], Point] = {}
        for point in points:
            key = (point.name, point.attributes)
            if key not in out or point.time_ns >= out[key].time_ns:
                out[key] = point
        return out

    def dws(self) -> dict[tuple[str, Attributes], Point]:
        return {key: p for key, p in self.latest().items() if key[0].startswith(f"{PREFIX}.dws.")}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    try:
        yield server
    finally:
        server.close()


# -- the emitting side: a fresh interpreter ------------------------------------------------------


class _Spy:
    """Airflow's stats as the provider sees them, logging each call before passing it on."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self.sent: list[tuple[str, str, float, dict[str, str]]] = []

    def incr(self, name: str, count: int, *, tags: dict[str, str]) -> None:
        self.sent.append(("incr", name, count, dict(tags)))
        self.stats.incr(name, count, tags=tags)

    def gauge(self, name: str, value: float, *, tags: dict[str, str]) -> None:
        self.sent.append(("gauge", name, value, dict(tags)))
        self.stats.gauge(name, value, tags=tags)

    def timing(self, name: str, dt: Any, *, tags: dict[str, str]) -> None:
        self.sent.append(("timing", name, dt.total_seconds() * 1000, dict(tags)))
        self.stats.timing(name, dt, tags=tags)


def emit(out: str) -> None:
    """Run a deferred Vertex AI job's trigger and its resumed task, then a task that gets no
    capacity, on the emulator at ``DWS_EMULATOR_HOST``; write what the provider sent to ``out``."""
    import asyncio

    from airflow.exceptions import TaskDeferred

    from airflow_provider_dws.exceptions import CapacityNotObtainedError
    from airflow_provider_dws.triggers.capacity_request import first_event
    from tests.emulator.test_records_on_emulator import TI, vertex

    # 3.2+: importing the task SDK's serde initialises its stats from [metrics], as the triggerer's
    # import does. 3.1 has no such module: airflow.stats reads [metrics] itself, on first use.
    with contextlib.suppress(ImportError):
        import airflow.sdk.serde  # noqa: F401
    spy = _Spy(metrics._stats())
    metrics._stats = lambda: spy  # type: ignore[assignment]

    ti = TI("metrics_otel", "train")
    try:
        vertex().execute({"ti": ti})
        raise AssertionError("the task did not defer")
    except TaskDeferred as deferred:
        event = asyncio.run(asyncio.wait_for(first_event(deferred.trigger), 120))
    resumed = ti.again()
    vertex().complete_attempt({"ti": resumed}, event)

    east = TI("metrics_otel", "no_capacity")
    try:
        vertex(task_id=east.task_id, region=EAST, max_wait=2, deferrable=False).execute({"ti": east})
        raise AssertionError("the task got capacity")
    except CapacityNotObtainedError:
        pass
    Path(out).write_text(json.dumps({"sent": spy.sent, "run_seconds": resumed.xcom["run_seconds"]}))
    # Nothing flushes here: Airflow's own at-exit hook sends what the last interval did not.


def _environment(port: int) -> dict[str, str]:
    """This environment for the emitting interpreter, with Airflow's OTel metrics on (and every other
    metrics backend and the OTEL_* variables, which would take precedence from 3.2, left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AIRFLOW__METRICS__"))}
    for key, value in {
        "OTEL_ON": "True",
        "OTEL_HOST": "127.0.0.1",
        "OTEL_PORT": str(port),
        "OTEL_PREFIX": PREFIX,
        "OTEL_INTERVAL_MILLISECONDS": "500",
        "OTEL_SERVICE": SERVICE,
        "OTEL_SSL_ACTIVE": "False",
        "STATSD_ON": "False",
        "STATSD_DATADOG_ENABLED": "False",
    }.items():
        env[f"AIRFLOW__METRICS__{key}"] = value
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    for proxy in ("NO_PROXY", "no_proxy"):
        env[proxy] = ",".join(filter(None, [env.get(proxy), "127.0.0.1"]))
    return env


# -- the test -------------------------------------------------------------------------------------


def _mismatches(
    sent: list[tuple[str, str, float, dict[str, str]]], got: dict[tuple[str, Attributes], Point]
) -> list[str]:
    """How the receiver's dws series differ from what the provider sent (empty: they agree)."""
    calls: dict[tuple[str, Attributes], list[tuple[str, float]]] = {}
    for method, name, value, tags in sent:
        calls.setdefault((f"{PREFIX}.{name}", attributes(tags)), []).append((method, value))
    problems = [f"received but never sent: {key}" for key in got.keys() - calls.keys()]
    for key, made in calls.items():
        point = got.get(key)
        methods = {method for method, _ in made}
        values = [value for _, value in made]
        if point is None:
            problems.append(f"not received: {key}")
            continue
        assert len(methods) == 1, f"{key} sent as {methods}"
        method = methods.pop()
        if point.kind != KIND[method]:
            problems.append(f"{key}: {point.kind}, not {KIND[method]}")
        elif method == "incr" and not (point.monotonic and point.cumulative and point.value == sum(values)):
            problems.append(f"{key}: {point}, not a monotonic cumulative sum of {sum(values)}")
        elif method == "gauge" and point.value != values[-1]:
            problems.append(f"{key}: last value {point.value}, not {values[-1]}")
        elif method == "timing" and TIMER_KIND == "gauge" and point.value != pytest.approx(values[-1]):
            problems.append(f"{key}: last value {point.value}, not {values[-1]} (ms)")
        elif method == "timing" and TIMER_KIND != "gauge":
            if (point.count, point.unit, point.cumulative) != (len(values), "ms", True):
                problems.append(f"{key}: {point}, not {len(values)} timings in ms, cumulative")
            elif point.total != pytest.approx(sum(values)):
                problems.append(f"{key}: sum {point.total} ms, not {sum(values)}")
    return problems


def test_a_trigger_run_and_task_runs_reach_an_otlp_receiver(
    receiver: OtlpReceiver, vertex_emulator: Any, tmp_path: Path
) -> None:
    vertex_emulator({H100: 8, f"{EAST}/NVIDIA_H100_80GB": 0})
    out = tmp_path / "sent.json"
    code = "import sys; from tests.emulator.test_metrics_otel import emit; emit(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=ROOT,
        env=_environment(receiver.port),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    report = json.loads(out.read_text())
    sent = report["sent"]

    # What the provider's code paths must have sent here (the spy only says what they did send).
    made = {(name, attributes(tags)) for _, name, _, tags in sent}
    for name, tags in [
        (metrics.POLLER_CALLS, TAGS),
        (metrics.REQUESTS_WAITING, TAGS),
        (metrics.REQUEST_WAIT, GPU_TAGS),
        (metrics.REQUEST_RUN, GPU_TAGS),
        (metrics.REQUEST_WAIT, EAST_GPU_TAGS),
        (metrics.CAPACITY_NOT_OBTAINED, EAST_GPU_TAGS),
    ]:
        assert (name, attributes(tags)) in made, f"{name} {tags} not sent: {sent}"
    assert not [s for s in sent if s[1] == metrics.REQUEST_RUN and s[3]["location"] == EAST]  # never ran

    # Every series the provider sent reaches the receiver, with its final value.
    deadline = time.monotonic() + 60
    while problems := _mismatches(sent, receiver.dws()):
        assert time.monotonic() < deadline, "\n".join(
            [*problems, f"requests: {receiver.requests}, refused: {receiver.refused}"]
        )
        time.sleep(0.2)

    got = receiver.dws()
    assert got[(f"{PREFIX}.{metrics.CAPACITY_NOT_OBTAINED}", attributes(EAST_GPU_TAGS))].value == 1
    waiting = [
        p.value
        for p in receiver.points
        if (p.name, p.attributes) == (f"{PREFIX}.{metrics.REQUESTS_WAITING}", attributes(TAGS))
    ]
    assert set(waiting) <= {0, 1}  # one request followed at most
    run = got[(f"{PREFIX}.{metrics.REQUEST_RUN}", attributes(GPU_TAGS))]
    run_ms = run.total if TIMER_KIND != "gauge" else run.value
    assert run_ms == pytest.approx(report["run_seconds"] * 1000, abs=1)
    assert {p.service for p in got.values()} == {SERVICE}
    assert not receiver.refused
