"""RequestIdentity: valid, stable and distinct GCP labels for every task instance."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from airflow_provider_dws.scheduling.identity import (
    RESERVED_LABEL_KEYS,
    RequestIdentity,
    to_label_value,
)

KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")

# Unicode, uppercase and long strings (up to 300 characters).
texts = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x1f"), min_size=1, max_size=300),
    st.text(alphabet="ABCxyz019_-.:+~ ", min_size=1, max_size=300),
    st.from_regex(r"[a-z0-9_-]{1,80}", fullmatch=True),
)
map_indexes = st.integers(min_value=-1, max_value=10000)
identities = st.builds(RequestIdentity, texts, texts, texts, map_indexes)

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(identities)
def test_every_label_is_valid(identity: RequestIdentity) -> None:
    labels = identity.labels()
    assert set(labels) == RESERVED_LABEL_KEYS
    for key, value in labels.items():
        assert KEY_RE.match(key), key
        assert VALUE_RE.match(value), (key, value)


@FAST
@given(identities)
def test_labels_are_stable(identity: RequestIdentity) -> None:
    again = RequestIdentity(identity.dag_id, identity.task_id, identity.run_id, identity.map_index)
    assert again.labels() == identity.labels()
    assert again.key == identity.key
    assert re.fullmatch(r"[0-9a-f]{32}", identity.key)


def test_key_is_the_same_in_every_process() -> None:
    # Hard-coded: a new release (or a fresh process) must find the jobs an older one labelled.
    identity = RequestIdentity("train_dag", "fit", "manual__2026-01-01T00:00:00+00:00", 3)
    assert identity.key == KNOWN_KEY
    assert identity.labels()["dws_key"] == KNOWN_KEY


# sha256("train_dag\x1ffit\x1fmanual__2026-01-01T00:00:00+00:00\x1f3")[:32], computed once and frozen.
KNOWN_KEY = "cb8fcb0fce446aa02ccc622ca2f20c65"


def test_known_digest_literal() -> None:
    assert RequestIdentity("d", "t", "r").key == "e1b0369d8c98f7d756bff129410d3eac"


@FAST
@given(identities, identities)
def test_distinct_task_instances_get_distinct_keys_and_labels(a: RequestIdentity, b: RequestIdentity) -> None:
    assume((a.dag_id, a.task_id, a.run_id, a.map_index) != (b.dag_id, b.task_id, b.run_id, b.map_index))
    assert a.key != b.key
    assert a.labels() != b.labels()


@FAST
@given(texts, texts, texts)
def test_map_indexes_are_distinct(dag: str, task: str, run: str) -> None:
    keys = {RequestIdentity(dag, task, run, i).key for i in (-1, 0, 1, 10, 10000)}
    assert len(keys) == 5


def test_separator_in_a_field_is_refused_so_keys_cannot_collide() -> None:
    # ("a\x1fb", "c") and ("a", "b\x1fc") would join to the same key text.
    with pytest.raises(ValueError, match=r"RequestIdentity.dag_id must not contain the unit separator"):
        RequestIdentity("a\x1fb", "c", "r")
    with pytest.raises(ValueError, match=r"RequestIdentity.task_id must not contain"):
        RequestIdentity("a", "b\x1fc", "r")


@FAST
@given(st.from_regex(r"[a-z0-9_-]{0,63}", fullmatch=True))
def test_valid_values_are_kept(value: str) -> None:
    assert to_label_value(value) == value


@FAST
@given(st.text(max_size=300))
def test_changed_values_are_valid_and_hashed(text: str) -> None:
    assume(not VALUE_RE.match(text))
    value = to_label_value(text)
    assert VALUE_RE.match(value)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    assert value.endswith("-" + digest)
    assert len(value) <= 63


def test_to_label_value_examples() -> None:
    assert to_label_value("my_dag-1") == "my_dag-1"
    assert to_label_value("My.Dag") == "my-dag-" + hashlib.sha256(b"My.Dag").hexdigest()[:8]
    # Two originals that sanitize alike stay distinct.
    assert to_label_value("A.b") != to_label_value("a:B")
    long = "x" * 64
    assert to_label_value(long) == "x" * 54 + "-" + hashlib.sha256(long.encode()).hexdigest()[:8]


def test_label_examples() -> None:
    labels = RequestIdentity("etl", "train", "scheduled__2026", 7, attempt=2).labels()
    assert labels["dws_managed"] == "true"
    assert labels["dws_dag"] == "etl"
    assert labels["dws_task"] == "train"
    assert labels["dws_map"] == "7"
    assert labels["dws_attempt"] == "2"
    assert labels["dws_run"].startswith("scheduled__2026")
    assert RequestIdentity("etl", "train", "r").labels()["dws_map"] == "none"


def test_vertex_filter_format() -> None:
    identity = RequestIdentity("d", "t", "r")
    assert identity.vertex_filter() == 'labels.dws_key="e1b0369d8c98f7d756bff129410d3eac"'


@FAST
@given(identities)
def test_display_name_fits(identity: RequestIdentity) -> None:
    name = identity.display_name()
    assert 0 < len(name) <= 128


def test_display_name_examples() -> None:
    assert RequestIdentity("d", "t", "r").display_name() == "d.t"
    assert RequestIdentity("d", "t", "r", 4).display_name() == "d.t[4]"
    long = RequestIdentity("d" * 200, "t", "r")
    assert long.display_name() == "d" * 119 + "-" + long.key[:8]
    assert len(long.display_name()) == 128


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dag_id": ""}, "dag_id"),
        ({"task_id": ""}, "task_id"),
        ({"run_id": ""}, "run_id"),
        ({"dag_id": None}, "dag_id"),
        ({"task_id": 5}, "task_id"),
        ({"map_index": -2}, "map_index"),
        ({"map_index": "1"}, "map_index"),
        ({"attempt": 0}, "attempt"),
        ({"attempt": 1.0}, "attempt"),
    ],
)
def test_invalid_arguments_name_the_field(kwargs: dict, field: str) -> None:
    args = {"dag_id": "d", "task_id": "t", "run_id": "r", **kwargs}
    with pytest.raises(ValueError, match=rf"^RequestIdentity\.{field} must be "):
        RequestIdentity(**args)


def test_with_attempt_keeps_key_and_changes_attempt_label() -> None:
    first = RequestIdentity("d", "t", "r", 2)
    second = first.with_attempt(3)
    assert second.attempt == 3
    assert first.attempt == 1
    assert second.key == first.key
    assert second.vertex_filter() == first.vertex_filter()
    assert second.labels()["dws_attempt"] == "3"
    assert {k: v for k, v in second.labels().items() if k != "dws_attempt"} == {
        k: v for k, v in first.labels().items() if k != "dws_attempt"
    }
    with pytest.raises(ValueError, match="attempt"):
        first.with_attempt(0)
