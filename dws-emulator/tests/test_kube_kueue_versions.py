"""Kueue's objects at ``v1beta2`` (stored) and ``v1beta1`` (deprecated), converted as Kueue's
webhook converts them, through the unmodified ``kubernetes`` client; ResourceFlavors; a
ClusterQueue active only when its flavors and checks exist; a cluster serving only ``v1beta1``."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from dws_emulator.kube.kueue_versions import to_served, to_stored
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

GROUP = "kueue.x-k8s.io"


@pytest.fixture
def emulator(dws_emulator_server_factory, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return dws_emulator_server_factory(clock=FakeClock())


@pytest.fixture
def custom(emulator) -> Any:
    with client.ApiClient(client.Configuration(host=emulator.rest_url)) as api_client:
        yield client.CustomObjectsApi(api_client)


@pytest.fixture
def apis(emulator) -> Any:
    with client.ApiClient(client.Configuration(host=emulator.rest_url)) as api_client:
        yield client.ApisApi(api_client)


def cluster_queue(custom: Any, version: str, name: str) -> dict[str, Any]:
    return custom.get_cluster_custom_object(GROUP, version, "clusterqueues", name)


def active(obj: dict[str, Any]) -> tuple[str, str, str]:
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Active")
    return cond["status"], cond["reason"], cond["message"]


# -- the conversion itself -----------------------------------------------------------------------


def test_a_workload_converts_its_priority_and_misspelt_field_both_ways() -> None:
    old = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "spec": {"priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass", "priorityClassName": "hi"},
        "status": {"accumulatedPastExexcutionTimeSeconds": 30},
    }
    new = to_stored("Workload", old, "v1beta1")
    assert new["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert new["spec"] == {
        "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "hi"}
    }
    assert new["status"] == {"accumulatedPastExecutionTimeSeconds": 30}
    assert old["spec"]["priorityClassName"] == "hi"  # the sent object is not changed
    new["spec"]["preemptionGates"] = [{"name": "g"}]
    back = to_served("Workload", new, "v1beta1")
    assert back["spec"] == old["spec"] and back["status"] == old["status"]
    pod_priority = {
        "spec": {"priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "p"}}
    }
    assert to_served("Workload", pod_priority, "v1beta1")["spec"] == {
        "priorityClassSource": "scheduling.k8s.io/priorityclass",
        "priorityClassName": "p",
    }
    assert to_served("Workload", new, "v1beta2") is new  # the stored version is shown as it is


def test_cluster_queue_local_queue_and_admission_check_conversions() -> None:
    cq = {
        "spec": {
            "cohort": "team",
            "admissionChecks": ["a", "b"],
            "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
        },
        "status": {"pendingWorkloadsStatus": {"head": []}},
    }
    stored = to_stored("ClusterQueue", cq, "v1beta1")
    assert stored["spec"] == {
        "cohortName": "team",
        "admissionChecksStrategy": {"admissionChecks": [{"name": "a"}, {"name": "b"}]},
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
    }
    assert stored["status"] == {}
    shown = to_served("ClusterQueue", stored, "v1beta1")
    assert shown["spec"]["cohort"] == "team" and "cohortName" not in shown["spec"]
    # As in Kueue, the checks stay in the strategy, which v1beta1 has too.
    assert shown["spec"]["admissionChecksStrategy"] == stored["spec"]["admissionChecksStrategy"]
    lq = {"status": {"flavorUsage": [{"name": "f"}], "flavors": [{"name": "f"}]}}
    assert to_stored("LocalQueue", lq, "v1beta1")["status"] == {"flavorsUsage": [{"name": "f"}]}
    assert to_served("LocalQueue", {"status": {"flavorsUsage": []}}, "v1beta1")["status"] == {
        "flavorUsage": []
    }
    ac = {"spec": {"controllerName": "x", "retryDelayMinutes": 15}}
    assert to_stored("AdmissionCheck", ac, "v1beta1")["spec"] == {"controllerName": "x"}
    flavor = {"spec": {"nodeLabels": {"a": "b"}}}
    assert to_stored("ResourceFlavor", flavor, "v1beta1") == flavor


# -- through the client --------------------------------------------------------------------------


def test_discovery_prefers_v1beta2_and_every_kind_is_served_at_both(apis, custom) -> None:
    (kueue,) = [g for g in apis.get_api_versions().groups if g.name == GROUP]
    assert [v.version for v in kueue.versions] == ["v1beta2", "v1beta1"]
    assert kueue.preferred_version.version == "v1beta2"
    for version in ("v1beta2", "v1beta1"):
        assert cluster_queue(custom, version, "dws-cluster-queue")["apiVersion"] == f"{GROUP}/{version}"
        (flavor,) = custom.list_cluster_custom_object(GROUP, version, "resourceflavors")["items"]
        assert flavor["metadata"]["name"] == "dws-flavor"
        assert flavor["spec"]["nodeLabels"] == {"cloud.google.com/gke-queued": "true"}
    seeded = cluster_queue(custom, "v1beta2", "dws-cluster-queue")["spec"]
    assert seeded["admissionChecksStrategy"] == {"admissionChecks": [{"name": "dws-prov"}]}
    assert "admissionChecks" not in seeded
    lq = custom.get_namespaced_custom_object(GROUP, "v1beta1", "default", "localqueues", "dws-queue")
    assert "flavorUsage" in lq["status"] and "flavorsUsage" not in lq["status"]
    (listed,) = custom.list_namespaced_custom_object(GROUP, "v1beta1", "default", "localqueues")["items"]
    assert listed["apiVersion"] == f"{GROUP}/v1beta1" and "flavorUsage" in listed["status"]


def test_an_object_written_at_v1beta1_is_stored_at_v1beta2_and_patched_as_sent(custom) -> None:
    body = {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "old-style"},
        "spec": {
            "cohort": "research",
            "admissionChecks": ["dws-prov"],
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "dws-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                    ],
                }
            ],
        },
    }
    created = custom.create_cluster_custom_object(GROUP, "v1beta1", "clusterqueues", body)
    assert created["apiVersion"] == f"{GROUP}/v1beta1" and created["spec"]["cohort"] == "research"
    stored = cluster_queue(custom, "v1beta2", "old-style")
    assert stored["spec"]["cohortName"] == "research" and "cohort" not in stored["spec"]
    assert stored["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "dws-prov"}]}
    assert active(stored) == ("True", "Ready", "Can admit new workloads")
    # A merge patch at v1beta1 applies to the v1beta1 view.
    custom.patch_cluster_custom_object(
        GROUP, "v1beta1", "clusterqueues", "old-style", {"spec": {"cohort": "prod"}}
    )
    assert cluster_queue(custom, "v1beta2", "old-style")["spec"]["cohortName"] == "prod"
    assert cluster_queue(custom, "v1beta1", "old-style")["spec"]["cohort"] == "prod"


def test_a_watch_at_v1beta1_shows_objects_as_v1beta1(custom) -> None:
    events = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        GROUP,
        "v1beta1",
        "default",
        "localqueues",
        timeout_seconds=5,
    )
    first = next(events)
    assert first["type"] == "ADDED"
    assert first["object"]["apiVersion"] == f"{GROUP}/v1beta1"
    assert "flavorUsage" in first["object"]["status"]


def test_a_cluster_queue_is_inactive_until_its_flavor_and_check_exist(custom, emulator) -> None:
    spec = {
        "admissionChecksStrategy": {"admissionChecks": [{"name": "later-check"}]},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "later", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
            }
        ],
    }
    custom.create_cluster_custom_object(
        GROUP, "v1beta2", "clusterqueues", {"metadata": {"name": "waits"}, "spec": spec}
    )
    assert active(cluster_queue(custom, "v1beta2", "waits")) == (
        "False",
        "FlavorNotFound",
        "Can't admit new workloads: references missing ResourceFlavor(s): later, "
        "references missing AdmissionCheck(s): later-check.",
    )
    custom.create_cluster_custom_object(
        GROUP,
        "v1beta2",
        "resourceflavors",
        {"metadata": {"name": "later"}, "spec": {"nodeLabels": {"pool": "x"}}},
    )
    check = {
        "metadata": {"name": "later-check"},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": GROUP, "kind": "ProvisioningRequestConfig", "name": "missing"},
        },
    }
    custom.create_cluster_custom_object(GROUP, "v1beta2", "admissionchecks", check)
    made = custom.get_cluster_custom_object(GROUP, "v1beta2", "admissionchecks", "later-check")
    assert active(made) == (
        "False",
        "BadParametersRef",
        'provisioningrequestconfigs.kueue.x-k8s.io "missing" not found',
    )
    assert active(cluster_queue(custom, "v1beta2", "waits"))[:2] == ("False", "AdmissionCheckInactive")
    config = custom.get_cluster_custom_object(GROUP, "v1beta2", "provisioningrequestconfigs", "dws-config")
    config = {"metadata": {"name": "missing"}, "spec": copy.deepcopy(config["spec"])}
    custom.create_cluster_custom_object(GROUP, "v1beta2", "provisioningrequestconfigs", config)
    assert (
        active(custom.get_cluster_custom_object(GROUP, "v1beta2", "admissionchecks", "later-check"))[0]
        == "True"
    )
    assert active(cluster_queue(custom, "v1beta2", "waits")) == ("True", "Ready", "Can admit new workloads")


def test_a_cluster_that_serves_only_v1beta1_answers_404_at_v1beta2(emulator, apis, custom) -> None:
    emulator.server.state.apis["kube"].cluster.kueue_versions = ("v1beta1",)
    (kueue,) = [g for g in apis.get_api_versions().groups if g.name == GROUP]
    assert [v.version for v in kueue.versions] == ["v1beta1"]
    assert cluster_queue(custom, "v1beta1", "dws-cluster-queue")["spec"]["admissionChecksStrategy"]
    with pytest.raises(ApiException) as raised:
        cluster_queue(custom, "v1beta2", "dws-cluster-queue")
    assert raised.value.status == 404
    assert json.loads(raised.value.body)["reason"] == "NotFound"
    # Its resource list too (discovery of the group version).
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(f"{emulator.rest_url}/apis/{GROUP}/v1beta2", timeout=30)
    assert http.value.code == 404
    with urllib.request.urlopen(f"{emulator.rest_url}/apis/{GROUP}/v1beta1", timeout=30) as reply:
        assert "clusterqueues" in {r["name"] for r in json.load(reply)["resources"]}
