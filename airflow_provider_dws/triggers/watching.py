"""The watch beside a shared poller's list, for a backend whose API streams changes (Kubernetes).

Polling hears a change at the next list: on average half an interval late (15 s at the default
30 s), and every waiting request costs its share of a list each interval. The Kubernetes API can
instead tell a client the moment something changes. For a backend that is a
:class:`~airflow_provider_dws.backends.base.Watcher`, the :class:`~.poller.SharedPoller` (one per
cluster, namespace and kind in the triggerer's event loop, shared by every wait there) keeps one
:class:`PollerWatch`:

* it starts after the poller's first good list, from that list's ``resourceVersion``, and is
  renewed from the last change it showed each time the server ends it (:data:`WATCH_SECONDS`);
* each change to a followed request is handed to its waits at once, as a listed status is;
  a deletion makes the poller list again now (its usual path then tells the waits how it ended);
* ``410 Gone`` (the version is too old to resume from): the poller lists again and the watch
  restarts from that list;
* any other failure (a watch refused, a connection that cannot be held): the poller polls at its
  interval, as without a watch, and tries the watch again every
  :data:`~.poller.LIST_RETRY_CYCLES` cycles (as it tries a refused list again);
* while the watch holds, the list runs only every :data:`RESYNC_SECONDS` (or the interval, if
  longer): a safety net, so a watch costs fewer API requests than polling, not more.

The waits keep their max wait, give-up and kill paths: those are the trigger's, not the poller's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from airflow_provider_dws.backends.base import Watcher

if TYPE_CHECKING:
    from airflow_provider_dws.triggers.poller import SharedPoller

log = logging.getLogger(__name__)

#: How long one watch call lasts before it is renewed (the API server ends a watch within 30 to
#: 60 minutes anyway; a shorter one also bounds how long a silently dead connection goes unnoticed).
WATCH_SECONDS = 300.0
#: While a watch holds, the list runs this often (or every interval, if longer).
RESYNC_SECONDS = 300.0
#: The code of a watch whose ``resourceVersion`` is too old to resume from.
GONE = 410


class PollerWatch:
    """The one watch of a :class:`~.poller.SharedPoller` whose backend is a ``Watcher``."""

    def __init__(self, poller: SharedPoller, retry_cycles: int) -> None:
        self.poller = poller
        self.retry_cycles = retry_cycles
        self._task: asyncio.Task[None] | None = None
        #: The watch is open and has not failed since: the list may then wait :data:`RESYNC_SECONDS`.
        self.holding = False
        #: The poller cycle at which a watch last failed other than by 410 (None: it has not).
        self._failed_at: int | None = None

    def delay(self, interval: float) -> float:
        """Seconds until the poller's next list: its interval, or the resync while the watch holds."""
        return max(interval, RESYNC_SECONDS) if self.holding else interval

    def ensure(self) -> None:
        """After a poller cycle: start the watch if it can start and is not running."""
        backend = self.poller.backend
        if not isinstance(backend, Watcher) or (self._task is not None and not self._task.done()):
            return
        cycles = self.poller.stats["cycles"]
        if self._failed_at is not None and cycles - self._failed_at < self.retry_cycles:
            return
        version = backend.list_version()
        if not version or not self.poller._subs:
            return
        self.holding = True
        self._task = asyncio.get_running_loop().create_task(
            self._run(backend, version), name=f"dws-watch {self.poller.key}"
        )

    def stop(self) -> None:
        """End the watch (the poller stopped)."""
        self.holding = False
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _run(self, backend: Watcher, version: str) -> None:
        poller = self.poller
        try:
            while poller._subs:
                poller.stats["watches"] += 1
                self.holding = True
                async for name, status in backend.awatch(version, WATCH_SECONDS):
                    poller.stats["watch_events"] += 1
                    if name not in poller._subs:
                        continue
                    if status is None:
                        poller._wake.set()  # deleted: the poller's list and read say how it ended
                    else:
                        poller.watched[name] = asyncio.get_running_loop().time()
                        await poller._hand_over([(name, status)])
                version = backend.watch_version() or version
                if self._failed_at is not None:
                    log.info("Watching %s works again", poller.key[1])
                    self._failed_at = None
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.holding = False
            if getattr(err, "code", None) == GONE:
                log.info("Watching %s must start again (%s); listing again", poller.key[1], err)
            else:
                if self._failed_at is None:
                    log.warning(
                        "Watching %s failed (%s: %s); polling every %.0fs and watching again every %d intervals",
                        poller.key[1],
                        type(err).__name__,
                        getattr(err, "message", err),
                        poller.interval(),
                        self.retry_cycles,
                    )
                self._failed_at = poller.stats["cycles"]
            poller._wake.set()
            return
        self.holding = False
