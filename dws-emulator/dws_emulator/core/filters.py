"""A small AIP-160 filter parser for list filters (``ListCustomJobs``, Batch ``ListJobs``/``ListTasks``).

Supported (the subset Vertex AI documents for jobs):

* ``state="JOB_STATE_RUNNING"``, ``state!=...`` (the value must be a ``JobState`` name)
* ``display_name="x"``, ``display_name!="x"``, ``display_name:"my_job_*"`` (``:`` matches the
  whole name with ``*`` as a wildcard)
* ``create_time>"2021-05-18T00:00:00Z"`` with ``= != < <= > >=``, RFC 3339 (``update_time`` is
  refused: the API does not document it as a filter field, so a client must not rely on it)
* ``labels.key="value"``, ``labels.key!="value"``, ``labels.key:*`` (has key), ``labels:key``,
  ``labels."key-with-dash"="v"``
* ``AND``, ``OR``, ``NOT`` (also ``-`` directly before a term), parentheses, and juxtaposition
  as an implicit ``AND``.

Precedence follows AIP-160, where ``OR`` binds *tighter* than ``AND``:
``a AND b OR c`` means ``a AND (b OR c)``. Anything else raises :class:`FilterError`, which the
server turns into ``INVALID_ARGUMENT``.

Filters are evaluated against a plain dict record with keys ``state`` (enum name),
``display_name``, ``labels`` (dict) and ``create_time`` (epoch seconds). An API whose state field
is spelled differently (Cloud Batch's ``status.state``) passes ``state_field``; ``fields`` limits
the fields it accepts (the others are refused as unsupported); ``id_fields`` are fields compared
whole with ``=`` and ``!=`` only (a resource id: ListEndpoints' ``endpoint``), read from the
record under the same key.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


class FilterError(ValueError):
    """The filter string is malformed or uses an unsupported field or operator."""


@dataclass(frozen=True)
class Token:
    kind: str  # "word", "string", "op", "(", ")", ".", "end"
    text: str
    pos: int


_OPS = ("!=", "<=", ">=", "=", ":", "<", ">")
_WORD_RE = re.compile(r"[^\s()=!:<>.\"']+")


def tokenize(text: str) -> list[Token]:
    """Split a filter into tokens; strings may use single or double quotes with ``\\`` escapes."""
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "().":
            tokens.append(Token(ch, ch, i))
            i += 1
        elif ch in "\"'":
            start, i = i, i + 1
            chars: list[str] = []
            while True:
                if i >= len(text):
                    raise FilterError(f"unterminated string starting at position {start}")
                if text[i] == "\\" and i + 1 < len(text):
                    chars.append(text[i + 1])
                    i += 2
                elif text[i] == ch:
                    i += 1
                    break
                else:
                    chars.append(text[i])
                    i += 1
            tokens.append(Token("string", "".join(chars), start))
        else:
            for op in _OPS:
                if text.startswith(op, i):
                    tokens.append(Token("op", op, i))
                    i += len(op)
                    break
            else:
                match = _WORD_RE.match(text, i)
                if not match:
                    raise FilterError(f"unexpected character {ch!r} at position {i}")
                tokens.append(Token("word", match.group(), i))
                i = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


# --- AST -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compare:
    path: tuple[str, ...]
    op: str
    value: str
    value_is_string: bool


@dataclass(frozen=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True)
class Or:
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    operand: Node


Node = Compare | And | Or | Not

_KEYWORDS = {"AND", "OR", "NOT"}


class _Parser:
    """Recursive descent over the AIP-160 grammar (expression > sequence > factor > term)."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def is_word(self, word: str) -> bool:
        tok = self.peek()
        return tok.kind == "word" and tok.text == word

    def fail(self, what: str) -> FilterError:
        tok = self.peek()
        found = "end of filter" if tok.kind == "end" else repr(tok.text)
        return FilterError(f"expected {what} at position {tok.pos}, found {found}")

    def parse(self) -> Node:
        node = self.expression()
        if self.peek().kind != "end":
            raise self.fail("AND, OR or end of filter")
        return node

    def expression(self) -> Node:
        node = self.sequence()
        while self.is_word("AND"):
            self.take()
            node = And(node, self.sequence())
        return node

    def _starts_term(self) -> bool:
        tok = self.peek()
        if tok.kind == "(":
            return True
        return tok.kind in ("word", "string") and tok.text not in ("AND", "OR")

    def sequence(self) -> Node:
        node = self.factor()
        while self._starts_term():  # juxtaposition = implicit AND
            node = And(node, self.factor())
        return node

    def factor(self) -> Node:
        node = self.term()
        while self.is_word("OR"):
            self.take()
            node = Or(node, self.term())
        return node

    def term(self) -> Node:
        if self.is_word("NOT"):
            self.take()
            return Not(self.simple())
        tok = self.peek()
        if tok.kind == "word" and tok.text.startswith("-") and len(tok.text) > 1:
            # "-state=..." negates; split the "-" off the word.
            self.tokens[self.i] = Token("word", tok.text[1:], tok.pos + 1)
            return Not(self.simple())
        return self.simple()

    def simple(self) -> Node:
        if self.peek().kind == "(":
            self.take()
            node = self.expression()
            if self.peek().kind != ")":
                raise self.fail("')'")
            self.take()
            return node
        return self.restriction()

    def restriction(self) -> Node:
        tok = self.peek()
        if tok.kind != "word" or tok.text in _KEYWORDS:
            raise self.fail("a field name")
        path = [self.take().text]
        while self.peek().kind == ".":
            self.take()
            part = self.peek()
            if part.kind not in ("word", "string"):
                raise self.fail("a field name after '.'")
            path.append(self.take().text)
        if self.peek().kind != "op":
            raise self.fail(f"a comparison operator after {'.'.join(path)!r}")
        op = self.take().text
        value = self.peek()
        if value.kind not in ("word", "string") or (value.kind == "word" and value.text in _KEYWORDS):
            raise self.fail(f"a value after {op!r}")
        self.take()
        return Compare(tuple(path), op, value.text, value.kind == "string")


def parse(text: str) -> Node | None:
    """Parse a filter; an empty or blank filter gives ``None`` (match everything)."""
    if not text.strip():
        return None
    return _Parser(text).parse()


# --- job semantics -------------------------------------------------------------------------
def _parse_time(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise FilterError(f"{value!r} is not an RFC 3339 timestamp") from None


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "=":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


Predicate = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class _Spec:
    states: Collection[str]
    state_field: str
    fields: Collection[str] | None
    id_fields: Collection[str] = ()


def _compile_compare(node: Compare, spec: _Spec) -> Predicate:
    field = ".".join(node.path)
    head, op, value = node.path[0], node.op, node.value
    if spec.fields is not None and head not in spec.fields and field != spec.state_field:
        raise FilterError(f"unsupported filter field {field!r}")
    states = spec.states
    if field == spec.state_field:
        if op not in ("=", "!="):
            raise FilterError(f"state supports only = and !=, not {op!r}")
        if value not in states:
            raise FilterError(f"unknown job state {value!r}")
        return lambda rec: _compare(op, rec["state"], value)
    if head in spec.id_fields and len(node.path) == 1:
        if op not in ("=", "!="):
            raise FilterError(f"{head} supports only = and !=, not {op!r}")
        return lambda rec: _compare(op, rec[head], value)
    if head == "display_name" and len(node.path) == 1:
        if op == ":":
            return lambda rec: fnmatch.fnmatchcase(rec["display_name"], value)
        if op not in ("=", "!="):
            raise FilterError(f"display_name supports only =, != and :, not {op!r}")
        return lambda rec: _compare(op, rec["display_name"], value)
    if head == "create_time" and len(node.path) == 1:
        if op == ":":
            raise FilterError(f"{head} does not support ':'")
        when = _parse_time(value)
        return lambda rec: _compare(op, rec[head], when)
    if head == "labels":
        if len(node.path) == 1:
            if op != ":":
                raise FilterError("labels supports only ':' (has key), e.g. labels:key")
            return lambda rec: value in rec["labels"]
        if len(node.path) != 2:
            raise FilterError(f"unsupported field {field!r}")
        key = node.path[1]
        if op == ":":
            if value == "*" and not node.value_is_string:
                return lambda rec: key in rec["labels"]
            return lambda rec: rec["labels"].get(key) == value
        if op == "=":
            return lambda rec: rec["labels"].get(key) == value
        if op == "!=":
            return lambda rec: rec["labels"].get(key) != value
        raise FilterError(f"labels supports only =, != and :, not {op!r}")
    raise FilterError(f"unsupported filter field {field!r}")


def _compile(node: Node, spec: _Spec) -> Predicate:
    if isinstance(node, Compare):
        return _compile_compare(node, spec)
    if isinstance(node, Not):
        inner = _compile(node.operand, spec)
        return lambda rec: not inner(rec)
    left, right = _compile(node.left, spec), _compile(node.right, spec)
    if isinstance(node, And):
        return lambda rec: left(rec) and right(rec)
    return lambda rec: left(rec) or right(rec)


def compile_job_filter(
    text: str,
    states: Collection[str],
    *,
    state_field: str = "state",
    fields: Collection[str] | None = None,
    id_fields: Collection[str] = (),
) -> Predicate:
    """Compile a list filter into a predicate over a record dict.

    ``state_field`` is how the filter spells the state (``status.state`` for Cloud Batch), whose
    value must be one of ``states``; ``fields`` (top-level names) limits what else may be used;
    ``id_fields`` (listed in ``fields`` too when that is given) take ``=`` and ``!=`` only.
    """
    node = parse(text)
    if node is None:
        return lambda rec: True
    return _compile(node, _Spec(states, state_field, fields, id_fields))
