"""The push of the console links a task's run makes, and the account of what it pushed.

Each surface builds its own link's URL in its adapter module (``runtime/<api>.py``), from
:data:`CONSOLE`, and pushes it with :func:`push_url`: a new surface adds nothing here. Loaded when a
task runs (``pre_execute`` calls :func:`track`) or when a link is asked for its URL, never at a DAG
file's parse: the link classes a DAG file's operators declare are in
:mod:`airflow_provider_dws.links`.

When a task ends, Airflow asks each of its extra links for its URL (``get_link``) and stores it again
for the UI. Asking the API server for an XCom that does not exist makes the task SDK's supervisor log
an error ("XCom not found") in the task's log, though a link not made yet (a task that failed before
its request existed, a release task) is no error. So this process keeps account of the links of the
task instance it runs (:func:`track`): a fresh try starts with its XComs deleted by Airflow, and the
links a try pushed before it deferred are kept in its task state store (:data:`LINKS_KEY`) for the
run that resumes it. ``get_link`` answers from that account (:func:`tracked_url`), and asks for the
XCom only where it has none (a caller outside the task's run).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

#: The Google Cloud console, the root of every link's URL (each adapter builds its own).
CONSOLE = "https://console.cloud.google.com"

#: Task state store key: ``{"try": N, "urls": {xcom key: url}}``, the links try N pushed so far.
LINKS_KEY = "dws_links"

log = logging.getLogger(__name__)

#: The links of each task instance this process runs, keyed by (dag, task, run, map index): the
#: URLs pushed in its current try, with the store that keeps them for a resumed run.
_TRACKED: dict[tuple[str, str, str, int], _Tracked] = {}


#: True while the run takes note of links its trigger already pushed (:func:`pushed_by_trigger`).
_PUSHED_BY_TRIGGER: ContextVar[bool] = ContextVar("dws_pushed_by_trigger", default=False)


@contextlib.contextmanager
def pushed_by_trigger() -> Iterator[None]:
    """Within it, :func:`push_url` only takes note of a URL: the trigger that made the request
    pushed its links already, and each write is a call to the API server."""
    token = _PUSHED_BY_TRIGGER.set(True)
    try:
        yield
    finally:
        _PUSHED_BY_TRIGGER.reset(token)


class _Tracked:
    """One task instance's links in its current try: those this run pushed or noted, and those
    earlier runs of the try kept in its task state store, read only when asked for (each read is a
    call to the API server, and a run whose trigger pushed its links never needs it)."""

    def __init__(self, store: Any, try_number: int) -> None:
        self.store = store
        self.try_number = try_number
        self.noted: dict[str, str] = {}
        self._kept: dict[str, str] | None = None

    def kept(self) -> dict[str, str] | None:
        """What earlier runs of this try pushed (``None``: the store could not be read)."""
        if self._kept is None and self.store is None:
            self._kept = {}  # tracked without a store: a try's first run, nothing pushed before it
        if self._kept is None:
            try:
                value = self.store.get(LINKS_KEY)
            except Exception:
                log.warning("Could not read the console links kept for this try", exc_info=True)
                return None
            urls = (
                value.get("urls") if isinstance(value, dict) and value.get("try") == self.try_number else None
            )
            # A try's first run: nothing kept. A resumed run: what the try pushed before deferring.
            self._kept = dict(urls) if isinstance(urls, dict) else {}
        return self._kept

    def url(self, key: str) -> str | None:
        """The URL pushed under ``key`` in this try (``""``: none; ``None``: unknown)."""
        if key in self.noted:
            return self.noted[key]
        kept = self.kept()
        return None if kept is None else kept.get(key, "")


def _ti_key(ti: Any) -> tuple[str, str, str, int] | None:
    """A task instance's (dag, task, run, map index); ``None`` for what does not name one."""
    dag_id, task_id, run_id = (getattr(ti, attr, None) for attr in ("dag_id", "task_id", "run_id"))
    if not (isinstance(dag_id, str) and isinstance(task_id, str) and isinstance(run_id, str)):
        return None
    map_index = getattr(ti, "map_index", -1)
    return (dag_id, task_id, run_id, map_index if isinstance(map_index, int) and map_index >= 0 else -1)


def _try_number(ti: Any) -> int | None:
    number = getattr(ti, "try_number", None)
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def track(context: Any) -> None:
    """Account for the link XComs of the task instance about to run (called before ``execute`` and
    before a resume): none on a fresh try (Airflow deleted its XComs when it began), or those the
    try pushed before it deferred, as its task state store keeps them (read when first needed).
    Without a store (Airflow 3.1, 3.2) only a try's first run is tracked; a resumed run's
    ``get_link`` reads the XCom."""
    ti, store = context.get("ti"), context.get("task_state_store")
    key, try_number = _ti_key(ti), _try_number(ti)
    if key is None:
        return
    _TRACKED.pop(key, None)
    if try_number is None or (store is None and not is_first_run(ti)):
        return
    # Without a store (Airflow 3.1, 3.2) a try's first run still knows what it pushed: nothing yet.
    _TRACKED[key] = _Tracked(store, try_number)


def is_first_run(ti: Any) -> bool:
    """Whether the task instance's run is its try's first, as the API server said when it started
    it (no method to resume); ``False`` when that is not known (a task instance of another kind)."""
    server_context = getattr(ti, "_ti_context_from_server", None)
    return server_context is not None and not getattr(server_context, "next_method", None)


def tracked_url(ti_key: Any, key: str) -> str | None:
    """The URL this process knows the task instance's run pushed under ``key`` (``""``: none was),
    or ``None`` when this process does not run that task instance (read its XCom)."""
    ti = _ti_key(ti_key)
    tracked = _TRACKED.get(ti) if ti is not None else None
    return None if tracked is None else tracked.url(key)


def push_url(context: Any, key: str, url: str) -> str:
    """Store ``url`` under the XCom ``key`` of a link for this task instance (and, for a run that
    resumes this try, in its task state store: :func:`track`); returns it. Under
    :func:`pushed_by_trigger`, only take note of it for this run's ``get_link``."""
    ti = context["ti"]
    pushed = _PUSHED_BY_TRIGGER.get()
    if not pushed:
        ti.xcom_push(key=key, value=url)
    ti_key = _ti_key(ti)
    tracked = _TRACKED.get(ti_key) if ti_key is not None else None
    if tracked is not None:
        tracked.noted[key] = url
        if pushed or tracked.store is None:
            return url
        try:
            urls = {**(tracked.kept() or {}), **tracked.noted}
            tracked.store.set(LINKS_KEY, {"try": tracked.try_number, "urls": urls})
        except Exception:
            log.warning("Could not keep the console link for a resumed run", exc_info=True)
    return url
