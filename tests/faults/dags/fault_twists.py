"""What the fault-matrix DAGs add to an API's adapter (no DAGs here).

The DAG files import it by its bare name: Airflow puts the DAG bundle's folder on ``sys.path``
in the processes that parse and run them.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any


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
