"""Cloud TPU arithmetic and CreateQueuedResource validation (no gRPC state, no threads).

Chip arithmetic (:func:`parse_accelerator_type`):

* the **family** is the accelerator type's prefix (``v5litepod-16`` -> ``v5litepod``) and names
  the capacity pool ``ZONE/FAMILY`` (a reservation pool is ``ZONE/FAMILY@RESERVATION``);
* ``v5litepod-N`` and ``v6e-N`` count chips: N chips. ``v2-N``, ``v3-N``, ``v4-N`` and ``v5p-N``
  count TensorCores (two per chip): N/2 chips;
* hosts (one network endpoint each): single-host up to 8 chips for ``v5litepod``/``v6e`` and up
  to 4 chips for the other families; larger slices have 4 chips per host
  (``v5litepod-16`` -> 4 hosts, ``v5p-32`` -> 16 chips -> 4 hosts);
* a multislice request (``multislice_params.node_count = k``) needs k times the chips, at once.

Only the slices of :data:`~..facts.TPU_FAMILIES` are accepted (the real API offers fixed shapes;
the emulator's facts are its own, written from the Cloud TPU documents).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

from ..core.capacity import PoolKey
from ..core.errors import EmulatorError, check_labels
from ..facts import MULTI_HOST_VM_CHIPS, TPU_FAMILIES

ACCELERATOR_TYPE_RE = re.compile(rf"^({'|'.join(TPU_FAMILIES)})-(0|[1-9][0-9]*)$")
TPU_PORT = 8470

_RFC1035_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_PARENT_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)")
_RESERVATION_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)/reservations/([^/]+)")


class TpuShape(NamedTuple):
    """One slice of ``accelerator_type``: its family, the suffix, chips and TPU VMs (hosts)."""

    accelerator_type: str
    family: str
    size: int
    chips: int
    hosts: int


def parse_accelerator_type(accelerator_type: str) -> TpuShape:
    """``v5litepod-16`` -> TpuShape(family="v5litepod", size=16, chips=16, hosts=4).

    Raises ``ValueError`` with a readable reason for unknown families or sizes.
    """
    match = ACCELERATOR_TYPE_RE.fullmatch(accelerator_type)
    if match is None:
        raise ValueError(
            f"{accelerator_type!r} is not a TPU accelerator type; expected "
            f"{ACCELERATOR_TYPE_RE.pattern}, e.g. v5litepod-16."
        )
    family, size = TPU_FAMILIES[match[1]], int(match[2])
    chips = family.slice_chips(size)
    if chips is None:
        raise ValueError(
            f"{accelerator_type!r} is not a known {family.name} size; known sizes: {family.describe()}."
        )
    hosts = 1 if chips <= family.vm_chips else chips // MULTI_HOST_VM_CHIPS
    return TpuShape(accelerator_type, family.name, size, chips, hosts)


def tpu_error(
    field: str, message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT
) -> EmulatorError:
    """An error naming ``field`` the way the Cloud TPU API does."""
    return EmulatorError(code, f"Invalid value for field '{field}': {message}")


def parse_parent(parent: str) -> tuple[str, str]:
    """``projects/P/locations/ZONE`` -> (P, ZONE), or INVALID_ARGUMENT."""
    match = _PARENT_RE.fullmatch(parent)
    if not match:
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Invalid parent {parent!r}: expected projects/{{project}}/locations/{{zone}}.",
        )
    return match.group(1), match.group(2)


def is_rfc1035(name: str) -> bool:
    return bool(_RFC1035_RE.fullmatch(name))


@dataclass(frozen=True)
class QueuedResourcePlan:
    """What the emulator needs to schedule a validated QueuedResource."""

    project: str
    zone: str
    queued_resource_id: str
    shape: TpuShape
    node_ids: tuple[str, ...]  # one per slice
    multislice: bool
    tier: str  # "spot", "guaranteed" or "on-demand"
    reservation: str | None  # the full reservation_name, None when unset
    pool: PoolKey
    valid_after: float | None  # epoch seconds; None = provision as soon as possible
    valid_until: float | None  # epoch seconds; None = wait indefinitely

    @property
    def node_count(self) -> int:
        return len(self.node_ids)

    @property
    def chips(self) -> int:
        """Chips needed at once (all slices)."""
        return self.shape.chips * self.node_count


def _seconds(message: Any) -> float:
    return message.seconds + message.nanos / 1e9


def validate_queued_resource(
    parent: str,
    queued_resource_id: str,
    qr: Any,
    now: float,
    both_tiers: bool = False,
) -> QueuedResourcePlan:
    """Check a raw CreateQueuedResource request and return its plan, or raise ``EmulatorError``.

    ``both_tiers`` is set by the server when the wire message carried both ``spot`` and
    ``guaranteed`` (a protobuf oneof keeps only the last one after parsing).
    Pool existence is checked by the caller, which owns the capacity model.
    """
    project, zone = parse_parent(parent)
    if not queued_resource_id:
        raise tpu_error("queued_resource_id", "Required field is not set.")
    if not is_rfc1035(queued_resource_id):
        raise tpu_error(
            "queued_resource_id",
            f"{queued_resource_id!r} must be 1-63 characters, start with a lowercase letter, contain "
            "only lowercase letters, digits and '-', and not end with '-' (RFC 1035).",
        )
    if not qr.HasField("tpu"):
        raise tpu_error("queued_resource.tpu", "Required field is not set.")
    specs = list(qr.tpu.node_spec)
    if len(specs) != 1:
        raise tpu_error(
            "queued_resource.tpu.node_spec", f"Exactly one node_spec is required, got {len(specs)}."
        )
    spec = specs[0]
    field = "queued_resource.tpu.node_spec[0]"
    if spec.parent != parent:
        raise tpu_error(f"{field}.parent", f"{spec.parent!r} must equal the request parent {parent!r}.")
    strategy = spec.WhichOneof("name_strategy")
    if strategy is None:
        raise tpu_error(f"{field}", "Exactly one of node_id or multislice_params must be set.")
    if strategy == "node_id":
        if not is_rfc1035(spec.node_id):
            raise tpu_error(
                f"{field}.node_id",
                f"{spec.node_id!r} must be 1-63 characters, start with a lowercase letter, contain only "
                "lowercase letters, digits and '-', and not end with '-' (RFC 1035).",
            )
        node_ids: tuple[str, ...] = (spec.node_id,)
    else:
        params = spec.multislice_params
        if params.node_count < 2:
            raise tpu_error(
                f"{field}.multislice_params.node_count",
                f"Must be greater than 1 for a multislice request, got {params.node_count}.",
            )
        prefix = params.node_id_prefix or queued_resource_id
        if not is_rfc1035(f"{prefix}-{params.node_count - 1}"):
            raise tpu_error(
                f"{field}.multislice_params.node_id_prefix",
                f"{prefix!r} must start with a lowercase letter and contain only lowercase letters, "
                "digits and '-', with node ids '<prefix>-<i>' at most 63 characters (RFC 1035).",
            )
        node_ids = tuple(f"{prefix}-{i}" for i in range(params.node_count))
    if not spec.HasField("node"):
        raise tpu_error(f"{field}.node", "Required field is not set.")
    node = spec.node
    if not node.accelerator_type:
        raise tpu_error(
            f"{field}.node.accelerator_type",
            "Required field is not set (the emulator does not support accelerator_config).",
        )
    try:
        shape = parse_accelerator_type(node.accelerator_type)
    except ValueError as exc:
        raise tpu_error(f"{field}.node.accelerator_type", str(exc)) from None
    if not node.runtime_version:
        raise tpu_error(f"{field}.node.runtime_version", "Required field is not set.")
    check_labels(node.labels, f"{field}.node.labels", tpu_error)

    tier = qr.WhichOneof("tier")
    node_spot = node.scheduling_config.spot or node.scheduling_config.preemptible
    if both_tiers or (tier == "guaranteed" and node_spot):
        raise tpu_error(
            "queued_resource.tier",
            "spot and guaranteed are mutually exclusive: a guaranteed queued resource cannot use "
            "Spot (or preemptible) capacity.",
        )
    if tier == "guaranteed" and qr.guaranteed.HasField("min_duration"):
        if _seconds(qr.guaranteed.min_duration) < 0:
            raise tpu_error("queued_resource.guaranteed.min_duration", "Must not be negative.")

    reservation = qr.reservation_name or None
    pool = PoolKey(zone, shape.family)
    if reservation is not None:
        match = _RESERVATION_RE.fullmatch(reservation)
        if not match:
            raise tpu_error(
                "queued_resource.reservation_name",
                f"{reservation!r} must look like projects/{{project}}/locations/{{zone}}/reservations/"
                "{reservation}.",
            )
        if match.group(2) != zone:
            raise tpu_error(
                "queued_resource.reservation_name",
                f"The reservation is in {match.group(2)}, but the queued resource is in {zone}.",
            )
        pool = PoolKey(zone, f"{shape.family}@{match.group(3)}")

    valid_after, valid_until = _timing(qr, now)
    return QueuedResourcePlan(
        project=project,
        zone=zone,
        queued_resource_id=queued_resource_id,
        shape=shape,
        node_ids=node_ids,
        multislice=strategy == "multislice_params",
        tier=tier or "on-demand",
        reservation=reservation,
        pool=pool,
        valid_after=valid_after,
        valid_until=valid_until,
    )


def _timing(qr: Any, now: float) -> tuple[float | None, float | None]:
    """``queueing_policy`` as absolute (valid_after, valid_until) epoch seconds."""
    if not qr.HasField("queueing_policy"):
        return None, None
    policy = qr.queueing_policy
    which = policy.WhichOneof("start_timing_constraints")
    field = f"queued_resource.queueing_policy.{which}"
    if which in ("valid_until_duration", "valid_after_duration"):
        seconds = _seconds(getattr(policy, which))
        if seconds < 0:
            raise tpu_error(field, f"Must not be negative, got {seconds:g}s.")
        return (now + seconds, None) if which == "valid_after_duration" else (None, now + seconds)
    if which == "valid_until_time":
        return None, policy.valid_until_time.ToNanoseconds() / 1e9
    if which == "valid_after_time":
        return policy.valid_after_time.ToNanoseconds() / 1e9, None
    if which == "valid_interval":
        interval = policy.valid_interval
        start = interval.start_time.ToNanoseconds() / 1e9 if interval.HasField("start_time") else None
        end = interval.end_time.ToNanoseconds() / 1e9 if interval.HasField("end_time") else None
        if start is not None and end is not None and end < start:
            raise tpu_error(field, "end_time must not be before start_time.")
        return start, end
    return None, None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def wire_fields(data: bytes) -> list[tuple[int, bytes | None]]:
    """Top-level ``(field_number, payload)`` of a protobuf message; payload only for length-delimited."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
            out.append((number, None))
        elif wire_type == 1:
            pos += 8
            out.append((number, None))
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire_type == 5:
            pos += 4
            out.append((number, None))
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    return out


def both_tiers_on_wire(create_request: bytes) -> bool:
    """True if a serialized CreateQueuedResourceRequest sets both ``spot`` (3) and ``guaranteed`` (4).

    ``queued_resource`` is field 3 of the request; repeated occurrences merge, so all are scanned.
    """
    try:
        seen: set[int] = set()
        for number, payload in wire_fields(create_request):
            if number == 3 and payload is not None:
                seen.update(n for n, _ in wire_fields(payload) if n in (3, 4))
        return seen == {3, 4}
    except ValueError:
        return False  # malformed bytes: protobuf parsing reports it
