"""A test auth manager: Airflow's ``SimpleAuthManager`` whose users may be limited to some DAGs.

The simple auth manager has roles only (a viewer reads every DAG), so a test of "a user who may
read only DAG A sees only A" needs per-user DAG access. This subclass keeps everything of the simple
manager (users, passwords file, login, tokens, roles) and adds one rule: a user listed in the
environment variable ``DWS_TEST_DAG_ACCESS`` (JSON ``{"alice": ["dag_a"]}``) may reach only those
DAGs, with any method. ``get_authorized_dag_ids`` and ``filter_authorized_dag_ids`` follow from
``is_authorized_dag`` (the base class asks it per DAG), so listing and per-DAG checks agree.

Configured with ``[core] auth_manager = tests.airflow.dws_auth_manager.DagScopedAuthManager``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _access() -> dict[str, list[str]]:
    return dict(json.loads(os.environ.get("DWS_TEST_DAG_ACCESS", "{}")))


class DagScopedAuthManager(SimpleAuthManager):
    """SimpleAuthManager plus per-user DAG lists (see the module doc)."""

    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        allowed = _access().get(user.get_name())
        if allowed is not None:
            dag_id = details.id if details else None
            if dag_id is None or dag_id not in allowed:
                return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
