"""The emulator's Kubernetes API through the unmodified sync ``kubernetes`` client: every route,
Status errors, the status subresource, patches, selectors and paging, watch, pod logs, deletion
propagation and injected faults."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from dws_emulator.kube import routes
from dws_emulator.kube.store import KINDS, invalid
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

NS = "team-a"
#: A valid Job that stays suspended: the Job controller makes no pods of its own for it.
JOB_SPEC = {
    "suspend": True,
    "template": {
        "spec": {**{"restartPolicy": "Never"}, "containers": [{"name": "main", "image": "busybox"}]}
    },
}
PR = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")
LQ = ("kueue.x-k8s.io", "v1beta1", NS, "localqueues")


@pytest.fixture
def emulator(dws_emulator_server_factory, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return dws_emulator_server_factory(clock=FakeClock())


@pytest.fixture
def api(emulator) -> Any:
    config = client.Configuration(host=emulator.rest_url)
    with client.ApiClient(config) as api_client:
        yield api_client


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}],
            **spec,
        },
    }


def provreq(name: str, version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": f"autoscaling.x-k8s.io/{version}",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "podSets": [{"podTemplateRef": {"name": "tpl"}, "count": 2}],
            "parameters": {"maxRunDurationSeconds": "3600"},
        },
    }


def template(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "template": {"spec": pod("x")["spec"]}}


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, dict[str, Any]]:
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["code"] == exc.value.status
    return exc.value.status, body["reason"], body


def test_discovery_and_version(api) -> None:
    info = client.VersionApi(api).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.")
    groups = client.ApisApi(api).get_api_versions()
    names = {group.name: [v.version for v in group.versions] for group in groups.groups}
    assert names["autoscaling.x-k8s.io"] == ["v1", "v1beta1"] and "batch" in names
    resources = client.CoreV1Api(api).get_api_resources()
    assert {"pods", "pods/log", "pods/status", "podtemplates", "namespaces"} <= {
        r.name for r in resources.resources
    }


def test_core_crud_with_server_metadata_and_status_errors(api, emulator) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NS}})
    created = core.create_namespaced_pod(NS, pod("p1", {"app": "x"}))
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert created.metadata.namespace == NS and created.kind == "Pod" and created.api_version == "v1"
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod("p1"))
    assert status_of(exc)[:2] == (409, "AlreadyExists")
    assert status_of(exc)[2]["details"] == {"name": "p1", "group": "", "kind": "pods"}
    generated = core.create_namespaced_pod(
        NS, {"metadata": {"generateName": "gen-"}, "spec": pod("x")["spec"]}
    )
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9
    assert core.read_namespaced_pod("p1", NS).metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("nope", NS)
    assert status_of(exc)[:2] == (404, "NotFound") and exc.value.reason == "Not Found"
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, {"metadata": {"name": "other", "namespace": "elsewhere"}})
    assert status_of(exc)[:2] == (400, "BadRequest")

    body = core.read_namespaced_pod("p1", NS)
    body.metadata.labels["app"] = "y"
    replaced = core.replace_namespaced_pod("p1", NS, body)
    assert replaced.metadata.labels == {"app": "y"}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as exc:  # the stale resourceVersion of ``body``
        core.replace_namespaced_pod("p1", NS, body)
    assert status_of(exc)[:2] == (409, "Conflict")

    listed = core.list_namespaced_pod(NS)
    assert [p.metadata.name for p in listed.items] == [generated.metadata.name, "p1"]
    assert int(listed.metadata.resource_version) == emulator.server.state.kube.store.revision
    raw = core.list_namespaced_pod(NS, _preload_content=False)
    items = json.loads(raw.data)["items"]
    assert "kind" not in items[0] and "apiVersion" not in items[0]  # built-in list items carry no type meta
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == [
        generated.metadata.name,
        "p1",
    ]

    deleted = core.delete_namespaced_pod("p1", NS)
    assert deleted.metadata.name == "p1" and deleted.kind == "Pod"
    status = core.delete_namespace(NS)  # a Status, and the namespace's objects go with it
    assert status.status == "Success" and status.details.name == NS
    assert core.list_pod_for_all_namespaces().items == []


def test_status_subresource_and_the_immutable_provisioning_request_spec(api) -> None:
    custom = client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(
        *PR[:2], NS, PR[2], {**provreq("r1"), "status": {"x": 1}}
    )
    assert created["status"] == {} and created["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(*PR[:2], NS, PR[2], provreq("r1"))
    assert status_of(exc)[:2] == (409, "AlreadyExists")

    conditions = {"conditions": [{"type": "Accepted", "status": "True"}]}
    written = custom.patch_namespaced_custom_object_status(*PR[:2], NS, PR[2], "r1", {"status": conditions})
    assert written["status"] == conditions and written["metadata"]["generation"] == 1
    # An object write ignores status; a status write ignores the rest.
    labelled = custom.patch_namespaced_custom_object(
        *PR[:2], NS, PR[2], "r1", {"metadata": {"labels": {"a": "b"}}, "status": {"conditions": []}}
    )
    assert labelled["status"] == conditions and labelled["metadata"]["labels"] == {"a": "b"}
    current = custom.get_namespaced_custom_object_status(*PR[:2], NS, PR[2], "r1")
    current["status"] = {"conditions": [{"type": "Provisioned", "status": "True"}]}
    current["metadata"]["labels"] = {"ignored": "yes"}
    replaced = custom.replace_namespaced_custom_object_status(*PR[:2], NS, PR[2], "r1", current)
    assert replaced["status"]["conditions"][0]["type"] == "Provisioned"
    assert replaced["metadata"]["labels"] == {"a": "b"}

    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*PR[:2], NS, PR[2], "r1", {"spec": {"podSets": []}})
    status, reason, body = status_of(exc)
    assert (status, reason) == (422, "Invalid") and body["details"]["causes"][0]["field"] == "spec"
    no_version = custom.get_namespaced_custom_object(*PR[:2], NS, PR[2], "r1")
    del no_version["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:  # a custom resource's PUT needs a resourceVersion
        custom.replace_namespaced_custom_object(*PR[:2], NS, PR[2], "r1", no_version)
    assert status_of(exc)[:2] == (422, "Invalid")

    # The other served version: the same object, answered in the version asked.
    beta = custom.get_namespaced_custom_object(PR[0], "v1beta1", NS, PR[2], "r1")
    assert (
        beta["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"
        and beta["metadata"]["uid"] == created["metadata"]["uid"]
    )
    listed = custom.list_namespaced_custom_object(PR[0], "v1beta1", NS, PR[2])
    assert listed["kind"] == "ProvisioningRequestList"
    assert listed["items"][0]["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"  # custom items keep type meta
    assert custom.list_cluster_custom_object(*PR)["items"][0]["metadata"]["name"] == "r1"
    gone = custom.delete_namespaced_custom_object(*PR[:2], NS, PR[2], "r1")
    assert gone["metadata"]["name"] == "r1" and gone["kind"] == "ProvisioningRequest"
    with pytest.raises(ApiException) as exc:
        custom.get_namespaced_custom_object(*PR[:2], NS, PR[2], "r1")
    assert status_of(exc)[2]["message"] == 'provisioningrequests.autoscaling.x-k8s.io "r1" not found'


def test_patch_types(api) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespaced_pod(NS, pod("p", {"a": "1", "b": "2"}))
    # A dict patch of a built-in kind travels as a strategic merge patch: containers merge by name.
    patched = core.patch_namespaced_pod(
        "p",
        NS,
        {
            "metadata": {"labels": {"b": None, "c": "3"}},
            "spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]},
        },
    )
    assert patched.metadata.labels == {"a": "1", "c": "3"}
    assert patched.spec.containers[0].image == "busybox"
    assert [e.name for e in patched.spec.containers[0].env] == ["A", "B"]
    # A merge patch replaces lists whole.
    merged = core.patch_namespaced_pod(
        "p",
        NS,
        {"spec": {"containers": [{"name": "other", "image": "x"}]}},
        _content_type="application/merge-patch+json",
    )
    assert [c.name for c in merged.spec.containers] == ["other"]
    # A list is a JSON patch: every operation.
    ops = [
        {"op": "add", "path": "/metadata/labels/d", "value": "4"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "remove", "path": "/metadata/labels/c"},
        {"op": "copy", "from": "/metadata/labels/d", "path": "/metadata/labels/e"},
        {"op": "move", "from": "/metadata/labels/e", "path": "/metadata/labels/f"},
        {"op": "test", "path": "/metadata/labels/f", "value": "4"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "side", "image": "y"}},
    ]
    jsoned = core.patch_namespaced_pod("p", NS, ops)
    assert jsoned.metadata.labels == {"a": "9", "d": "4", "f": "4"}
    assert [c.name for c in jsoned.spec.containers] == ["other", "side"]
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, [{"op": "test", "path": "/metadata/labels/a", "value": "0"}])
    assert status_of(exc)[:2] == (422, "Invalid")
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, [{"op": "remove", "path": "/metadata/labels/zz"}])
    assert exc.value.status == 422

    # A custom object's dict patch travels as a merge patch; a strategic one is refused with 415.
    custom.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta1",
        NS,
        "localqueues",
        {"metadata": {"name": "q"}, "spec": {"clusterQueue": "cq"}},
    )
    queue = custom.patch_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", NS, "localqueues", "q", {"metadata": {"labels": {"x": "1"}}}
    )
    assert queue["metadata"]["labels"] == {"x": "1"} and queue["spec"] == {"clusterQueue": "cq"}
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta1",
            NS,
            "localqueues",
            "q",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    status, reason, body = status_of(exc)
    assert (status, reason) == (415, "UnsupportedMediaType")
    assert body["message"].startswith(
        "the body of the request was in an unknown format - accepted media types"
    )
    # The sync client sends every custom-object patch as a merge patch: a list needs the type.
    ops = [{"op": "replace", "path": "/spec/clusterQueue", "value": "c2"}]
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*LQ, "q", ops)
    assert exc.value.status == 400
    jsoned = custom.patch_namespaced_custom_object(*LQ, "q", ops, _content_type="application/json-patch+json")
    assert jsoned["spec"]["clusterQueue"] == "c2"


def test_label_and_field_selectors_and_paging(api) -> None:
    core = client.CoreV1Api(api)
    for i, (env, tier) in enumerate([("prod", "web"), ("dev", "web"), ("prod", "db"), ("qa", None)]):
        labels = {"env": env, **({"tier": tier} if tier else {})}
        core.create_namespaced_pod(NS, pod(f"p{i}", labels))
    core.create_namespaced_pod("other", pod("p9", {"env": "prod"}))

    def names(**kw: Any) -> list[str]:
        return [p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items]

    assert names(label_selector="env=prod") == ["p9", "p0", "p2"]
    assert names(label_selector="env==prod,tier=web") == ["p0"]
    assert names(label_selector="env!=prod") == ["p1", "p3"]
    assert names(label_selector="env in (dev, qa)") == ["p1", "p3"]
    assert names(label_selector="env notin (dev,qa),tier") == ["p0", "p2"]
    assert names(label_selector="!tier") == ["p9", "p3"]
    assert names(field_selector="metadata.name=p2") == ["p2"]
    assert names(field_selector="metadata.namespace!=team-a") == ["p9"]
    # Pods that ask for no accelerator run on the default pool at once.
    assert names(field_selector="status.phase=Running") == ["p9", "p0", "p1", "p2", "p3"]
    assert core.list_namespaced_pod(NS, field_selector="status.phase=Pending").items == []
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS, field_selector="spec.nodeName=x")
    assert status_of(exc)[:2] == (400, "BadRequest")
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS, label_selector="env in (a")
    assert exc.value.status == 400

    first = core.list_namespaced_pod(NS, limit=3)
    assert [p.metadata.name for p in first.items] == ["p0", "p1", "p2"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 1
    rest = core.list_namespaced_pod(NS, limit=3, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["p3"] and rest.metadata._continue is None


def test_watch_lists_then_streams_resumes_and_answers_410(api, emulator) -> None:
    # On PodTemplates, which no controller writes: every event is the test's own.
    core = client.CoreV1Api(api)
    core.create_namespaced_pod_template(NS, template("a", {"w": "1"}))
    core.create_namespaced_pod_template(NS, template("skip", {"w": "0"}))
    store = emulator.server.state.kube.store

    def writer(event_count: list[int]) -> None:
        if event_count[0] == 1:  # after the initial ADDED, change things
            core.patch_namespaced_pod_template("a", NS, {"metadata": {"annotations": {"k": "v"}}})
            core.create_namespaced_pod_template(NS, template("b", {"w": "1"}))
            core.patch_namespaced_pod_template(
                "b", NS, {"metadata": {"labels": {"w": "0"}}}
            )  # leaves the selector
            core.delete_namespaced_pod_template("a", NS)

    seen: list[tuple[str, str]] = []
    count = [0]
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod_template, NS, label_selector="w=1", timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        count[0] += 1
        writer(count)
        if len(seen) == 5:
            w.stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "b"), ("DELETED", "a")]
    assert w.resource_version == str(store.revision)

    # Resume after a resourceVersion: only what changed since.
    mark = store.revision
    core.create_namespaced_pod_template(NS, template("c", {"w": "1"}))
    w = watch.Watch()
    resumed = []
    for event in w.stream(
        core.list_namespaced_pod_template, NS, resource_version=str(mark), timeout_seconds=5
    ):
        resumed.append((event["type"], event["object"].metadata.name, event["object"].kind))
        w.stop()
    assert resumed == [("ADDED", "c", "PodTemplate")]

    # Too old: an ERROR event with a 410 Status, which the client raises.
    store.events.clear()
    core.create_namespaced_pod_template(NS, template("d", {}))
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod_template, NS, resource_version="1", timeout_seconds=5
        ):
            pass
    assert exc.value.status == 410 and "too old resource version" in exc.value.reason
    # Watch spellings: raw ``watch=True``, ``1``; ``timeoutSeconds`` ends the stream.
    for spelling in ("True", "1", "true"):
        reply = api.call_api(
            f"/api/v1/namespaces/{NS}/podtemplates",
            "GET",
            query_params=[("watch", spelling), ("timeoutSeconds", "0.05")],
            _preload_content=False,
            response_types_map={},
        )
        lines = [json.loads(line) for line in reply.data.splitlines() if line]
        assert {line["type"] for line in lines} == {"ADDED"}
        assert len(lines) == len(core.list_namespaced_pod_template(NS).items) == 4


def test_pod_log_plain_tail_and_follow(api, emulator) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, pod("job-0"))
    state = emulator.server.state
    logs = {"main": "one\ntwo\nthree\n"}
    state.kube.cluster.pod_log = lambda ns, name, container: logs[container or "main"]  # type: ignore[method-assign]
    # kubernetes 36's sync client answers a str response with the repr of the bytes; the raw
    # response (``_preload_content=False``) gives the text.
    raw = core.read_namespaced_pod_log("job-0", NS, _preload_content=False)
    assert raw.data.decode() == "one\ntwo\nthree\n" and raw.headers["content-type"].startswith("text/plain")
    assert (
        core.read_namespaced_pod_log("job-0", NS, tail_lines=1, container="main", _preload_content=False).data
        == b"three\n"
    )
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("ghost", NS)
    assert exc.value.status == 404

    def finish() -> None:
        with state.lock:
            logs["main"] += "four\n"
            state.kube.store.update(
                KINDS["pods"], NS, "job-0", lambda p: p["status"].update(phase="Succeeded"), status=True
            )

    if watch.Watch().get_watch_argument_name(core.read_namespaced_pod_log) != "follow":
        # kubernetes 36.0.1 does not recognise the log's follow parameter in its own docstrings
        # (it passes watch=True, which the call refuses); the async clients test the emulator's follow.
        return
    lines = []
    for line in watch.Watch().stream(core.read_namespaced_pod_log, "job-0", NS):
        lines.append(line)
        if line == "three":
            finish()
    assert lines == ["one", "two", "three", "four"]


def test_delete_propagation(api) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def job_with_pods(name: str) -> list[str]:
        """A running Job's two pods, made by the Job controller (names from its generateName)."""
        spec = {**JOB_SPEC, "suspend": False, "parallelism": 2, "completions": 2}
        batch.create_namespaced_job(NS, {"metadata": {"name": name}, "spec": spec})
        made = [
            p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=f"job-name={name}").items
        ]
        assert len(made) == 2 and all(n.startswith(f"{name}-") for n in made)
        return made

    def pods() -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(NS).items]

    orphans = job_with_pods("orphaned")  # a Job's default is Orphan: the pods stay, unowned
    assert batch.delete_namespaced_job("orphaned", NS).status == "Success"
    assert pods() == orphans
    assert core.read_namespaced_pod(orphans[0], NS).metadata.owner_references is None
    job_with_pods("bg")
    batch.delete_namespaced_job("bg", NS, propagation_policy="Background")
    assert pods() == orphans
    job_with_pods("fg")
    batch.delete_namespaced_job("fg", NS, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert pods() == orphans
    # Recursive: a workload owned by a job owns a provisioning request.
    custom = client.CustomObjectsApi(api)
    job = batch.create_namespaced_job(NS, {"metadata": {"name": "kq"}, "spec": JOB_SPEC})

    def ref(kind: str, obj: dict[str, Any]) -> list[dict[str, str]]:
        meta = obj["metadata"]
        return [{"apiVersion": "v1", "kind": kind, "name": meta["name"], "uid": meta["uid"]}]

    wl = custom.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta1",
        NS,
        "workloads",
        {"metadata": {"name": "wl", "ownerReferences": ref("Job", job.to_dict())}},
    )
    custom.create_namespaced_custom_object(
        *PR[:2],
        NS,
        PR[2],
        {**provreq("wl-check-1"), "metadata": {"name": "wl-check-1", "ownerReferences": ref("Workload", wl)}},
    )
    batch.delete_namespaced_job("kq", NS, propagation_policy="Background")
    assert custom.list_namespaced_custom_object(*PR[:2], NS, PR[2])["items"] == []
    with pytest.raises(ApiException) as exc:
        batch.delete_namespaced_job("kq", NS, propagation_policy="Sideways")
    assert exc.value.status in (404, 422)


def test_injected_faults_answer_as_status(api, emulator, monkeypatch) -> None:
    core = client.CoreV1Api(api)
    cases = [
        ("UNAVAILABLE", 503, "ServiceUnavailable"),
        ("INTERNAL", 500, "InternalError"),
        ("DEADLINE_EXCEEDED", 504, "Timeout"),
    ]
    for code, http, reason in cases:
        emulator.control.set_faults([f"pods.list={code}x1"])
        with pytest.raises(ApiException) as exc:
            core.list_namespaced_pod(NS)
        assert status_of(exc)[:2] == (http, reason)
    # A 429 carries Retry-After, which urllib3 (under the sync client) obeys: up to 3 retries.
    monkeypatch.setattr(routes, "RETRY_AFTER", 0)  # no real sleeping in the test
    emulator.control.set_faults(["pods.list=RESOURCE_EXHAUSTEDx1"])
    assert core.list_namespaced_pod(NS).items == []
    emulator.control.set_faults(["pods.list=RESOURCE_EXHAUSTEDx4"])
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS)
    status, reason, body = status_of(exc)
    assert (status, reason) == (429, "TooManyRequests") and exc.value.headers["Retry-After"] == "0"
    assert body["details"] == {"retryAfterSeconds": 0}
    assert emulator.calls("pods.list") == 3 + 2 + 4
    emulator.control.set_faults(["pods.create=DEADLINE_EXCEEDEDx1"])
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod("applied"))
    assert exc.value.status == 504
    assert core.read_namespaced_pod("applied", NS).metadata.name == "applied"  # applied, answer lost
    emulator.control.clear_faults()
    # Unknown paths and methods answer as Status too.
    with pytest.raises(ApiException) as exc:
        api.call_api("/apis/example.com/v1/things", "GET", response_types_map={})
    assert status_of(exc)[:2] == (404, "NotFound")
    with pytest.raises(ApiException) as exc:
        api.call_api(f"/api/v1/namespaces/{NS}/pods", "PUT", body={}, response_types_map={})
    assert status_of(exc)[:2] == (405, "MethodNotAllowed")


def test_every_client_write_goes_through_admission(api, emulator) -> None:
    core = client.CoreV1Api(api)
    seen: list[tuple[str, str, str, bool]] = []

    def step(
        operation: str, kind: Any, namespace: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        seen.append((operation, kind.key, namespace, old is not None))
        if (obj["metadata"].get("labels") or {}).get("bad"):
            raise invalid(kind, obj["metadata"]["name"], [("metadata.labels", "Forbidden: bad")])
        obj["metadata"].setdefault("annotations", {})["admitted"] = "yes"  # defaulting sticks

    emulator.server.state.kube.cluster.admission.append(step)
    created = core.create_namespaced_pod(NS, pod("p"))
    assert created.metadata.annotations == {"admitted": "yes"}
    core.patch_namespaced_pod("p", NS, {"metadata": {"annotations": {"admitted": None}}})
    assert core.read_namespaced_pod("p", NS).metadata.annotations == {"admitted": "yes"}
    core.replace_namespaced_pod("p", NS, core.read_namespaced_pod("p", NS))
    core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"bad": "1"}}})
    assert status_of(exc)[:2] == (422, "Invalid")
    assert core.read_namespaced_pod("p", NS).metadata.labels == {}  # refused: nothing stored
    assert seen == [("CREATE", "pods", NS, False)] + [("UPDATE", "pods", NS, True)] * 4


def test_cluster_wide_watch_of_a_namespaced_kind(api) -> None:
    batch = client.BatchV1Api(api)
    spec = JOB_SPEC
    batch.create_namespaced_job("one", {"metadata": {"name": "j1"}, "spec": spec})
    w = watch.Watch()
    seen = []
    for event in w.stream(batch.list_job_for_all_namespaces, timeout_seconds=10):
        if event["type"] != "ADDED":
            continue  # the Job controller's status writes
        seen.append((event["type"], event["object"].metadata.namespace, event["object"].metadata.name))
        if len(seen) == 1:
            batch.create_namespaced_job("two", {"metadata": {"name": "j2"}, "spec": spec})
        else:
            w.stop()
    assert seen == [("ADDED", "one", "j1"), ("ADDED", "two", "j2")]
    assert isinstance(event["object"], client.V1Job) and event["object"].api_version == "batch/v1"


def test_watch_of_provisioning_requests_in_the_version_asked(api, emulator) -> None:
    # The provisioning controller left alone: the test writes the conditions itself.
    emulator.server.state.kube.cluster.provisioning.manual = True
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*PR[:2], NS, PR[2], provreq("r1"))
    w = watch.Watch()
    seen = []
    stream = w.stream(custom.list_namespaced_custom_object, PR[0], "v1beta1", NS, PR[2], timeout_seconds=10)
    for event in stream:
        seen.append((event["type"], event["object"]["apiVersion"], event["object"].get("status")))
        if len(seen) == 1:
            custom.patch_namespaced_custom_object_status(
                *PR[:2], NS, PR[2], "r1", {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
            )
        else:
            w.stop()
    beta = "autoscaling.x-k8s.io/v1beta1"
    assert seen == [
        ("ADDED", beta, {}),
        ("MODIFIED", beta, {"conditions": [{"type": "Accepted", "status": "True"}]}),
    ]


def test_an_open_watch_ends_when_the_server_goes_down(api, emulator) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, pod("a"))
    # No timeoutSeconds: only the server going away ends this stream (the read timeout fails the
    # test instead of hanging it).
    reply = core.list_namespaced_pod(NS, watch=True, _preload_content=False, _request_timeout=30)
    first = json.loads(reply.readline())
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    emulator.server.outage(0.5)
    assert reply.read() == b""
