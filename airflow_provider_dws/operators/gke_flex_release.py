"""Give back the flex-start nodes of a Job handed over to later tasks: delete the Job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.links import GKEFlexStartJobLink
from airflow_provider_dws.operators.gke_release import GKESetupReleaseOperator
from airflow_provider_dws.specs import roles

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeleteGKEFlexStartJobOperator(GKESetupReleaseOperator):
    """Release the flex-start nodes a Job handed over holds: delete every Job its setup made that
    is still waiting or running, any try and attempt (one list by the setup task instance's
    ``dws_key`` label), with its pods (background propagation), logging the nodes each ran on; the
    cluster autoscaler then removes the emptied nodes. A Job that ended is left as Kubernetes leaves
    it (its pods' logs). Already gone is success. Meant as the teardown of a
    ``CreateGKEFlexStartJobOperator(wait_until_finished=False)``::

        serve = CreateGKEFlexStartJobOperator(task_id="serve", wait_until_finished=False, ...)
        release = DeleteGKEFlexStartJobOperator(task_id="release_serve", setup_task_id="serve")
        serve >> evaluate >> release.as_teardown(setups=serve)

    The parameters are :class:`~airflow_provider_dws.operators.gke_release.GKESetupReleaseOperator`'s.
    """

    SETUP_ROLE = roles.GKE_FLEX_START_JOB
    SETUP_KIND = "CreateGKEFlexStartJobOperator"
    operator_extra_links = (GKEFlexStartJobLink(),)
    ui_color = "#d2e3fc"

    def release(self, context: Context) -> dict[str, Any]:
        """Delete the setup's live Jobs (:func:`~airflow_provider_dws.runtime.gke_flex.release_flex_jobs`)."""
        from airflow_provider_dws.runtime.gke_flex import release_flex_jobs

        return release_flex_jobs(self, context)
