"""The one module that knows which Airflow 3 it runs on, and what it gives the rest of the provider."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pendulum
import pytest
from airflow import __version__ as airflow_version
from airflow.timetables.base import DagRunInfo, DataInterval
from packaging.version import Version

from airflow_provider_dws import compat

PACKAGE_DIR = Path(compat.__file__).parent


def test_the_flags_follow_the_installed_airflows_base_version() -> None:
    base = Version(Version(airflow_version).base_version)
    assert (base.major, base.minor, base.micro) == compat.AIRFLOW_VERSION
    assert (base >= Version("3.2")) == compat.AIRFLOW_V_3_2_PLUS
    assert (base >= Version("3.3")) == compat.AIRFLOW_V_3_3_PLUS


@pytest.mark.parametrize("name", sorted(compat.MOVED))
def test_every_moved_name_resolves_on_this_airflow(name: str) -> None:
    value = getattr(compat, name)
    assert value is not None
    assert getattr(compat, name) is value  # kept after the first lookup


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        compat.no_such_name  # noqa: B018


def test_the_moved_exceptions_are_the_ones_the_task_runner_catches() -> None:
    # A DwsError must be an AirflowException of this Airflow; a fail must be its AirflowFailException.
    from airflow_provider_dws.exceptions import DwsError, RequestCancelledError

    assert issubclass(DwsError, compat.AirflowException)
    assert issubclass(RequestCancelledError, compat.AirflowFailException)


def test_a_run_info_carries_its_start_and_interval_on_this_airflow() -> None:
    start = pendulum.datetime(2026, 12, 6, 1, tz="UTC")
    interval = DataInterval(start, start.add(hours=4))
    info = compat.dag_run_info(start, interval)
    assert isinstance(info, DagRunInfo)
    assert (info.run_after, info.data_interval) == (start, interval)
    if "partition_key" in DagRunInfo._fields:
        assert info.partition_key is None


def test_no_other_module_reads_the_airflow_version() -> None:
    """Version differences live in compat alone: no other module reads ``airflow.__version__``."""
    offenders = []
    for path in PACKAGE_DIR.rglob("*.py"):
        if path.name == "compat.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "airflow":
                if any(alias.name == "__version__" for alias in node.names):
                    offenders.append(str(path.relative_to(PACKAGE_DIR)))
            if isinstance(node, ast.Attribute) and node.attr == "__version__":
                if isinstance(node.value, ast.Name) and node.value.id == "airflow":
                    offenders.append(str(path.relative_to(PACKAGE_DIR)))
    assert offenders == []


def test_importing_compat_loads_no_moved_module() -> None:
    """The flags cost nothing at parse: the moved names' modules load on first use only."""
    code = (
        "import sys, airflow.sdk; before = set(sys.modules)\n"
        "import airflow_provider_dws.compat\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('airflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout.strip()))
    assert loaded <= {"airflow_provider_dws", "airflow_provider_dws.compat"}
