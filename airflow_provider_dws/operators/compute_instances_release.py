"""Give standalone flex-start VMs back: delete every VM of the sets a setup task made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.links import ComputeFlexStartInstancesLink
from airflow_provider_dws.operators.release import DwsSetupReleaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeleteComputeFlexStartInstancesOperator(DwsSetupReleaseOperator):
    """Release standalone flex-start VMs: delete every VM of the sets its setup made, waiting or
    running.

    The sets are derived from ``setup_task_id`` (the same run and map index): the one in the setup's
    XCom, and every set of the setup's task instance in every zone it may have used (found by the
    VMs' labels, as a retried setup finds them). Already gone is success. Meant as the setup's
    teardown::

        ask = CreateComputeFlexStartInstancesOperator(task_id="ask_for_vms", ...)
        release = DeleteComputeFlexStartInstancesOperator(task_id="release_vms", setup_task_id="ask_for_vms")
        ask >> work >> release.as_teardown(setups=ask)

    :param setup_task_id: the creating task, in the same DAG.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.
    """

    operator_extra_links = (ComputeFlexStartInstancesLink(),)
    ui_color = "#d2e3fc"

    def release(self, context: Context) -> dict[str, Any]:
        """Delete the setup's VMs (:func:`~airflow_provider_dws.runtime.compute_instances.release_instances`)."""
        from airflow_provider_dws.runtime.compute_instances import release_instances

        return release_instances(self, context)
