"""Compute Engine flex-start VMs: the state table, names, the request and template built, parse-time
checks, the thread pool bound, and the shared poller's one list per MIG."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from google.cloud.compute_v1 import (
    Error,
    Errors,
    InstanceGroupManagerResizeRequest,
    InstanceGroupManagerResizeRequestStatus,
)

from airflow_provider_dws.backends.base import GroupedLister, RequestBackend
from airflow_provider_dws.backends.compute import (
    COMPUTE_RESIZE_REQUEST_STATES,
    ComputeResizeRequestBackend,
    parse_resize_request_name,
    resize_request_status,
)
from airflow_provider_dws.backends.compute_base import POOL_THREADS, compute_pool, in_pool
from airflow_provider_dws.backends.compute_groups import VmSpec, flex_start_template
from airflow_provider_dws.hooks.base import emulator_rest_host
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter, mig_console_url
from airflow_provider_dws.scheduling.identity import RequestIdentity, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers import poller

IDENTITY = RequestIdentity("render_dag", "ask_for_vms", "manual__2026-12-01", try_number=2, attempt=3)
MIG = "projects/my-project/zones/us-central1-a/instanceGroupManagers/farm"


def make(**kwargs: Any) -> CreateComputeFlexStartVMsOperator:
    args: dict[str, Any] = {
        "task_id": "ask_for_vms",
        "project_id": "my-project",
        "zone": "us-central1-a",
        "machine_type": "a3-highgpu-8g",
        "resize_by": 4,
        "max_run": timedelta(hours=6),
    }
    args.update(kwargs)
    return CreateComputeFlexStartVMsOperator(**args)


# -- the state table -----------------------------------------------------------------------------


def test_state_table() -> None:
    table = COMPUTE_RESIZE_REQUEST_STATES
    assert table.live_states() == ("STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "SUCCEEDED")
    assert table.phase("CREATING") is table.phase("ACCEPTED") is Phase.WAITING
    assert table.phase("SUCCEEDED") is Phase.RUNNING  # the VMs are held and billed
    assert table.classify("CANCELLED").failure is FailureKind.CANCELLED
    assert table.phase("SOMETHING_NEW") is Phase.WAITING
    stock_out = table.classify("FAILED", reasons=["ZONE_RESOURCE_POOL_EXHAUSTED"], message="no H100")
    assert (stock_out.phase, stock_out.failure) == (Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED)
    refused = table.classify("FAILED", reasons=["INVALID_FIELD_VALUE"], message="bad template")
    assert (refused.phase, refused.failure, refused.message) == (
        Phase.FAILED,
        FailureKind.BAD_REQUEST,
        "bad template",
    )
    assert table.classify("FAILED").failure is FailureKind.CAPACITY_NOT_OBTAINED


def _rr(state: str, name: str = "dws-a-t1-a1", **fields: Any) -> InstanceGroupManagerResizeRequest:
    return InstanceGroupManagerResizeRequest(
        name=name, state=state, resize_by=4, creation_timestamp="2026-12-01T10:00:00.000-08:00", **fields
    )


def test_status_of_a_request() -> None:
    name = f"{MIG}/resizeRequests/{IDENTITY.resize_request_name()}"
    rr = _rr(
        "FAILED",
        IDENTITY.resize_request_name(),
        description="airflow-provider-dws x; max_wait=3600s",
        requested_run_duration={"seconds": 21600},
        status=InstanceGroupManagerResizeRequestStatus(
            error=Error(errors=[Errors(code="ZONE_RESOURCE_POOL_EXHAUSTED", message="no capacity")])
        ),
    )
    status = resize_request_status(rr, name)
    assert status.phase is Phase.NOT_OBTAINED
    assert status.outcome.message == "ZONE_RESOURCE_POOL_EXHAUSTED: no capacity"
    assert status.details["max_wait_seconds"] == 3600
    assert status.details["attempt"] == 3
    assert status.timings.submitted is not None and status.timings.submitted.utcoffset() == timedelta(
        hours=-8
    )
    assert status.description == "4 VMs for 6:00:00 in MIG farm (us-central1-a)"


def test_names() -> None:
    where = parse_resize_request_name(f"https://www.googleapis.com/compute/v1/{MIG}/resizeRequests/r1")
    assert (where.project, where.location, where.instance_group_manager, where.resize_request) == (
        "my-project",
        "us-central1-a",
        "farm",
        "r1",
    )
    assert not where.regional and where.mig_path == MIG
    with pytest.raises(ValueError, match="not a Compute Engine resize request"):
        parse_resize_request_name("projects/p/locations/l/jobs/j")
    name = IDENTITY.resize_request_name()
    assert len(name) <= 63 and parse_attempt_name(name)[1:] == (2, 3)  # type: ignore[index]
    # The same submission always gets the same name and request_id; another attempt does not.
    assert (
        name
        == RequestIdentity(
            "render_dag", "ask_for_vms", "manual__2026-12-01", try_number=2, attempt=3
        ).resize_request_name()
    )
    assert IDENTITY.request_uuid() != IDENTITY.with_attempt(4).request_uuid()
    assert IDENTITY.group_name() == IDENTITY.with_attempt(1).group_name()  # shared by every attempt
    assert IDENTITY.group_name("g2-standard-8") != IDENTITY.group_name()
    assert len(IDENTITY.group_name("g2-standard-8")) <= 63
    assert emulator_rest_host("127.0.0.1:8470") == "127.0.0.1:8471"
    with pytest.raises(ValueError, match="loopback"):
        emulator_rest_host("10.0.0.1:8470")
    assert mig_console_url("p", "us-central1-a", "farm").endswith(
        "/instanceGroups/details/us-central1-a/farm?project=p"
    )


# -- what is built -------------------------------------------------------------------------------


def test_resize_request_built() -> None:
    adapter = ComputeFlexStartAdapter(make())
    rr = adapter.build(IDENTITY, timedelta(hours=2))
    assert rr.name == IDENTITY.resize_request_name()
    assert rr.resize_by == 4
    assert rr.requested_run_duration.seconds == 6 * 3600
    assert "max_wait=7200s" in rr.description
    assert adapter.mig_for(IDENTITY, Placement("us-central1-a")) == IDENTITY.group_name()
    assert adapter.mig_for(
        IDENTITY, Placement("us-east4-b", machine_type="a3-highgpu-4g")
    ) == IDENTITY.group_name("a3-highgpu-4g")
    given = ComputeFlexStartAdapter(make(machine_type=None, instance_group_manager="farm"))
    assert given.mig_for(IDENTITY, Placement("us-east4-b")) == "farm"


def test_flex_start_template() -> None:
    template = flex_start_template("t", VmSpec(machine_type="a3-highgpu-8g", boot_disk_size_gb=200))
    props = template.properties
    assert props.scheduling.provisioning_model == "FLEX_START"
    assert props.scheduling.on_host_maintenance == "TERMINATE"
    assert props.scheduling.automatic_restart is False
    assert not props.guest_accelerators  # an A3 machine comes with its H100s
    assert props.disks[0].initialize_params.disk_size_gb == 200
    n1 = flex_start_template(
        "t", VmSpec(machine_type="n1-standard-8", accelerator_type="nvidia-tesla-t4", accelerator_count=2)
    )
    accelerator = n1.properties.guest_accelerators[0]
    assert (accelerator.accelerator_type, accelerator.accelerator_count) == ("nvidia-tesla-t4", 2)


def test_record_facts() -> None:
    adapter = ComputeFlexStartAdapter(make())
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.scheduling.phases import Outcome, RequestTimings

    status = RequestStatus(f"{MIG}/resizeRequests/r", "ACCEPTED", Outcome(Phase.WAITING), RequestTimings())
    facts = adapter.record_facts(status, Placement("us-central1-a"))
    assert facts["accelerator_type"] == "nvidia-h100-80gb"
    assert facts["accelerator_count"] == 32  # 4 VMs x 8 H100
    assert facts["api"] == "compute_resize_request" and facts["pricing_model"] == "flex_start"


# -- parse time ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zone": None}, "exactly one of zone"),
        ({"region": "us-central1"}, "exactly one of zone"),
        ({"machine_type": None}, "pass instance_group_manager"),
        ({"instance_group_manager": "farm"}, "not both"),
        ({"resize_by": 0}, "resize_by must be an integer from 1 to 1000"),
        ({"resize_by": True}, "resize_by must be an integer"),
        ({"max_run": timedelta(minutes=5)}, "max_run must be at least 0:10:00"),
        ({"max_run": timedelta(days=8)}, "max_run"),
        ({"max_wait": timedelta(days=8)}, "max_wait"),
        ({"zone": "us-central1"}, "zone must be a Compute Engine zone"),
        ({"machine_type": "a3-highgpu-8g", "accelerator_type": "nvidia-l4"}, "comes with exactly 8"),
        ({"machine_type": "n1-standard-8"}, "has no GPUs of its own"),
        ({"accelerator_type": "nvidia-k80"}, "accelerator_type must be a GPU"),
        ({"metadata": {"startup-script": 1}}, "metadata must be a dict of strings"),
        ({"failover": ["us-east4"]}, "is not a Compute Engine zone"),
        ({"failover": [Placement("us-east4-b", tier="spot")]}, "no tier"),
        (
            {
                "machine_type": None,
                "instance_group_manager": "farm",
                "failover": [Placement("us-east4-b", machine_type="g2-standard-8")],
            },
            "existing instance_group_manager",
        ),
    ],
)
def test_parameter_mistakes_fail_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_good_parameters() -> None:
    op = make(
        failover=[Placement("us-east4-b", machine_type="a3-highgpu-4g")],
        capacity_retry=2,
        zone="{{ var.value.zone }}",
    )
    assert op.max_run == timedelta(hours=6)
    regional = make(zone=None, region="us-central1", machine_type=None, instance_group_manager="farm")
    assert regional.home_placement().location == "us-central1"
    release = DeleteComputeFlexStartVMsOperator(task_id="release", setup_task_id="ask_for_vms")
    assert release.setup_task_id == "ask_for_vms"
    with pytest.raises(ValueError, match="setup_task_id must be a task id"):
        DeleteComputeFlexStartVMsOperator(task_id="release", setup_task_id="")


# -- the backend: pool, contract, grouping ------------------------------------------------------


def test_backend_contract_and_spec() -> None:
    backend = ComputeResizeRequestBackend("my-project", "us-central1-a")
    assert isinstance(backend, RequestBackend) and isinstance(backend, GroupedLister)
    rebuilt = backend_from_spec(backend.kind, backend.spec())
    assert isinstance(rebuilt, ComputeResizeRequestBackend) and rebuilt.location == "us-central1-a"
    assert backend.poll_group(f"{MIG}/resizeRequests/r") == MIG
    assert ComputeResizeRequestBackend("p", "us-central1").scope == {"region": "us-central1"}


def test_the_pool_is_one_and_bounded() -> None:
    running = 0
    peak = 0
    threads: set[str] = set()
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def many() -> None:
        await asyncio.gather(*(in_pool(work) for _ in range(40)))

    asyncio.run(many())
    assert compute_pool() is compute_pool()
    assert peak <= POOL_THREADS and len(threads) <= POOL_THREADS
    assert all(name.startswith("dws-compute") for name in threads)


class _Page:
    def __init__(self, items: list[Any]) -> None:
        self.items = items


class _Pager:
    def __init__(self, pages: list[list[Any]]) -> None:
        self.pages = [_Page(p) for p in pages]


class _FakeRequests:
    """The resize requests client's ``list`` and ``get``, counting calls per MIG (and the threads)."""

    def __init__(self, by_mig: dict[str, list[InstanceGroupManagerResizeRequest]]) -> None:
        self.by_mig = by_mig
        self.lists: dict[str, int] = {}
        self.gets = 0
        self.threads: set[str] = set()

    def list(self, *, request: Any, **_: Any) -> _Pager:
        instance_group_manager = request.instance_group_manager
        assert request.max_results == 250 and request.zone == "us-central1-a"
        self.lists[instance_group_manager] = self.lists.get(instance_group_manager, 0) + 1
        self.threads.add(threading.current_thread().name)
        items = self.by_mig[instance_group_manager]
        return _Pager([items[:2], items[2:]])  # two pages

    def get(self, **_: Any) -> Any:
        self.gets += 1
        raise AssertionError("every wait is served by its MIG's list")


def test_poller_lists_each_mig_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRequests(
        {
            "farm-a": [_rr("ACCEPTED", f"a{i}") for i in range(3)],
            "farm-b": [_rr("SUCCEEDED", "b0"), _rr("ACCEPTED", "b1"), _rr("CREATING", "b2")],
        }
    )
    monkeypatch.setattr(ComputeResizeRequestBackend, "_requests", lambda self: fake)
    spec = ComputeResizeRequestBackend("my-project", "us-central1-a").spec()
    base = "projects/my-project/zones/us-central1-a/instanceGroupManagers"
    names = [f"{base}/farm-a/resizeRequests/a{i}" for i in range(3)] + [
        f"{base}/farm-b/resizeRequests/b{i}" for i in range(3)
    ]

    async def scenario() -> dict[str, str]:
        subs = [poller.shared_poller("compute_resize_request", spec, n).subscribe(n, 3600.0) for n in names]
        pollers = {id(s.poller) for s in subs}
        assert len(pollers) == 2  # one per MIG
        assert len({id(s.poller.backend) for s in subs}) == 1  # one backend (one set of clients)
        states = {}
        for sub in subs:
            status = await asyncio.wait_for(sub.next(), 30)
            assert status is not None
            states[sub.name.rsplit("/", 1)[-1]] = status.state
        for sub in subs:
            sub.close()
        return states

    states = asyncio.run(scenario())
    assert states == {
        "a0": "ACCEPTED",
        "a1": "ACCEPTED",
        "a2": "ACCEPTED",
        "b0": "SUCCEEDED",
        "b1": "ACCEPTED",
        "b2": "CREATING",
    }
    assert fake.lists == {"farm-a": 1, "farm-b": 1}
    assert fake.gets == 0
    assert fake.threads and all(t.startswith("dws-compute") for t in fake.threads)  # never on the loop


def test_other_apis_keep_one_poller_per_location() -> None:
    spec = {"project_id": "p", "region": "us-central1", "gcp_conn_id": "c", "impersonation_chain": None}

    async def scenario() -> None:
        a = poller.shared_poller("vertex_custom_job", spec, "projects/p/locations/us-central1/customJobs/1")
        b = poller.shared_poller("vertex_custom_job", spec, "projects/p/locations/us-central1/customJobs/2")
        assert a is b and a.key == poller.poller_key("vertex_custom_job", spec)

    asyncio.run(scenario())


# -- the release ----------------------------------------------------------------------------------


class _ReleaseTI:
    dag_id, run_id, map_index, task_id, try_number = "render_dag", "manual__1", -1, "release", 1

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        return None


def test_the_release_builds_one_backend_per_location(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two MIGs of one zone (a failover machine type) and three requests: one backend, so one hook,
    one connection lookup and one set of clients, not one per MIG and per request."""
    from airflow.sdk import DAG

    import airflow_provider_dws.runtime.compute as runtime_compute
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.scheduling.phases import Outcome, RequestTimings

    built: list[tuple[Any, ...]] = []
    searched: list[str] = []
    discarded: list[str] = []

    class Backend:
        kind = ComputeResizeRequestBackend.kind

        def __init__(self, *args: Any) -> None:
            built.append(args)

        def find(self, identity: Any, mig: str) -> list[RequestStatus]:
            base = f"projects/my-project/zones/us-central1-a/instanceGroupManagers/{mig}/resizeRequests/"
            searched.append(mig)
            return [status(base + f"r{n}") for n in range(len(searched))]  # 1, then 2 requests

        def get_status(self, name: str) -> RequestStatus:
            return status(name)

        def discard(self, name: str) -> None:
            discarded.append(name)

    def status(name: str) -> RequestStatus:
        return RequestStatus(name, "ACCEPTED", Outcome(Phase.WAITING, None, ""), RequestTimings())

    monkeypatch.setattr(runtime_compute, "ComputeResizeRequestBackend", Backend)
    with DAG(dag_id="render_dag", schedule=None):
        make(failover=[Placement("us-central1-a", machine_type="a3-highgpu-4g")], capacity_retry=1)
        release = DeleteComputeFlexStartVMsOperator(
            task_id="release", setup_task_id="ask_for_vms", project_id="my-project"
        )
    result = release.execute({"ti": _ReleaseTI()})  # type: ignore[arg-type]
    assert len(searched) == 2 and len(result["released"]) == len(discarded) == 3
    assert built == [("my-project", "us-central1-a", "google_cloud_default", None)]


def test_one_rule_says_whose_vms_a_request_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker, the trigger and the release take a request's VMs by one rule, from its name: every
    VM of the MIG made for the task instance (of any machine type), else only those its MIG created
    since the request was (a MIG the DAG gives may hold other VMs)."""
    from datetime import datetime, timezone

    from airflow_provider_dws.backends import compute_groups as groups
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.compute import request_vms
    from airflow_provider_dws.scheduling.phases import Outcome, RequestTimings

    submitted = datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    before, after = "2026-12-01T09:00:00+00:00", "2026-12-01T10:05:00+00:00"
    from types import SimpleNamespace

    monkeypatch.setattr(
        groups, "managed_instances", lambda backend, mig: [SimpleNamespace(instance=i) for i in "ab"]
    )
    made = iter([])
    monkeypatch.setattr(groups, "get_instance", lambda backend, instance: next(made))
    monkeypatch.setattr(groups, "instance_summary", lambda instance: instance)

    def vms(mig: str) -> list[str]:
        nonlocal made
        made = iter(
            [{"name": "old", "creation_timestamp": before}, {"name": "new", "creation_timestamp": after}]
        )
        name = f"projects/p/zones/us-central1-a/instanceGroupManagers/{mig}/resizeRequests/{IDENTITY.resize_request_name()}"
        status = RequestStatus(name, "SUCCEEDED", Outcome(Phase.RUNNING), RequestTimings(submitted=submitted))
        return [vm["name"] for vm in request_vms(ComputeResizeRequestBackend("p", "us-central1-a"), status)]

    assert vms(IDENTITY.group_name()) == ["old", "new"]
    assert vms(IDENTITY.group_name("a3-highgpu-4g")) == ["old", "new"]  # a failover machine type's MIG
    assert vms("farm") == ["new"]  # the DAG's MIG: only what this request added
