"""Watch streams and followed pod logs: newline-delimited chunks produced as the store changes.

A stream is a plain iterator run by the REST front in a worker thread, one ``next`` at a time.
It takes the core's lock only to read (and tick), never while it waits: it waits on the store's
:attr:`~.store.KubeStore.changed` condition in short slices, so it also notices the end of its
``timeoutSeconds``, the server stopping and time-driven changes (the emulator's ticker).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ..core.api import Core
from . import kueue_versions
from .store import Event, Kind, KubeError, KubeStore


class ClusterHooks(Protocol):
    """What the routes call on the cluster (:class:`~.cluster.Cluster`)."""

    def admit(
        self, operation: str, kind: Kind, namespace: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None: ...

    def pod_log(self, namespace: str, name: str, container: str | None) -> str: ...

    def serves(self, kind: Kind, version: str) -> bool: ...


class KubeApi(Protocol):
    """What the routes and streams use of :class:`~.state.KubeState` (a protocol: the state
    imports the routes, so they do not import it back)."""

    @property
    def core(self) -> Core: ...

    @property
    def store(self) -> KubeStore: ...

    @property
    def cluster(self) -> ClusterHooks: ...


#: The longest one wait lasts before the stream looks at its deadline and the server again.
SLICE = 0.25
#: A watch without ``timeoutSeconds`` ends after this long (the API server picks 30 to 60 min).
DEFAULT_TIMEOUT = 1800.0
TERMINAL_PHASES = ("Succeeded", "Failed")


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def gone(revision: int, oldest: int) -> KubeError:
    """410 Expired: the resourceVersion asked for is older than the history kept."""
    return KubeError(410, "Expired", f"too old resource version: {revision} ({oldest})")


def _wait(api: KubeApi, seen: int, deadline: float, stopping: threading.Event) -> bool:
    """Wait a slice for a change after ``seen``; False once the deadline passed or the server stops."""
    store = api.store
    if stopping.is_set() or time.monotonic() >= deadline:
        return False
    with store.changed:
        store.changed.wait_for(
            lambda: store.changes != seen, timeout=max(0.0, min(SLICE, deadline - time.monotonic()))
        )
    return not stopping.is_set()


def watch_stream(
    api: KubeApi,
    kind: Kind,
    version: str,
    namespace: str | None,
    match: Callable[[dict[str, Any]], bool],
    resource_version: str,
    timeout: float | None,
    stopping: threading.Event,
) -> Iterator[bytes]:
    """Events of ``kind`` (in ``namespace``, or all) that ``match``, as the API server streams them.

    No ``resource_version`` (or ``"0"``): an ``ADDED`` for each object first, then the changes.
    Else the changes after it, or one ``ERROR`` event with a 410 Status if they are no longer
    kept. An object that stops matching (its labels changed) is sent as ``DELETED``, one that
    starts matching as ``ADDED``, as the API server's watch filter does.
    """
    store = api.store
    deadline = time.monotonic() + (timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT)

    def shown(obj: dict[str, Any]) -> dict[str, Any]:
        return kueue_versions.shown(kind, obj, version)

    def key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata", {})
        return meta.get("namespace", ""), meta.get("name", "")

    inside: set[tuple[str, str]] = set()
    resumed = resource_version not in ("", "0")
    with api.core.lock:
        api.core.tick()
        seen = store.changes
        if resumed:
            try:
                last = int(resource_version)
            except ValueError:
                raise KubeError(400, "BadRequest", f"invalid resourceVersion {resource_version!r}") from None
            first = store.events_since(last)
            if first is None:
                oldest = store.events[0].revision if store.events else store.revision
                error = gone(last, oldest - 1)
                initial = [_line("ERROR", error.body())]
                last = -1
            else:
                initial = []
        else:
            last = store.revision
            objects = store.select(kind, namespace, match)
            inside = {key(obj) for obj in objects}
            initial = [_line("ADDED", shown(obj)) for obj in objects]
    # Everything before here runs at the call (errors answer as a Status); the rest streams.
    return _stream(
        api, kind, namespace, match, last, seen, inside, resumed, initial, deadline, stopping, shown
    )


def _stream(
    api: KubeApi,
    kind: Kind,
    namespace: str | None,
    match: Callable[[dict[str, Any]], bool],
    last: int,
    seen: int,
    inside: set[tuple[str, str]],
    resumed: bool,
    initial: list[bytes],
    deadline: float,
    stopping: threading.Event,
    shown: Callable[[dict[str, Any]], dict[str, Any]],
) -> Iterator[bytes]:
    # Each wake's lines go out as one chunk: the REST front hands every chunk of a sync stream
    # through a worker thread, and 1,000 changes in one tick as 1,000 chunks took most of a second.
    if initial:
        yield b"".join(initial)
    if last < 0:
        return  # the 410 ERROR event ends the stream
    store = api.store
    while True:
        with api.core.lock:
            seen = store.changes
            events = store.events_since(last)
            if events is None:
                oldest = store.events[0].revision if store.events else store.revision
                yield _line("ERROR", gone(last, oldest - 1).body())
                return
        lines: list[bytes] = []
        for event in events:
            last = event.revision
            lines.extend(_translate(event, kind, namespace, match, inside, resumed, shown))
        if lines:
            yield b"".join(lines)
        if not _wait(api, seen, deadline, stopping):
            return


def _translate(
    event: Event,
    kind: Kind,
    namespace: str | None,
    match: Callable[[dict[str, Any]], bool],
    inside: set[tuple[str, str]],
    resumed: bool,
    shown: Callable[[dict[str, Any]], dict[str, Any]],
) -> list[bytes]:
    if event.kind.key != kind.key or (
        namespace is not None and kind.namespaced and event.namespace != namespace
    ):
        return []
    obj = event.obj
    meta = obj.get("metadata", {})
    where = (meta.get("namespace", ""), meta.get("name", ""))
    was = where in inside
    now = match(obj)
    if event.type == "DELETED":
        inside.discard(where)
        return [_line("DELETED", shown(dict(obj)))] if was or now else []
    if now:
        inside.add(where)
        type_ = event.type if event.type == "ADDED" or was or resumed else "ADDED"
        return [_line(type_, shown(dict(obj)))]
    if was:
        inside.discard(where)
        return [_line("DELETED", shown(dict(obj)))]
    return []


def tail(text: str, lines: int | None) -> str:
    """The last ``lines`` lines of ``text`` (all when None)."""
    if lines is None:
        return text
    if lines <= 0:
        return ""
    parts = text.splitlines(keepends=True)
    return "".join(parts[-lines:])


def log_stream(
    api: KubeApi,
    namespace: str,
    name: str,
    container: str | None,
    first: str,
    offset: int,
    stopping: threading.Event,
) -> Iterator[bytes]:
    """A followed log: ``first`` (read under the lock, the log then ``offset`` characters long),
    then the text the log gains, until the pod is Succeeded, Failed or deleted (or the server stops)."""
    from .store import KINDS

    pods = KINDS["pods"]
    if first:
        yield first.encode()
    while True:
        with api.core.lock:
            seen = api.store.changes
            api.core.tick()
            pod = api.store.find(pods, namespace, name)
            text = api.cluster.pod_log(namespace, name, container) if pod is not None else ""
            phase = ((pod or {}).get("status") or {}).get("phase")
        if len(text) > offset:
            yield text[offset:].encode()
            offset = len(text)
        if pod is None or phase in TERMINAL_PHASES:
            return
        if not _wait(api, seen, time.monotonic() + SLICE, stopping):
            return
