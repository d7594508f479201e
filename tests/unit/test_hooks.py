"""The emulator switch of the hooks."""

from __future__ import annotations

import asyncio
import logging

import pytest
import structlog.testing
from google.cloud.aiplatform_v1 import JobServiceClient

from airflow_provider_dws.hooks.base import EMULATOR_HOST_ENV, check_emulator_host
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIHook


@pytest.mark.parametrize(
    "host", ["127.0.0.1:1234", "[::1]:5", "localhost:80", "127.8.9.10:65535", " localhost:80 "]
)
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert check_emulator_host(host) == host.strip()


@pytest.mark.parametrize("host", ["10.0.0.1:80", "example.com:80", "[2001:db8::1]:80", "0.0.0.0:80"])
def test_remote_hosts_are_refused(host: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not a loopback address; .* only 127\.0\.0\.0/8, ::1 or localhost"
    ):
        check_emulator_host(host)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:port", ""]
)
def test_malformed_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match=r"emulator host must look like 127\.0\.0\.1:PORT, got"):
        check_emulator_host(host)


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)


def test_emulator_from_environment_needs_no_connection(
    monkeypatch: pytest.MonkeyPatch, no_connections: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    # Airflow 3 hooks log through structlog (straight to the task log), not through stdlib
    # logging, so caplog alone sees nothing: capture both.
    with caplog.at_level(logging.WARNING), structlog.testing.capture_logs() as captured:
        hook = DwsVertexAIHook()
    assert hook.emulator_host == "127.0.0.1:8470"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    warnings += [str(e["event"]) for e in captured if e.get("log_level") in ("warning", "error")]
    assert any("EMULATOR" in m and "127.0.0.1:8470" in m and EMULATOR_HOST_ENV in m for m in warnings), (
        warnings
    )
    client = hook.get_job_service_client("us-central1")
    assert isinstance(client, JobServiceClient)
    assert hook.get_job_service_client("us-central1") is client  # cached per region


def test_remote_emulator_host_in_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, no_connections: None
) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "10.1.2.3:8470")
    with pytest.raises(ValueError, match="not a loopback address"):
        DwsVertexAIHook()


def test_missing_connection_without_emulator_is_an_error(
    monkeypatch: pytest.MonkeyPatch, no_connections: None
) -> None:
    monkeypatch.delenv(EMULATOR_HOST_ENV, raising=False)
    with pytest.raises(Exception, match="google_cloud_default"):
        DwsVertexAIHook()


def test_emulator_mode_builds_nothing_google(monkeypatch: pytest.MonkeyPatch, no_connections: None) -> None:
    """The switch is decided before any GoogleBaseHook exists: none is built, no credentials read."""
    from airflow.providers.google.common.hooks import base_google

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("GoogleBaseHook built in emulator mode")

    monkeypatch.setattr(base_google.GoogleBaseHook, "__init__", refuse)
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    hook = DwsVertexAIHook()
    assert hook.project_id is None  # no connection: the operator names the project
    hook.get_job_service_client("us-central1")
    with pytest.raises(RuntimeError, match="needs no Google credentials"):
        hook.get_credentials()


def test_one_emulator_factory_for_grpc_and_rest_clients() -> None:
    from google.cloud.tpu_v2 import TpuAsyncClient, TpuClient

    from airflow_provider_dws.hooks.base import emulator_client

    grpc_client = emulator_client(TpuClient, "127.0.0.1:8470")
    assert type(grpc_client.transport).__name__ == "TpuGrpcTransport"
    rest_client = emulator_client(TpuClient, "127.0.0.1:8470", transport="rest")
    assert type(rest_client.transport).__name__ == "TpuRestTransport"
    assert rest_client.transport._host == "http://127.0.0.1:8470"

    async def in_a_loop() -> str:  # grpc.aio channels belong to the running loop
        return type(emulator_client(TpuAsyncClient, "127.0.0.1:8470", asynchronous=True).transport).__name__

    assert asyncio.run(in_a_loop()) == "TpuGrpcAsyncIOTransport"
