"""GKE ProvisioningRequests in the attempt loop, and the release that deletes every attempt."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.kube_base import KubernetesBackend
from airflow_provider_dws.backends.kubernetes import (
    ACCELERATOR_ANNOTATION,
    LABEL_MAX_WAIT,
    ProvisioningAsk,
    ProvisioningRequestBackend,
    provisioned_line,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityRevokedError,
    RequestCancelledError,
)
from airflow_provider_dws.facts import (
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    GKE_QUEUED_LABEL,
    GPU_TOLERATION,
    PROVISIONING_REQUEST_GROUP,
    QUEUED_TOLERATION,
)
from airflow_provider_dws.links import GKEProvisioningRequestLink
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.task import task_identity
from airflow_provider_dws.scheduling.identity import parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.specs.pod_template import accelerator_of, pod_gpus, pod_spec_of

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
    from airflow_provider_dws.operators.gke_release import (
        DeleteGKEProvisioningRequestOperator,
        GKESetupReleaseOperator,
    )
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

#: What the API answers when it refuses a request (invalid, not allowed).
_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: XCom key of the request the setup waits on (read by the release).
REQUEST_XCOM = "provisioning_request_name"
#: The XCom keys under which the result also gives what the workload's pods must carry.
CONSUME_XCOM_KEYS = ("annotations", "node_selector", "tolerations")


_Backend = TypeVar("_Backend", bound=KubernetesBackend)


def gke_cluster_console_url(project_id: str, location: str, cluster_name: str) -> str:
    """The console page of a GKE cluster (its node pools show the queued provisioning nodes)."""
    return f"{CONSOLE}/kubernetes/clusters/details/{location}/{cluster_name}/details?project={project_id}"


def cluster_backend(
    adapter: RequestAdapter[Any, _Backend], cls: type[_Backend], location: str | None
) -> _Backend:
    """``cls`` for the adapter's operator's cluster and namespace, built once per task (the GKE
    operators share their cluster parameters)."""
    op = adapter.op
    return adapter._backends.get(
        cls,
        op.project_id,
        location or str(op.location),
        op.gcp_conn_id,
        op.impersonation_chain,
        cluster_name=op.cluster_name,
        namespace=op.namespace,
        kubernetes_conn_id=op.kubernetes_conn_id,
        use_internal_ip=op.use_internal_ip,
    )


def pod_template_spec(value: Any) -> dict[str, Any]:
    """The operator's ``pod_template`` as a pod template spec ``{"metadata", "spec"}`` (a bare pod
    spec is wrapped; ``kubernetes`` model objects, in it or as it, are serialized as the API spells
    them: the result is JSON, for a trigger to carry)."""
    if _has_model(value):
        from kubernetes.client import ApiClient

        value = ApiClient().sanitize_for_serialization(value)
    value = copy.deepcopy(dict(value))
    if "containers" in value:
        return {"metadata": {}, "spec": value}
    return {"metadata": dict(value.get("metadata") or {}), "spec": dict(value.get("spec") or {})}


def _has_model(value: Any) -> bool:
    """Whether ``value`` is, or holds, a ``kubernetes`` model object (a DAG that built one)."""
    if isinstance(value, Mapping):
        return any(_has_model(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_model(v) for v in value)
    return hasattr(value, "openapi_types")


def queued_pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with what a pod on a queued node pool needs: its toleration and node selector (and the
    GPU taint's toleration for GPU pods), each added once."""
    out: dict[str, Any] = copy.deepcopy(dict(spec))
    tolerations = list(out.get("tolerations") or [])
    wanted = [QUEUED_TOLERATION] + ([GPU_TOLERATION] if (pod_gpus(out) or 0) > 0 else [])
    for toleration in wanted:
        if not any(t.get("key") == toleration["key"] for t in tolerations if isinstance(t, Mapping)):
            tolerations.append(dict(toleration))
    out["tolerations"] = tolerations
    out["nodeSelector"] = {**(out.get("nodeSelector") or {}), GKE_QUEUED_LABEL: "true"}
    return out


class GKEProvisioningRequestAdapter(
    RequestAdapter["CreateGKEProvisioningRequestOperator", ProvisioningRequestBackend]
):
    """A PodTemplate and a ProvisioningRequest per attempt, named ``<base>-t<try>-a<attempt>``; the
    wait ends when the request is Provisioned, and an attempt that ends without it is deleted. The
    API has no max wait: the trigger deletes a request still queued at the provider's."""

    name_key = REQUEST_XCOM

    target = "running"
    wait_grace = timedelta(0)
    submits_in_trigger = True
    result_keys = CONSUME_XCOM_KEYS

    def __init__(self, operator: CreateGKEProvisioningRequestOperator) -> None:
        super().__init__(operator)
        self._ended: list[RequestStatus] = []

    def backend(self, location: str | None = None) -> ProvisioningRequestBackend:
        """The backend of the operator's cluster and namespace, built once per task."""
        return cluster_backend(self, ProvisioningRequestBackend, location)

    def location_of(self, name: str) -> str:
        """Every request of the operator is in its one cluster."""
        return str(self.op.location)

    # -- what an attempt creates -------------------------------------------------------------------

    def template(self) -> dict[str, Any]:
        """The pods' template spec, with the queued node pool's toleration and selector."""
        template = pod_template_spec(self.op.pod_template)
        template["spec"] = queued_pod_spec(template["spec"])
        return template

    def build(self, identity: RequestIdentity, max_wait: timedelta) -> ProvisioningAsk:
        """The PodTemplate and the ProvisioningRequest of this attempt (both named from the identity)."""
        op = self.op
        name = identity.provisioning_request_name()
        labels = {**(op.labels or {}), **identity.kube_labels()}
        template = self.template()
        spec = template["spec"]
        gpus, accelerator = pod_gpus(spec) or 0, accelerator_of(spec)
        parameters = dict(op.parameters or {})
        if op.max_run is not None:
            parameters["maxRunDurationSeconds"] = str(int(op.max_run.total_seconds()))
        annotations = (
            {ACCELERATOR_ANNOTATION: f"{gpus} x {accelerator} per pod"} if gpus and accelerator else {}
        )
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": op.namespace, "labels": labels},
            "template": template,
        }
        request: dict[str, Any] = {
            "apiVersion": f"{PROVISIONING_REQUEST_GROUP}/v1",
            "kind": "ProvisioningRequest",
            "metadata": {
                "name": name,
                "namespace": op.namespace,
                "labels": {**labels, LABEL_MAX_WAIT: str(int(max_wait.total_seconds()))},
                "annotations": annotations,
            },
            "spec": {
                "provisioningClassName": op.provisioning_class,
                "podSets": [{"podTemplateRef": {"name": name}, "count": op.count}],
            },
        }
        if parameters:
            request["spec"]["parameters"] = parameters
        return ProvisioningAsk(pod_template, request)

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The PodTemplate and ProvisioningRequest of :meth:`build` as JSON, for the trigger to
        create (``pod_template``, ``provisioning_request``); one cluster, so ``placement`` changes
        nothing."""
        ask = self.build(identity, max_wait or self.op.max_wait)
        return {"pod_template": ask.pod_template, "provisioning_request": ask.provisioning_request}

    def announce(self) -> dict[str, Any]:
        """The request's name under its XCom key, the cluster's console page (when the cluster is
        named) under the link's key."""
        op = self.op
        if not (op.cluster_name and op.project_id):
            return {"name_key": self.name_key}
        link = gke_cluster_console_url(str(op.project_id), str(op.location), op.cluster_name)
        return {"name_key": self.name_key, "link_key": GKEProvisioningRequestLink.key, "link": link}

    # -- the loop's steps --------------------------------------------------------------------------

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The newest live or Provisioned request of any try and attempt of this task instance (one
        list by its ``dws_key`` label); the ended ones are deleted by :meth:`delete_ended`."""
        best: tuple[tuple[int, int], RequestStatus] | None = None
        self._ended = []
        for status in self.backend().find(identity):
            if not status.phase.live:
                self._ended.append(status)
                continue
            parsed = parse_attempt_name(status.name)
            order = (parsed[1], parsed[2]) if parsed else (0, 1)
            if best is None or order > best[0]:
                best = (order, status)
        if best is None:
            return None
        (_, attempt), status = best
        self.remember(context, status)
        return Found(status, self.op.home_placement(), max(attempt, 1))

    def delete_ended(self) -> None:
        """Delete the ended requests (and PodTemplates) the last :meth:`find` saw: they hold nothing
        but stay listed until deleted."""
        for status in self._ended:
            self.log.warning("An earlier request %s ended %s; deleting it", status.name, status.state)
            self.backend().release(status.name)
        self._ended = []

    def persist_link(self, context: Context, status: RequestStatus) -> str | None:
        """The cluster's console page, when the cluster is named."""
        op = self.op
        if not (op.cluster_name and op.project_id):
            return None
        return push_url(
            context,
            GKEProvisioningRequestLink.key,
            gke_cluster_console_url(str(op.project_id), str(op.location), op.cluster_name),
        )

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's PodTemplate and ProvisioningRequest (409: adopt)."""
        backend = self.backend()
        ask = self.build(identity, max_wait)
        name = ask.provisioning_request["metadata"]["name"]
        existing = backend.get_status(name)
        if existing is not None and existing.phase.terminal:
            self.log.warning(
                "An earlier request %s ended %s; deleting it before asking again", name, existing.state
            )
            backend.release(name)
        try:
            status, created = backend.submit(ask, identity)
        except _REFUSED as err:
            raise BadRequestError(f"GKE refused the ProvisioningRequest {name}: {err.message}") from None
        self.log.info(
            "%s ProvisioningRequest %s in %s (attempt %d): %s, class %s, max run %s; may wait up to %s "
            "(the provider deletes it then)",
            "Created" if created else "Adopted",
            name,
            backend.where(),
            identity.attempt,
            status.description,
            self.op.provisioning_class,
            self.op.max_run or "GKE's default",
            max_wait,
        )
        self.remember(context, status)
        return status

    def release_or_keep(self, name: str) -> None:
        """Delete the request and its PodTemplate (no cancel verb exists)."""
        self.backend().release(name)

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Ended without (or after losing) capacity: delete it and its PodTemplate."""
        self.log.info(
            "Deleting %s (%s) and its PodTemplate so nothing is left behind", status.name, status.state
        )
        self.backend().release(status.name)

    def consume(self, name: str, template: Mapping[str, Any] | None) -> dict[str, Any]:
        """What the workload's pods must carry to run on the request's nodes: the two annotations,
        the PodTemplate's tolerations and node selector (read back, else built again)."""
        spec = pod_spec_of(((template or {}).get("template")) or {}) or self.template()["spec"]
        return {
            "annotations": {CONSUME_ANNOTATION: name, CLASS_ANNOTATION: self.op.provisioning_class},
            "tolerations": [dict(t) for t in spec.get("tolerations") or []],
            "node_selector": dict(spec.get("nodeSelector") or {}),
            "accelerator": accelerator_of(spec),
            "gpus_per_pod": pod_gpus(spec) or 0,
        }

    def result(self, context: Context, status: RequestStatus) -> Any:
        """The request's name and what the workload's pods must carry (the task's XCom return value)."""
        read = status.details.get(RESULT)  # by the trigger, with the PodTemplate, once Provisioned
        value = dict(read) if read is not None else self._read_result(status)
        self.log.info("%s", provisioned_line(status, value))
        return value

    def _read_result(self, status: RequestStatus) -> dict[str, Any]:
        """The return value read from the cluster: the request again, its PodTemplate."""
        backend = self.backend()
        current = backend.get_status(status.name)
        if current is None:
            raise RequestCancelledError(f"{status.name} disappeared right after it was Provisioned")
        template = backend.pod_template(status.details.get("pod_template") or status.name)
        consume = self.consume(status.name, template)
        op = self.op
        started = current.timings.started or status.timings.started
        return {
            "name": status.name,
            "namespace": op.namespace,
            "pod_template": current.details.get("pod_template") or status.name,
            "provisioning_class": op.provisioning_class,
            **consume,
            "count": current.details.get("count") or op.count,
            "max_run_seconds": current.details.get("max_run_seconds"),
            "cluster": {
                "project_id": op.project_id,
                "location": op.location,
                "cluster_name": op.cluster_name,
            },
            "provisioned_at": started.isoformat() if started else None,
            "wait_seconds": status.timings.wait_seconds,
        }

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The pods' GPU (GKE's label value) over every pod, Flex Start pricing, the cluster's page."""
        spec = self.template()["spec"]
        gpus, accelerator = pod_gpus(spec) or 0, accelerator_of(spec)
        op = self.op
        url = (
            gke_cluster_console_url(str(op.project_id), str(op.location), op.cluster_name)
            if op.project_id and op.cluster_name
            else None
        )
        return {
            "api": ProvisioningRequestBackend.kind,
            "kind": "GKE ProvisioningRequest",
            # The record's project when neither the operator nor its Google connection names one (a
            # cluster reached through a Kubernetes connection).
            "project": "",
            "accelerator_type": accelerator,
            "accelerator_count": gpus * int(op.count),
            "machine_type": None,
            "pricing_model": "flex_start",
            "console_url": url,
        }

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a request that ended without being Provisioned (or lost it)."""
        message = status.outcome.message
        where = self.backend().where()
        detail = f" ({status.name} [{status.state}]{': ' + message if message else ''})"
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
            return CapacityNotObtainedError(
                f"no GKE capacity within max wait {max_wait} for {status.description} in {where}{detail}"
            )
        if status.outcome.failure is FailureKind.PREEMPTED:
            return CapacityRevokedError(f"the capacity of the ProvisioningRequest was revoked{detail}")
        if status.outcome.failure is FailureKind.BAD_REQUEST:
            return BadRequestError(f"GKE refused the ProvisioningRequest{detail}")
        return RequestCancelledError(f"the ProvisioningRequest was deleted before it was Provisioned{detail}")


# -- the release (DeleteGKEProvisioningRequestOperator) -------------------------------------------


def release_backend(op: GKESetupReleaseOperator, cls: type[_Backend]) -> _Backend:
    """``cls`` for a GKE release task's cluster and namespace (its own, or its setup's)."""
    return cls(
        op.project_id,
        str(op.location),
        op.gcp_conn_id,
        op.impersonation_chain,
        cluster_name=op.cluster_name,
        namespace=op.namespace or "default",
        kubernetes_conn_id=op.kubernetes_conn_id,
        use_internal_ip=bool(op.use_internal_ip),
    )


def release_all(op: DeleteGKEProvisioningRequestOperator, context: Context) -> dict[str, Any]:
    """Delete every ProvisioningRequest (and PodTemplate) of the setup task instance, any try and
    attempt (one list by its ``dws_key``), logging what each held."""
    identity = task_identity(context, task_id=op.setup_task_id)
    backend = release_backend(op, ProvisioningRequestBackend)
    found = backend.find(identity)
    pushed = context["ti"].xcom_pull(task_ids=op.setup_task_id, key=REQUEST_XCOM)
    if isinstance(pushed, str) and pushed and pushed not in {s.name for s in found}:
        status = backend.get_status(pushed)
        found += [status] if status is not None else []
    released: list[tuple[str, str]] = []
    for status in found:
        held = status.timings.started is not None and status.phase.live
        consumers = backend.consumers(status.name) if held else []
        op.log.info(
            "Deleting ProvisioningRequest %s (%s: %s)%s",
            status.name,
            status.state,
            status.description,
            f", its nodes used by {len(consumers)} pod(s) still: {', '.join(consumers[:10])}"
            if consumers
            else (", no pod on its nodes now" if held else ""),
        )
        backend.release(status.name)
        released.append((status.name, status.state))
    # A PodTemplate whose request was never made (its create refused or failed) has no request to
    # be deleted with: the task instance's labels find it.
    for template in backend.pod_templates(identity.kube_selector()):
        op.log.info("Deleting PodTemplate %s, left without its ProvisioningRequest", template)
        backend.delete_pod_template(template)
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release

    # For a request the setup left no record of (its worker killed right after the create), the
    # record is this API's, and Provisioned is what held nodes.
    requests = ReleasedApi(
        backend.kind, "GKE ProvisioningRequest", lambda _name: str(op.location), ("Provisioned",)
    )
    record_release(op, context, requests, Released(released))
    if not released:
        op.log.info(
            "No ProvisioningRequest of task %r in %s (never created, or already deleted): nothing to do",
            op.setup_task_id,
            backend.where(),
        )
    return {
        "released": [name for name, _ in released],
        "deleted": bool(released),
        "state_before": released[0][1] if released else None,
    }
