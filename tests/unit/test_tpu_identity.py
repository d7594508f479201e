"""RequestIdentity.queued_resource_id: valid, stable, readable and distinct Cloud TPU ids."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from airflow_provider_dws.scheduling.identity import (
    QUEUED_RESOURCE_ID_MAX,
    QUEUED_RESOURCE_ID_RE,
    RequestIdentity,
    attempt_name,
    is_attempt_of,
    parse_attempt_name,
)

# Unicode, uppercase and long strings (up to 300 characters); "\x1f" is refused by the identity.
texts = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_characters="\x1f"), min_size=1, max_size=300),
    st.text(alphabet="ABCxyz019_-.:+~ ", min_size=1, max_size=300),
    st.from_regex(r"[a-z0-9_-]{1,80}", fullmatch=True),
)
map_indexes = st.integers(min_value=-1, max_value=10000)
attempts = st.integers(min_value=1, max_value=99)
tries = st.integers(min_value=1, max_value=999)
identities = st.builds(RequestIdentity, texts, texts, texts, map_indexes, attempts, tries)

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# "<prefix>-<slug>-<16 hex>-t<try>-a<attempt>": the submission is always part of the id.
ID_PARTS = re.compile(
    r"^dws-(?P<slug>[a-z0-9-]+)-(?P<hash>[0-9a-f]{16})-t(?P<try>[0-9]+)-a(?P<attempt>[0-9]+)$"
)


def full_slug(task_id: str) -> str:
    """The task id as the id would show it before shortening."""
    return "-".join(re.findall(r"[a-z0-9]+", task_id.lower()))


@FAST
@given(identities)
def test_id_is_valid_and_short_enough(identity: RequestIdentity) -> None:
    qr_id = identity.queued_resource_id()
    assert QUEUED_RESOURCE_ID_RE.match(qr_id), qr_id
    assert re.fullmatch(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", qr_id), qr_id
    assert len(qr_id) <= QUEUED_RESOURCE_ID_MAX
    assert "--" not in qr_id


@FAST
@given(identities)
def test_id_is_stable(identity: RequestIdentity) -> None:
    again = RequestIdentity(
        identity.dag_id,
        identity.task_id,
        identity.run_id,
        identity.map_index,
        identity.attempt,
        identity.try_number,
    )
    assert again.queued_resource_id() == identity.queued_resource_id()
    assert identity.queued_resource_id() == identity.queued_resource_id()


@FAST
@given(identities)
def test_id_shape_and_attempt_suffix(identity: RequestIdentity) -> None:
    match = ID_PARTS.match(identity.queued_resource_id())
    assert match, identity.queued_resource_id()
    assert match["hash"] == identity.key[:16]
    assert (match["try"], match["attempt"]) == (str(identity.try_number), str(identity.attempt))
    # The id parses back to the shared base, this try and this attempt.
    assert parse_attempt_name(identity.queued_resource_id()) == (
        identity.queued_resource_base(),
        identity.try_number,
        identity.attempt,
    )
    assert is_attempt_of(identity.queued_resource_id(), identity.queued_resource_base())


@FAST
@given(identities, identities)
def test_distinct_task_instances_get_distinct_ids(a: RequestIdentity, b: RequestIdentity) -> None:
    assume((a.dag_id, a.task_id, a.run_id, a.map_index) != (b.dag_id, b.task_id, b.run_id, b.map_index))
    assert a.queued_resource_id() != b.queued_resource_id()
    # Also at the same attempt.
    assert a.queued_resource_id() != b.with_attempt(a.attempt).queued_resource_id()


@FAST
@given(identities, attempts, attempts)
def test_attempts_of_one_task_instance_get_distinct_ids(identity: RequestIdentity, x: int, y: int) -> None:
    assume(x != y)
    a, b = identity.with_attempt(x), identity.with_attempt(y)
    assert a.key == b.key
    assert a.queued_resource_id() != b.queued_resource_id()


@FAST
@given(identities, tries, tries)
def test_tries_of_one_task_instance_get_distinct_ids(identity: RequestIdentity, x: int, y: int) -> None:
    # A retried task never reuses the id of an earlier try's request, even at the same attempt.
    assume(x != y)
    a, b = (
        RequestIdentity(identity.dag_id, identity.task_id, identity.run_id, identity.map_index, 1, t)
        for t in (x, y)
    )
    assert a.queued_resource_id() != b.queued_resource_id()
    assert a.queued_resource_base() == b.queued_resource_base()


@FAST
@given(texts, texts, map_indexes, attempts)
def test_near_identical_task_instances_differ(dag: str, run: str, map_index: int, attempt: int) -> None:
    # Task ids that slugify alike still get different ids.
    a = RequestIdentity(dag, "Train.Model", run, map_index, attempt)
    b = RequestIdentity(dag, "train-model", run, map_index, attempt)
    assert a.queued_resource_id() != b.queued_resource_id()
    if map_index < 10000:
        c = RequestIdentity(dag, "Train.Model", run, map_index + 1, attempt)
        assert a.queued_resource_id() != c.queued_resource_id()


readable_task_ids = st.one_of(
    st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,120}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_characters="\x1f"), max_size=100).map(lambda s: s + "x"),
)


@FAST
@given(texts, readable_task_ids, texts, map_indexes, attempts)
def test_id_contains_a_readable_slug_of_the_task_id(
    dag: str, task: str, run: str, map_index: int, attempt: int
) -> None:
    identity = RequestIdentity(dag, task, run, map_index, attempt)
    match = ID_PARTS.match(identity.queued_resource_id())
    assert match
    slug = match["slug"]
    expected = full_slug(task)
    assert expected, "the strategy always yields an ASCII letter"
    assert slug != "task" or expected.startswith("task")
    # A prefix of the whole slug, cut on a character and never ending with '-'.
    assert expected.startswith(slug), (slug, expected)
    assert not slug.endswith("-")
    assert len(slug) >= min(len(expected.rstrip("-")), 30)


@pytest.mark.parametrize(
    ("task_id", "attempt", "expected_slug"),
    [
        ("fit", 1, "fit"),
        ("Train_Model.v2", 1, "train-model-v2"),
        ("--Ask For TPU!!", 3, "ask-for-tpu"),
        ("ünïcødé", 1, "n-c-d"),
        ("日本語", 1, "task"),
        ("___", 2, "task"),
    ],
)
def test_examples(task_id: str, attempt: int, expected_slug: str) -> None:
    identity = RequestIdentity("dag", task_id, "manual__2026-01-01", 4, attempt)
    assert identity.queued_resource_id() == f"dws-{expected_slug}-{identity.key[:16]}-t1-a{attempt}"


def test_long_task_id_is_cut_to_fit_at_the_largest_attempt() -> None:
    identity = RequestIdentity("dag", "a" * 300, "run", 10000, 999, 999)
    qr_id = identity.queued_resource_id()
    assert len(qr_id) <= QUEUED_RESOURCE_ID_MAX
    assert qr_id.endswith(f"-{identity.key[:16]}-t999-a999")
    assert qr_id.startswith("dws-aaaaaaaa")
    assert qr_id.startswith(identity.queued_resource_base())


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("nightly-slice-t1-a1", ("nightly-slice", 1, 1)),
        ("nightly-slice-t3-a12", ("nightly-slice", 3, 12)),
        ("x-t1-a1-t2-a3", ("x-t1-a1", 2, 3)),
        ("nightly-slice", None),
        ("nightly-slice-a2", None),
        ("nightly-slice-t0-a1", None),
        ("-t1-a1", None),
    ],
)
def test_parse_attempt_name(name: str, parsed: tuple[str, int, int] | None) -> None:
    assert parse_attempt_name(name) == parsed


def test_a_custom_base_cut_to_fit_is_still_recognised() -> None:
    base = "b" * 63
    name = attempt_name(base, 2, 7)
    assert len(name) == QUEUED_RESOURCE_ID_MAX and name.endswith("-t2-a7")
    assert is_attempt_of(name, base)
    assert not is_attempt_of(name, "b" * 10)
    assert not is_attempt_of("nightly-slice-extra-t1-a1", "nightly-slice")
    assert not is_attempt_of("nightly-slice", "nightly-slice")


def test_long_slug_cut_on_a_dash_does_not_end_with_a_dash() -> None:
    for n in range(1, 80):
        identity = RequestIdentity("dag", "a" * n + "-b" * 40, "run", attempt=(n % 99) + 1)
        qr_id = identity.queued_resource_id()
        assert QUEUED_RESOURCE_ID_RE.match(qr_id), qr_id
        assert "--" not in qr_id
