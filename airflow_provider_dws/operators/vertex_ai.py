"""Run a Vertex AI custom job on GPUs obtained through Dynamic Workload Scheduler Flex Start."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_dws import catalog
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    RequestCancelledError,
    WorkloadFailedError,
)
from airflow_provider_dws.links.vertex_ai import VertexAIFlexStartJobLink
from airflow_provider_dws.operators.base import CONNECTION_CHECKS, WAIT_CHECKS
from airflow_provider_dws.operators.checks import Check, matches, str_len_in
from airflow_provider_dws.operators.request import DwsRequestOperator
from airflow_provider_dws.operators.vertex_pools import (
    FLEX_START_ACCELERATORS,
    WORKER_POOL_FIELDS,
    as_dict,
    check_custom_job,
    check_pools,
    normalize_pool,
)
from airflow_provider_dws.scheduling.budget import (
    DEFAULT_MAX_RUN,
    DEFAULT_MAX_WAIT,
    WaitBudget,
)
from airflow_provider_dws.scheduling.identity import (
    RequestIdentity,
)

__all__ = [
    "FLEX_START_ACCELERATORS",
    "WORKER_POOL_FIELDS",
    "CreateVertexAIFlexStartJobOperator",
    "FlexStartCustomJobOperator",
]

if TYPE_CHECKING:
    from types import ModuleType

    from airflow.sdk import Context
    from google.cloud.aiplatform_v1 import CustomJob, WorkerPoolSpec

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.vertex_ai import VertexCustomJobBackend
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet
    from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger


def _backends() -> ModuleType:
    """The Vertex AI backend module, imported on first use: a DAG file's parse never loads the client."""
    from airflow_provider_dws.backends import vertex_ai

    return vertex_ai


_NETWORK_RE = re.compile(r"^projects/[^/\s]+/global/networks/[^/\s]+$")
_GCS_URI_RE = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?$")
_EXIT_CODE_RE = re.compile(r"non-zero status of (-?\d+)")


class CreateVertexAIFlexStartJobOperator(DwsRequestOperator):
    """Run a Vertex AI custom job when DWS Flex Start obtains its GPUs, without holding a worker slot.

    The job is submitted with ``scheduling.strategy = FLEX_START``: it waits in the Dynamic
    Workload Scheduler queue (at most ``max_wait``) until its whole set of machines is free, then
    runs (at most ``max_run``), and is billed only while it runs. The task defers while the job
    waits and runs. A retried or re-run task reattaches to its live job (found by identity labels)
    instead of submitting a second one, and a job that already succeeded is taken as the result.

    On success the task returns the ``CustomJob`` as a dict and pushes ``wait_seconds``,
    ``run_seconds`` and ``dws_request`` (name, state, timings) to XCom. On failure it raises
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` (no capacity within max wait),
    :class:`~airflow_provider_dws.exceptions.WorkloadFailedError` (the job ran and failed),
    :class:`~airflow_provider_dws.exceptions.BadRequestError` (refused; not retried) or
    :class:`~airflow_provider_dws.exceptions.RequestCancelledError`.

    :param project_id: Google Cloud project; defaults to the connection's project.
    :param region: Vertex AI region, e.g. ``us-central1``.
    :param display_name: job display name; defaults to ``<dag_id>.<task_id>``.
    :param worker_pool_specs: list of ``WorkerPoolSpec`` dicts or messages (all pools must share
        one machine spec, a Flex Start rule). Exactly one of this and ``custom_job``.
    :param custom_job: a whole ``CustomJob`` (dict or message); its ``scheduling`` must not set
        strategy, max wait or timeout (use ``max_wait``/``max_run``).
    :param max_wait: how long the job may wait for capacity (``timedelta`` or seconds; default
        24 h, the API's default; at most 7 days).
    :param max_run: how long the job may run once started (default and maximum 7 days).
    :param labels: extra labels for the job (the ``dws_*`` keys are reserved for identity).
    :param service_account: service account the job runs as.
    :param network: VPC network ``projects/<number>/global/networks/<name>``.
    :param base_output_directory: ``gs://`` prefix for the job's outputs.
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate.
    :param poll_interval: seconds between status reads while waiting (default 30).
    :param deferrable: wait in the triggerer (``True``) or in the worker. The default is the
        deployment's ``[operators] default_deferrable``, as for every Airflow provider; Airflow
        ships it as ``false``, so pass ``deferrable=True`` (or set it) to keep worker slots free
        while the request waits in the DWS queue.
    :param cancel_on_kill: cancel the job when the task is killed by a user (default ``True``).
    :param window: only let capacity arrive inside this off-peak window (``OffPeakWindow``,
        ``WindowSet`` or a spec such as ``"Mon-Fri 22:00-06:00 Asia/Seoul"``): outside it the task
        defers until it opens, and the max wait is cut at the window's close.
    :param deadline: nothing is submitted, and no wait extends, past it (``Deadline``, a
        ``timedelta`` after the data interval end, or an aware ``datetime``).
    :param capacity_retry: resubmit after capacity was not obtained (``CapacityRetry`` or a number
        of retries).
    :param failover: other regions (or placements with another machine/accelerator type) to try,
        in order, after the home region comes back without capacity.
    """

    template_fields: Sequence[str] = (
        "project_id",
        "region",
        "display_name",
        "worker_pool_specs",
        "custom_job",
        "labels",
        "service_account",
        "network",
        "base_output_directory",
        "impersonation_chain",
    )
    template_fields_renderers = {"worker_pool_specs": "json", "custom_job": "json", "labels": "json"}
    operator_extra_links = (VertexAIFlexStartJobLink(),)
    ui_color = "#c5e1f5"
    CHECKS = (
        *CONNECTION_CHECKS,
        *WAIT_CHECKS,
        Check(
            "region",
            matches(catalog.REGION_RE),
            "must be a Vertex AI region such as 'us-central1'",
            templated=True,
        ),
        Check(
            "display_name",
            str_len_in(1, 128),
            "must be a string of 1 to 128 characters",
            templated=True,
            optional=True,
        ),
        Check(
            "network",
            matches(_NETWORK_RE),
            "must look like 'projects/<project number>/global/networks/<name>'",
            templated=True,
            optional=True,
        ),
        Check(
            "base_output_directory",
            matches(_GCS_URI_RE),
            "must be a Cloud Storage URI 'gs://bucket/path'",
            templated=True,
            optional=True,
        ),
        Check(
            "worker_pool_specs",
            templated=True,
            optional=True,
            validate=lambda op, pools, unrendered: check_pools(op, pools, "worker_pool_specs", unrendered),
        ),
        Check(
            "custom_job",
            templated=True,
            optional=True,
            validate=check_custom_job,
        ),
    )
    _rendered = False

    def __init__(
        self,
        *,
        region: str,
        project_id: str | None = None,
        display_name: str | None = None,
        worker_pool_specs: Sequence[Mapping[str, Any] | WorkerPoolSpec] | None = None,
        custom_job: Mapping[str, Any] | CustomJob | None = None,
        max_wait: timedelta | int | float = DEFAULT_MAX_WAIT,
        max_run: timedelta | int | float = DEFAULT_MAX_RUN,
        labels: Mapping[str, str] | None = None,
        service_account: str | None = None,
        network: str | None = None,
        base_output_directory: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        window: OffPeakWindow | WindowSet | str | None = None,
        deadline: Deadline | timedelta | datetime | None = None,
        capacity_retry: CapacityRetry | int | None = None,
        failover: Failover | Sequence[str | Placement] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.project_id = project_id
        self.region = region
        self.display_name = display_name
        self.worker_pool_specs = worker_pool_specs
        self.custom_job = custom_job
        self.budget = self._budget(max_wait, max_run)
        self.max_wait = self.budget.max_wait
        self.max_run = self.budget.max_run
        self.labels = labels
        self.service_account = service_account
        self.network = network
        self.base_output_directory = base_output_directory
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        if (self.worker_pool_specs is None) == (self.custom_job is None):
            raise self._param_error("pass exactly one of worker_pool_specs and custom_job")
        self.check_parameters(rendered=False)
        self.init_policies(window, deadline, capacity_retry, failover)

    # -- validation ----------------------------------------------------------------------------

    def _budget(self, max_wait: Any, max_run: Any) -> WaitBudget:
        try:
            return WaitBudget(max_wait=max_wait, max_run=max_run)
        except (TypeError, ValueError, OverflowError) as err:
            raise self._param_error(str(err)) from None

    def check_parameters(self, *, rendered: bool) -> None:
        """Run :attr:`CHECKS`; after rendering, the worker pools are also built as messages."""
        self._rendered = rendered
        super().check_parameters(rendered=rendered)

    # -- building the request ------------------------------------------------------------------

    def build_custom_job(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> CustomJob:
        """The ``CustomJob`` to submit: the user's spec plus Flex Start scheduling and identity labels.

        A failover ``placement`` may swap the machine and accelerator type of every pool;
        ``max_wait`` is the effective wait decided by the scheduling core (default: ``max_wait``).
        """
        from google.cloud.aiplatform_v1 import (
            AcceleratorType,
            CustomJob,
            CustomJobSpec,
            Scheduling,
            WorkerPoolSpec,
        )

        if self.custom_job is not None:
            job = CustomJob(as_dict(self.custom_job, "custom_job"))
        else:
            pools = [WorkerPoolSpec(as_dict(p, "worker_pool_specs")) for p in self.worker_pool_specs or []]
            job = CustomJob(job_spec=CustomJobSpec(worker_pool_specs=pools))
        job.display_name = self.display_name or job.display_name or identity.display_name()
        spec = job.job_spec
        spec.scheduling = Scheduling(
            strategy=Scheduling.Strategy.FLEX_START,
            max_wait_duration=max_wait or self.max_wait,
            timeout=self.max_run,
            restart_job_on_worker_restart=spec.scheduling.restart_job_on_worker_restart,
            disable_retries=spec.scheduling.disable_retries,
        )
        if self.service_account:
            spec.service_account = self.service_account
        if self.network:
            spec.network = self.network
        if self.base_output_directory:
            spec.base_output_directory.output_uri_prefix = self.base_output_directory
        if placement is not None:
            machine = catalog.GPU_MACHINES.get(placement.machine_type or "")
            for pool in spec.worker_pool_specs:
                if placement.machine_type:
                    pool.machine_spec.machine_type = placement.machine_type
                if machine is not None and pool.machine_spec.accelerator_count:
                    # Another machine type comes with its own number of GPUs.
                    pool.machine_spec.accelerator_count = machine.accelerator_count
                if placement.accelerator_type:
                    pool.machine_spec.accelerator_type = AcceleratorType.__members__[
                        placement.accelerator_type
                    ]
        labels = dict(job.labels)
        labels.update(self.labels or {})
        labels.update(identity.labels())
        job.labels = labels
        return job

    # -- execution: the steps of the attempt loop ------------------------------------------------

    def _backend(self, region: str | None = None) -> VertexCustomJobBackend:
        from airflow_provider_dws.backends.base import BackendCache

        cache: BackendCache = self.__dict__.setdefault("_dws_backends", BackendCache())
        return cache.get(
            _backends().VertexCustomJobBackend,
            self.resolve_project(),
            region or self.region,
            self.gcp_conn_id,
            self.impersonation_chain,
        )

    def check_placement(self, placement: Placement) -> None:
        """Failover placements must be Vertex AI regions with Flex Start accelerators and no tier."""
        if not catalog.REGION_RE.fullmatch(placement.location):
            raise self._param_error(
                f"failover location {placement.location!r} is not a Vertex AI region such as 'us-east4'"
            )
        if placement.tier is not None:
            raise self._param_error(f"failover placement {placement}: Flex Start custom jobs have no tier")
        if placement.machine_type and not placement.accelerator_type:
            raise self._param_error(
                f"failover placement {placement}: a machine_type needs its accelerator_type too "
                "(the machine and the GPU must match)"
            )
        if placement.accelerator_type and placement.accelerator_type not in FLEX_START_ACCELERATORS:
            raise self._param_error(
                f"failover placement {placement}: accelerator_type must be one of {sorted(FLEX_START_ACCELERATORS)}"
            )
        if placement.accelerator_type and not placement.machine_type:
            raise self._param_error(
                f"failover placement {placement}: an accelerator_type needs its machine_type too (GPU "
                f"machine types come with a fixed GPU), one of {catalog.machines_for(placement.accelerator_type)}"
            )
        if placement.machine_type:
            machine = catalog.GPU_MACHINES.get(placement.machine_type)
            error = catalog.gpu_machine_error(
                placement.machine_type,
                placement.accelerator_type,
                machine.accelerator_count if machine else 0,
            )
            if error:
                raise self._param_error(f"failover placement {placement}: {error}")

    def home_placement(self) -> Placement:
        """The operator's own region."""
        from airflow_provider_dws.scheduling.policies import Placement

        return Placement(location=self.region)

    def find_existing(
        self, context: Context, identity: RequestIdentity
    ) -> tuple[RequestStatus, Placement, int] | None:
        """Any live or succeeded job of this task instance, in any region it may have used."""
        from airflow_provider_dws.scheduling.policies import Placement

        regions: dict[str, Placement] = {}
        for placement in self.placements():
            regions.setdefault(placement.location, placement)
        jobs: dict[str, RequestStatus] = {}
        for region in regions:
            jobs.update({job.name: job for job in self._backend(region).find(identity)})
        from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing

        candidates = [Candidate(name, job.phase, job.timings.submitted) for name, job in jobs.items()]
        decision = choose_existing(candidates)
        self.log.info("Identity %s: %s", identity.key, decision.reason)
        if decision.name is None:
            return None
        job = jobs[decision.name]
        region, _ = _backends().parse_job_name(job.name)
        attempt = int(job.details.get("attempt") or 1)
        self._remember(context, job)
        return job, regions.get(region, Placement(location=region)), attempt

    def _remember(self, context: Context, job: RequestStatus) -> None:
        region, job_id = _backends().parse_job_name(job.name)
        context["ti"].xcom_push(key="job_name", value=job.name)
        url = VertexAIFlexStartJobLink.persist(context, self.resolve_project(), region, job_id)
        self.log.info("Console: %s", url)

    def submit_attempt(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create the job of this attempt in the placement's region (or adopt the one a lost reply made)."""
        backend = self._backend(placement.location)
        try:
            job, created = backend.submit(self.build_custom_job(identity, placement, max_wait), identity)
        except PermissionDeniedApiError as err:
            raise BadRequestError(f"permission denied creating the job: {err.message}") from None
        except InvalidRequestError as err:
            raise BadRequestError(f"Vertex AI refused the job: {err.message}") from None
        self.log.info(
            "%s Flex Start job %s (attempt %d, %s); it may wait up to %s for capacity and run up to %s",
            "Submitted" if created else "Adopted",
            job.name,
            identity.attempt,
            job.description,
            max_wait,
            self.max_run,
        )
        self._remember(context, job)
        return job

    def make_trigger(
        self,
        status: RequestStatus,
        placement: Placement,
        max_wait: timedelta,
        echo: dict[str, Any],
        task_deadline: datetime | None = None,
    ) -> CapacityRequestTrigger:
        """Wait on the job until it ends."""
        from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger

        backend = self._backend(placement.location)
        submitted = status.timings.submitted or datetime.now(timezone.utc)
        return CapacityRequestTrigger(
            kind=backend.kind,
            backend_spec=backend.spec(),
            request_name=status.name,
            poll_interval=float(self.poll_interval),
            wait_deadline=(submitted + max_wait).isoformat(),
            cancel_on_kill=self.cancel_on_kill,
            echo=echo,
            task_deadline=task_deadline.isoformat() if task_deadline else None,
        )

    def cancel_request(self, name: str) -> None:
        """Cancel the job (it ends CANCELLED; an ended one is left as it is)."""
        region, _ = _backends().parse_job_name(name)
        self._backend(region).release(name)

    def execute(self, context: Context) -> Any:
        """Find or submit the job, then wait for it (deferred by default)."""
        if self.worker_pool_specs is not None:
            self.worker_pool_specs = [normalize_pool(p) for p in self.worker_pool_specs]
        self.check_parameters(rendered=True)
        return self.run_attempts(context)

    def complete_attempt(
        self, context: Context, event: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Record the job's wait and run times, then let the attempt loop decide."""
        if not event:
            return super().complete_attempt(context, event, *args, **kwargs)
        from airflow_provider_dws.backends.base import RequestStatus

        status = RequestStatus.from_event(event)
        wait_s, run_s = status.timings.wait_seconds, status.timings.run_seconds
        ti = context["ti"]
        ti.xcom_push(key="wait_seconds", value=wait_s)
        ti.xcom_push(key="run_seconds", value=run_s)
        self.log.info(
            "Job %s ended %s [%s]: waited %s for capacity, ran %s",
            status.name,
            status.phase.value.upper(),
            status.state,
            timedelta(seconds=round(wait_s or 0)),
            timedelta(seconds=round(run_s or 0)),
        )
        return super().complete_attempt(context, event, *args, **kwargs)

    #: Resume point of tasks deferred by earlier releases of the provider.
    execute_complete = complete_attempt

    def finish_success(self, context: Context, status: RequestStatus) -> Any:
        """The succeeded ``CustomJob`` as a dict."""
        from google.cloud.aiplatform_v1 import CustomJob

        region, _ = _backends().parse_job_name(status.name)
        job = self._backend(region).get(status.name)
        return dict(CustomJob.to_dict(job, use_integers_for_enums=False, preserving_proto_field_name=True))

    def error_for(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without success."""
        message = status.outcome.message
        region = status.details.get("region") or placement.location
        from airflow_provider_dws.scheduling.phases import FailureKind

        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            what = status.description.rsplit(" in ", 1)[0] if status.description else "the requested GPUs"
            return CapacityNotObtainedError(
                f"no capacity within max wait {max_wait} in {region} for {what} "
                f"(job {status.name}{': ' + message if message else ''})"
            )
        if status.outcome.failure is FailureKind.WORKLOAD_FAILED:
            match = _EXIT_CODE_RE.search(message)
            reason = f"exit code {match.group(1)}" if match else (message or status.state)
            return WorkloadFailedError(f"workload failed: {reason} (job {status.name}: {message})")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"Vertex AI refused the job {status.name}: {message}")
        return RequestCancelledError(
            f"job {status.name} was cancelled before it finished{': ' + message if message else ''}"
        )


class FlexStartCustomJobOperator(CreateVertexAIFlexStartJobOperator):
    """Deprecated: the earlier name of :class:`CreateVertexAIFlexStartJobOperator` (same parameters)."""

    def __init__(self, **kwargs: Any) -> None:
        warnings.warn(
            "FlexStartCustomJobOperator is renamed CreateVertexAIFlexStartJobOperator; the old name will be removed",
            AirflowProviderDeprecationWarning,
            stacklevel=2,
        )
        super().__init__(**kwargs)
