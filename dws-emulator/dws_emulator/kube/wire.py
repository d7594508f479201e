"""The Kubernetes API's request semantics, apart from HTTP: patches, selectors, list and delete options.

* Patches by ``Content-Type``: merge patch (RFC 7386), JSON patch (RFC 6902, every op), and the
  strategic merge patch of built-in kinds, modelled as a merge patch except that lists of objects
  that all carry a ``name`` (containers, env, volumes, ports...) merge element by element by name
  (``$patch`` directives, ``$setElementOrder`` and other patch strategies are not modelled). A
  strategic merge patch of a custom resource, server-side apply and unknown types answer 415.
* Label selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and field
  selectors (``metadata.name``, ``metadata.namespace``, ``status.phase``; ``=``, ``==``, ``!=``).
* ``limit`` / ``continue`` paging (a token carries the last name served; pages read the current
  state, not a snapshot as etcd would).
* Delete propagation: dependents are the objects whose ``metadata.ownerReferences[].uid`` is the
  deleted uid; ``Background`` and ``Foreground`` delete them at once, recursively, ``Orphan``
  drops the reference. The default is ``Orphan`` for ``batch/v1`` Jobs, ``Background`` otherwise.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Callable
from typing import Any

from .store import KINDS, Kind, KubeError, KubeStore

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def bad_request(message: str) -> KubeError:
    """400 BadRequest."""
    return KubeError(400, "BadRequest", message)


def unsupported_media(content_type: str) -> KubeError:
    """415 UnsupportedMediaType, worded as the API server words it for a custom resource."""
    return KubeError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE}, {APPLY}",
    )


# -- patches ---------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _named_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "name" in item for item in value)
    )


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch whose lists of named objects merge by ``name`` (the strategic patch's common case)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        old = result.get(key)
        if value is None:
            result.pop(key, None)
        elif _named_list(value) and (old is None or _named_list(old)):
            merged = [copy.deepcopy(item) for item in old or []]
            index = {item["name"]: i for i, item in enumerate(merged)}
            for item in value:
                if item["name"] in index:
                    merged[index[item["name"]]] = strategic_merge_patch(merged[index[item["name"]]], item)
                else:
                    merged.append(strategic_merge_patch({}, item))
            result[key] = merged
        else:
            result[key] = strategic_merge_patch(old, value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _patch_error(message: str) -> KubeError:
    return KubeError(
        422, "Invalid", f"the server rejected our request due to an error in our request: {message}"
    )


def _index(container: list[Any], token: str, adding: bool) -> int:
    if token == "-" and adding:
        return len(container)
    if not token.isdigit():
        raise _patch_error(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not adding):
        raise _patch_error(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for token in parts[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, False)]
        else:
            raise _patch_error(f"path /{'/'.join(parts)} does not exist")
    return node


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict) and token in parent:
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, False)]
    raise _patch_error(f"path /{'/'.join(parts)} does not exist")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    if isinstance(parent, dict):
        parent[parts[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, parts[-1], True), value)
    else:
        raise _patch_error(f"cannot add to /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise _patch_error("cannot remove the whole document")
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict) and token in parent:
        del parent[token]
    elif isinstance(parent, list):
        del parent[_index(parent, token, False)]
    else:
        raise _patch_error(f"path /{'/'.join(parts)} does not exist")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of ``target``: add, remove, replace, move, copy, test (422 when one fails)."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise _patch_error(f"invalid JSON patch operation {operation!r}")
        op, path = operation["op"], _pointer(operation["path"])
        if op in ("add", "replace", "test") and "value" not in operation:
            raise _patch_error(f"{op} operation has no value")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc = _remove(doc, path)
        elif op == "replace":
            _get(doc, path)  # must exist
            value = copy.deepcopy(operation["value"])
            if not path:
                doc = value
            else:  # in place, so a key keeps its position
                parent = _parent(doc, path)
                if isinstance(parent, list):
                    parent[_index(parent, path[-1], False)] = value
                else:
                    parent[path[-1]] = value
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from", ""))
            value = copy.deepcopy(_get(doc, source))
            if op == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise _patch_error(f"testing value {operation['path']} failed")
        else:
            raise _patch_error(f"unknown JSON patch operation {op!r}")
    return doc


def apply_patch(kind: Kind, obj: dict[str, Any], content_type: str, patch: Any) -> dict[str, Any]:
    """``obj`` with ``patch`` applied as ``content_type`` says (415 for what the server refuses)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == JSON_PATCH:
        result = json_patch(obj, patch)
    elif media == MERGE:
        result = merge_patch(obj, patch)
    elif media == STRATEGIC and not kind.custom:
        result = strategic_merge_patch(obj, patch)
    elif media in (STRATEGIC, APPLY) or media.startswith("application/"):
        raise unsupported_media(media)
    else:
        raise unsupported_media(media or "(none)")
    if not isinstance(result, dict):
        raise bad_request("the patched object is not a JSON object")
    return result


# -- selectors -------------------------------------------------------------------------------------

Match = Callable[[dict[str, Any]], bool]
_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<absent>[\w./-]+)"
    r"|(?P<key>[\w./-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[\w.-]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


def _requirement(key: str, op: str, values: frozenset[str]) -> Callable[[dict[str, str]], bool]:
    """One label requirement: ``op`` is ``exists``, ``!``, ``in`` or ``notin`` (``=`` is ``in`` one value)."""

    def check(labels: dict[str, str]) -> bool:
        if op == "exists":
            return key in labels
        if op == "!":
            return key not in labels
        found = labels.get(key) in values
        return found if op == "in" else not found

    return check


def label_selector(text: str | None) -> Match:
    """A predicate on an object's ``metadata.labels`` (400 when ``text`` does not parse)."""
    text = (text or "").strip()
    checks: list[Callable[[dict[str, str]], bool]] = []
    pos = 0
    while pos < len(text):
        found = _REQUIREMENT.match(text, pos)
        if found is None or found.end() == pos:
            raise bad_request(f"unable to parse requirement: invalid label selector {text!r}")
        pos = found.end()
        g = found.groupdict()
        if g["absent"]:
            checks.append(_requirement(g["absent"], "!", frozenset()))
        elif g["op"]:
            checks.append(
                _requirement(g["key"], "notin" if g["op"] == "!=" else "in", frozenset([g["value"]]))
            )
        elif g["set"]:
            values = frozenset(v.strip() for v in g["values"].split(",") if v.strip())
            checks.append(_requirement(g["key"], g["set"], values))
        else:
            checks.append(_requirement(g["key"], "exists", frozenset()))

    def match(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda obj: obj.get("metadata", {}).get("name", ""),
    "metadata.namespace": lambda obj: obj.get("metadata", {}).get("namespace", ""),
    "status.phase": lambda obj: (obj.get("status") or {}).get("phase", ""),
}


def _field(read: Callable[[dict[str, Any]], str], equal: bool, value: str) -> Match:
    return lambda obj: (read(obj) == value) == equal


def field_selector(text: str | None) -> Match:
    """A predicate on the fields in :data:`FIELDS` (400 for another field, as the server)."""
    checks: list[Match] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        found = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", part)
        if found is None:
            raise bad_request(f"invalid field selector {part!r}")
        name, op, value = found.groups()
        if name not in FIELDS:
            raise bad_request(f'field label not supported: "{name}"')
        checks.append(_field(FIELDS[name], op != "!=", value))
    return lambda obj: all(check(obj) for check in checks)


def selector(query: dict[str, str]) -> Match:
    """Both selectors of a list or watch query, joined."""
    labels = label_selector(query.get("labelSelector"))
    fields = field_selector(query.get("fieldSelector"))
    return lambda obj: labels(obj) and fields(obj)


# -- paging ----------------------------------------------------------------------------------------


def _position(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def page(
    items: list[dict[str, Any]], query: dict[str, str], revision: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page of ``items`` (sorted by namespace and name) by ``limit`` / ``continue``; the list metadata."""
    start: tuple[str, str] | None = None
    token = query.get("continue") or ""
    if token:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            start = (str(decoded["ns"]), str(decoded["name"]))
        except (ValueError, KeyError, TypeError):
            raise bad_request(f"invalid continue token {token!r}") from None
        items = [obj for obj in items if _position(obj) > start]
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    limit_text = query.get("limit") or "0"
    try:
        limit = int(limit_text)
    except ValueError:
        raise bad_request(f"invalid limit {limit_text!r}") from None
    if limit > 0 and len(items) > limit:
        rest = len(items) - limit
        items = items[:limit]
        ns, name = _position(items[-1])
        meta["continue"] = base64.urlsafe_b64encode(json.dumps({"ns": ns, "name": name}).encode()).decode()
        meta["remainingItemCount"] = rest
    return items, meta


# -- deletion --------------------------------------------------------------------------------------

PROPAGATION = ("Orphan", "Background", "Foreground")


def propagation(kind: Kind, query: dict[str, str], body: Any) -> str:
    """The delete's propagation policy: body, then query (``orphanDependents`` too), then the default."""
    options = body if isinstance(body, dict) else {}
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    orphan = options.get("orphanDependents", query.get("orphanDependents"))
    if policy is None and orphan is not None:
        policy = "Orphan" if str(orphan).lower() in ("true", "1") else "Background"
    if policy is None:
        # As the API server: the batch/v1 Job's legacy default leaves its pods behind.
        policy = "Orphan" if kind.key == "jobs.batch" else "Background"
    if policy not in PROPAGATION:
        raise KubeError(
            422,
            "Invalid",
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "{policy}": '
            'supported values: "Foreground", "Background", "Orphan"',
        )
    return str(policy)


def check_preconditions(kind: Kind, obj: dict[str, Any], body: Any) -> None:
    """A delete's ``preconditions`` (``uid``, ``resourceVersion``): 409 Conflict when they differ."""
    pre = (body or {}).get("preconditions") if isinstance(body, dict) else None
    if not pre:
        return
    meta = obj["metadata"]
    for field in ("uid", "resourceVersion"):
        if pre.get(field) and pre[field] != meta.get(field):
            raise KubeError(
                409,
                "Conflict",
                f"Precondition failed: {field.capitalize() if field == 'uid' else 'ResourceVersion'} "
                f"in precondition: {pre[field]}, {field} in object meta: {meta.get(field)}",
                {"name": meta["name"], "group": kind.group, "kind": kind.plural},
            )


def _dependents(store: KubeStore, uid: str) -> list[tuple[Kind, str, str]]:
    found = []
    for kind in KINDS.values():
        for obj in store.iter(kind):
            refs = obj.get("metadata", {}).get("ownerReferences") or []
            if any(ref.get("uid") == uid for ref in refs):
                meta = obj["metadata"]
                found.append((kind, meta.get("namespace", ""), meta["name"]))
    return found


def delete_with_dependents(
    store: KubeStore, kind: Kind, namespace: str, name: str, policy: str
) -> dict[str, Any]:
    """Delete an object and, per ``policy``, its dependents (recursively) or their references to it.

    Deleting a Namespace deletes every object in it. Returns the object as it was.
    """
    deleted = store.delete(kind, namespace, name)
    uid = deleted["metadata"]["uid"]
    for dep_kind, dep_ns, dep_name in _dependents(store, uid):
        if store.find(dep_kind, dep_ns, dep_name) is None:
            continue  # already gone with another dependent
        if policy == "Orphan":

            def drop(obj: dict[str, Any]) -> None:
                refs = obj["metadata"].get("ownerReferences") or []
                kept = [ref for ref in refs if ref.get("uid") != uid]
                if kept:
                    obj["metadata"]["ownerReferences"] = kept
                else:
                    obj["metadata"].pop("ownerReferences", None)

            store.update(dep_kind, dep_ns, dep_name, drop)
        else:
            delete_with_dependents(store, dep_kind, dep_ns, dep_name, "Background")
    if kind.key == "namespaces":
        for other in KINDS.values():
            if other.namespaced:
                for obj in list(store.iter(other, name)):
                    if store.find(other, name, obj["metadata"]["name"]) is not None:
                        delete_with_dependents(store, other, name, obj["metadata"]["name"], "Background")
    return deleted
