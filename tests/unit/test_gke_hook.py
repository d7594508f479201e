"""GKEClusterHook: which source a hook picks (emulator, cncf-kubernetes connection, GKE), and the
clients each source builds, with fakes for everything that would reach Google or a cluster."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import os
from typing import Any

import certifi
import pytest
import structlog.testing

from airflow_provider_dws.hooks import kubernetes as khook
from airflow_provider_dws.hooks.base import EMULATOR_HOST_ENV
from airflow_provider_dws.hooks.kubernetes import GKEClusterHook, ensure_no_proxy


@pytest.fixture(autouse=True)
def no_connections(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    monkeypatch.delenv(EMULATOR_HOST_ENV, raising=False)
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_"):
            monkeypatch.delenv(name)


def _hook(**kwargs: Any) -> GKEClusterHook:
    kwargs.setdefault("location", "us-central1")
    return GKEClusterHook(**kwargs)


def test_environment_variable_means_the_emulator_rest_front_with_a_loud_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    hook = _hook(cluster_name="train", kubernetes_conn_id="ignored")
    with caplog.at_level(logging.WARNING), structlog.testing.capture_logs() as captured:
        source = hook.source()
        hook.source()
    assert (source.kind, source.host) == ("emulator", "http://127.0.0.1:8471")
    warnings = [str(e["event"]) for e in captured if e.get("log_level") == "warning"]
    warnings += [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "EMULATOR" in w]) == 1, warnings
    assert EMULATOR_HOST_ENV in warnings[0] and "127.0.0.1:8471" in warnings[0]
    client = hook.api_client()
    assert client.configuration.host == "http://127.0.0.1:8471"
    assert client.configuration.proxy is None
    hook.close()


def test_google_connection_extra_switches_to_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"extra__google_cloud_platform__dws_emulator_host": "localhost:9000"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_GCP", json.dumps({"conn_type": "google_cloud_platform", "extra": extra})
    )
    source = _hook(gcp_conn_id="my_gcp", cluster_name="c").source()
    assert (source.kind, source.host) == ("emulator", "http://localhost:9001")
    assert "my_gcp" in str(source.set_by)


def test_a_remote_emulator_host_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "10.1.2.3:8470")
    with pytest.raises(ValueError, match="not a loopback address"):
        _hook(cluster_name="c").source()


def test_kubernetes_connection_needs_no_google_connection() -> None:
    assert _hook(kubernetes_conn_id="k8s").source().kind == "kubernetes"


def test_gke_needs_a_cluster_name() -> None:
    with pytest.raises(ValueError, match="cluster_name"):
        _hook().source()
    assert _hook(cluster_name="c").source().kind == "gke"


def test_kubernetes_connection_goes_through_cncf_kubernetes_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.hooks import kubernetes as cncf

    seen: list[str | None] = []

    class FakeKubernetesHook:
        def __init__(self, conn_id: str | None = None, **_: Any) -> None:
            seen.append(conn_id)

        def get_conn(self) -> str:
            return "cncf-client"

    monkeypatch.setattr(cncf, "KubernetesHook", FakeKubernetesHook)
    assert _hook(kubernetes_conn_id="k8s").api_client() == "cncf-client"
    assert seen == ["k8s"]


class FakeCluster:
    endpoint = "34.1.2.3"

    class private_cluster_config:
        private_endpoint = "10.0.0.2"

    class master_auth:
        # Any valid PEM will do: the public CA bundle the environment already has.
        cluster_ca_certificate = base64.b64encode(open(certifi.where(), "rb").read()).decode()  # noqa: SIM115


@pytest.fixture
def fake_gke(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from airflow.providers.google.cloud.hooks import kubernetes_engine as gke

    calls: dict[str, Any] = {}

    class FakeGKEHook:
        def __init__(self, gcp_conn_id: str, location: str, impersonation_chain: Any) -> None:
            calls["gke"] = (gcp_conn_id, location, impersonation_chain)

        def get_cluster(self, name: str, project_id: str | None) -> FakeCluster:
            calls["cluster"] = (name, project_id)
            return FakeCluster()

    class FakeGKEKubernetesHook:
        def __init__(self, cluster_url: str, ssl_ca_cert: str, gcp_conn_id: str, impersonation_chain: Any):
            calls["kube"] = (cluster_url, ssl_ca_cert)

        def get_conn(self) -> str:
            return "gke-client"

        def get_credentials(self) -> Any:
            return calls["credentials"]

    monkeypatch.setattr(gke, "GKEHook", FakeGKEHook)
    monkeypatch.setattr(gke, "GKEKubernetesHook", FakeGKEKubernetesHook)
    return calls


@pytest.mark.parametrize(("internal", "address"), [(False, "34.1.2.3"), (True, "10.0.0.2")])
def test_gke_cluster_endpoint_and_ca_from_the_container_api(
    fake_gke: dict[str, Any], internal: bool, address: str
) -> None:
    hook = _hook(project_id="p", cluster_name="train", impersonation_chain="sa@x", use_internal_ip=internal)
    assert hook.api_client() == "gke-client"
    assert fake_gke["gke"] == ("google_cloud_default", "us-central1", "sa@x")
    assert fake_gke["cluster"] == ("train", "p")
    assert fake_gke["kube"] == (f"https://{address}", FakeCluster.master_auth.cluster_ca_certificate)


class FakeCredentials:
    def __init__(self, expires_in: float) -> None:
        self.refreshes = 0
        self.token: str | None = "old"
        self.valid = True
        self.expiry = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(
            seconds=expires_in
        )

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = f"new{self.refreshes}"
        self.expiry = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(
            hours=1
        )


def test_async_gke_client_has_bearer_token_ca_file_and_refreshes_before_expiry(
    fake_gke: dict[str, Any],
) -> None:
    creds = fake_gke["credentials"] = FakeCredentials(expires_in=3000)
    hook = _hook(cluster_name="train")

    async def run() -> tuple[dict[str, str], str, dict[str, str], bool]:
        client = await hook.async_api_client()
        assert await hook.async_api_client() is client
        configuration = client.configuration
        before = dict(configuration.api_key)
        ca_file = configuration.ssl_ca_cert
        with open(ca_file, "rb") as handle:
            assert b"-----BEGIN CERTIFICATE" in handle.read()
        creds.expiry = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)  # about to go
        header = await configuration.get_api_key_with_prefix("BearerToken")
        after = dict(configuration.api_key)
        assert header == "Bearer new1"
        await hook.aclose()
        return before, ca_file, after, os.path.exists(ca_file)

    before, _, after, ca_left = asyncio.run(run())
    assert before == {"BearerToken": "old"} and after == {"BearerToken": "new1"}
    assert creds.refreshes == 1
    assert not ca_left


def test_async_emulator_client_is_bound_to_the_running_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    hook = _hook(cluster_name="c")

    async def run() -> bool:
        client = await hook.async_api_client()
        assert client.configuration.host == "http://127.0.0.1:8471"
        bound = client.rest_client.pool_manager._loop is asyncio.get_running_loop()
        await hook.aclose()
        return bound

    assert asyncio.run(run())


def test_an_async_client_left_open_is_closed_when_its_loop_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """``airflow dags test`` and ``deferrable=False`` run a wait in a loop of its own and never close
    the client: it is closed as ``asyncio.run`` ends that loop, with no "Unclosed client session"."""
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    hook = _hook(cluster_name="c")
    clients: list[Any] = []

    async def run() -> None:
        clients.append(await hook.async_api_client())

    asyncio.run(run())
    assert hook._async is None
    assert clients[0].rest_client.pool_manager.closed


def test_a_closed_and_rebuilt_async_client_is_not_closed_by_the_first_ones_closer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, "127.0.0.1:8470")
    hook = _hook(cluster_name="c")

    async def run() -> bool:
        first = await hook.async_api_client()
        await hook.aclose()
        second = await hook.async_api_client()
        assert second is not first
        import gc

        gc.collect()  # the first client's closer is collected: it must leave the second open
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return bool(second.rest_client.pool_manager.closed)

    assert asyncio.run(run()) is False
    assert hook._async is None  # and the second is closed at the loop's end


def test_no_proxy_covers_loopback_only_when_a_proxy_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    ensure_no_proxy()
    assert "NO_PROXY" not in os.environ
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "corp.example, 127.0.0.1")
    ensure_no_proxy()
    assert os.environ["NO_PROXY"].split(",") == ["corp.example", "127.0.0.1", "localhost", "::1"]
    assert os.environ["no_proxy"].split(",") == list(khook._LOOPBACK)


def test_async_kubernetes_connection_loads_through_cncf_kubernetes_async_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib

    from airflow.providers.cncf.kubernetes.hooks import kubernetes as cncf
    from kubernetes_asyncio import client

    loaded: list[str | None] = []

    class FakeAsyncKubernetesHook:
        def __init__(self, conn_id: str | None = None, **_: Any) -> None:
            self.conn_id = conn_id
            self.client_configuration: Any = None

        @contextlib.asynccontextmanager
        async def get_conn(self) -> Any:
            # What the real hook does: load the connection's configuration, then hand a client.
            self.client_configuration = client.Configuration(host="https://kube.example:6443")
            loaded.append(self.conn_id)
            yield "its own client"

    monkeypatch.setattr(cncf, "AsyncKubernetesHook", FakeAsyncKubernetesHook)
    hook = _hook(kubernetes_conn_id="k8s")

    async def run() -> str:
        api = await hook.async_api_client()
        host = api.configuration.host
        await hook.aclose()
        return str(host)

    assert asyncio.run(run()) == "https://kube.example:6443"
    assert loaded == ["k8s"]


def _exec_auth_hook(monkeypatch: pytest.MonkeyPatch, fail_on: set[int]) -> list[int]:
    """A cncf-kubernetes async hook whose every load runs the exec plugin: token ``t<N>`` on load N
    (a load in ``fail_on`` raises, as a failing plugin does). Returns the loads so far."""
    import contextlib

    from airflow.providers.cncf.kubernetes.hooks import kubernetes as cncf
    from kubernetes_asyncio import client

    loads: list[int] = []

    class ExecAuthAsyncKubernetesHook:
        def __init__(self, conn_id: str | None = None, **_: Any) -> None:
            self.client_configuration: Any = None

        @contextlib.asynccontextmanager
        async def get_conn(self) -> Any:
            loads.append(len(loads) + 1)
            if loads[-1] in fail_on:
                raise RuntimeError("exec plugin failed")
            if self.client_configuration is None:
                self.client_configuration = client.Configuration(host="https://kube.example:6443")
            self.client_configuration.api_key["BearerToken"] = f"Bearer t{loads[-1]}"
            yield "its own client"

    monkeypatch.setattr(cncf, "AsyncKubernetesHook", ExecAuthAsyncKubernetesHook)
    return loads


def test_a_kubernetes_connection_is_loaded_again_so_exec_credentials_do_not_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads = _exec_auth_hook(monkeypatch, fail_on={3})
    clock = [1000.0]
    monkeypatch.setattr(khook.time, "monotonic", lambda: clock[0])
    hook = _hook(kubernetes_conn_id="k8s")

    async def run() -> list[str]:
        configuration = (await hook.async_api_client()).configuration
        seen = [await configuration.get_api_key_with_prefix("BearerToken")]
        clock[0] += 10  # within the interval: the loaded token, no load
        seen.append(await configuration.get_api_key_with_prefix("BearerToken"))
        clock[0] += khook._KUBECONFIG_RELOAD  # due: loaded again, a new token
        seen.append(await configuration.get_api_key_with_prefix("BearerToken"))
        clock[0] += khook._KUBECONFIG_RELOAD  # due, but the plugin fails: the current token stays
        seen.append(await configuration.get_api_key_with_prefix("BearerToken"))
        clock[0] += 1  # a failed load is retried later, not on every call
        seen.append(await configuration.get_api_key_with_prefix("BearerToken"))
        clock[0] += khook._RELOAD_RETRY
        seen.append(await configuration.get_api_key_with_prefix("BearerToken"))
        await hook.aclose()
        return seen

    assert asyncio.run(run()) == [
        "Bearer t1",
        "Bearer t1",
        "Bearer t2",
        "Bearer t2",
        "Bearer t2",
        "Bearer t4",
    ]
    assert loads == [1, 2, 3, 4]


def test_an_async_gke_client_reads_a_valid_token_without_a_thread(fake_gke: dict[str, Any]) -> None:
    fake_gke["credentials"] = FakeCredentials(expires_in=3000)
    hook = _hook(cluster_name="train")

    async def run() -> str:
        configuration = (await hook.async_api_client()).configuration

        def no_thread(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a valid token needs no thread")

        real, khook.asyncio.to_thread = khook.asyncio.to_thread, no_thread  # type: ignore[assignment]
        try:
            return str(await configuration.get_api_key_with_prefix("BearerToken"))
        finally:
            khook.asyncio.to_thread = real  # type: ignore[assignment]
            await hook.aclose()

    assert asyncio.run(run()) == "Bearer old"
