"""CreateBatchFlexStartJobOperator: parse-time checks, the Job built, and what the adapter returns."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote

import pytest
from google.cloud.batch_v1 import AllocationPolicy, Job, JobStatus, StatusEvent

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.batch import BatchJobBackend, job_status
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.runtime.batch import (
    BatchFlexStartAdapter,
    batch_job_console_url,
    batch_job_logs_url,
)
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers.capacity_request import WAIT_DEADLINE_GRACE

IDENTITY = RequestIdentity("batch_dag", "infer", "manual__2026-03-01")
FLEX = AllocationPolicy.ProvisioningModel.FLEX_START
GPUS = "['nvidia-a100-80gb', 'nvidia-b200', 'nvidia-h100-80gb', 'nvidia-h100-mega-80gb'"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def make(**kwargs: Any) -> CreateBatchFlexStartJobOperator:
    args: dict[str, Any] = {
        "task_id": "infer",
        "project_id": "my-project",
        "region": "us-central1",
        "image_uri": "us-docker.pkg.dev/my-project/infer/batch:1",
        "machine_type": "g2-standard-8",
    }
    args.update(kwargs)
    return CreateBatchFlexStartJobOperator(**args)


JOB = {
    "task_groups": [{"task_count": 4, "task_spec": {"runnables": [{"script": {"text": "nvidia-smi"}}]}}],
    "allocation_policy": {
        "instances": [{"policy": {"machine_type": "a3-highgpu-8g"}, "install_gpu_drivers": True}]
    },
    "labels": {"owner": "ml"},
}


# -- parse time --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"script": "python infer.py", "image_uri": None},
        {"machine_type": "g2-standard-8", "accelerator_type": "nvidia-l4", "accelerator_count": 1},
        {"machine_type": "a3-highgpu-8g"},
        {"machine_type": "n1-standard-8", "accelerator_type": "nvidia-tesla-t4", "accelerator_count": 2},
        {"task_count": 16, "parallelism": 4, "commands": ["--shard", "$BATCH_TASK_INDEX"]},
        {"environment": {"DWS_EMULATOR_RUN_SECONDS": "30"}, "labels": {"team": "ml"}, "max_run": 3600},
        {"image_uri": None, "machine_type": None, "job": JOB},
        {"region": "{{ params.region }}", "image_uri": "{{ params.image }}"},
        {
            "failover": ["us-east4", Placement("europe-west4", machine_type="g2-standard-4")],
            "capacity_retry": 2,
        },
    ],
)
def test_good_parameters_parse(kwargs: dict[str, Any]) -> None:
    make(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image_uri": None}, "pass exactly one of job, image_uri"),
        ({"script": "echo"}, "pass exactly one of job, image_uri"),
        (
            {"job": JOB},
            "pass either job or the job's parameters, not both: got job and ['image_uri', 'machine_type']",
        ),
        ({"machine_type": None}, "machine_type is required: Flex Start schedules GPU VMs"),
        (
            {"region": "us-central"},
            "region must be a Cloud Batch region such as 'us-central1', got 'us-central'",
        ),
        (
            {"accelerator_type": "NVIDIA_L4"},
            "accelerator_type must be a GPU Flex Start offers to Cloud Batch, one of " + GPUS,
        ),
        ({"accelerator_type": "nvidia-tesla-k80"}, "got 'nvidia-tesla-k80'"),
        (
            {"machine_type": "g2-standard-8", "accelerator_type": "nvidia-h100-80gb"},
            "machine_type 'g2-standard-8' comes with exactly 1 x nvidia-l4: set accelerator_type='nvidia-l4' and "
            "accelerator_count=1",
        ),
        (
            {"machine_type": "a3-highgpu-8g", "accelerator_count": 4},
            "comes with exactly 8 x nvidia-h100-80gb",
        ),
        (
            {"machine_type": "g2-standard-5"},
            "'g2-standard-5' is not a g2-standard machine type; use one of ['g2-standard-12'",
        ),
        ({"machine_type": "n1-standard-8"}, "'n1-standard-8' has no GPUs of its own"),
        ({"task_count": 0}, "task_count must be an integer from 1 to 10000, got 0"),
        ({"task_count": 4, "parallelism": 8}, "parallelism (8) cannot exceed task_count (4)"),
        (
            {"accelerator_count": 17, "machine_type": "n1-standard-8"},
            "accelerator_count must be an integer from 1 to 16",
        ),
        (
            {"environment": {"1BAD": "x"}},
            "environment must be a dict of environment variable names to strings",
        ),
        (
            {"script": "echo", "image_uri": None, "commands": ["x"]},
            "commands and entrypoint go with image_uri",
        ),
        ({"labels": {"dws_key": "x"}}, "are reserved"),
        ({"labels": {f"k{i}": "v" for i in range(56)}}, "labels can have at most 55 entries on a Batch job"),
        ({"max_wait": timedelta(days=8)}, "max_wait must be greater than 0 and at most 7 days"),
        ({"max_run": timedelta(days=8)}, "max_run must be greater than 0 and at most 7 days"),
        (
            {"failover": ["us-east4-a"], "capacity_retry": 1},
            "failover location 'us-east4-a' is not a Cloud Batch region such as 'us-east4'",
        ),
        (
            {
                "failover": [
                    Placement("us-east4", machine_type="a3-highgpu-8g", accelerator_type="nvidia-l4")
                ],
                "capacity_retry": 1,
            },
            "comes with exactly 8 x nvidia-h100-80gb",
        ),
        (
            {"failover": [Placement("us-east4", accelerator_type="nvidia-l4")], "capacity_retry": 1},
            "an accelerator_type needs its machine_type too",
        ),
        (
            {"failover": [Placement("us-east4", tier="spot")], "capacity_retry": 1},
            "Flex Start Batch jobs have no tier",
        ),
    ],
)
def test_bad_parameters_fail_at_parse_time_saying_what_is_allowed(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        make(**kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("CreateBatchFlexStartJobOperator 'infer': ")


def job_args(job: Any) -> dict[str, Any]:
    return {"job": job, "image_uri": None, "machine_type": None}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"provisioning_model": "SPOT"},
            "job.allocation_policy.instances[0].policy.provisioning_model is set by the operator to FLEX_START; "
            "remove it (or set FLEX_START), got 'SPOT'",
        ),
        ({"provisioning_model": "RESERVATION_BOUND"}, "got 'RESERVATION_BOUND'"),
        ({"machine_type": "a3-highgpu-3g"}, "'a3-highgpu-3g' is not a a3-highgpu machine type"),
        ({"accelerators": [{"type_": "nvidia-l4", "count": 1}]}, "comes with exactly 8 x nvidia-h100-80gb"),
    ],
)
def test_a_whole_job_is_checked_at_parse_time(change: dict[str, Any], message: str) -> None:
    policy = {"machine_type": "a3-highgpu-8g", **change}
    job = {**JOB, "allocation_policy": {"instances": [{"policy": policy}]}}
    with pytest.raises(ValueError) as info:
        make(**job_args(job))
    assert message in str(info.value)


def test_a_job_with_an_instance_template_or_flexibility_is_refused() -> None:
    template = {**JOB, "allocation_policy": {"instances": [{"instance_template": "projects/p/global/t"}]}}
    with pytest.raises(ValueError, match=r"instances\[0\].instance_template cannot be used"):
        make(**job_args(template))
    flexible = {
        **JOB,
        "allocation_policy": {
            "instances": [{"policy": {"machine_type": "g2-standard-4"}, "instance_flexibility": {}}]
        },
    }
    with pytest.raises(
        ValueError, match=r"has field\(s\) \['instance_flexibility'\] a Flex Start job cannot use"
    ):
        make(**job_args(flexible))
    with pytest.raises(ValueError, match="must hold an instance policy with the machine_type"):
        make(**job_args({"task_groups": JOB["task_groups"]}))
    # Cloud Batch takes one instance policy and one task group (batch_v1.Job's own docs).
    two_policies = {**JOB, "allocation_policy": {"instances": [JOB["allocation_policy"]["instances"][0]] * 2}}
    with pytest.raises(ValueError, match="instances must hold one instance policy, got 2"):
        make(**job_args(two_policies))
    with pytest.raises(ValueError, match="task_groups must hold exactly one task group"):
        make(**job_args({**JOB, "task_groups": JOB["task_groups"] * 2}))
    with pytest.raises(
        ValueError, match=r"task_groups\[0\].task_spec.max_run_duration \('60s'\) and max_run are both set"
    ):
        make(
            max_run=60,
            **job_args(
                {**JOB, "task_groups": [{"task_spec": {"runnables": [{}], "max_run_duration": "60s"}}]}
            ),
        )


def test_a_job_message_is_accepted_like_a_dict() -> None:
    make(**job_args(Job(JOB)))
    bad = Job(JOB)
    bad.allocation_policy.instances[0].policy.provisioning_model = AllocationPolicy.ProvisioningModel.STANDARD
    with pytest.raises(ValueError, match="got 'STANDARD'"):
        make(**job_args(bad))


# -- the Job built -------------------------------------------------------------------------------------


def test_the_job_from_parameters_is_flex_start_with_its_shape_labels_and_environment() -> None:
    op = make(
        commands=["--shard", "$BATCH_TASK_INDEX"],
        task_count=16,
        parallelism=4,
        environment={"MODEL": "llama"},
        labels={"team": "ml"},
        max_run=timedelta(hours=2),
        max_wait=timedelta(hours=3),
        service_account="runner@my-project.iam.gserviceaccount.com",
        subnetwork="projects/my-project/regions/us-central1/subnetworks/gpu",
    )
    job = op.adapter().build(IDENTITY)
    (group,) = job.task_groups
    assert (group.task_count, group.parallelism) == (16, 4)
    (runnable,) = group.task_spec.runnables
    assert runnable.container.image_uri == "us-docker.pkg.dev/my-project/infer/batch:1"
    assert list(runnable.container.commands) == ["--shard", "$BATCH_TASK_INDEX"]
    assert dict(group.task_spec.environment.variables) == {"MODEL": "llama"}
    assert group.task_spec.max_run_duration == timedelta(hours=2)
    (instance,) = job.allocation_policy.instances
    assert instance.policy.provisioning_model == FLEX
    assert instance.policy.machine_type == "g2-standard-8" and instance.install_gpu_drivers
    assert [(a.type_, a.count) for a in instance.policy.accelerators] == [("nvidia-l4", 1)]
    assert job.allocation_policy.service_account.email == "runner@my-project.iam.gserviceaccount.com"
    assert job.allocation_policy.network.network_interfaces[0].subnetwork.endswith("/subnetworks/gpu")
    assert job.logs_policy.destination == job.logs_policy.Destination.CLOUD_LOGGING
    assert dict(job.labels) == {"team": "ml", **IDENTITY.labels(), "dws_max_wait": "10800"}


def test_a_whole_job_gets_flex_start_on_every_instance_policy_and_keeps_its_own_labels() -> None:
    job = (
        make(**job_args(JOB), labels={"team": "ml"}).adapter().build(IDENTITY, max_wait=timedelta(minutes=30))
    )
    assert [i.policy.provisioning_model for i in job.allocation_policy.instances] == [FLEX]
    assert job.labels["owner"] == "ml" and job.labels["team"] == "ml"
    assert job.labels["dws_max_wait"] == "1800" and job.labels["dws_key"] == IDENTITY.key
    assert job.task_groups[0].task_count == 4


def test_a_failover_placement_swaps_the_machine_and_its_gpus() -> None:
    op = make(machine_type="n1-standard-8", accelerator_type="nvidia-tesla-t4", accelerator_count=2)
    policy = (
        op.adapter()
        .build(IDENTITY, Placement("us-east4", machine_type="a2-highgpu-1g"))
        .allocation_policy.instances[0]
        .policy
    )
    assert (policy.machine_type, [(a.type_, a.count) for a in policy.accelerators]) == (
        "a2-highgpu-1g",
        [("nvidia-tesla-a100", 1)],
    )
    assert policy.provisioning_model == FLEX
    same = (
        op.adapter()
        .build(IDENTITY, Placement("us-east4", machine_type="n1-standard-16"))
        .allocation_policy.instances[0]
        .policy
    )
    assert [(a.type_, a.count) for a in same.accelerators] == [("nvidia-tesla-t4", 2)]


# -- the adapter ---------------------------------------------------------------------------------------


class Backend(BatchJobBackend):
    """The real backend over a stored job (no client): what the adapter reads back."""

    def __init__(self, stored: Job | None) -> None:
        super().__init__("my-project", "us-central1")
        self.stored = stored

    def get(self, name: str) -> Job | None:
        return self.stored


def adapter_with(stored: Job | None) -> BatchFlexStartAdapter:
    adapter = BatchFlexStartAdapter(make())
    adapter.backend = lambda location=None: Backend(stored)  # type: ignore[method-assign]
    return adapter


def ended_job(state: Any, counts: dict[str, int]) -> Job:
    name = f"projects/my-project/locations/us-central1/jobs/{IDENTITY.batch_job_id()}"
    events = [
        StatusEvent(
            description="Job state is set from SCHEDULED to RUNNING", event_time=T0 + timedelta(minutes=10)
        ),
        StatusEvent(
            description=f"Job state is set from RUNNING to {state.name}",
            event_time=T0 + timedelta(minutes=70),
        ),
    ]
    return Job(
        name=name,
        uid="dws-infer-0001",
        labels=IDENTITY.labels(),
        create_time=T0,
        update_time=T0 + timedelta(minutes=70),
        task_groups=[
            {"task_count": 16, "parallelism": 4, "task_spec": {"runnables": [{"script": {"text": "x"}}]}}
        ],
        allocation_policy={"instances": [{"policy": {"machine_type": "g2-standard-4"}}]},
        status=JobStatus(state=state, status_events=events, task_groups={"group0": {"counts": counts}}),
    )


def test_the_result_is_the_job_summary_with_task_counts_and_timings() -> None:
    job = ended_job(JobStatus.State.SUCCEEDED, {"SUCCEEDED": 16})
    result = adapter_with(job).result({}, job_status(job))  # type: ignore[arg-type]
    assert result["state"] == "SUCCEEDED" and result["task_counts"] == {"SUCCEEDED": 16}
    assert (result["task_count"], result["parallelism"]) == (16, 4)
    assert (result["wait_seconds"], result["run_seconds"]) == (600, 3600)
    assert result["job_id"] == IDENTITY.batch_job_id() and result["uid"] == "dws-infer-0001"
    assert result["region"] == "us-central1" and result["project_id"] == "my-project"
    assert result["description"] == "16 tasks on g2-standard-4 (1 x nvidia-l4 each) in us-central1"
    assert result["timings"]["started"] == (T0 + timedelta(minutes=10)).isoformat()
    assert result["labels"]["dws_key"] == IDENTITY.key


def status_of(failure: FailureKind | None, phase: Phase, message: str = "m") -> RequestStatus:
    return RequestStatus(
        name=f"projects/my-project/locations/us-central1/jobs/{IDENTITY.batch_job_id()}",
        state="FAILED",
        outcome=Outcome(phase, failure, message),
        timings=RequestTimings(T0),
        description="16 tasks on g2-standard-4 (1 x nvidia-l4 each) in us-central1",
    )


def test_each_end_is_its_own_exception() -> None:
    failed = ended_job(JobStatus.State.FAILED, {"SUCCEEDED": 14, "FAILED": 2})
    adapter = adapter_with(failed)
    home, wait = Placement("us-central1"), timedelta(hours=2)
    error = adapter.error(status_of(FailureKind.CAPACITY_NOT_OBTAINED, Phase.NOT_OBTAINED), home, wait)
    assert isinstance(error, CapacityNotObtainedError)
    assert (
        "no capacity within max wait 2:00:00 in us-central1 for 16 tasks on g2-standard-4 (1 x nvidia-l4 each)"
        in str(error)
    )
    error = adapter.error(status_of(FailureKind.WORKLOAD_FAILED, Phase.FAILED, "exit code 3"), home, wait)
    assert isinstance(error, WorkloadFailedError) and "workload failed: 2 of 16 tasks failed" in str(error)
    assert isinstance(
        adapter.error(status_of(FailureKind.BAD_REQUEST, Phase.FAILED), home, wait), BadRequestError
    )
    assert isinstance(
        adapter.error(status_of(FailureKind.CANCELLED, Phase.CANCELLED), home, wait), RequestCancelledError
    )


def test_the_provider_cancels_at_max_wait_itself() -> None:
    # Batch has no max wait: the trigger gives up at the max wait itself, with no grace.
    adapter = adapter_with(None)
    deadline = adapter.wait_deadline(status_of(None, Phase.WAITING), timedelta(hours=2))
    assert deadline == T0 + timedelta(hours=2)
    assert adapter.wait_grace == timedelta(0) != WAIT_DEADLINE_GRACE


def test_the_links_point_at_the_job_and_its_task_logs() -> None:
    assert batch_job_console_url("my-project", "us-central1", "dws-infer-1") == (
        "https://console.cloud.google.com/batch/jobsDetail/regions/us-central1/jobs/dws-infer-1/details"
        "?project=my-project"
    )
    url = batch_job_logs_url("my-project", "dws-infer-0001")
    assert url.startswith("https://console.cloud.google.com/logs/query;query=") and url.endswith(
        "?project=my-project"
    )
    assert unquote(url.split("query=", 1)[1].split("?", 1)[0]) == (
        'logName="projects/my-project/logs/batch_task_logs" AND labels.job_uid="dws-infer-0001"'
    )


# -- quick checks against their explanations ------------------------------------------------------


class Op:
    _rendered = False
    max_run = None

    def __init__(self, machine: Any = None, accelerator: Any = None, count: Any = None) -> None:
        self.machine_type, self.accelerator_type, self.accelerator_count = machine, accelerator, count

    def _param_error(self, message: str) -> ValueError:
        return ValueError(message)


def explained_ok(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except ValueError:
        return False
    return True


def test_the_quick_gpu_check_accepts_only_what_its_explanation_accepts() -> None:
    from airflow_provider_dws import facts
    from airflow_provider_dws.specs.batch_job import check_gpus

    machines = [*facts.GPU_MACHINE_ROWS, "n1-standard-8", "g2-standard-5", "a3-highgpu-3g"]
    accelerators = [None, *facts.COMPUTE_GPU_NAMES, "NVIDIA_L4"]
    tried = accepted = 0
    for machine in machines:
        for accelerator in accelerators:
            for count in (None, 1, 2, 8):
                tried += 1
                if facts.batch_gpu_matches(machine, accelerator, count):
                    accepted += 1
                    assert explained_ok(check_gpus, Op(machine, accelerator, count)), (
                        machine,
                        accelerator,
                        count,
                    )
    assert tried > 1000 and accepted > len(facts.GPU_MACHINE_ROWS)  # each machine alone, and spelt out


def test_the_quick_labels_check_accepts_only_what_its_explanation_accepts() -> None:
    from airflow_provider_dws.operators.batch import _batch_labels_ok
    from airflow_provider_dws.specs.batch_job import check_batch_labels

    for size in (0, 1, 54, 55, 56, 57):
        labels = {f"k{i}": "v" for i in range(size)}
        quick = _batch_labels_ok(labels)
        assert quick == explained_ok(check_batch_labels, Op(), labels, lambda _: False), size
        assert quick == (size <= 55)


def test_the_operator_is_in_the_provider_info_with_its_links() -> None:
    from airflow_provider_dws.get_provider_info import get_provider_info

    info = get_provider_info()
    assert "airflow_provider_dws.operators.batch" in info["operators"][0]["python-modules"]
    assert "airflow_provider_dws.hooks.batch" in info["hooks"][0]["python-modules"]
    assert {
        "airflow_provider_dws.links.BatchFlexStartJobLink",
        "airflow_provider_dws.links.BatchJobLogsLink",
    } <= set(info["extra-links"])
    assert [link.name for link in CreateBatchFlexStartJobOperator.operator_extra_links] == [
        "Batch Flex Start Job",
        "Batch Job Logs",
    ]
