"""Fault injection: per-method gRPC errors at a rate, added latency, and the rules' bookkeeping.

A rule is written ``METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL]`` (see the package docstring):

* ``METHOD``: ``*`` (every emulated method of every registered API), ``SERVICE/*``, a full name
  (``google.cloud.aiplatform.v1.JobService/GetCustomJob``) or a short one (``GetCustomJob``).
  REST routes are methods too (``compute.v1/compute.instances.get``, short
  ``compute.instances.get``; :mod:`.rest` maps the codes to HTTP statuses). The control service
  is never subject to faults.
* ``EFFECT``: an error code (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``INTERNAL``,
  ``RESOURCE_EXHAUSTED``), ``latency:SECONDS``, or both joined by a comma.
* ``@RATE``: the probability (0..1) that the rule fires on a matching call (default 1).
* ``xCOUNT``: the rule fires at most COUNT times.
* ``+FROM`` / ``..UNTIL``: the rule is active only from FROM until UNTIL seconds after it was set.

Rules are evaluated in order on every matching call: the latencies of all rules that fire add
up; the first error that fires is the answer. DEADLINE_EXCEEDED is answered *after* the request
was applied (the job is created, the resource deleted): the "unknown outcome" a client must
resolve by looking the request up before it retries. Every decision is drawn from one seeded
``random.Random``, so the same seed and the same call sequence inject the same faults.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import grpc

OPERATIONS_SERVICE = "google.longrunning.Operations"

#: Every emulated method (the ones a fault can target), by service. The core knows only its own
#: Operations service; each API adds its service with :func:`register_methods` when it is loaded.
METHODS: dict[str, tuple[str, ...]] = {
    OPERATIONS_SERVICE: (
        "GetOperation",
        "ListOperations",
        "DeleteOperation",
        "CancelOperation",
        "WaitOperation",
    ),
}
_SHORT_NAMES: dict[str, str] = {m: f"{OPERATIONS_SERVICE}/{m}" for m in METHODS[OPERATIONS_SERVICE]}


def register_methods(service: str, methods: Iterable[str]) -> None:
    """Make ``service``'s methods targetable by fault rules (idempotent; short names must be unique)."""
    names = tuple(methods)
    for name in names:
        full = f"{service}/{name}"
        if _SHORT_NAMES.get(name, full) != full:
            raise ValueError(f"method {name} of {service} clashes with {_SHORT_NAMES[name]}")
    METHODS[service] = names
    _SHORT_NAMES.update({name: f"{service}/{name}" for name in names})


CODES: dict[str, grpc.StatusCode] = {
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "DEADLINE_EXCEEDED": grpc.StatusCode.DEADLINE_EXCEEDED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
}
MESSAGES: dict[str, str] = {
    "UNAVAILABLE": "dws-emulator injected fault: The service is currently unavailable.",
    "DEADLINE_EXCEEDED": "dws-emulator injected fault: Deadline Exceeded (the request was applied).",
    "INTERNAL": "dws-emulator injected fault: Internal error encountered.",
    "RESOURCE_EXHAUSTED": "dws-emulator injected fault: Quota exceeded (429 Too Many Requests).",
}
LATENCY = "LATENCY"  # the pseudo code recorded for an injected delay
HISTORY_LIMIT = 10_000

_NUMBER = r"\d+(?:\.\d*)?|\.\d+"
_SPEC_RE = re.compile(
    rf"(?P<effect>[^@x+.][^@+]*?)"
    rf"(?:@(?P<rate>{_NUMBER}))?"
    rf"(?:x(?P<count>\d+))?"
    rf"(?:\+(?P<start>{_NUMBER}))?"
    rf"(?:\.\.(?P<until>{_NUMBER}))?"
)


class FaultSpecError(ValueError):
    """A fault rule that does not parse or makes no sense."""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def resolve_method(method: str) -> str:
    """Normalize a method pattern: ``*``, ``SERVICE/*`` or a full ``SERVICE/Method`` name."""
    method = method.strip().lstrip("/")
    if method == "*":
        return method
    if "/" not in method:
        if method not in _SHORT_NAMES:
            raise FaultSpecError(
                f"unknown method {method!r}; expected *, SERVICE/*, SERVICE/Method or one of: "
                f"{', '.join(sorted(_SHORT_NAMES))}"
            )
        return _SHORT_NAMES[method]
    service, _, name = method.rpartition("/")
    if service not in METHODS:
        raise FaultSpecError(
            f"unknown service {service!r} in {method!r}; faults apply to: {', '.join(METHODS)}"
        )
    if name != "*" and name not in METHODS[service]:
        raise FaultSpecError(
            f"{service} has no emulated method {name!r}; expected one of: {', '.join(METHODS[service])}"
        )
    return method


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultSpecError(f"{spec!r}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise FaultSpecError(f"{spec!r}: {what} must be a finite number >= 0, got {text!r}")
    return value


@dataclass
class FaultRule:
    """One rule; see the module docstring. ``code`` None means latency only."""

    method: str
    code: str | None = None
    rate: float = 1.0
    latency: float = 0.0
    count: int | None = None
    start: float | None = None  # seconds after the rule was set
    until: float | None = None
    fired: int = 0
    set_at: float = field(default=0.0, repr=False, compare=False)  # monotonic time it was installed

    def __post_init__(self) -> None:
        self.method = resolve_method(self.method)
        where = self.spec
        if self.code is not None:
            self.code = self.code.upper()
            if self.code not in CODES:
                raise FaultSpecError(
                    f"{where!r}: unknown code {self.code!r}; expected one of: {', '.join(CODES)}"
                )
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not 0 <= self.rate <= 1:
            raise FaultSpecError(f"{where!r}: rate must be between 0 and 1, got {self.rate!r}")
        if (
            isinstance(self.latency, bool)
            or not isinstance(self.latency, (int, float))
            or not math.isfinite(self.latency)
            or self.latency < 0
        ):
            raise FaultSpecError(f"{where!r}: latency must be a number of seconds >= 0, got {self.latency!r}")
        if self.code is None and not self.latency:
            raise FaultSpecError(f"{where!r}: a rule needs an error code, a latency > 0, or both")
        if self.count is not None and (
            isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1
        ):
            raise FaultSpecError(f"{where!r}: count must be an integer >= 1, got {self.count!r}")
        for name in ("start", "until"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise FaultSpecError(f"{where!r}: {name} must be a number of seconds >= 0, got {value!r}")
        if self.start is not None and self.until is not None and self.until <= self.start:
            raise FaultSpecError(
                f"{where!r}: the window ends ({self.until:g}s) before it starts ({self.start:g}s)"
            )

    @classmethod
    def parse(cls, spec: str) -> FaultRule:
        """Parse ``METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL]``."""
        method, sep, rest = spec.strip().partition("=")
        if not sep or not method or not rest:
            raise FaultSpecError(
                f"{spec!r}: expected METHOD=EFFECT[@RATE][xCOUNT][+FROM][..UNTIL], "
                "e.g. GetCustomJob=UNAVAILABLE@0.2 or *=latency:0.3"
            )
        try:
            resolve_method(method)
        except FaultSpecError as exc:
            raise FaultSpecError(f"{spec!r}: {exc}") from None
        match = _SPEC_RE.fullmatch(rest.strip())
        if match is None:
            raise FaultSpecError(
                f"{spec!r}: cannot parse {rest!r}; expected EFFECT[@RATE][xCOUNT][+FROM][..UNTIL] "
                "with EFFECT a code, latency:SECONDS, or CODE,latency:SECONDS"
            )
        code: str | None = None
        latency = 0.0
        for item in match["effect"].split(","):
            item = item.strip()
            if item.lower().startswith("latency:"):
                if latency:
                    raise FaultSpecError(f"{spec!r}: latency given twice")
                latency = _number(item.split(":", 1)[1], "latency", spec)
                if latency == 0:
                    raise FaultSpecError(f"{spec!r}: latency must be > 0")
            elif item.upper() in CODES:
                if code is not None:
                    raise FaultSpecError(f"{spec!r}: one error code per rule, got {code} and {item}")
                code = item.upper()
            else:
                raise FaultSpecError(
                    f"{spec!r}: unknown effect {item!r}; expected one of {', '.join(CODES)} or latency:SECONDS"
                )
        rate = 1.0 if match["rate"] is None else _number(match["rate"], "rate", spec)
        count = None if match["count"] is None else int(match["count"])
        start = None if match["start"] is None else _number(match["start"], "FROM", spec)
        until = None if match["until"] is None else _number(match["until"], "UNTIL", spec)
        return cls(method, code, rate, latency, count, start, until)

    @classmethod
    def from_json(cls, value: Any) -> FaultRule:
        """A spec string, or a dict with the fields of :meth:`to_json` (``fired`` ignored)."""
        if isinstance(value, str):
            return cls.parse(value)
        if not isinstance(value, Mapping):
            raise FaultSpecError(f"a fault rule is a spec string or an object, got {value!r}")
        known = {"method", "code", "rate", "latency", "count", "start", "until"}
        unknown = set(value) - known - {"spec", "fired"}
        if unknown:
            raise FaultSpecError(f"unknown fault rule fields: {', '.join(sorted(unknown))}")
        if not isinstance(value.get("method"), str):
            raise FaultSpecError(f"a fault rule needs a method, got {dict(value)!r}")
        code = value.get("code")
        if code is not None and not isinstance(code, str):
            raise FaultSpecError(f"code must be a string, got {code!r}")
        kwargs = {k: value[k] for k in known if k in value and value[k] is not None}
        return cls(**kwargs)

    @property
    def spec(self) -> str:
        """The rule in spec syntax (short method names where unambiguous)."""
        method = self.method.rsplit("/", 1)[1] if self.method in _SHORT_NAMES.values() else self.method
        effects = [e for e in (self.code, f"latency:{self.latency:g}" if self.latency else None) if e]
        text = f"{method}={','.join(effects) or '?'}"
        if self.rate != 1:
            text += f"@{self.rate:g}"
        if self.count is not None:
            text += f"x{self.count}"
        if self.start is not None:
            text += f"+{self.start:g}"
        if self.until is not None:
            text += f"..{self.until:g}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "method": self.method,
            "code": self.code,
            "rate": self.rate,
            "latency": self.latency,
            "count": self.count,
            "start": self.start,
            "until": self.until,
            "fired": self.fired,
        }

    def matches(self, method: str) -> bool:
        if self.method == "*" or self.method == method:
            return True
        return self.method.endswith("/*") and method.startswith(self.method[:-1])


@dataclass
class Decision:
    """What to do to one call: sleep ``latency``, then answer ``code`` (None: handle normally)."""

    latency: float = 0.0
    code: str | None = None


@dataclass
class FaultInjector:
    """The active rules, the seeded generator they draw from, and what was injected.

    ``enabled`` is a plain attribute, so a server without rules pays one attribute read per call.
    """

    rng: random.Random = field(default_factory=random.Random)
    clock: Any = time.monotonic
    wall_clock: Any = time.time

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.rules: list[FaultRule] = []
        self.enabled = False
        self.counts: Counter[tuple[str, str]] = Counter()
        self.history: deque[tuple[str, str, float]] = deque(maxlen=HISTORY_LIMIT)
        self.outages: list[dict[str, Any]] = []

    def set(self, rules: Iterable[Any], *, append: bool = False, seed: int | None = None) -> None:
        """Install rules (spec strings, dicts or :class:`FaultRule`); replaces the old ones unless ``append``.

        Time windows of the new rules count from now. ``seed`` reseeds the generator.
        """
        parsed = [r if isinstance(r, FaultRule) else FaultRule.from_json(r) for r in rules]
        with self.lock:
            if seed is not None:
                self.rng.seed(seed)
            now = self.clock()
            for rule in parsed:
                rule.set_at = now
            self.rules = [*self.rules, *parsed] if append else parsed
            self.enabled = bool(self.rules)

    def clear(self) -> None:
        """Remove every rule (the history of injected faults is kept)."""
        with self.lock:
            self.rules = []
            self.enabled = False

    def decide(self, method: str) -> Decision:
        """Draw the faults for one call of ``method`` (a full ``SERVICE/Method`` name) and record them."""
        decision = Decision()
        with self.lock:
            mono = self.clock()
            for rule in self.rules:
                if not rule.matches(method):
                    continue
                if rule.count is not None and rule.fired >= rule.count:
                    continue
                elapsed = mono - rule.set_at
                if (rule.start is not None and elapsed < rule.start) or (
                    rule.until is not None and elapsed >= rule.until
                ):
                    continue
                if rule.latency == 0 and decision.code is not None:
                    continue  # an error was already chosen; this rule could add nothing
                if rule.rate < 1 and not self.rng.random() < rule.rate:
                    continue
                rule.fired += 1
                decision.latency += rule.latency
                if decision.code is None and rule.code is not None:
                    decision.code = rule.code
            now = self.wall_clock()
            if decision.latency:
                self._record(method, LATENCY, now)
            if decision.code is not None:
                self._record(method, decision.code, now)
        return decision

    def _record(self, method: str, code: str, now: float) -> None:
        self.counts[(method, code)] += 1
        self.history.append((method, code, now))

    def record_outage(self, seconds: float) -> None:
        with self.lock:
            self.outages.append({"start": _iso(self.wall_clock()), "seconds": seconds})

    def to_json(self) -> dict[str, Any]:
        """Rules, counts of injected faults per method and code, the recent history and outages."""
        with self.lock:
            injected: dict[str, dict[str, int]] = {}
            for (method, code), n in sorted(self.counts.items()):
                injected.setdefault(method, {})[code] = n
            return {
                "rules": [rule.to_json() for rule in self.rules],
                "injected": injected,
                "total": sum(n for (_, code), n in self.counts.items() if code != LATENCY),
                "history": [{"method": m, "code": c, "time": _iso(t)} for m, c, t in self.history],
                "outages": list(self.outages),
            }


def parse_specs(specs: Iterable[str]) -> list[FaultRule]:
    """Parse several specs; the first bad one raises :class:`FaultSpecError`."""
    return [FaultRule.parse(spec) for spec in specs]
