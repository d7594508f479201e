"""The emulator's Kubernetes API through the async clients: ``kubernetes_asyncio`` and the
``kubernetes.aio`` bundled with kubernetes 36 (same generated code, no ``watch`` module of its own).

Each test runs once per library; watches use ``kubernetes_asyncio.watch.Watch`` (and the raw
stream for ``kubernetes.aio``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dws_emulator.kube.store import KINDS
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

NS = "team-b"
PR = ("autoscaling.x-k8s.io", "v1", NS, "provisioningrequests")
LIBRARIES = ["kubernetes_asyncio.client", "kubernetes.aio.client"]


@pytest.fixture
def emulator(dws_emulator_server_factory, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return dws_emulator_server_factory(clock=FakeClock())


@pytest.fixture(params=LIBRARIES)
def run(request, emulator) -> Callable[[Callable[[Any, Any], Awaitable[None]]], None]:
    """``run(body)``: ``await body(lib, api_client)`` on a fresh loop, the client closed after."""
    lib = importlib.import_module(request.param)

    def runner(body: Callable[[Any, Any], Awaitable[None]]) -> None:
        async def main() -> None:
            async with lib.ApiClient(lib.Configuration(host=emulator.rest_url)) as api:
                await body(lib, api)

        asyncio.run(main())

    return runner


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]},
    }


def template(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "template": {"spec": pod("x")["spec"]}}


def provreq(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "podSets": [{"podTemplateRef": {"name": "tpl"}, "count": 1}],
        },
    }


async def fails(lib: Any, call: Awaitable[Any]) -> tuple[int, str, dict[str, Any]]:
    """The HTTP status, Status reason and body of a call that must fail."""
    try:
        await call
    except lib.ApiException as exc:
        body = json.loads(exc.body)
        assert body["kind"] == "Status" and body["code"] == exc.status
        return exc.status, body["reason"], body
    raise AssertionError("the call did not fail")


def test_crud_status_errors_and_the_status_subresource(run) -> None:
    async def body(lib: Any, api: Any) -> None:
        core, custom = lib.CoreV1Api(api), lib.CustomObjectsApi(api)
        created = await core.create_namespaced_pod(NS, pod("p"))
        assert created.metadata.uid and created.metadata.resource_version and created.kind == "Pod"
        assert (await fails(lib, core.create_namespaced_pod(NS, pod("p"))))[:2] == (409, "AlreadyExists")
        assert (await fails(lib, core.read_namespaced_pod("q", NS)))[:2] == (404, "NotFound")
        assert (await core.read_namespaced_pod("p", NS)).metadata.uid == created.metadata.uid
        assert [p.metadata.name for p in (await core.list_pod_for_all_namespaces()).items] == ["p"]
        assert (await core.delete_namespaced_pod("p", NS)).metadata.name == "p"

        request = await custom.create_namespaced_custom_object(*PR, provreq("r"))
        assert request["status"] == {} and request["apiVersion"] == "autoscaling.x-k8s.io/v1"
        accepted = {"conditions": [{"type": "Accepted", "status": "True"}]}
        # The async clients send a dict patch of a custom object as a JSON patch, which the server
        # refuses (400); a merge patch needs ``_content_type``.
        status = await fails(
            lib, custom.patch_namespaced_custom_object_status(*PR, "r", {"status": accepted})
        )
        assert status[:2] == (400, "BadRequest")
        written = await custom.patch_namespaced_custom_object_status(
            *PR, "r", {"status": accepted}, _content_type="application/merge-patch+json"
        )
        assert written["status"] == accepted
        ops = [{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}]
        labelled = await custom.patch_namespaced_custom_object(*PR, "r", ops)
        assert labelled["metadata"]["labels"] == {"x": "1"} and labelled["status"] == accepted
        immutable = [{"op": "replace", "path": "/spec/podSets/0/count", "value": 2}]
        code, reason, _ = await fails(lib, custom.patch_namespaced_custom_object(*PR, "r", immutable))
        assert (code, reason) == (422, "Invalid")
        current = await custom.get_namespaced_custom_object_status(*PR, "r")
        current["status"] = {"conditions": []}
        replaced = await custom.replace_namespaced_custom_object_status(*PR, "r", current)
        assert replaced["status"] == {"conditions": []}
        beta = await custom.get_namespaced_custom_object("autoscaling.x-k8s.io", "v1beta1", NS, PR[3], "r")
        assert beta["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"
        assert (await custom.delete_namespaced_custom_object(*PR, "r"))["metadata"]["name"] == "r"

    run(body)


def test_patch_types_and_415(run) -> None:
    async def body(lib: Any, api: Any) -> None:
        core, custom = lib.CoreV1Api(api), lib.CustomObjectsApi(api)
        await core.create_namespaced_pod(NS, pod("p", {"a": "1"}))
        # A dict patch of a built-in kind is a strategic merge patch: env merges by name.
        patched = await core.patch_namespaced_pod(
            "p", NS, {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}
        )
        assert [e.name for e in patched.spec.containers[0].env] == ["A", "B"]
        merged = await core.patch_namespaced_pod(
            "p",
            NS,
            {"metadata": {"labels": {"a": None, "b": "2"}}},
            _content_type="application/merge-patch+json",
        )
        assert merged.metadata.labels == {"b": "2"}
        jsoned = await core.patch_namespaced_pod(
            "p", NS, [{"op": "remove", "path": "/spec/containers/0/env/0"}]
        )
        assert [e.name for e in jsoned.spec.containers[0].env] == ["B"]
        await custom.create_namespaced_custom_object(*PR, provreq("r"))
        code, reason, status = await fails(
            lib,
            custom.patch_namespaced_custom_object(
                *PR, "r", {"metadata": {}}, _content_type="application/strategic-merge-patch+json"
            ),
        )
        assert (code, reason) == (415, "UnsupportedMediaType") and "application/merge-patch+json" in status[
            "message"
        ]

    run(body)


def test_selectors_and_paging(run) -> None:
    async def body(lib: Any, api: Any) -> None:
        core = lib.CoreV1Api(api)
        for i, env in enumerate(["prod", "dev", "prod"]):
            await core.create_namespaced_pod(NS, pod(f"p{i}", {"env": env}))
        prod = await core.list_namespaced_pod(NS, label_selector="env in (prod)")
        assert [p.metadata.name for p in prod.items] == ["p0", "p2"]
        named = await core.list_namespaced_pod(NS, field_selector="metadata.name!=p0", label_selector="env")
        assert [p.metadata.name for p in named.items] == ["p1", "p2"]
        first = await core.list_namespaced_pod(NS, limit=2)
        second = await core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
        assert [p.metadata.name for p in first.items + second.items] == ["p0", "p1", "p2"]

    run(body)


def test_watch_streams_resumes_and_410(run, emulator) -> None:
    store = emulator.server.state.kube.store

    async def body(lib: Any, api: Any) -> None:
        # On PodTemplates, which no controller writes: every event is the test's own.
        core = lib.CoreV1Api(api)
        await core.create_namespaced_pod_template(NS, template("a", {"w": "1"}))
        if lib.__name__.startswith("kubernetes_asyncio"):
            from kubernetes_asyncio import watch

            seen = []
            async with watch.Watch().stream(
                core.list_namespaced_pod_template, NS, label_selector="w=1", timeout_seconds=10
            ) as w:
                async for event in w:
                    seen.append((event["type"], event["object"].metadata.name))
                    if len(seen) == 1:
                        await core.create_namespaced_pod_template(NS, template("b", {"w": "1"}))
                        await core.delete_namespaced_pod_template("a", NS)
                    if len(seen) == 3:
                        w.stop()
            assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
            mark = store.revision
            await core.create_namespaced_pod_template(NS, template("c", {}))
            async with watch.Watch().stream(
                core.list_namespaced_pod_template, NS, resource_version=str(mark), timeout_seconds=5
            ) as w:
                async for event in w:
                    assert (event["type"], event["object"].metadata.name) == ("ADDED", "c")
                    w.stop()
            store.events.clear()
            await core.create_namespaced_pod_template(NS, template("d", {}))
            with pytest.raises(lib.ApiException) as exc:
                async with watch.Watch().stream(
                    core.list_namespaced_pod_template, NS, resource_version="1", timeout_seconds=5
                ) as w:
                    async for _ in w:
                        pass
            assert exc.value.status == 410
        else:  # kubernetes.aio has no Watch: read the stream itself
            reply = await core.list_namespaced_pod_template(
                NS, watch=True, timeout_seconds=1, _preload_content=False
            )
            first = json.loads(await reply.content.readline())
            assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "a"
            await core.create_namespaced_pod_template(NS, template("b", {}))
            second = json.loads(await reply.content.readline())
            assert (second["type"], second["object"]["kind"]) == ("ADDED", "PodTemplate")
            reply.close()
            store.events.clear()
            await core.create_namespaced_pod_template(NS, template("c", {}))
            reply = await core.list_namespaced_pod_template(
                NS, watch=True, resource_version="1", _preload_content=False
            )
            error = json.loads(await reply.content.readline())
            assert error["type"] == "ERROR" and error["object"]["code"] == 410
            assert await reply.content.readline() == b""  # the stream ends after it

    run(body)


def test_pod_log_plain_and_follow(run, emulator) -> None:
    state = emulator.server.state
    logs = {"main": "one\ntwo\n"}
    state.kube.cluster.pod_log = lambda ns, name, container: logs[container or "main"]  # type: ignore[method-assign]

    def finish(phase: str) -> None:
        with state.lock:
            logs["main"] += "three\n"
            state.kube.store.update(
                KINDS["pods"], NS, "p", lambda p: p["status"].update(phase=phase), status=True
            )

    async def body(lib: Any, api: Any) -> None:
        core = lib.CoreV1Api(api)
        await core.create_namespaced_pod(NS, pod("p"))
        # The async clients decode a text/plain log to str (a log that is valid JSON would be parsed).
        assert await core.read_namespaced_pod_log("p", NS) == "one\ntwo\n"
        assert await core.read_namespaced_pod_log("p", NS, tail_lines=1, container="main") == "two\n"
        reply = await core.read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)
        lines = []
        while line := await reply.content.readline():
            lines.append(line.decode())
            if line == b"two\n":
                finish("Failed")
        assert lines == ["one\n", "two\n", "three\n"]

    run(body)


def test_delete_propagation_and_injected_faults(run, emulator) -> None:
    async def body(lib: Any, api: Any) -> None:
        core, batch = lib.CoreV1Api(api), lib.BatchV1Api(api)
        spec = {"template": {"spec": {"restartPolicy": "Never", **pod("x")["spec"]}}}
        await batch.create_namespaced_job(NS, {"metadata": {"name": "j"}, "spec": spec})
        made = await core.list_namespaced_pod(NS, label_selector="job-name=j")
        assert len(made.items) == 1  # the Job controller's pod
        status = await batch.delete_namespaced_job("j", NS, propagation_policy="Background")
        assert status.status == "Success"
        assert (await core.list_namespaced_pod(NS)).items == []

        emulator.control.set_faults(["jobs.get=UNAVAILABLEx1", "jobs.list=RESOURCE_EXHAUSTEDx1"])
        assert (await fails(lib, batch.read_namespaced_job("j", NS)))[:2] == (503, "ServiceUnavailable")
        try:
            await batch.list_namespaced_job(NS)
        except lib.ApiException as exc:  # aiohttp does not retry: the 429 reaches the caller
            assert exc.status == 429 and exc.headers["Retry-After"] == "1"
        else:
            raise AssertionError("no 429")
        emulator.control.clear_faults()

    run(body)
