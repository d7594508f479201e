"""The Kubernetes objects the emulator serves: one store, as plain JSON dicts, with real metadata.

Objects are kept exactly as a kube-apiserver returns them (``apiVersion``, ``kind``,
``metadata``, ``spec``, ``status``), so the routes return them unchanged and the controllers read
and change them as the wire shows them. The server sets what a server sets: ``uid``,
``resourceVersion`` (one counter for the whole store, as etcd's revision), ``generation`` (1 on
create, +1 on each change of anything but ``metadata`` and ``status``), ``creationTimestamp``.

Every change is appended to :attr:`KubeStore.events` (``ADDED``, ``MODIFIED``, ``DELETED``, with
the revision it made), which list-then-watch reads from, and handed to each listener
(:meth:`KubeStore.listen`), which is how controllers learn of a change without scanning.

The store is not thread safe on its own: callers hold the core state's lock, as every API does.
"""

from __future__ import annotations

import copy
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..core.errors import EmulatorError
from .kueue_versions import GROUP as KUEUE
from .kueue_versions import VERSIONS as KUEUE_VERSIONS

#: How many change events a watch can resume from (older resourceVersions answer 410 Gone).
EVENT_HISTORY = 10_000


@dataclass(frozen=True)
class Kind:
    """One resource type: where it is served and what the server does with it."""

    group: str  #: ``""`` for the core group
    versions: tuple[str, ...]  #: served versions, the first is the one stored
    plural: str
    kind: str
    namespaced: bool = True
    #: Has a ``/status`` subresource: writes to the object ignore ``status``, writes to it ignore the rest.
    status_subresource: bool = False
    #: A custom resource: a strategic-merge patch is refused (415), as the API server does.
    custom: bool = False
    #: ``spec`` cannot change after create (ProvisioningRequest).
    immutable_spec: bool = False

    def api_version(self, version: str | None = None) -> str:
        """``v1``, ``batch/v1``, ``autoscaling.x-k8s.io/v1beta1``."""
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version

    @property
    def key(self) -> str:
        """``plural.group`` (``pods``, ``jobs.batch``): the name controllers and errors use."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _kinds(*kinds: Kind) -> dict[str, Kind]:
    return {kind.key: kind for kind in kinds}


#: Every resource the emulator serves, by :attr:`Kind.key`.
KINDS: dict[str, Kind] = _kinds(
    Kind("", ("v1",), "namespaces", "Namespace", namespaced=False, status_subresource=True),
    Kind("", ("v1",), "podtemplates", "PodTemplate"),
    Kind("", ("v1",), "pods", "Pod", status_subresource=True),
    Kind("", ("v1",), "events", "Event"),
    Kind("batch", ("v1",), "jobs", "Job", status_subresource=True),
    Kind(
        "autoscaling.x-k8s.io",
        ("v1", "v1beta1"),
        "provisioningrequests",
        "ProvisioningRequest",
        status_subresource=True,
        custom=True,
        immutable_spec=True,
    ),
    # Kueue: every kind at v1beta2 (stored) and v1beta1 (deprecated), converted by kueue_versions.
    Kind(KUEUE, KUEUE_VERSIONS, "localqueues", "LocalQueue", status_subresource=True, custom=True),
    Kind(
        KUEUE,
        KUEUE_VERSIONS,
        "clusterqueues",
        "ClusterQueue",
        namespaced=False,
        status_subresource=True,
        custom=True,
    ),
    Kind(
        KUEUE,
        KUEUE_VERSIONS,
        "admissionchecks",
        "AdmissionCheck",
        namespaced=False,
        status_subresource=True,
        custom=True,
    ),
    Kind(
        KUEUE,
        KUEUE_VERSIONS,
        "provisioningrequestconfigs",
        "ProvisioningRequestConfig",
        namespaced=False,
        custom=True,
    ),
    Kind(KUEUE, KUEUE_VERSIONS, "resourceflavors", "ResourceFlavor", namespaced=False, custom=True),
    Kind(KUEUE, KUEUE_VERSIONS, "workloads", "Workload", status_subresource=True, custom=True),
)


class KubeError(EmulatorError):
    """An error answered as a ``kind: Status`` body with HTTP ``status`` and ``reason``.

    ``details`` is the Status' ``details`` (``name``, ``group``, ``kind``, ``causes``).
    """

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        import grpc

        from ..core.rest import _GRPC_OF_HTTP

        super().__init__(_GRPC_OF_HTTP.get(status, grpc.StatusCode.UNKNOWN), message)
        self.status = status
        self.reason = reason
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        """The ``v1`` Status object the API server answers with."""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.status,
        }


def not_found(kind: Kind, name: str) -> KubeError:
    """404 NotFound: ``pods "x" not found``."""
    return KubeError(
        404,
        "NotFound",
        f'{kind.key} "{name}" not found',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def already_exists(kind: Kind, name: str) -> KubeError:
    """409 AlreadyExists: ``jobs.batch "x" already exists``."""
    return KubeError(
        409,
        "AlreadyExists",
        f'{kind.key} "{name}" already exists',
        {"name": name, "group": kind.group, "kind": kind.plural},
    )


def invalid(kind: Kind, name: str, causes: list[tuple[str, str]]) -> KubeError:
    """422 Invalid with ``causes`` of ``(field, message)``, worded as the API server words them."""
    text = "; ".join(f"{field}: {message}" for field, message in causes)
    return KubeError(
        422,
        "Invalid",
        f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: {text}'
        if kind.group
        else f'{kind.kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": kind.group,
            "kind": kind.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        },
    )


def timestamp(epoch: float) -> str:
    """RFC 3339 in UTC to the second, as the API server writes metadata times."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    """One change: ``type`` is ``ADDED``, ``MODIFIED`` or ``DELETED``; ``obj`` a copy as it then was."""

    revision: int
    type: str
    kind: Kind
    namespace: str
    obj: dict[str, Any]


Key = tuple[str, str, str]  # (kind key, namespace or "", name)
Listener = Callable[[Event], None]


class KubeStore:
    """Every object by kind, namespace and name; ``clock`` gives epoch seconds, ``rng`` the uids."""

    def __init__(self, clock: Callable[[], float], rng: random.Random) -> None:
        self.clock = clock
        self.rng = rng
        self.revision = 0
        self._objects: dict[Key, dict[str, Any]] = {}
        #: Each kind's keys in order, kept until an object of that kind is created or deleted:
        #: sorting every key at every read was most of the time of 1,000 requests provisioned at once.
        self._sorted: dict[str, list[Key]] = {}
        self.events: deque[Event] = deque(maxlen=EVENT_HISTORY)
        self._listeners: list[Listener] = []
        #: Notified (``changes`` incremented) after every change, for watchers that wait without
        #: the core's lock; its own lock is only ever held briefly.
        self.changed = threading.Condition()
        self.changes = 0
        #: Called on a new object once the server has set its metadata (uid), before it is stored:
        #: defaults that need the uid (a Job's selector and pod template labels).
        self.defaulters: list[Callable[[Kind, dict[str, Any]], None]] = []

    # -- reads -----------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        """A copy of the object, or :func:`not_found`."""
        obj = self._objects.get(self._key(kind, namespace, name))
        if obj is None:
            raise not_found(kind, name)
        return copy.deepcopy(obj)

    def find(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object itself (not a copy: read it, never change it), or None."""
        return self._objects.get(self._key(kind, namespace, name))

    def select(
        self,
        kind: Kind,
        namespace: str | None = None,
        match: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Copies of the objects of ``kind`` (in ``namespace``, or all), by namespace and name."""
        return [copy.deepcopy(obj) for obj in self.iter(kind, namespace) if match is None or match(obj)]

    def iter(self, kind: Kind, namespace: str | None = None) -> Iterable[dict[str, Any]]:
        """The stored objects themselves (read only), by namespace and name."""
        keys = self._sorted.get(kind.key)
        if keys is None:
            keys = self._sorted[kind.key] = sorted(key for key in self._objects if key[0] == kind.key)
        for key in keys:  # a list no write changes: a new one replaces it
            if namespace is None or not kind.namespaced or key[1] == namespace:
                obj = self._objects.get(key)
                if obj is not None:  # (deleted while a caller iterates)
                    yield obj

    # -- writes ----------------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object (``metadata.name`` or ``generateName``); 409 if the name is taken."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self._suffix()}"
        name = meta.get("name") or ""
        if not name:
            raise invalid(kind, "", [("metadata.name", "Required value: name or generateName is required")])
        key = self._key(kind, namespace, name)
        if key in self._objects:
            raise already_exists(kind, name)
        obj["apiVersion"] = kind.api_version()
        obj["kind"] = kind.kind
        if kind.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = timestamp(self.clock())
        meta["generation"] = 1
        if kind.status_subresource:
            obj["status"] = {}
        for defaulter in self.defaulters:
            defaulter(kind, obj)
        return self._commit("ADDED", kind, key, obj)

    def replace(
        self, kind: Kind, namespace: str, name: str, obj: dict[str, Any], status: bool = False
    ) -> dict[str, Any]:
        """Write ``obj`` over the stored one, as PUT (``status``: PUT of the status subresource).

        Server-set metadata is kept; with a status subresource, an object write keeps the stored
        ``status`` and a status write keeps everything else. ``immutable_spec`` refuses a spec change.
        """
        key = self._key(kind, namespace, name)
        old = self._objects.get(key)
        if old is None:
            raise not_found(kind, name)
        sent = obj.get("metadata", {}).get("resourceVersion")
        if sent and sent != old["metadata"]["resourceVersion"]:
            raise KubeError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.key} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "group": kind.group, "kind": kind.plural},
            )
        new = copy.deepcopy(old if status else obj)
        if status:
            new["status"] = copy.deepcopy(obj.get("status") or {})
        else:
            meta = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "generation", "namespace", "name"):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            if kind.status_subresource:
                new["status"] = copy.deepcopy(old.get("status") or {})
            if kind.immutable_spec and new.get("spec") != old.get("spec"):
                raise invalid(kind, name, [("spec", 'Invalid value: "object": Value is immutable')])
            if self._body(new) != self._body(old):
                meta["generation"] = old["metadata"]["generation"] + 1
        return self._commit("MODIFIED", kind, key, new)

    def update(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        status: bool = False,
    ) -> dict[str, Any]:
        """Read, let ``change`` edit a copy in place, write it back (the controllers' write)."""
        obj = self.get(kind, namespace, name)
        change(obj)
        obj.get("metadata", {}).pop("resourceVersion", None)
        return self.replace(kind, namespace, name, obj, status=status)

    def delete(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        """Remove the object at once (no finalizers are modelled); the object as it was."""
        key = self._key(kind, namespace, name)
        obj = self._objects.get(key)
        if obj is None:
            raise not_found(kind, name)
        del self._objects[key]
        self._sorted.pop(kind.key, None)
        self.revision += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self._emit(Event(self.revision, "DELETED", kind, namespace if kind.namespaced else "", obj))
        return copy.deepcopy(obj)

    # -- change feed -----------------------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every change, after it is stored (under the caller's lock)."""
        self._listeners.append(listener)

    def events_since(self, revision: int) -> list[Event] | None:
        """Changes after ``revision``, oldest first; None if the history no longer reaches back."""
        # Revisions are consecutive, so a first kept event past ``revision + 1`` means some were dropped.
        if self.events and self.events[0].revision > revision + 1:
            return None
        return [event for event in self.events if event.revision > revision]

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _key(kind: Kind, namespace: str, name: str) -> Key:
        return kind.key, namespace if kind.namespaced else "", name

    @staticmethod
    def _body(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    def _suffix(self) -> str:
        alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
        return "".join(self.rng.choice(alphabet) for _ in range(5))

    def _commit(self, type_: str, kind: Kind, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        if key not in self._objects:
            self._sorted.pop(kind.key, None)
        self._objects[key] = obj
        self._emit(Event(self.revision, type_, kind, key[1], copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        for listener in list(self._listeners):
            listener(event)
        with self.changed:
            self.changes += 1
            self.changed.notify_all()
