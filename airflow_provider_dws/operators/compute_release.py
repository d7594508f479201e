"""Give flex-start VMs back: delete the VMs a setup's resize request created, then the request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.links import ComputeFlexStartMIGLink
from airflow_provider_dws.operators.release import DwsSetupReleaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeleteComputeFlexStartVMsOperator(DwsSetupReleaseOperator):
    """Release flex-start VMs: delete the VMs its setup's resize request created, and only those
    (``deleteInstances`` on the MIG with the instance URLs of the setup's result), then the request.

    The request is derived from ``setup_task_id`` (the same run and map index): its name in the
    setup's XCom, and every request of the setup's task instance in every MIG it may have used
    (found by its name, as a retried setup finds it), so a request still waiting is cancelled and
    deleted too. Already gone is success. Meant as the setup's teardown::

        ask = CreateComputeFlexStartVMsOperator(task_id="ask_for_vms", ...)
        release = DeleteComputeFlexStartVMsOperator(task_id="release_vms", setup_task_id="ask_for_vms")
        ask >> work >> release.as_teardown(setups=ask)

    :param setup_task_id: the creating task, in the same DAG.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.

    The deletes run in the worker (a teardown is short): each waits for its operation.
    """

    operator_extra_links = (ComputeFlexStartMIGLink(),)
    ui_color = "#d2e3fc"

    def release(self, context: Context) -> dict[str, Any]:
        """Delete the setup's VMs, then its requests (:func:`~airflow_provider_dws.runtime.compute.release_vms`)."""
        from airflow_provider_dws.runtime.compute import release_vms

        return release_vms(self, context)
