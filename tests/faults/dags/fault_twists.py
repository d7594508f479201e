"""What the fault-matrix DAGs add to an API's adapter (no DAGs here).

The DAG files import it by its bare name: Airflow puts the DAG bundle's folder on ``sys.path``
in the processes that parse and run them.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any, TypeVar

#: The examples' poll interval and max wait, as the harness sets them for every fault DAG.
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 2 * 3600)))

_Operator = TypeVar("_Operator", bound=type)


class KillAfterSubmit:
    """Adapter mixin: on try 1, SIGKILL the task process right after ``submit`` returned, before
    the task defers (no cleanup, no log flush); the retry must adopt the request."""

    log: Any
    #: The fault is in the worker's own submit: where the trigger makes the request, the worker
    #: makes it here instead (the path of deferrable=False and of adapters that submit themselves).
    submits_in_trigger = False

    def submit(self, context: Any, identity: Any, placement: Any, max_wait: timedelta) -> Any:
        status = super().submit(context, identity, placement, max_wait)  # type: ignore[misc]
        if context["ti"].try_number == 1:
            self.log.warning("FAULT: SIGKILL of this task process right after submitting %s", status.name)
            os.kill(os.getpid(), signal.SIGKILL)
        return status


def killed_after_submit(operator: _Operator, adapter: type, name: str, what: str) -> _Operator:
    """``operator`` (named ``name``) whose adapter, ``adapter`` with :class:`KillAfterSubmit`,
    SIGKILLs the task process on try 1 as soon as ``what`` exists."""
    killing = type(f"_{name}Adapter", (KillAfterSubmit, adapter), {})
    doc = f"On try 1, SIGKILL the task process as soon as {what} exists."
    return type(name, (operator,), {"ADAPTER": killing, "__doc__": doc})  # type: ignore[return-value]
