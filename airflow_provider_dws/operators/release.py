"""The teardown that gives back what a setup task got, shared by the release operators.

Apart from :mod:`.base` so that a DAG file with only request operators does not load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws.operators.base import CONNECTION_CHECKS, DwsBaseOperator
from airflow_provider_dws.operators.checks import Check, non_empty_str

if TYPE_CHECKING:
    from airflow.sdk import Context


class DwsSetupReleaseOperator(DwsBaseOperator):
    """A teardown that gives back what its setup task (``setup_task_id``, same run and map index)
    got; already gone is success. A subclass's :meth:`release` calls the runtime function that does
    it, imported there (when the task runs, never at parse).

    :param setup_task_id: the setup task, in the same DAG.
    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param gcp_conn_id: Airflow connection; :param impersonation_chain: account(s) to impersonate.
    """

    template_fields: Sequence[str] = ("project_id", "impersonation_chain")
    CHECKS = (*CONNECTION_CHECKS, Check("setup_task_id", non_empty_str, "must be a task id"))

    def __init__(
        self,
        *,
        setup_task_id: str,
        project_id: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.setup_task_id = setup_task_id
        self.project_id = project_id
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.check_parameters(rendered=False)

    #: The setup's role (:mod:`airflow_provider_dws.specs.roles`), and the parameters the release
    #: takes from the setup task when not given (:meth:`take_from_setup`).
    SETUP_ROLE: ClassVar[str | None] = None
    FROM_SETUP: ClassVar[tuple[str, ...]] = ()

    def take_from_setup(self, context: Context) -> None:
        """Each of :attr:`FROM_SETUP` not given: the setup task's value, rendered for this run (when
        the setup is a task of :attr:`SETUP_ROLE` in this DAG)."""
        from airflow_provider_dws.specs.roles import task_in_role
        from airflow_provider_dws.specs.templates import has_template

        setup = task_in_role(self, self.setup_task_id, self.SETUP_ROLE) if self.SETUP_ROLE else None
        if setup is None:
            return
        for name in self.FROM_SETUP:
            if getattr(self, name) is None:
                value = getattr(setup, name)
                setattr(self, name, setup.render_template(value, context) if has_template(value) else value)

    def execute(self, context: Context) -> Any:
        """Give the setup's request(s) back (:meth:`release`); already gone is success."""
        self.check_parameters(rendered=True)
        return self.release(context)

    def release(self, context: Context) -> Any:
        """Release what the setup got (what the task returns)."""
        raise NotImplementedError
