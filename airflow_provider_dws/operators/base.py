"""What every DWS operator shares: the common parameters and their checks, and the request operators'
policies and entry points.

This is the parse-time half: what runs when the task runs (the attempt loop and the per-API
adapter) lives in :mod:`airflow_provider_dws.runtime`, imported from ``execute``, so a DAG file's
parse loads only this module, :mod:`.checks`, :mod:`airflow_provider_dws.facts`, the links and the
operator's own module.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.configuration import conf
from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import BaseOperatorMeta

from airflow_provider_dws import facts, registry
from airflow_provider_dws.operators.checks import (
    Check,
    duration,
    flag,
    matches,
    non_empty_str,
    run_checks,
    str_len_in,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.runtime.adapter import RequestAdapter
    from airflow_provider_dws.runtime.loop import AttemptLoop
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement
    from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet

POLL_INTERVAL_MAX = 3600.0
#: Patterns, compiled by ``re``'s cache on first use (only for the parameters a DAG gives).
PROJECT_PATTERN = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
SERVICE_ACCOUNT_PATTERN = r"[^@\s]+@[^@\s]+\.[^@\s]+"


def _check_poll_interval(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise op._param_error(f"poll_interval must be a number of seconds, got {value!r}")
    if not 0 < value <= POLL_INTERVAL_MAX:
        raise op._param_error(
            f"poll_interval must be greater than 0 and at most {POLL_INTERVAL_MAX:.0f} seconds, got {value}"
        )


def _is_chain(chain: Any) -> bool:
    if isinstance(chain, str):
        return bool(chain)
    return isinstance(chain, (list, tuple)) and bool(chain) and all(isinstance(c, str) and c for c in chain)


def _labels_ok(labels: Any) -> bool:
    """Quick: a dict of valid label strings, none of the provider's ``dws_`` keys, room for identity."""
    return (
        type(labels) is dict
        and len(labels) <= facts.MAX_LABELS - facts.IDENTITY_LABELS
        and all(
            type(key) is str
            and type(value) is str
            and not key.startswith("dws_")
            and re.fullmatch(facts.LABEL_KEY_PATTERN, key) is not None
            and re.fullmatch(facts.LABEL_VALUE_PATTERN, value) is not None
            for key, value in labels.items()
        )
    )


#: Checks of what every DWS operator has (connection, project, identity to run as).
CONNECTION_CHECKS = (
    Check("gcp_conn_id", non_empty_str, "must be a non-empty connection id"),
    Check(
        "project_id",
        matches(PROJECT_PATTERN),
        "must be a Google Cloud project id (6-30 lowercase letters, digits and hyphens, starting "
        "with a letter)",
        templated=True,
        optional=True,
    ),
    Check(
        "impersonation_chain",
        _is_chain,
        "must be a service account email or a list of them",
        templated=True,
        optional=True,
    ),
)


def vertex_region_check(*, optional: bool = False) -> Check:
    """The check of a Vertex AI operator's ``region`` (templated; ``optional`` where a release may
    take it from its setup)."""
    return Check(
        "region",
        matches(facts.REGION_PATTERN),
        "must be a Vertex AI region such as 'us-central1'",
        templated=True,
        optional=optional,
    )


def display_name_check(name: str = "display_name") -> Check:
    """The check of a Vertex AI resource's optional display name (1 to 128 characters)."""
    return Check(
        name, str_len_in(1, 128), "must be a string of 1 to 128 characters", templated=True, optional=True
    )


#: Checks of what every operator that waits on a request has.
WAIT_CHECKS = (
    Check(
        "poll_interval",
        lambda v: type(v) in (int, float) and 0 < v <= POLL_INTERVAL_MAX,
        explain=_check_poll_interval,
    ),
    flag("deferrable"),
    flag("cancel_on_kill"),
    Check(
        "service_account",
        matches(SERVICE_ACCOUNT_PATTERN),
        "must be a service account email",
        templated=True,
        optional=True,
    ),
    Check(
        "labels",
        _labels_ok,
        templated=True,
        optional=True,
        explain=registry.CHECK_LABELS,
    ),
)


#: Checks more than one operator has.
ZONE_CHECK = Check(
    "zone", matches(facts.ZONE_PATTERN), "must be a Cloud TPU zone such as 'us-west4-a'", templated=True
)
QUEUED_RESOURCE_ID_CHECK = Check(
    "queued_resource_id",
    matches(facts.QUEUED_RESOURCE_ID_PATTERN),
    "must start with a lowercase letter, use only lowercase letters, digits and '-', not end with "
    "'-', and have at most 63 characters",
    templated=True,
    optional=True,
)


#: The start of the TypeError Airflow's ``BaseOperatorMeta`` raises for a required argument not given.
_MISSING = "missing keyword argument"


class DwsOperatorMeta(BaseOperatorMeta):
    """Airflow's operator metaclass, whose "missing keyword argument 'region'" names no operator nor
    task: each ``__init__`` it wraps says which operator and task lack which required argument."""

    @classmethod
    def _apply_defaults(cls, func: Any) -> Any:
        applied = super()._apply_defaults(func)

        @functools.wraps(applied)
        def init(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return applied(self, *args, **kwargs)
            except TypeError as err:
                text = str(err)
                if not text.startswith(_MISSING):
                    raise
                names = re.findall(r"'([^']+)'", text)
                what = "argument" if len(names) == 1 else "arguments"
                raise TypeError(
                    f"{type(self).__name__} {kwargs.get('task_id')!r}: missing required {what} "
                    + ", ".join(repr(name) for name in names)
                ) from None

        # Airflow finds the operator's own __init__ through __wrapped__ (it sets the task's
        # dependencies once, in the outermost one), so it must stay the function it wrapped.
        init.__wrapped__ = func  # type: ignore[attr-defined]
        return init


class DwsBaseOperator(BaseOperator, metaclass=DwsOperatorMeta):
    """Base of the DWS operators: common parameters, their checks and the request identity.

    Subclasses set their parameters as attributes, list their checks in :attr:`CHECKS` and call
    :meth:`check_parameters` (``rendered=False`` at the end of ``__init__``, ``rendered=True`` at
    the start of ``execute``).
    """

    project_id: str | None
    labels: Mapping[str, str] | None
    service_account: str | None
    impersonation_chain: Any
    gcp_conn_id: str
    poll_interval: float
    deferrable: bool
    cancel_on_kill: bool

    #: The parameter checks of the operator (see :mod:`airflow_provider_dws.operators.checks`).
    CHECKS: tuple[Check, ...] = ()
    #: What the task is to the other tasks of its DAG, for the ones that look it up (a release, a
    #: wait): one of :mod:`airflow_provider_dws.specs.roles`, or ``None``.
    ROLE: ClassVar[str | None] = None

    def _param_error(self, message: str) -> ValueError:
        """A parameter error naming the operator and the task (the caller raises it)."""
        return ValueError(f"{type(self).__name__} {self.task_id!r}: {message}")

    def check_parameters(self, *, rendered: bool) -> None:
        """Run :attr:`CHECKS`: all of them at parse time, the templated ones again after rendering."""
        run_checks(self, self.CHECKS, rendered=rendered)

    def pre_execute(self, context: Any) -> None:
        """Before ``execute`` and before a resume: account for this try's console-link XComs
        (:func:`airflow_provider_dws.console.track`), so the links Airflow stores when the task ends
        are known without reading an XCom that was never pushed (an error line in the task log)."""
        super().pre_execute(context)
        from airflow_provider_dws.console import track

        track(context)


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

    def adapter_entry(self) -> str | type[RequestAdapter[Any, Any]]:
        """The adapter this task runs on (:attr:`ADAPTER`; an operator whose parameters choose
        between two ways of waiting returns the one they ask for)."""
        return self.ADAPTER

    def adapter(self) -> RequestAdapter[Any, Any]:
        """This task run's adapter (built on first use, with its backends and clients)."""
        from airflow_provider_dws.runtime.loop import adapter_of

        return adapter_of(self)

    def attempt_loop(self) -> AttemptLoop:
        """This task run's attempt loop."""
        from airflow_provider_dws.runtime.loop import loop_of

        return loop_of(self)

    def builds_messages_here(self, rendered: bool) -> bool:
        """Whether the rendered-value checks also build the request's client messages: only where this
        worker submits the request itself and so loads the client anyway. A request its trigger makes
        is built (and refused, field named, as a ``BadRequestError``) there; loading the client only
        to check would cost a task process more than all the rest of its run (issue 36)."""
        return rendered and not self.attempt_loop().in_trigger()

    def prepare_for_execution_checks(self) -> None:
        """Normalize rendered values before the post-render checks (default: nothing)."""

    def execute(self, context: Context) -> Any:
        """Check the rendered parameters, then find or submit the request and wait for it."""
        self.prepare_for_execution_checks()
        self.check_parameters(rendered=True)
        return self.attempt_loop().run(context, fresh=True)

    def resume_attempt(self, context: Context, event: Any = None, **kwargs: Any) -> Any:
        """Back from a wait for the window (or a backoff): plan the attempt again."""
        return self.attempt_loop().resume(context, event, kwargs)

    def complete_attempt(self, context: Context, event: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """An attempt ended (or reached its target): succeed, or decide the next step."""
        return self.attempt_loop().complete(context, event, kwargs)

    def on_kill(self) -> None:
        """Cancel the request this worker holds (``cancel_on_kill``): submitted and not yet handed to
        a trigger, or waited on in the worker (``deferrable=False``). Airflow calls it when the
        worker is killed or its ``execution_timeout`` passes."""
        if "_dws_loop" in self.__dict__:
            self.attempt_loop().on_kill()


class DwsQueuedRequestOperator(DwsRequestOperator):
    """Base of the operators whose request waits in a DWS queue under the scheduling policies
    (Vertex AI, Cloud TPU, Cloud Batch, Compute Engine, GKE): the parameters they all take,
    declared and assigned here once. A subclass declares its own (its location, what it asks
    for) and ends its ``__init__`` with :meth:`check_policies`.

    :param project_id: Google Cloud project; defaults to the connection's project (templated).
    :param max_wait: how long the request may wait for capacity (``timedelta`` or seconds; default
        24 h, at most 7 days).
    :param labels: extra labels of the request (templated; the ``dws_*`` keys are the identity's).
    :param gcp_conn_id: Airflow connection for Google Cloud.
    :param impersonation_chain: service account (or chain) to impersonate (templated).
    :param poll_interval: seconds between status reads while waiting (default 30).
    :param deferrable: wait in the triggerer (``True``) or in the worker; the default is the
        deployment's ``[operators] default_deferrable`` (Airflow ships ``false``). Deferred, no
        worker slot is held while the request waits in the DWS queue.
    :param cancel_on_kill: cancel the request when the task is killed by a user (default ``True``).
    :param window: only let capacity arrive inside this off-peak window (``OffPeakWindow``,
        ``WindowSet`` or a spec such as ``"Mon-Fri 22:00-06:00 Asia/Seoul"``): outside it the task
        defers until it opens, and the max wait is cut at the window's close.
    :param deadline: nothing is submitted, and no wait extends, past it (``Deadline``, a
        ``timedelta`` after the data interval end, or an aware ``datetime``).
    :param capacity_retry: resubmit after capacity was not obtained (``CapacityRetry`` or a number
        of retries); each attempt is a new request (``-a<N>``).
    :param failover: other placements (a region or zone, optionally with another machine or
        accelerator type) to try, in order, after the home one comes back without capacity.
    """

    def __init__(
        self,
        *,
        project_id: str | None = None,
        max_wait: timedelta | int | float = facts.DEFAULT_MAX_WAIT,
        labels: Mapping[str, str] | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        cancel_on_kill: bool = True,
        window: OffPeakWindow | WindowSet | str | None = None,
        deadline: Deadline | timedelta | datetime | None = None,
        capacity_retry: CapacityRetry | int | None = None,
        failover: Failover | Sequence[str | Placement] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.project_id = project_id
        self.max_wait = duration(self, "max_wait", max_wait, facts.MAX_WAIT_LIMIT)
        self.labels = labels
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.window = self.deadline = self.capacity_retry = self.failover = None
        # Checked last (check_policies): a failover placement is checked against the subclass's
        # own parameters (its machine type, its location), set after this.
        self._given_policies = (window, deadline, capacity_retry, failover)

    def check_policies(self) -> None:
        """Accept the policies given to ``__init__`` (or their short forms) and check them; a
        subclass calls it at the end of its ``__init__``."""
        self.init_policies(*self._given_policies)
