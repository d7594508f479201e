"""What differs between the Airflow 3 releases the provider supports (3.1 to 3.3), in one module.

The rest of the provider asks the flags below and imports the moved names from here; no other
module reads ``airflow.__version__`` or picks an import path by version. The flags follow the
providers' convention (``AIRFLOW_V_3_X_PLUS`` from the installed Airflow's base version, so a
``3.2.0rc1`` counts as 3.2); the moved names come from apache-airflow-providers-common-compat,
which knows every path each name has had. The README's compatibility table says what each
version lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowTaskTimeout,
    )
    from airflow.sdk.observability.stats import Stats
    from airflow.timetables.base import DagRunInfo, DataInterval
    from pendulum import DateTime

#: The names whose module moved within 3.x, re-exported from where this Airflow keeps them (the
#: type checker sees them above): ``airflow.exceptions`` before the task SDK took them in 3.2,
#: ``airflow.stats`` before ``airflow.sdk.observability`` (3.2).
__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowTaskTimeout",
    "BaseHook",
    "Stats",
]


def _base_version() -> tuple[int, int, int]:
    from airflow import __version__
    from packaging.version import Version

    version = Version(__version__)
    return version.major, version.minor, version.micro


AIRFLOW_VERSION: tuple[int, int, int] = _base_version()
#: 3.2: ``DagRunInfo`` has partition fields, which a timetable must fill.
AIRFLOW_V_3_2_PLUS: bool = AIRFLOW_VERSION >= (3, 2, 0)
#: 3.3: the triggerer calls ``BaseTrigger.on_kill`` for a task a user stops, and a task's context
#: carries ``task_state_store``. Before it, the trigger's ``cleanup`` sees a kill
#: (:mod:`airflow_provider_dws.triggers.on_kill`) and a next try finds an earlier try's request by
#: its identity labels alone (:mod:`airflow_provider_dws.runtime.recording`).
AIRFLOW_V_3_3_PLUS: bool = AIRFLOW_VERSION >= (3, 3, 0)
#: Whether the triggerer calls ``BaseTrigger.on_kill`` for a trigger a user stopped (3.3). Before,
#: it only cancels the trigger and awaits its ``cleanup``, whatever the reason it stops it.
TRIGGERER_CALLS_ON_KILL: bool = AIRFLOW_V_3_3_PLUS
#: Whether a task's read of an Airflow Variable that does not exist logs an error line in its log
#: (3.1's task SDK, 1.1.x; 1.2 logs it at debug, apache/airflow#61625). On 3.1 a task therefore
#: reads no Variable that may be absent: the price and carbon tables come from their config
#: sections there, and the wait history is off unless ``[dws] wait_history`` turns it on.
MISSING_VARIABLE_LOGS_ERROR: bool = not AIRFLOW_V_3_2_PLUS

MOVED = frozenset(__all__)


def __getattr__(name: str) -> Any:
    """A moved name, from where this Airflow keeps it, imported on first use (never at parse)."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from airflow.providers.common.compat import sdk

    value = getattr(sdk, name)
    globals()[name] = value
    return value


def dag_run_info(run_after: DateTime, data_interval: DataInterval) -> DagRunInfo:
    """A timetable's next run, with the partition fields 3.2 requires left empty (3.1 has none)."""
    from airflow.timetables.base import DagRunInfo

    if AIRFLOW_V_3_2_PLUS:
        return DagRunInfo(
            run_after=run_after, data_interval=data_interval, partition_date=None, partition_key=None
        )
    return DagRunInfo(run_after=run_after, data_interval=data_interval)
