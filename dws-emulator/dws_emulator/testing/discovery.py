"""Every REST call to an emulator, held against Google's discovery documents (a testing aid).

The documents are the ones google-api-python-client ships (``discovery_cache/documents/``), the
ones the emulator's facts were checked against; google-api-python-client is not a dependency of
the emulator: without it, or with a document older than the one the emulator was written against
(:data:`WRITTEN_AGAINST`), :func:`checking` checks nothing (:func:`available` says so). A body is
held against the schema of the method that carried it: a request against ``request.$ref``, an
answer against ``response.$ref``.

What is checked, recursively:

* every field is one the schema names (``additionalProperties`` maps take any key);
* the JSON type of each value (``int64``/``uint64`` travel as strings, ``int32`` as numbers);
* enum values;
* a request carries the fields the document marks required for its method
  (``annotations.required``) and none it marks output-only (``readOnly``);
* an answer carries ``kind`` wherever the schema gives its value (``default``), and that value.

And each route's verb and path must be its method's. :func:`checking` installs the check for a
block (a test): a request the emulator refused is not checked (negative tests send such bodies on
purpose); calls to APIs without a shipped document (Kubernetes) are not either.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.rest import Exchange, observe

_INT_AS_STRING = {"int64", "uint64"}

#: Enum values a schema omits that the same document gives elsewhere: (schema, field) -> values.
#: ``Reservation.status`` lists no INACTIVE, yet ``FutureReservation.reservationName`` says its
#: reservation "is created automatically at the time of Approval with INACTIVE state till specified
#: start-time" (compute v1, revision 20261106).
DOCUMENTED_ELSEWHERE: dict[tuple[str, str], frozenset[str]] = {
    ("Reservation", "status"): frozenset({"INACTIVE"}),
}
_DIGITS = re.compile(r"-?[0-9]+")


def documents_dir() -> Path | None:
    """Where google-api-python-client keeps its discovery documents (``None``: not installed)."""
    try:
        import googleapiclient
    except ImportError:
        return None
    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


#: The revision of each document the emulator was written against: an older one (an older
#: google-api-python-client, as the oldest supported dependencies have) lacks what came since
#: (compute v1 had no regional resize requests in 20260213), so calls are not checked against it.
WRITTEN_AGAINST = {"compute.v1": "20261106", "tpu.v2alpha1": "20261001"}


def available(service: str = "compute.v1") -> bool:
    """Whether ``service``'s document is here, at least as new as :data:`WRITTEN_AGAINST` says."""
    where = documents_dir()
    if where is None or not (where / f"{service}.json").exists():
        return False
    return discovery(service).revision >= WRITTEN_AGAINST.get(service, "")


@dataclass(frozen=True)
class Method:
    """One method of a discovery document: its id, HTTP verb, full path and body schemas."""

    id: str
    http_method: str
    path: str
    request: str | None
    response: str | None


class Discovery:
    """One discovery document (``compute.v1``, ``tpu.v2``...)."""

    def __init__(self, name: str, doc: Mapping[str, Any]) -> None:
        self.name = name
        self.revision = str(doc.get("revision", "?"))
        self.schemas: Mapping[str, Any] = doc.get("schemas", {})
        self.methods: dict[str, Method] = {}
        service_path = str(doc.get("servicePath", ""))
        for raw in _walk_methods(doc.get("resources", {})):
            self.methods[raw["id"]] = Method(
                id=raw["id"],
                http_method=raw["httpMethod"],
                path="/" + service_path + raw.get("flatPath", raw["path"]),
                request=(raw.get("request") or {}).get("$ref"),
                response=(raw.get("response") or {}).get("$ref"),
            )

    def check_request(self, method_id: str, body: Any) -> list[str]:
        """What is wrong with ``body`` as the request of ``method_id``."""
        method = self.methods[method_id]
        if method.request is None:
            return [] if body in (None, {}) else [f"{method_id} takes no body, got {_short(body)}"]
        return list(_Check(self, "request", method_id).ref(method.request, body, method.request))

    def check_response(self, method_id: str, body: Any) -> list[str]:
        """What is wrong with ``body`` as the answer of ``method_id``."""
        method = self.methods[method_id]
        if method.response is None:
            return []
        return list(_Check(self, "response", method_id).ref(method.response, body, method.response))


@functools.cache
def discovery(name: str) -> Discovery:
    """The shipped document ``name`` (``compute.v1``), loaded once."""
    where = documents_dir()
    if where is None:
        raise FileNotFoundError("google-api-python-client (its discovery documents) is not installed")
    return Discovery(name, json.loads((where / f"{name}.json").read_text()))


def _walk_methods(resources: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for resource in resources.values():
        yield from resource.get("methods", {}).values()
        yield from _walk_methods(resource.get("resources", {}))


def same_path(template: str, path: str) -> bool:
    """Whether ``path`` (a template or a real path) matches ``template`` segment for segment; a
    placeholder on either side matches any segment, whatever it is named."""
    a, b = template.strip("/").split("/"), path.strip("/").split("/")
    return len(a) == len(b) and all(
        x == y or x.startswith("{") or y.startswith("{") for x, y in zip(a, b, strict=True)
    )


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class _Check:
    """One walk over one body."""

    def __init__(self, doc: Discovery, direction: str, method_id: str) -> None:
        self.doc = doc
        self.direction = direction
        self.method_id = method_id

    def ref(self, name: str, value: Any, where: str) -> Iterator[str]:
        schema = self.doc.schemas.get(name)
        if schema is None:
            yield f"{where}: schema {name} is not in {self.doc.name}"
            return
        yield from self.value(schema, value, where)

    def value(self, schema: Mapping[str, Any], value: Any, where: str) -> Iterator[str]:
        if "$ref" in schema:
            yield from self.ref(schema["$ref"], value, where)
            return
        kind = schema.get("type")
        if kind == "object":
            yield from self.object(schema, value, where)
        elif kind == "array":
            if not isinstance(value, list):
                yield f"{where}: an array expected, got {_short(value)}"
                return
            for index, item in enumerate(value):
                yield from self.value(schema.get("items", {}), item, f"{where}[{index}]")
        elif kind == "string":
            yield from self.string(schema, value, where)
        elif kind == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                yield f"{where}: an integer expected, got {_short(value)}"
        elif kind == "number":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                yield f"{where}: a number expected, got {_short(value)}"
        elif kind == "boolean":
            if not isinstance(value, bool):
                yield f"{where}: a boolean expected, got {_short(value)}"

    def string(self, schema: Mapping[str, Any], value: Any, where: str) -> Iterator[str]:
        if not isinstance(value, str):
            yield f"{where}: a string expected, got {_short(value)}"
            return
        if schema.get("format") in _INT_AS_STRING and not _DIGITS.fullmatch(value):
            yield f"{where}: a {schema['format']} (digits in a string) expected, got {value!r}"
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            yield f"{where}: {value!r} is not one of {sorted(enum)}"

    def object(self, schema: Mapping[str, Any], value: Any, where: str) -> Iterator[str]:
        if not isinstance(value, dict):
            yield f"{where}: an object expected, got {_short(value)}"
            return
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            field = properties.get(key)
            if field is None:
                if extra is None:
                    yield f"{where}.{key}: not a field of {schema.get('id', 'this object')}"
                else:
                    yield from self.value(extra, item, f"{where}[{key!r}]")
                continue
            if self.direction == "request" and field.get("readOnly"):
                yield f"{where}.{key}: output only, sent in a request"
            if item in DOCUMENTED_ELSEWHERE.get((schema.get("id", ""), key), ()):
                continue
            yield from self.value(field, item, f"{where}.{key}")
        yield from self.required(properties, value, where)

    def required(self, properties: Mapping[str, Any], value: Mapping[str, Any], where: str) -> Iterator[str]:
        for key, field in properties.items():
            if self.direction == "request":
                if self.method_id in field.get("annotations", {}).get("required", ()) and key not in value:
                    yield f"{where}.{key}: required by {self.method_id}, missing"
            elif key == "kind" and "default" in field and value.get("kind") != field["default"]:
                yield f"{where}.kind: {value.get('kind')!r}, the document says {field['default']!r}"


class Conformance:
    """Collects the problems of every observed call (thread-safe: handlers run in a pool)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.checked: set[str] = set()
        self._lock = threading.Lock()
        self._known: dict[str, bool] = {}

    def __call__(self, exchange: Exchange) -> None:
        service = exchange.service
        if service not in self._known:
            self._known[service] = available(service)
        if not self._known[service]:
            return  # Kubernetes (checked against the CRDs elsewhere), or an older document
        found = self.problems_of(exchange)
        with self._lock:
            self.checked.add(exchange.method)
            self.problems.extend(found)

    @staticmethod
    def problems_of(exchange: Exchange) -> list[str]:
        """What is wrong with one exchange."""
        doc = discovery(exchange.service)
        method = doc.methods.get(exchange.method)
        name = f"{exchange.method} ({exchange.http_method} {exchange.path})"
        if method is None:
            return [f"{name}: not a method of {doc.name} revision {doc.revision}"]
        found = []
        if method.http_method != exchange.http_method or not same_path(method.path, exchange.path):
            found.append(f"{name}: the document has {method.http_method} {method.path}")
        if 200 <= exchange.status < 300:
            found += [f"{name} request {p}" for p in doc.check_request(exchange.method, exchange.request)]
            found += [f"{name} answer {p}" for p in doc.check_response(exchange.method, exchange.response)]
        return found


@contextlib.contextmanager
def checking() -> Iterator[Conformance]:
    """Check every REST call made inside the block; read ``.problems`` after it."""
    conformance = Conformance()
    with observe(conformance):
        yield conformance
