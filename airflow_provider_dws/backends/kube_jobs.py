"""What the backends whose request is a ``batch/v1`` Job share: create or adopt, read, find, delete.

A Job alone does not say whether it got its capacity: Kueue's Job backend reads it with its
Workload (:mod:`.kueue`), the flex-start Job backend with its pods (:mod:`.gke_flex`). Both are
a :class:`JobBackend`: this class makes every Job call (through the shared retry policy, with
the errors translated) and pairs each Job with the objects it owns; a subclass says which
objects those are (:meth:`JobBackend._owned_list`) and how a Job and they are classified
(:meth:`JobBackend.classify`). Releasing is deleting the Job with ``propagationPolicy=Background``:
what it owns goes with it.

Objects are handled as the API's JSON (camelCase dicts), whichever client read them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_dws.backends.base import RequestStatus, classify_listed
from airflow_provider_dws.backends.job_watch import PairedView, merged, pair_version, split_version
from airflow_provider_dws.backends.kube_base import (
    LABEL_MAX_WAIT,
    MANAGED_SELECTOR,
    KubernetesBackend,
    kube_time,
    translated,
)
from airflow_provider_dws.backends.retry import aretrying, retrying
from airflow_provider_dws.errors import RequestAlreadyExistsError, RequestNotFoundError
from airflow_provider_dws.scheduling.identity import (
    LABEL_ATTEMPT,
    LABEL_TRY,
    RequestIdentity,
    parse_attempt_name,
)
from airflow_provider_dws.scheduling.phases import Phase

log = logging.getLogger(__name__)

#: How long a ``release(wait=True)`` waits for the Job to be gone.
RELEASE_WAIT_SECONDS = 120.0


# -- reading a Job (pure) ----------------------------------------------------------------------------


def true_conditions(obj: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """An object's conditions whose status is ``True``, by type."""
    status = (obj or {}).get("status") or {}
    return {c.get("type", ""): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def job_details(job: Mapping[str, Any]) -> dict[str, Any]:
    """What every Job backend's status carries of its Job: namespace, uid, pod counts, the attempt
    and try that made it (labels; else its name's ``-t<try>``) and the max wait it keeps."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    labels = meta.get("labels") or {}
    attempt, tried = str(labels.get(LABEL_ATTEMPT, "")), str(labels.get(LABEL_TRY, ""))
    parsed = parse_attempt_name(str(meta.get("name", "")))
    max_wait = str(labels.get(LABEL_MAX_WAIT, ""))
    return {
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "succeeded": int(status.get("succeeded") or 0),
        "failed": int(status.get("failed") or 0),
        "active": int(status.get("active") or 0),
        "attempt": int(attempt) if attempt.isdigit() else 1,
        "try": int(tried) if tried.isdigit() else (parsed[1] if parsed else None),
        "max_wait_seconds": float(max_wait) if max_wait.isdigit() else None,
    }


def job_ended_at(
    job: Mapping[str, Any], started: datetime | None, other_times: Iterable[datetime | None] = ()
) -> datetime | None:
    """When an ended Job ended: its completion time, else its ``Complete``/``Failed`` condition's,
    else the latest of ``other_times`` (what it owns says), else its deletion, start or creation."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    conditions = true_conditions(job)
    ended = conditions.get("Complete") or conditions.get("Failed") or {}
    return (
        kube_time(status.get("completionTime"))
        or kube_time(ended.get("lastTransitionTime"))
        or max((t for t in other_times if t is not None), default=None)
        or kube_time(meta.get("deletionTimestamp"))
        or started
        or kube_time(meta.get("creationTimestamp"))
    )


def job_result(status: RequestStatus, namespace: str, details: Mapping[str, Any]) -> dict[str, Any]:
    """The task's return value (and XCom) for an ended Job: its name, namespace, status, pod counts,
    the nodes its pods ran on (when its backend reads them), wait and run seconds."""
    timings = status.timings
    return {
        "name": status.name,
        "namespace": details.get("namespace") or namespace,
        "status": "Complete" if status.phase is Phase.SUCCEEDED else status.state,
        "succeeded": int(details.get("succeeded") or 0),
        "failed": int(details.get("failed") or 0),
        **({"nodes": list(details["nodes"])} if "nodes" in details else {}),
        "wait_seconds": timings.wait_seconds,
        "run_seconds": timings.run_seconds,
    }


def owned_by(
    objects: Iterable[dict[str, Any]], uid_label: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``objects`` by the uid of their owner (an owner reference, or the value of ``uid_label``)."""
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        uids = {ref.get("uid") for ref in meta.get("ownerReferences") or []}
        if uid_label:
            uids.add((meta.get("labels") or {}).get(uid_label))
        for uid in uids - {None, ""}:
            by_uid.setdefault(str(uid), []).append(obj)
    return by_uid


@dataclass(frozen=True)
class ListedJob:
    """A listed Job with the objects it owns (what :func:`classify_listed` classifies)."""

    name: str
    job: dict[str, Any]
    owned: list[dict[str, Any]]


class JobBackend(KubernetesBackend):
    """Create, find, read and delete Jobs in one namespace of one GKE cluster.

    Sync methods serve the operator (in a worker) and a trigger's submission (in a thread), with
    the ``kubernetes`` client; ``a*`` methods serve the trigger (``kubernetes_asyncio``). Jobs are
    named from the task instance (:meth:`RequestIdentity.queued_resource_id`): 409 AlreadyExists
    means "adopt". A subclass writes :meth:`classify`, :meth:`_owned_list` and
    :meth:`_aowned_list`.
    """

    #: The label that names an owned object's Job uid, if its objects carry one (else owner refs).
    owned_uid_label: str | None = None
    #: Whether the owned objects carry the provider's labels (pods, from the Job's template), so a
    #: list of them can be narrowed by the identity or ``dws_managed`` selector (a Workload does not).
    owned_have_labels = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: What the last list and the watch since saw (:mod:`.job_watch`), and their versions.
        self._view = PairedView(self._owners, self.classify)
        self._list_version: str | None = None
        self._watch_versions: list[str | None] = [None, None]

    # -- what a subclass writes ------------------------------------------------------------------

    def classify(self, job: dict[str, Any], owned: Sequence[dict[str, Any]]) -> RequestStatus:
        """The status of ``job`` from it and the objects it owns (pure: no API call)."""
        raise NotImplementedError

    def _owned_list(self, label_selector: str | None) -> list[dict[str, Any]]:
        """The namespace's objects Jobs own (matching ``label_selector``), as JSON."""
        raise NotImplementedError

    async def _aowned_lister(self, label_selector: str | None) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The async client's list method of the owned objects and its keyword arguments (its
        watch too: a watch is a list call with ``watch=True``)."""
        raise NotImplementedError

    async def _aowned_list(
        self, label_selector: str | None, versions: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`_owned_list` from the event loop (each page one call: the shared poller retries);
        the list's ``resourceVersion`` appended to ``versions``."""
        list_fn, kwargs = await self._aowned_lister(label_selector)
        return await self._alist_all(list_fn, versions=versions, **kwargs)

    def _owned_selector(self, job: dict[str, Any]) -> str | None:
        """The selector of one Job's owned objects (default: its uid label, if they carry one)."""
        uid = (job.get("metadata") or {}).get("uid")
        return f"{self.owned_uid_label}={uid}" if uid and self.owned_uid_label else None

    def _pair(self, jobs: Sequence[dict[str, Any]], owned: Iterable[dict[str, Any]]) -> list[ListedJob]:
        by_uid = owned_by(owned, self.owned_uid_label)
        return [
            ListedJob(
                str(job["metadata"]["name"]), job, by_uid.get(str((job.get("metadata") or {}).get("uid")), [])
            )
            for job in jobs
        ]

    def _classify_listed(self, item: ListedJob) -> RequestStatus:
        return self.classify(item.job, item.owned)

    # -- sync (worker) ---------------------------------------------------------------------------

    def _batch(self) -> Any:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.api_client())

    def list_jobs(self, label_selector: str) -> list[dict[str, Any]]:
        """Every Job of the namespace matching ``label_selector``, all pages, as JSON."""
        return self._list_all(
            f"list Jobs in {self.namespace}",
            self._batch().list_namespaced_job,
            namespace=self.namespace,
            label_selector=label_selector,
        )

    def owned(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The objects ``job`` owns (by its selector first, then by the whole namespace's list)."""
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if not uid:
            return []
        selector = self._owned_selector(job)
        found = owned_by(self._owned_list(selector), self.owned_uid_label).get(uid, [])
        if found or selector is None or self.owned_have_labels:
            # Objects that carry the uid label are all found by it: none is none (a whole
            # namespace's list per Job without pods would be the cost of asking again).
            return found
        return owned_by(self._owned_list(None), self.owned_uid_label).get(uid, [])

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every Job (any state, try and attempt) of this task instance in the namespace: one list on
        its identity label, one of the objects Jobs own."""
        jobs = self.list_jobs(identity.kube_selector())
        if not jobs:
            return []
        owned = self._owned_list(identity.kube_selector() if self.owned_have_labels else None)
        return [self._classify_listed(item) for item in self._pair(jobs, owned)]

    def get(self, name: str) -> dict[str, Any] | None:
        """Read one Job as JSON; ``None`` when it does not exist."""
        try:
            return self._json(  # type: ignore[no-any-return]
                self._call(f"read Job {name}", self._batch().read_namespaced_job, name, self.namespace)
            )
        except RequestNotFoundError:
            return None

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one Job and what it owns, classified; ``None`` when the Job does not exist."""
        job = self.get(name)
        return None if job is None else self.classify(job, self.owned(job))

    def submit(
        self, request: dict[str, Any], identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Create the Job ``request`` (named in its metadata), or adopt the one of that name.

        A create retried after a lost reply reads the Job first: it may exist already. Returns the
        Job's status and whether this call created it.
        """
        name = str(request["metadata"]["name"])
        tries = 0

        def create() -> tuple[RequestStatus, bool]:
            nonlocal tries
            tries += 1
            if tries > 1:
                existing = self.get_status(name)
                if existing is not None:
                    log.warning("An earlier create call did succeed: adopting Job %s", name)
                    return existing, False
            with translated():
                job = self._batch().create_namespaced_job(
                    self.namespace, request, _request_timeout=self.rpc_timeout
                )
            return self.classify(self._json(job), []), True

        try:
            return retrying(f"create Job {name}", logger=log)(create)
        except RequestAlreadyExistsError:
            existing = self.get_status(name)
            if existing is None:
                raise
            return existing, False

    def submit_spec(self, spec: Mapping[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (the Job manifest, what a trigger is handed)."""
        if not isinstance(spec, Mapping) or not (spec.get("metadata") or {}).get("name"):
            raise ValueError("a Job spec is a Job manifest with its metadata.name")
        return self.submit(dict(spec), identity)

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Delete the Job with what it owns (background propagation); one already gone is fine
        (False). ``wait``: until the Job is gone."""
        try:
            self._call(
                f"delete Job {name}",
                self._batch().delete_namespaced_job,
                name,
                self.namespace,
                propagation_policy="Background",
            )
        except RequestNotFoundError:
            log.info("Job %s is already gone; nothing to delete", name)
            return False
        if wait:
            deadline = time.monotonic() + RELEASE_WAIT_SECONDS
            while self.get(name) is not None and time.monotonic() < deadline:
                time.sleep(1.0)
        return True

    # -- async (triggerer) -----------------------------------------------------------------------

    async def _abatch(self) -> Any:
        from kubernetes_asyncio.client import BatchV1Api

        return BatchV1Api(await self.async_api_client())

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one Job and what it owns, classified (``RequestNotFoundError`` when the Job is
        gone); errors propagate (the shared poller retries)."""
        job = await self._aonce((await self._abatch()).read_namespaced_job, name, self.namespace)
        uid = str((job.get("metadata") or {}).get("uid") or "")
        selector = self._owned_selector(job)
        owned = owned_by(await self._aowned_list(selector), self.owned_uid_label).get(uid, []) if uid else []
        if uid and not owned and selector is not None and not self.owned_have_labels:
            owned = owned_by(await self._aowned_list(None), self.owned_uid_label).get(uid, [])
        return self.classify(job, owned)

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The provider's Jobs of the namespace by name (``only``: just these), classified: one list
        of Jobs by the ``dws_managed`` label and one of the objects Jobs own per call. Both are
        kept, with their ``resourceVersion``s, for the watch (:meth:`awatch`) to start from.

        Ended Jobs stay listed until deleted, so they are returned too (the poller then reads none
        of them again). Errors propagate: the shared poller backs off as a whole.
        """
        versions: list[str] = []
        jobs = await self._alist_all(
            (await self._abatch()).list_namespaced_job,
            versions=versions,
            namespace=self.namespace,
            label_selector=MANAGED_SELECTOR,
        )
        owned = await self._aowned_list(self._owned_watch_selector(), versions) if jobs else []
        self._view.listed(jobs, owned)
        self._list_version = pair_version(*versions) if len(versions) == 2 else None
        if only is not None:
            jobs = [job for job in jobs if (job.get("metadata") or {}).get("name") in only]
        # Paired by the view just filled: one index of the owned objects by their Job, not two.
        pairs = [
            ListedJob(
                str(job["metadata"]["name"]), job, self._view.owned_of(str(job["metadata"].get("uid") or ""))
            )
            for job in jobs
        ]

        async def one_page() -> Any:
            yield pairs

        return await classify_listed(one_page(), only, self._classify_listed)

    # -- the watch (the shared poller's, beside its list: triggers/watching.py) ----------------------

    def _owned_watch_selector(self) -> str | None:
        return MANAGED_SELECTOR if self.owned_have_labels else None

    def _owners(self, obj: dict[str, Any]) -> list[str]:
        return list(owned_by([obj], self.owned_uid_label))

    def list_version(self) -> str | None:
        """The ``resourceVersion``s of the last live list of Jobs and of what they own (the watch
        starts after them)."""
        return self._list_version

    def watch_version(self) -> str | None:
        """The ``resourceVersion``s of the last change each of the two watches showed."""
        return pair_version(*self._watch_versions)

    async def awatch(
        self, resource_version: str, timeout: float
    ) -> AsyncIterator[tuple[str, RequestStatus | None]]:
        """The provider's Jobs of this namespace whose state changes after ``resource_version``: a
        watch of the Jobs and one of what they own (two API calls) for at most ``timeout`` seconds;
        a change to either gives the Job's status, classified as the list classifies it, from the
        last list with the changes since (None: the Job was deleted)."""
        jobs_version, owned_version = split_version(resource_version)
        self._watch_versions = [jobs_version, owned_version]
        list_fn, kwargs = await self._aowned_lister(self._owned_watch_selector())
        streams = [
            self._awatch_objects(
                (await self._abatch()).list_namespaced_job,
                jobs_version,
                timeout,
                namespace=self.namespace,
                label_selector=MANAGED_SELECTOR,
            ),
            self._awatch_objects(list_fn, owned_version, timeout, **kwargs),
        ]
        async for which, kind, obj in merged(streams):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self._watch_versions[which] = str(version)
            for name, status in self._view.changed(which, kind, obj):
                yield name, status

    async def arelease(self, name: str) -> bool:
        """Delete the Job (background propagation) from the event loop; gone is fine (False)."""
        batch = await self._abatch()

        async def delete() -> None:
            await self._aonce(
                batch.delete_namespaced_job, name, self.namespace, propagation_policy="Background"
            )

        try:
            await aretrying(f"delete Job {name}", logger=log)(delete)
        except RequestNotFoundError:
            log.info("Job %s is already gone; nothing to delete", name)
            return False
        return True
