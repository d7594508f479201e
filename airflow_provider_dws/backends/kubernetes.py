"""GKE queued provisioning as DWS capacity requests: ProvisioningRequests and their PodTemplates.

A ProvisioningRequest (``autoscaling.x-k8s.io``, class ``queued-provisioning.gke.io``) asks DWS for
the nodes of ``count`` pods of one PodTemplate at once; its conditions tell where it is
(:data:`.provisioning_request_states.PROVISIONING_REQUEST_CONDITIONS`, its state table). The sync half
(operators in a worker; a trigger's submission, in a thread) uses the ``kubernetes`` client, the
async half (triggers, the shared poller) ``kubernetes_asyncio``; both come from one
:class:`~airflow_provider_dws.hooks.kubernetes.GKEClusterHook`.

A backend is one namespace of one cluster: the shared poller lists that namespace once per
interval by the provider's label (``dws_managed=true``), so one list serves every wait there. Both
objects of a request are named from the task identity
(:meth:`~airflow_provider_dws.scheduling.identity.RequestIdentity.provisioning_request_name`) and
labelled with it; a create answered 409 adopts what is there, never a second one.

Nothing here imports ``kubernetes`` or ``kubernetes_asyncio`` at module level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RESULT, ListMemo, RequestStatus, classify_listed
from airflow_provider_dws.backends.batched_reads import BatchedReads
from airflow_provider_dws.backends.kube_base import (
    LABEL_MAX_WAIT,
    MANAGED_SELECTOR,
    KubernetesBackend,
    kube_time,
    translated,
)
from airflow_provider_dws.backends.provisioning_request_states import (
    PROVISIONING_REQUEST_CONDITIONS,
    provisioning_request_condition,
    provisioning_request_state,
)
from airflow_provider_dws.backends.retry import aretrying, retrying
from airflow_provider_dws.facts import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    PROVISIONING_REQUEST_GROUP,
    PROVISIONING_REQUEST_PLURAL,
)
from airflow_provider_dws.scheduling.identity import (
    LABEL_TRY,
    RequestIdentity,
    parse_attempt_name,
)
from airflow_provider_dws.scheduling.phases import RequestTimings
from airflow_provider_dws.specs.pod_template import accelerator_of, pod_gpus, pod_spec_of

log = logging.getLogger(__name__)

#: Annotation saying what the pods ask for, for the description (the list carries no PodTemplate).
ACCELERATOR_ANNOTATION = "airflow-provider-dws/accelerator"
#: The content type any custom-object patch must name: the two clients default differently (the
#: async one sends a dict as a JSON patch). The backend itself never patches: the spec is immutable.
MERGE_PATCH = "application/merge-patch+json"


def request_status(obj: Mapping[str, Any]) -> RequestStatus:
    """Classify a ProvisioningRequest (as the API returns it, a dict) into the shared vocabulary."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    name = str(metadata.get("name", ""))
    state = provisioning_request_state(conditions)
    condition = provisioning_request_condition(conditions, state) or {}
    outcome = PROVISIONING_REQUEST_CONDITIONS.classify(
        state, reason=str(condition.get("reason") or ""), message=str(condition.get("message") or "")
    )
    provisioned = provisioning_request_condition(conditions, "Provisioned") or {}
    started = (
        kube_time(provisioned.get("lastTransitionTime")) if provisioned.get("status") == "True" else None
    )
    finished = kube_time(condition.get("lastTransitionTime")) if outcome.phase.terminal else None
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    pod_sets = spec.get("podSets") or []
    count = sum(int(p.get("count") or 0) for p in pod_sets)
    template = (pod_sets[0].get("podTemplateRef") or {}).get("name") if pod_sets else None
    parameters = spec.get("parameters") or {}
    max_run = parameters.get("maxRunDurationSeconds")
    max_wait = labels.get(LABEL_MAX_WAIT)
    parsed = parse_attempt_name(name)
    what = annotations.get(ACCELERATOR_ANNOTATION)
    namespace = str(metadata.get("namespace") or "")
    tried = str(labels.get(LABEL_TRY) or "")
    return RequestStatus(
        name=name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=kube_time(metadata.get("creationTimestamp")),
            started=started,
            finished=finished,
        ),
        description=(
            f"{count} pod{'s' if count != 1 else ''}{' with ' + what if what else ''} in namespace {namespace}"
        ),
        details={
            "namespace": namespace,
            "count": count,
            "pod_template": template,
            "provisioning_class": spec.get("provisioningClassName"),
            "max_run_seconds": _seconds(max_run),
            "max_wait_seconds": _seconds(max_wait),
            "attempt": parsed[2] if parsed else 1,
            # Which Airflow try made it (its label; else its name's ``-t<try>``).
            "try": int(tried) if tried.isdigit() else (parsed[1] if parsed else None),
            "reason": condition.get("reason"),
            "uid": metadata.get("uid"),
            "resource_version": metadata.get("resourceVersion"),
        },
    )


class _Listed:
    """A listed object with the ``name`` :func:`classify_listed` reads."""

    __slots__ = ("name", "obj")

    def __init__(self, name: str, obj: Mapping[str, Any]) -> None:
        self.name = name
        self.obj = obj


def provisioned_result(
    status: RequestStatus, pod_spec: Mapping[str, Any], cluster: Mapping[str, Any]
) -> dict[str, Any]:
    """What the setup task returns for a Provisioned request (``status``, read from the API), whose
    PodTemplate's pod spec is ``pod_spec`` and whose cluster is ``cluster`` (``project_id``,
    ``location``, ``cluster_name``): the request, and what the workload's pods must carry to run on
    its nodes (the two annotations, the template's tolerations and node selector)."""
    details = status.details
    name = status.name
    provisioning_class = details.get("provisioning_class")
    started = status.timings.started
    return {
        "name": name,
        "namespace": details.get("namespace"),
        "pod_template": details.get("pod_template") or name,
        "provisioning_class": provisioning_class,
        "annotations": {CONSUME_ANNOTATION: name, CLASS_ANNOTATION: provisioning_class},
        "tolerations": [dict(t) for t in pod_spec.get("tolerations") or []],
        "node_selector": dict(pod_spec.get("nodeSelector") or {}),
        "accelerator": accelerator_of(pod_spec),
        "gpus_per_pod": pod_gpus(pod_spec) or 0,
        "count": details.get("count"),
        "max_run_seconds": details.get("max_run_seconds"),
        "cluster": dict(cluster),
        "provisioned_at": started.isoformat() if started else None,
        "wait_seconds": status.timings.wait_seconds,
    }


def _seconds(value: Any) -> int | None:
    """A string parameter or label holding whole seconds, else ``None``."""
    text = str(value or "")
    return int(text) if text.isdigit() else None


def _version(item: _Listed) -> Any:
    # Every change (a condition included) gets a new resourceVersion.
    return (item.obj.get("metadata") or {}).get("resourceVersion")


@dataclass(frozen=True)
class ProvisioningAsk:
    """What :meth:`ProvisioningRequestBackend.submit` creates: a PodTemplate, then the request that
    names it (both bodies as the API takes them, dicts)."""

    pod_template: dict[str, Any]
    provisioning_request: dict[str, Any]


def provisioned_line(status: RequestStatus, value: Mapping[str, Any]) -> str:
    """The task log's line for a Provisioned request: its wait, the pods booked, what they carry."""
    from datetime import timedelta

    waited = timedelta(seconds=round(status.timings.wait_seconds or 0))
    gpus = f" of {value['gpus_per_pod']} x {value['accelerator']}" if value.get("gpus_per_pod") else ""
    return (
        f"{status.name} is Provisioned after waiting {waited}: {value['count']} pod(s){gpus} are booked; "
        f"create the workload's pods now (the booking lasts minutes) with annotations {value['annotations']}"
    )


class ProvisioningRequestBackend(KubernetesBackend):
    """Create, read, list and delete the ProvisioningRequests (and PodTemplates) of one namespace of
    one GKE cluster; the contract of :class:`~airflow_provider_dws.backends.base.RequestBackend`.

    The parameters are :class:`~.kube_base.KubernetesBackend`'s, and ``api_version``: ``v1`` (or
    ``v1beta1``, the same schema).
    """

    kind = "gke_provisioning_request"

    def __init__(self, *args: Any, api_version: str = "v1", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_version = api_version
        self._memo = ListMemo(_version)
        self._list_version: str | None = None
        self._watch_version: str | None = None
        self._reads: tuple[asyncio.AbstractEventLoop, BatchedReads] | None = None

    def spec(self) -> dict[str, Any]:
        """Constructor keyword arguments, JSON-serializable, to rebuild this backend in the triggerer."""
        spec = super().spec()
        if self.api_version != "v1":
            spec["api_version"] = self.api_version
        return spec

    def _cr(self) -> dict[str, str]:
        return {
            "group": PROVISIONING_REQUEST_GROUP,
            "version": self.api_version,
            "namespace": self.namespace,
            "plural": PROVISIONING_REQUEST_PLURAL,
        }

    # -- sync (worker) -----------------------------------------------------------------------------

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client())

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def get(self, name: str) -> dict[str, Any] | None:
        """Read one ProvisioningRequest (a dict); ``None`` when it does not exist."""
        try:
            obj = self._call(
                f"get {name}", self._custom().get_namespaced_custom_object, name=name, **self._cr()
            )
        except errors.RequestNotFoundError:
            return None
        return dict(obj)

    def get_status(self, name: str) -> RequestStatus | None:
        """Read one request, classified; ``None`` when gone."""
        obj = self.get(name)
        return None if obj is None else request_status(obj)

    def list_by(self, selector: str) -> list[dict[str, Any]]:
        """Every ProvisioningRequest of the namespace matching label ``selector`` (all pages)."""
        return self._list_all(
            f"list ProvisioningRequests in {self.where()}",
            self._custom().list_namespaced_custom_object,
            **self._cr(),
            label_selector=selector,
        )

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every request (any try and attempt, any state) of this task instance: one list by ``dws_key``."""
        return [request_status(obj) for obj in self.list_by(identity.kube_selector())]

    def submit(
        self, request: ProvisioningAsk, identity: RequestIdentity, request_id: str | None = None
    ) -> tuple[RequestStatus, bool]:
        """Create the PodTemplate, then the ProvisioningRequest naming it; a request of that name
        already there (looked up first, or 409) is adopted, and its PodTemplate kept. Returns it and
        whether this call created it. ``request_id`` is unused: the name is the identity."""
        name = str(request.provisioning_request["metadata"]["name"])
        existing = self.get_status(name)
        if existing is not None:
            return existing, False
        self.ensure_pod_template(request.pod_template)
        tries = 0

        def create() -> tuple[RequestStatus, bool]:
            nonlocal tries
            tries += 1
            if tries > 1:  # a create whose reply was lost may have made it
                again = self.get_status(name)
                if again is not None:
                    log.warning("An earlier create call did succeed: adopting %s", name)
                    return again, False
            with translated():
                created = self._custom().create_namespaced_custom_object(
                    body=request.provisioning_request, _request_timeout=self.rpc_timeout, **self._cr()
                )
            return request_status(created), True

        try:
            return retrying(f"create ProvisioningRequest {name}", logger=log)(create)
        except errors.RequestAlreadyExistsError:
            adopted = self.get_status(name)
            if adopted is None:
                raise
            return adopted, False
        except Exception:
            self._drop_template_of_missing(name, str(request.pod_template["metadata"]["name"]))
            raise

    def submit_spec(self, spec: Mapping[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` for a JSON request spec (``{"pod_template": ..., "provisioning_request":
        ...}``, what a trigger is handed); a request of this attempt's name that already ended is
        deleted first and asked again, as the worker's own submit does."""
        bodies = (
            [spec.get("pod_template"), spec.get("provisioning_request")] if isinstance(spec, Mapping) else []
        )
        if len(bodies) != 2 or not all(isinstance(b, Mapping) for b in bodies):
            raise ValueError("a ProvisioningRequest spec has a pod_template and a provisioning_request")
        ask = ProvisioningAsk(dict(bodies[0]), dict(bodies[1]))  # type: ignore[arg-type]
        name = str(ask.provisioning_request["metadata"]["name"])
        existing = self.get_status(name)
        if existing is not None and existing.phase.terminal:
            log.warning(
                "An earlier request %s ended %s; deleting it before asking again", name, existing.state
            )
            self.release(name)
        return self.submit(ask, identity)

    def delete_ended(self, found: Sequence[RequestStatus]) -> None:
        """Delete the ended requests (and PodTemplates) of ``found`` (a lookup's): they hold nothing
        but stay listed, and listed again by every poll, until deleted."""
        for status in found:
            if not status.phase.live:
                log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
                self.release(status.name)

    def _drop_template_of_missing(self, request_name: str, template_name: str) -> None:
        """After a failed create (refused, or retries spent): delete the PodTemplate, unless the
        request exists after all (a lost reply; the next try adopts it and needs its template)."""
        try:
            if self.get_status(request_name) is None:
                self.delete_pod_template(template_name)
        except Exception:
            log.warning(
                "Could not delete PodTemplate %s after the failed create; the release deletes it",
                template_name,
                exc_info=True,
            )

    def pod_templates(self, selector: str) -> list[str]:
        """The names of the namespace's PodTemplates matching label ``selector`` (all pages)."""
        items = self._list_all(
            f"list PodTemplates in {self.where()}",
            self._core().list_namespaced_pod_template,
            namespace=self.namespace,
            label_selector=selector,
        )
        return [str((item.get("metadata") or {}).get("name")) for item in items]

    def ensure_pod_template(self, body: Mapping[str, Any]) -> bool:
        """Create the PodTemplate; one of that name already there (409) is kept. True if created."""
        name = body["metadata"]["name"]
        try:
            self._call(
                f"create PodTemplate {name}",
                self._core().create_namespaced_pod_template,
                namespace=self.namespace,
                body=dict(body),
            )
        except errors.RequestAlreadyExistsError:
            log.info("PodTemplate %s already exists in %s: kept", name, self.where())
            return False
        return True

    def pod_template(self, name: str) -> dict[str, Any] | None:
        """The PodTemplate ``name`` as a dict (camelCase, as on the wire); ``None`` when gone."""
        try:
            template = self._call(
                f"get PodTemplate {name}",
                self._core().read_namespaced_pod_template,
                name=name,
                namespace=self.namespace,
            )
        except errors.RequestNotFoundError:
            return None
        return dict(self._json(template))

    def delete_pod_template(self, name: str) -> bool:
        """Delete PodTemplate ``name``; False when it was gone."""
        try:
            self._call(
                f"delete PodTemplate {name}",
                self._core().delete_namespaced_pod_template,
                name=name,
                namespace=self.namespace,
            )
        except errors.RequestNotFoundError:
            return False
        return True

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Delete the request (no cancel verb exists: deleting it gives its place or its nodes back)
        and its PodTemplate; gone is success. False when there was no request left. ``wait`` is
        accepted for the contract: a delete is immediate for a custom resource without finalizers."""
        try:
            self._call(
                f"delete ProvisioningRequest {name}",
                self._custom().delete_namespaced_custom_object,
                name=name,
                **self._cr(),
            )
            deleted = True
        except errors.RequestNotFoundError:
            deleted = False
        self.delete_pod_template(name)
        return deleted

    def consumers(self, name: str) -> list[str]:
        """The pods of the namespace that name request ``name`` in their consume annotation."""
        pods = self._call(
            f"list pods in {self.where()}", self._core().list_namespaced_pod, namespace=self.namespace
        )
        return [
            pod.metadata.name
            for pod in pods.items or []
            if (pod.metadata.annotations or {}).get(CONSUME_ANNOTATION) == name
        ]

    # -- async (triggerer) -------------------------------------------------------------------------

    async def _acustom(self) -> Any:
        from kubernetes_asyncio import client

        return client.CustomObjectsApi(await self.async_api_client())

    async def _acore(self) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(await self.async_api_client())

    async def aget_status(self, name: str) -> RequestStatus:
        """Read one request with one call (``RequestNotFoundError`` when gone); errors propagate."""
        api = await self._acustom()
        return request_status(await self._aonce(api.get_namespaced_custom_object, name=name, **self._cr()))

    async def _alisted(
        self, selector: str, versions: list[str] | None = None
    ) -> AsyncIterator[list[_Listed]]:
        api = await self._acustom()
        async for page in self._apages(
            api.list_namespaced_custom_object, versions, **self._cr(), label_selector=selector
        ):
            yield [_Listed(str(obj["metadata"]["name"]), obj) for obj in page]

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The provider's requests of this namespace (label ``dws_managed=true``) by name, classified,
        with one paged list: the shared poller's one call per interval for every wait here. Ended
        requests stay listed until deleted, classified as such. Errors propagate."""
        versions: list[str] = []
        listed = await classify_listed(
            self._alisted(MANAGED_SELECTOR, versions),
            only,
            lambda item: request_status(item.obj),
            self._memo,
        )
        self._list_version = versions[0] if versions and versions[0] else None
        return listed

    # -- the watch (the shared poller's, beside its list: triggers/watching.py) ----------------------

    def list_version(self) -> str | None:
        """The ``resourceVersion`` of the last live list (the watch starts after it)."""
        return self._list_version

    def watch_version(self) -> str | None:
        """The ``resourceVersion`` of the last change the watch showed."""
        return self._watch_version

    async def awatch(
        self, resource_version: str, timeout: float
    ) -> AsyncIterator[tuple[str, RequestStatus | None]]:
        """The provider's requests of this namespace that change after ``resource_version``: one
        watch (one API call) for at most ``timeout`` seconds, each change classified as the list
        classifies it (None: the request was deleted)."""
        api = await self._acustom()
        self._watch_version = resource_version
        async for kind, obj in self._awatch_objects(
            api.list_namespaced_custom_object,
            resource_version,
            timeout,
            **self._cr(),
            label_selector=MANAGED_SELECTOR,
        ):
            meta = obj.get("metadata") or {}
            self._watch_version = str(meta.get("resourceVersion") or self._watch_version)
            name = str(meta.get("name") or "")
            yield name, (None if kind == "DELETED" else request_status(obj))

    def result_line(self, status: RequestStatus) -> str | None:
        """What a trigger that ends the task logs of its result (:func:`provisioned_line`)."""
        value = status.details.get(RESULT)
        return provisioned_line(status, value) if isinstance(value, Mapping) else None

    async def aended(self, status: RequestStatus) -> RequestStatus:
        """A Provisioned request with what its task returns (:data:`RESULT`, read with its
        PodTemplate: one call), so the resumed task needs no client; any other status as it is, and
        this one too when the template cannot be read (the task then reads it itself)."""
        if status.state != "Provisioned" or RESULT in status.details:
            return status
        name = str(status.details.get("pod_template") or status.name)
        try:
            template = await self._template_reads().read(name)
        except Exception:
            log.warning("Could not read PodTemplate %s; the task reads it itself", name, exc_info=True)
            return status
        spec = pod_spec_of(template.get("template") or {}) or {}
        cluster = {
            "project_id": self.project_id,
            "location": self.location,
            "cluster_name": self.cluster_name,
        }
        return replace(status, details={**status.details, RESULT: provisioned_result(status, spec, cluster)})

    def _template_reads(self) -> BatchedReads:
        """The PodTemplate reads of the running event loop, gathered per burst (many requests
        Provisioned at once: one labelled list, not a GET each)."""
        loop = asyncio.get_running_loop()
        if self._reads is None or self._reads[0] is not loop:

            async def list_all() -> dict[str, dict[str, Any]]:
                api = await self._acore()
                items = await self._alist_all(
                    api.list_namespaced_pod_template,
                    namespace=self.namespace,
                    label_selector=MANAGED_SELECTOR,
                )
                return {str(t["metadata"]["name"]): t for t in items}

            async def get_one(name: str) -> dict[str, Any]:
                api = await self._acore()
                return dict(
                    await self._aonce(api.read_namespaced_pod_template, name=name, namespace=self.namespace)
                )

            self._reads = (loop, BatchedReads(list_all, get_one))
        return self._reads[1]

    async def arelease(self, name: str) -> bool:
        """Delete the request and its PodTemplate from the event loop, transient errors retried with
        async backoff; gone is success (False: there was no request left)."""

        async def delete_request() -> bool:
            api = await self._acustom()
            try:
                await self._aonce(api.delete_namespaced_custom_object, name=name, **self._cr())
            except errors.RequestNotFoundError:
                return False
            return True

        async def delete_template() -> None:
            api = await self._acore()
            with contextlib.suppress(errors.RequestNotFoundError):
                await self._aonce(api.delete_namespaced_pod_template, name=name, namespace=self.namespace)

        deleted: bool = await aretrying(f"delete ProvisioningRequest {name}", logger=log)(delete_request)
        await aretrying(f"delete PodTemplate {name}", logger=log)(delete_template)
        return deleted
