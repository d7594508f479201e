"""The parse-time half of every capacity-requesting operator: its policies and its entry points.

What runs when the task runs (the attempt loop and the per-API adapter) lives in
:mod:`airflow_provider_dws.runtime`, imported from ``execute``: a DAG file's parse loads only
this module, the parameter checks and the operator's own module.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_dws.operators.base import DwsBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.runtime.adapter import RequestAdapter
    from airflow_provider_dws.runtime.loop import AttemptLoop
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet


class DwsRequestOperator(DwsBaseOperator):
    """Base of operators that obtain capacity through a DWS request, one attempt at a time.

    A subclass holds its parameters and their checks, names its API's
    :class:`~airflow_provider_dws.runtime.adapter.RequestAdapter` in :attr:`ADAPTER` and says
    where it asks first (:meth:`home_placement`); the shared
    :class:`~airflow_provider_dws.runtime.loop.AttemptLoop` runs the attempts with the scheduling
    policies: ``window``, ``deadline``, ``capacity_retry`` and ``failover``.
    """

    #: The operator's adapter: ``"module:Class"``, imported when the task runs (never at parse), or
    #: the class itself (a subclass in a DAG file that wraps an adapter step, as the fault tests do).
    ADAPTER: ClassVar[str | type[RequestAdapter[Any, Any]]] = ""

    max_wait: timedelta
    window: OffPeakWindow | WindowSet | None
    deadline: Deadline | None
    capacity_retry: CapacityRetry | None
    failover: Failover | None

    # -- policies ------------------------------------------------------------------------------

    def init_policies(
        self,
        window: OffPeakWindow | WindowSet | str | None,
        deadline: Deadline | timedelta | datetime | None,
        capacity_retry: CapacityRetry | int | None,
        failover: Failover | Sequence[str | Placement] | None,
    ) -> None:
        """Accept the policies (or their short forms) and check them at DAG-parse time."""
        self.window = self.deadline = self.capacity_retry = self.failover = None
        if window is None and deadline is None and capacity_retry is None and failover is None:
            return
        # The policy classes (and their checks) load only for a DAG file that gives a policy.
        from airflow_provider_dws.operators.policy_params import set_policies

        set_policies(self, window, deadline, capacity_retry, failover)

    def check_placement(self, placement: Placement) -> None:
        """Subclasses refuse placements their API cannot use (raise ``self._param_error(...)``)."""

    def home_placement(self) -> Placement:
        """Where the operator asks first (its region or zone)."""
        raise NotImplementedError

    def placements(self) -> list[Placement]:
        """The home placement, then the failover placements, in order."""
        return [self.home_placement(), *(self.failover.placements if self.failover else ())]

    # -- when the task runs --------------------------------------------------------------------

    def adapter(self) -> RequestAdapter[Any, Any]:
        """This task run's adapter (built on first use, with its backends and clients)."""
        adapter = self.__dict__.get("_dws_adapter")
        if adapter is None:
            cls = self.ADAPTER
            if isinstance(cls, str):
                module, _, name = cls.partition(":")
                cls = getattr(importlib.import_module(module), name)
            adapter = self.__dict__["_dws_adapter"] = cls(self)
        return adapter  # type: ignore[no-any-return]

    def attempt_loop(self) -> AttemptLoop:
        """This task run's attempt loop."""
        loop = self.__dict__.get("_dws_loop")
        if loop is None:
            from airflow_provider_dws.runtime.loop import AttemptLoop

            loop = self.__dict__["_dws_loop"] = AttemptLoop(self, self.adapter())
        return loop  # type: ignore[no-any-return]

    def prepare_for_execution_checks(self) -> None:
        """Normalize rendered values before the post-render checks (default: nothing)."""

    def execute(self, context: Context) -> Any:
        """Check the rendered parameters, then find or submit the request and wait for it."""
        self.prepare_for_execution_checks()
        self.check_parameters(rendered=True)
        return self.attempt_loop().run(context)

    def run_attempts(self, context: Context) -> Any:
        """The attempt loop from the start (adopt this task instance's request, or submit)."""
        return self.attempt_loop().run(context)

    def resume_attempt(self, context: Context, event: Any = None, **kwargs: Any) -> Any:
        """Back from a wait for the window (or a backoff): plan the attempt again."""
        return self.attempt_loop().resume(context, event, kwargs)

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """An attempt ended (or reached its target): succeed, or decide the next step."""
        return self.attempt_loop().complete(context, event, kwargs)

    #: Resume point of tasks deferred by earlier releases of the provider.
    execute_complete = complete_attempt

    def on_kill(self) -> None:
        """``deferrable=False`` only: cancel the request the worker waits on (``cancel_on_kill``)."""
        loop = self.__dict__.get("_dws_loop")
        if loop is not None:
            loop.on_kill()
