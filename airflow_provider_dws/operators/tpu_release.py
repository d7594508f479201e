"""Give a Cloud TPU slice back: delete every queued resource its setup task submitted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import catalog
from airflow_provider_dws.exceptions import BadRequestError
from airflow_provider_dws.links.tpu import TPUQueuedResourceLink
from airflow_provider_dws.operators.base import API_REFUSED, CONNECTION_CHECKS, DwsBaseOperator
from airflow_provider_dws.operators.checks import Check, flag, has_template, matches, non_empty_str
from airflow_provider_dws.scheduling.identity import QUEUED_RESOURCE_ID_RE, RequestIdentity, is_attempt_of

if TYPE_CHECKING:
    from types import ModuleType

    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend
    from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator


def _backends() -> ModuleType:
    """The TPU backend module, imported on first use: a DAG file's parse never loads the client."""
    from airflow_provider_dws.backends import tpu

    return tpu


def _zone_of(name: str) -> str:
    return str(_backends().parse_queued_resource_name(name)[1])


ZONE_CHECK = Check(
    "zone", matches(catalog.ZONE_RE), "must be a Cloud TPU zone such as 'us-west4-a'", templated=True
)
QUEUED_RESOURCE_ID_CHECK = Check(
    "queued_resource_id",
    matches(QUEUED_RESOURCE_ID_RE),
    "must start with a lowercase letter, use only lowercase letters, digits and '-', not end with "
    "'-', and have at most 63 characters",
    templated=True,
    optional=True,
)


class DeleteTPUQueuedResourceOperator(DwsBaseOperator):
    """Release a TPU slice: delete every queued resource (and nodes) of its setup and wait until gone.

    Every submission of a :class:`CreateTPUQueuedResourceOperator` is named ``<base>-t<try>-a<attempt>``,
    so one list per zone finds all of them, whichever try and capacity attempt made them and
    whichever failover zone they went to. Already gone is success. Meant as the setup's teardown::

        ask = CreateTPUQueuedResourceOperator(task_id="ask_for_tpu", ...)
        release = DeleteTPUQueuedResourceOperator(task_id="release_tpu", zone=..., setup_task_id="ask_for_tpu")
        ask >> work >> release.as_teardown(setups=ask)

    :param zone: Cloud TPU zone (templated).
    :param setup_task_id: the creating task, in the same DAG: its base id (custom or derived for the
        same run and map index) and its failover zones are read from it, so no XCom is needed
        (works even if that task's worker died before pushing anything).
    :param queued_resource_id: the setup's ``queued_resource_id`` instead (templated): every
        submission of it is released (and a queued resource of exactly that id, if any).
        Exactly one of the two.
    :param failover_zones: more zones to search (with ``queued_resource_id``: the setup's failover
        zones; with ``setup_task_id`` they are read from the setup).
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param force: also delete the nodes (default True; without it the API refuses while nodes exist).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate.

    The deletes run in the worker (a teardown is short): each waits until its queued resource is
    gone, at most 10 minutes.
    """

    template_fields: Sequence[str] = ("project_id", "zone", "queued_resource_id", "impersonation_chain")
    operator_extra_links = (TPUQueuedResourceLink(),)
    ui_color = "#fce8b2"
    CHECKS = (
        *CONNECTION_CHECKS,
        ZONE_CHECK,
        QUEUED_RESOURCE_ID_CHECK,
        Check("setup_task_id", non_empty_str, "must be a task id", optional=True),
        Check(
            "failover_zones",
            lambda zones: (
                not isinstance(zones, str)
                and isinstance(zones, Sequence)
                and all(isinstance(z, str) and catalog.ZONE_RE.fullmatch(z) for z in zones)
            ),
            "must be a list of Cloud TPU zones such as 'us-west4-a'",
        ),
        flag("force"),
    )

    def __init__(
        self,
        *,
        zone: str,
        setup_task_id: str | None = None,
        queued_resource_id: str | None = None,
        failover_zones: Sequence[str] = (),
        project_id: str | None = None,
        force: bool = True,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zone = zone
        self.setup_task_id = setup_task_id
        self.queued_resource_id = queued_resource_id
        self.failover_zones = failover_zones
        self.project_id = project_id
        self.force = force
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        if (setup_task_id is None) == (queued_resource_id is None):
            raise self._param_error("pass exactly one of setup_task_id and queued_resource_id")
        self.check_parameters(rendered=False)

    def _setup(self) -> CreateTPUQueuedResourceOperator | None:
        from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator

        dag = getattr(self, "dag", None) if self.has_dag() else None
        if dag is None or not self.setup_task_id or not dag.has_task(self.setup_task_id):
            return None
        task = dag.get_task(self.setup_task_id)
        return task if isinstance(task, CreateTPUQueuedResourceOperator) else None

    def _targets(self, context: Context) -> tuple[RequestIdentity | None, str | None, list[str], list[str]]:
        """Whose submissions to release (the setup's identity, or a base id), where, and names
        released whatever they are."""
        zones = [self.zone, *self.failover_zones]
        if self.queued_resource_id:
            return None, self.queued_resource_id, zones, []
        setup = self._setup()
        if setup is not None:
            home = setup.render_template(setup.zone, context) if has_template(setup.zone) else setup.zone
            zones += [str(home), *(p.location for p in (setup.failover.placements if setup.failover else ()))]
        else:
            self.log.warning(
                "Task %r is not a CreateTPUQueuedResourceOperator of this DAG: searching %s only",
                self.setup_task_id,
                ", ".join(zones),
            )
        exact: list[str] = []
        # The setup pushes the name of the submission it waits on; it may be in any zone.
        pushed = context["ti"].xcom_pull(task_ids=self.setup_task_id, key="queued_resource_name")
        if isinstance(pushed, str) and pushed:
            exact.append(pushed)
            zones.append(_zone_of(pushed))
        return self.identity(context, task_id=self.setup_task_id), None, zones, exact

    def execute(self, context: Context) -> dict[str, Any]:
        """Delete every submission of the setup, in every zone it may have used, and wait until gone."""
        self.check_parameters(rendered=True)
        identity, base, zones, exact = self._targets(context)
        project = self.resolve_project()
        released: list[str] = []
        states: list[str] = []
        for zone in dict.fromkeys(zones):
            backend = _backends().TpuQueuedResourceBackend(
                project, zone, self.gcp_conn_id, self.impersonation_chain
            )
            if identity is not None:
                # Every submission of the setup's task instance carries its identity label.
                found = backend.find(identity)
            else:
                assert base is not None
                found = [
                    status
                    for status in backend.find_by_prefix(base)
                    if status.name == backend.name_of(base)
                    or is_attempt_of(status.name.rsplit("/", 1)[-1], base)
                ]
            names = {status.name for status in found}
            for name in exact:
                if name not in names and name.startswith(backend.parent + "/"):
                    status = backend.get_status(name)
                    found += [status] if status is not None else []
            for status in found:
                released.append(self._release(context, backend, status))
                states.append(status.state)
        if not released:
            self.log.info(
                "No queued resource of %s in %s (never created, or already released): nothing to do",
                f"task {self.setup_task_id!r}" if identity is not None else repr(base),
                ", ".join(dict.fromkeys(zones)),
            )
        return {
            "queued_resource": released[0] if released else None,
            "released": released,
            "deleted": bool(released),
            "state_before": states[0] if states else None,
        }

    def _release(self, context: Context, backend: TpuQueuedResourceBackend, status: RequestStatus) -> str:
        name = status.name
        TPUQueuedResourceLink.persist(context, backend.project_id, backend.zone, name.rsplit("/", 1)[-1])
        self.log.info("Releasing %s (%s)%s", name, status.state, " with its nodes" if self.force else "")
        try:
            backend.delete(name, force=self.force)
        except API_REFUSED as err:
            raise BadRequestError(f"Cloud TPU refused to delete {name}: {err.message}") from None
        self.log.info("%s is gone; the slice is no longer billed", name)
        return name
