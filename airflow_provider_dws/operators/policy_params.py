"""The scheduling policies of a request operator, accepted in their short forms and checked.

Loaded at parse time only by a DAG file that gives ``window``, ``deadline``, ``capacity_retry`` or
``failover``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def set_policies(op: Any, window: Any, deadline: Any, capacity_retry: Any, failover: Any) -> None:
    """Set ``op.window``, ``op.deadline``, ``op.capacity_retry`` and ``op.failover``, or raise
    ``op._param_error`` saying what is wrong."""
    from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, Failover, Placement

    window_types: tuple[type, ...] = ()
    if window is not None:
        # The window classes (and their cron parser) load only for a DAG that gives a window.
        from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet, parse_window

        window_types = (OffPeakWindow, WindowSet)
    try:
        if isinstance(window, str):
            window = parse_window(window)
        if isinstance(deadline, timedelta):
            deadline = Deadline(after_data_interval_end=deadline)
        elif isinstance(deadline, datetime):
            deadline = Deadline(at=deadline)
        if isinstance(capacity_retry, int) and not isinstance(capacity_retry, bool):
            if capacity_retry < 0:
                raise ValueError(f"capacity_retry must be a number of retries >= 0, got {capacity_retry}")
            capacity_retry = CapacityRetry(attempts=capacity_retry + 1)
        if failover is not None and not isinstance(failover, Failover):
            if isinstance(failover, (str, Placement)):
                failover = [failover]
            failover = Failover(placements=tuple(failover))
    except (TypeError, ValueError) as err:
        raise op._param_error(str(err)) from None
    for name, value, types in (
        ("window", window, window_types),
        ("deadline", deadline, (Deadline,)),
        ("capacity_retry", capacity_retry, (CapacityRetry,)),
        ("failover", failover, (Failover,)),
    ):
        if value is not None and not isinstance(value, types):
            allowed = " or ".join(t.__name__ for t in types)
            article = "an" if allowed[0] in "AEIOU" else "a"
            raise op._param_error(f"{name} must be {article} {allowed} (or None), got {type(value).__name__}")
    op.window = window
    op.deadline = deadline
    op.capacity_retry = capacity_retry
    op.failover = failover
    if op.failover is not None:
        for placement in op.failover.placements:
            op.check_placement(placement)
        if op.failover.advised and not getattr(op, "ADVISED", False):
            raise op._param_error(
                f"failover={op.failover}: capacity advice is Compute Engine's; {type(op).__name__} has none "
                "(pass the placements as a list to try them in order)"
            )
        if op.failover.order == "written" and (op.capacity_retry is None or op.capacity_retry.retries < 1):
            # Failover happens on a retry: without one the placements would never be tried. Said in
            # retries, as the short form counts (capacity_retry=N is CapacityRetry(attempts=N + 1)).
            places = len(op.failover.placements)
            got = "no capacity_retry" if op.capacity_retry is None else "capacity_retry with 0 retries"
            raise op._param_error(
                f"failover ({op.failover}) is tried only on capacity retries, so it needs at least 1 "
                f"retry: pass capacity_retry={places} (retries; CapacityRetry(attempts={places + 1}) counts "
                f"the first submission too) to try each failover placement once, got {got}"
            )
