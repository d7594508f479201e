"""Give a Cloud TPU slice back: delete every queued resource its setup task submitted."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts
from airflow_provider_dws.links import TPUQueuedResourceLink
from airflow_provider_dws.operators.base import (
    CONNECTION_CHECKS,
    QUEUED_RESOURCE_ID_CHECK,
    ZONE_CHECK,
    DwsBaseOperator,
)
from airflow_provider_dws.operators.checks import Check, flag, non_empty_str

if TYPE_CHECKING:
    from airflow.sdk import Context


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
                and all(isinstance(z, str) and re.fullmatch(facts.ZONE_PATTERN, z) for z in zones)
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

    def execute(self, context: Context) -> dict[str, Any]:
        """Delete every submission of the setup, in every zone it may have used, and wait until gone."""
        from airflow_provider_dws.runtime.tpu import release_all

        self.check_parameters(rendered=True)
        return release_all(self, context)
