"""ProvisioningRequestBackend against fake Kubernetes APIs: classification, error translation,
create-or-adopt, release, and the one labelled list per namespace the shared poller makes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import tenacity
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_dws import errors
from airflow_provider_dws.backends import kube_base
from airflow_provider_dws.backends import kubernetes as kb
from airflow_provider_dws.backends.base import AsyncRequestBackend, RequestBackend
from airflow_provider_dws.backends.kubernetes import (
    ProvisioningAsk,
    ProvisioningRequestBackend,
    request_status,
)
from airflow_provider_dws.backends.retry import retry_kwargs
from airflow_provider_dws.registry import BACKENDS, backend_from_spec
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

IDENTITY = RequestIdentity("dag", "ask", "manual__1", try_number=2, attempt=3)
NAME = IDENTITY.provisioning_request_name()


def pr(name: str = NAME, *conditions: dict[str, str], version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "labels": {**IDENTITY.kube_labels(), "dws_max_wait": "7200"},
            "annotations": {kb.ACCELERATOR_ANNOTATION: "8 x nvidia-h100-80gb per pod"},
        },
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "parameters": {"maxRunDurationSeconds": "3600"},
            "podSets": [{"podTemplateRef": {"name": name}, "count": 4}],
        },
        "status": {"conditions": list(conditions)},
    }


def cond(kind: str, at: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": "True", "lastTransitionTime": at, "reason": reason, "message": message}


def api_error(status: int, reason: str = "", message: str = "", cls: type = ApiException) -> Exception:
    exc = cls(status=status, reason=reason)
    exc.body = json.dumps(
        {"kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": status}
    )
    return exc


@pytest.fixture(autouse=True)
def no_retry_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    def fast(what: str, **kwargs: Any) -> tenacity.Retrying:
        return tenacity.Retrying(**{**retry_kwargs(what, **kwargs), "wait": tenacity.wait_none()})

    def afast(what: str, **kwargs: Any) -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(**{**retry_kwargs(what, **kwargs), "wait": tenacity.wait_none()})

    monkeypatch.setattr(kb, "retrying", fast)
    monkeypatch.setattr(kb, "aretrying", afast)


def test_a_provisioned_request_in_the_shared_vocabulary() -> None:
    status = request_status(
        pr(
            NAME,
            cond("Accepted", "2026-12-02T10:00:05Z"),
            cond("Provisioned", "2026-12-02T10:20:00Z", "Provisioned"),
        )
    )
    assert (status.name, status.state, status.phase) == (NAME, "Provisioned", Phase.RUNNING)
    assert status.timings.wait_seconds == 1200 and status.timings.finished is None
    assert status.details["count"] == 4 and status.details["pod_template"] == NAME
    assert status.details["max_run_seconds"] == 3600 and status.details["max_wait_seconds"] == 7200
    assert status.details["attempt"] == 3 and status.details["namespace"] == "team"
    assert status.description == "4 pods with 8 x nvidia-h100-80gb per pod in namespace team"


def test_an_ended_request_is_timed_by_its_condition() -> None:
    status = request_status(
        pr(
            NAME,
            cond("Accepted", "2026-12-02T10:00:05Z"),
            cond("Failed", "2026-12-02T11:00:00Z", "CapacityIsNotFound"),
        )
    )
    assert (status.phase, status.outcome.failure) == (Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED)
    assert status.timings.wait_seconds == 3600 and status.timings.run_seconds == 0
    assert "CapacityIsNotFound" in status.outcome.message


@pytest.mark.parametrize("cls", [ApiException, AsyncApiException])
@pytest.mark.parametrize(
    ("code", "reason", "ours"),
    [
        (404, "NotFound", errors.RequestNotFoundError),
        (409, "AlreadyExists", errors.RequestAlreadyExistsError),
        (409, "Conflict", errors.ConflictError),
        (422, "Invalid", errors.InvalidRequestError),
        (415, "UnsupportedMediaType", errors.InvalidRequestError),
        (403, "Forbidden", errors.PermissionDeniedApiError),
        (429, "TooManyRequests", errors.QuotaExceededError),
        (503, "ServiceUnavailable", errors.TransientApiError),
        (500, "InternalError", errors.TransientApiError),
    ],
)
def test_api_errors_become_the_providers(cls: type, code: int, reason: str, ours: type) -> None:
    translated = kube_base.translate(api_error(code, reason, f"said {code}", cls))
    assert type(translated) is ours
    assert translated.message == f"said {code}" and translated.code == code  # type: ignore[attr-defined]


def test_the_clients_status_subclasses_are_translated_too() -> None:
    """kubernetes 36 raises NotFoundException, ForbiddenException, ServiceException (ApiException
    subclasses): a check of the class name alone let a 404 through untranslated."""
    from kubernetes.client import exceptions as sync_exc
    from kubernetes_asyncio.client import exceptions as async_exc

    for module in (sync_exc, async_exc):
        for cls, code, ours in (
            (module.NotFoundException, 404, errors.RequestNotFoundError),
            (module.ForbiddenException, 403, errors.PermissionDeniedApiError),
            (module.ServiceException, 503, errors.TransientApiError),
        ):
            assert type(kube_base.translate(api_error(code, "x", "y", cls))) is ours


def test_connection_failures_are_transient_and_others_pass_through() -> None:
    import aiohttp
    import urllib3

    assert isinstance(
        kube_base.translate(urllib3.exceptions.MaxRetryError(None, "/x")), errors.TransientApiError
    )
    assert isinstance(kube_base.translate(aiohttp.ClientConnectionError("refused")), errors.TransientApiError)
    assert isinstance(kube_base.translate(asyncio.TimeoutError()), errors.TransientApiError)
    other = KeyError("x")
    assert kube_base.translate(other) is other


class FakeCustom:
    """CustomObjectsApi (sync) over a dict of objects, with scripted create errors."""

    def __init__(self, objects: dict[str, dict[str, Any]] | None = None) -> None:
        self.objects = dict(objects or {})
        self.calls: list[str] = []
        self.create_errors: list[Exception] = []
        self.lose_reply = False

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **_: Any
    ) -> Any:
        self.calls.append(f"get {name}")
        if name not in self.objects:
            raise api_error(404, "NotFound", f"{name} not found")
        return self.objects[name]

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Any, **kw: Any
    ) -> Any:
        assert (group, version, plural, namespace) == (
            "autoscaling.x-k8s.io",
            "v1",
            "provisioningrequests",
            "team",
        )
        assert "_request_timeout" in kw
        self.calls.append(f"create {body['metadata']['name']}")
        if self.create_errors:
            raise self.create_errors.pop(0)
        self.objects[body["metadata"]["name"]] = pr(body["metadata"]["name"])
        if self.lose_reply:
            self.lose_reply = False
            raise api_error(503, "ServiceUnavailable", "reply lost")
        return self.objects[body["metadata"]["name"]]

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **_: Any
    ) -> Any:
        self.calls.append(f"delete {name}")
        if self.objects.pop(name, None) is None:
            raise api_error(404, "NotFound", "gone")
        return {}

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **kw: Any
    ) -> Any:
        self.calls.append(f"list {kw['label_selector']}")
        return {"items": list(self.objects.values()), "metadata": {}}


class FakeCore:
    def __init__(self) -> None:
        self.templates: dict[str, Any] = {}
        self.calls: list[str] = []

    def create_namespaced_pod_template(self, namespace: str, body: Any, **_: Any) -> Any:
        name = body["metadata"]["name"]
        self.calls.append(f"create template {name}")
        if name in self.templates:
            raise api_error(409, "AlreadyExists", "exists")
        self.templates[name] = body
        return body

    def delete_namespaced_pod_template(self, name: str, namespace: str, **_: Any) -> Any:
        self.calls.append(f"delete template {name}")
        if self.templates.pop(name, None) is None:
            raise api_error(404, "NotFound", "gone")
        return {}


def backend_with(custom: FakeCustom, core: FakeCore) -> ProvisioningRequestBackend:
    backend = ProvisioningRequestBackend("p", "us-central1", cluster_name="train", namespace="team")
    backend._custom = lambda: custom  # type: ignore[method-assign]
    backend._core = lambda: core  # type: ignore[method-assign]
    return backend


def ask(name: str = NAME) -> ProvisioningAsk:
    meta = {"name": name, "namespace": "team"}
    return ProvisioningAsk({"metadata": meta, "template": {}}, {"metadata": meta, "spec": {}})


def test_submit_creates_the_pod_template_then_the_request() -> None:
    custom, core = FakeCustom(), FakeCore()
    status, created = backend_with(custom, core).submit(ask(), IDENTITY)
    assert created and status.name == NAME
    assert core.calls == [f"create template {NAME}"]
    assert custom.calls == [f"get {NAME}", f"create {NAME}"]


def test_submit_adopts_a_request_that_is_there_without_creating_anything() -> None:
    custom, core = FakeCustom({NAME: pr()}), FakeCore()
    status, created = backend_with(custom, core).submit(ask(), IDENTITY)
    assert not created and status.name == NAME
    assert core.calls == [] and custom.calls == [f"get {NAME}"]


def test_a_409_on_create_reads_the_request_back() -> None:
    custom, core = FakeCustom(), FakeCore()
    core.templates[NAME] = {"kept": True}  # an earlier try made the PodTemplate: kept, not an error
    custom.create_errors = [api_error(409, "AlreadyExists", "exists")]
    backend = backend_with(custom, core)
    original = custom.get_namespaced_custom_object
    reads = 0

    def get(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        if reads == 2:  # the other writer's request, there by the time we read it back
            custom.objects[NAME] = pr()
        return original(*args, **kwargs)

    custom.get_namespaced_custom_object = get  # type: ignore[method-assign]
    status, created = backend.submit(ask(), IDENTITY)
    assert not created and status.name == NAME
    assert core.templates[NAME] == {"kept": True}
    assert custom.calls.count(f"create {NAME}") == 1


def test_a_create_whose_reply_was_lost_is_adopted_not_repeated() -> None:
    custom, core = FakeCustom(), FakeCore()
    custom.lose_reply = True
    status, created = backend_with(custom, core).submit(ask(), IDENTITY)
    assert not created and status.name == NAME
    assert custom.calls.count(f"create {NAME}") == 1


def test_a_refused_create_raises_the_providers_error() -> None:
    custom, core = FakeCustom(), FakeCore()
    custom.create_errors = [api_error(422, "Invalid", "spec.podSets: Too many: 33")]
    with pytest.raises(errors.InvalidRequestError, match="Too many"):
        backend_with(custom, core).submit(ask(), IDENTITY)


def test_release_deletes_request_and_template_and_gone_is_fine() -> None:
    custom, core = FakeCustom({NAME: pr()}), FakeCore()
    core.templates[NAME] = {}
    backend = backend_with(custom, core)
    assert backend.release(NAME) is True
    assert NAME not in custom.objects and NAME not in core.templates
    assert backend.release(NAME) is False


def test_find_lists_once_by_the_identity_key() -> None:
    custom, core = FakeCustom({NAME: pr()}), FakeCore()
    found = backend_with(custom, core).find(IDENTITY)
    assert [s.name for s in found] == [NAME]
    assert custom.calls == [f"list dws_key={IDENTITY.key}"]


class FakeAsyncCustom:
    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        self.pages = pages
        self.calls: list[dict[str, Any]] = []

    async def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **kw: Any
    ) -> Any:
        self.calls.append(kw)
        index = int(kw.get("_continue") or 0)
        more = index + 1 < len(self.pages)
        return {"items": self.pages[index], "metadata": {"continue": str(index + 1) if more else None}}


def test_alist_live_is_one_paged_list_by_the_provider_label() -> None:
    api = FakeAsyncCustom(
        [
            [pr("a-t1-a1", cond("Accepted", "2026-12-02T10:00:00Z"))],
            [pr("b-t1-a1", cond("Provisioned", "2026-12-02T10:01:00Z")), pr("c-t1-a1")],
        ]
    )
    backend = ProvisioningRequestBackend("p", "us-central1", cluster_name="train", namespace="team")

    async def acustom() -> Any:
        return api

    backend._acustom = acustom  # type: ignore[method-assign]
    found = asyncio.run(backend.alist_live({"a-t1-a1", "b-t1-a1"}))
    assert {n: s.state for n, s in found.items()} == {"a-t1-a1": "Accepted", "b-t1-a1": "Provisioned"}
    assert [c["label_selector"] for c in api.calls] == ["dws_managed=true", "dws_managed=true"]
    assert [c.get("_continue") for c in api.calls] == [None, "1"]
    everything = asyncio.run(backend.alist_live())
    assert set(everything) == {"a-t1-a1", "b-t1-a1", "c-t1-a1"} and everything["c-t1-a1"].state == "Pending"


def test_backend_contract_spec_round_trip_and_registry() -> None:
    backend = ProvisioningRequestBackend(
        "p", "us-central1", "gc", ["sa@x"], cluster_name="train", namespace="team", kubernetes_conn_id=None
    )
    assert isinstance(backend, RequestBackend) and isinstance(backend, AsyncRequestBackend)
    spec = backend.spec()
    assert json.loads(json.dumps(spec)) == spec
    assert ProvisioningRequestBackend(**spec).spec() == spec
    assert BACKENDS[backend.kind] == "airflow_provider_dws.backends.kubernetes:ProvisioningRequestBackend"
    rebuilt = backend_from_spec(backend.kind, spec)
    assert isinstance(rebuilt, ProvisioningRequestBackend) and rebuilt.namespace == "team"
