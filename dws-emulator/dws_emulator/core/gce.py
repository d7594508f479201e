"""Compute Engine's REST conventions, shared by the APIs served as ``compute.v1`` (:mod:`..compute`,
:mod:`..calendar`): links, names, request ids, JSON through the ``compute_v1`` types, pages, list
filters and list bodies.

Resources are stored as the raw protobuf messages behind the client's proto-plus types and
encoded with ``json_format`` exactly as the REST transport decodes them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from google.protobuf import json_format

from .rest import RestError

SELF_LINK_ROOT = "https://www.googleapis.com/compute/v1/"
DEFAULT_MAX_RESULTS = 500
MAX_MAX_RESULTS = 500
#: The longest an operation ``wait`` blocks (real seconds; the real API says about 2 minutes).
MAX_WAIT_SECONDS = 60.0

_RFC1035_RE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_NAME_REGEX_TEXT = "(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"


_T = TypeVar("_T")


def link(path: str) -> str:
    """The ``selfLink`` of ``projects/...``."""
    return SELF_LINK_ROOT + path


def strip_link(value: str) -> str:
    """``projects/...`` (or a shorter relative path) from a full URL or a relative reference."""
    value = value.strip()
    for prefix in (SELF_LINK_ROOT, "https://compute.googleapis.com/compute/v1/"):
        if value.startswith(prefix):
            return value[len(prefix) :]
    return value.lstrip("/")


def region_of(zone: str) -> str:
    """``us-central1`` of ``us-central1-a``."""
    return zone.rsplit("-", 1)[0]


def invalid(field: str, value: Any, why: str) -> RestError:
    """Compute's 400: ``Invalid value for field 'FIELD': 'VALUE'. WHY``."""
    return RestError(400, "invalid", f"Invalid value for field '{field}': '{value}'. {why}".rstrip())


def check_name(value: Any, field: str = "resource.name") -> str:
    if not isinstance(value, str) or not _RFC1035_RE.fullmatch(value):
        raise invalid(field, value, f"Must be a match of regex '{_NAME_REGEX_TEXT}'")
    return value


def check_request_id(request_id: str | None) -> str:
    """A ``requestId``, when given, is a non-zero UUID (as the API documents)."""
    if not request_id:
        return ""
    try:
        value = uuid.UUID(request_id)
    except ValueError:
        value = None
    if value is None or value.int == 0:
        raise invalid(
            "requestId",
            request_id,
            "The request id must be a valid UUID with the exception that zero UUID is not supported "
            "(00000000-0000-0000-0000-000000000000).",
        )
    return request_id


def parse_body(body: Any, message_class: Callable[[], Any], what: str) -> Any:
    """A request body decoded into ``message_class`` (unknown fields refused, as the API does)."""
    if body is None:
        raise RestError(400, "required", f"Required field '{what}' not specified")
    if not isinstance(body, dict):
        raise RestError(400, "parseError", f"Invalid JSON payload received. Expected an object for {what}.")
    message = message_class()
    try:
        json_format.ParseDict(body, message)
    except json_format.ParseError as exc:
        raise RestError(400, "invalid", f"Invalid JSON payload received. {exc}") from None
    return message


def to_json(message: Any) -> dict[str, Any]:
    """The REST JSON of a stored message (camelCase, int64 as strings, enums as strings)."""
    return json_format.MessageToDict(message)


def copy(message: Any) -> Any:
    out = type(message)()
    out.CopyFrom(message)
    return out


def page(items: Sequence[_T], query: dict[str, str]) -> tuple[list[_T], str]:
    """``maxResults`` / ``pageToken`` paging: one page of ``items`` and the next token ("" at the end)."""
    text = query.get("maxResults", "")
    try:
        size = int(text) if text else DEFAULT_MAX_RESULTS
    except ValueError:
        raise invalid("maxResults", text, "Must be an integer.") from None
    if not 0 <= size <= MAX_MAX_RESULTS:
        raise invalid("maxResults", text, f"Must be between 0 and {MAX_MAX_RESULTS}.")
    size = size or DEFAULT_MAX_RESULTS
    token = query.get("pageToken", "")
    if token and not token.isdigit():
        raise invalid("pageToken", token, "The page token is invalid.")
    start = int(token) if token else 0
    chunk = list(items[start : start + size])
    return chunk, (str(start + size) if start + size < len(items) else "")


_TERM_RE = re.compile(
    r"\s*\(?\s*(?P<field>[A-Za-z][A-Za-z0-9_.-]*)\s*(?P<op>!=|=|\beq\b|\bne\b)\s*"
    r"(?:\"(?P<quoted>[^\"]*)\"|'(?P<single>[^']*)'|(?P<bare>[^\s()]+))\s*\)?\s*(?:AND\s+)?"
)


def compile_filter(text: str, fields: Sequence[str]) -> Callable[[dict[str, str]], bool]:
    """A list ``filter`` over ``fields``: ``name = "x"``, ``state != ACCEPTED``, ``name eq 'rr-.*'``
    (``eq``/``ne`` match a whole regular expression), several terms ANDed (juxtaposed, parenthesized
    or joined by ``AND``). ``labels.*`` in ``fields`` allows ``labels.KEY`` for any key (the record
    then holds ``labels.KEY`` entries). Anything else is a 400."""
    terms: list[tuple[str, str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TERM_RE.match(text, pos)
        if match is None or match.end() == pos:
            raise invalid(
                "filter",
                text,
                f"Supported: FIELD = VALUE, FIELD != VALUE, FIELD eq REGEX on {', '.join(fields)}.",
            )
        field = match["field"]
        if field not in fields and not (field.startswith("labels.") and "labels.*" in fields):
            raise invalid(
                "filter", text, f"Filtering on {field!r} is not supported; use {', '.join(fields)}."
            )
        value = next(v for v in (match["quoted"], match["single"], match["bare"]) if v is not None)
        terms.append((field, match["op"], value))
        pos = match.end()
    compiled: list[tuple[str, str, Any]] = []
    for field, op, value in terms:
        if op in ("eq", "ne"):
            try:
                compiled.append((field, op, re.compile(value)))
            except re.error:
                raise invalid("filter", text, f"{value!r} is not a valid regular expression.") from None
        else:
            compiled.append((field, op, value))

    def matches(record: dict[str, str]) -> bool:
        for field, op, value in compiled:
            actual = record.get(field, "")
            if op == "=" and actual != value:
                return False
            if op == "!=" and actual == value:
                return False
            if op == "eq" and not value.fullmatch(actual):
                return False
            if op == "ne" and value.fullmatch(actual):
                return False
        return True

    return matches


def list_json(kind: str, path: str, items: list[dict[str, Any]], token: str) -> dict[str, Any]:
    """A Compute list response: ``kind``, ``id``, ``selfLink``, ``items`` (omitted when empty), ``nextPageToken``."""
    out: dict[str, Any] = {"kind": kind, "id": path, "selfLink": link(path)}
    if items:
        out["items"] = items
    if token:
        out["nextPageToken"] = token
    return out


def aggregated_json(
    kind: str, project: str, field: str, items: list[tuple[str, dict[str, Any]]], token: str
) -> dict[str, Any]:
    """A Compute ``aggregatedList`` response: ``items`` maps each scope (``zones/Z``) of the page to
    ``{FIELD: [...]}``; scopes with nothing on the page are left out."""
    scopes: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for scope, item in items:
        scopes.setdefault(scope, {field: []})[field].append(item)
    path = f"projects/{project}/aggregated/{field}"
    out: dict[str, Any] = {"kind": kind, "id": path, "selfLink": link(path), "items": scopes}
    if token:
        out["nextPageToken"] = token
    return out
