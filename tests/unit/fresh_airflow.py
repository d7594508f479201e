"""A table loader of the provider (the price table, the carbon table) run as a deployment runs it:
in a fresh interpreter, against a real Airflow with its config file, environment and metadata
database. A test module gives its config file and a ``--flag`` that makes it print its scenarios'
results as JSON when run as a script; it reads them back with :func:`scenarios_in_fresh_airflow`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[2]


def variable_model() -> Any:
    """Airflow's ``Variable`` with its table made in the fresh home's database (and the team
    table it names from Airflow 3.1, a foreign key to its own table)."""
    from airflow import settings
    from airflow.models.base import Base
    from airflow.models.variable import Variable

    teams = [Base.metadata.tables["team"]] if "team" in Base.metadata.tables else []
    Base.metadata.create_all(settings.engine, tables=[*teams, Variable.__table__])
    return Variable


@contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process for the block's length."""
    os.environ.update(env)
    try:
        yield
    finally:
        for key in env:
            del os.environ[key]


def scenarios_in_fresh_airflow(
    tmp_path_factory: pytest.TempPathFactory, probe: Probe, *, config_file: str, script: str, flag: str
) -> dict[str, dict[str, Any]]:
    """Run ``script`` with ``flag`` in a fresh Airflow home whose ``airflow.cfg`` is
    ``config_file`` (no ``AIRFLOW__*`` or ``AIRFLOW_VAR_*`` of this process leaks in), and read
    back the JSON it prints last."""
    home = tmp_path_factory.mktemp("airflow_home")
    (home / "airflow.cfg").write_text(config_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_VAR_"))}
    env.pop("_AIRFLOW_PROCESS_CONTEXT", None)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW_CONFIG=str(home / "airflow.cfg"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    done = probe.run(path=script, args=[flag], cwd=ROOT, env=env)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return result
