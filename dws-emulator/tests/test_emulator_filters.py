"""Unit tests of the AIP-160 list filter parser used by ListCustomJobs."""

from __future__ import annotations

import pytest

from dws_emulator.core.filters import (
    And,
    Compare,
    FilterError,
    Not,
    Or,
    compile_job_filter,
    parse,
)

STATES = {"JOB_STATE_RUNNING", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"}
JOBS = [
    {"state": "JOB_STATE_RUNNING", "display_name": "train_a", "labels": {"team": "ml"}, "create_time": 10.0},
    {"state": "JOB_STATE_FAILED", "display_name": "etl_b", "labels": {"team": "data"}, "create_time": 20.0},
    {"state": "JOB_STATE_SUCCEEDED", "display_name": "etl_c", "labels": {"a-b": "x"}, "create_time": 30.0},
]


def matching(text: str) -> list[str]:
    predicate = compile_job_filter(text, STATES)
    return [job["display_name"] for job in JOBS if predicate(job)]


def test_or_binds_tighter_than_and() -> None:
    # AIP-160: a AND b OR c == a AND (b OR c)
    state = Compare(("state",), "=", "A", True)
    name = Compare(("display_name",), "=", "B", True)
    label = Compare(("labels", "k"), ":", "*", False)
    assert parse('state="A" AND display_name="B" OR labels.k:*') == And(state, Or(name, label))
    assert parse('NOT state="A" display_name="B"') == And(Not(state), name)
    assert parse("   ") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["train_a", "etl_b", "etl_c"]),
        ("state=JOB_STATE_RUNNING", ["train_a"]),
        ("state != 'JOB_STATE_RUNNING'", ["etl_b", "etl_c"]),
        ('display_name:"etl_*"', ["etl_b", "etl_c"]),
        ('display_name:"etl"', []),
        ("labels.team:*", ["train_a", "etl_b"]),
        ('labels.team:"ml"', ["train_a"]),
        ("labels.team!=ml", ["etl_b", "etl_c"]),
        ('labels."a-b"=x', ["etl_c"]),
        ('labels:"a-b"', ["etl_c"]),
        (
            'display_name:"etl_*" AND state="JOB_STATE_FAILED" OR state="JOB_STATE_SUCCEEDED"',
            ["etl_b", "etl_c"],
        ),
        ('(state="JOB_STATE_RUNNING" OR state="JOB_STATE_FAILED") AND labels.team="data"', ["etl_b"]),
    ],
)
def test_filters_match(text: str, expected: list[str]) -> None:
    assert matching(text) == expected


def test_create_time_comparisons() -> None:
    predicate = compile_job_filter('create_time>="1970-01-01T00:00:20Z"', STATES)
    assert [j["display_name"] for j in JOBS if predicate(j)] == ["etl_b", "etl_c"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("state=", "expected a value after '='"),
        ("AND state=x", "expected a field name"),
        ('state="JOB_STATE_RUNNING")', "expected AND, OR or end of filter"),
        ("state<JOB_STATE_RUNNING", "state supports only = and !="),
        ("state=NOPE", "unknown job state 'NOPE'"),
        ("labels.a.b=c", "unsupported field 'labels.a.b'"),
        ("labels=x", "labels supports only ':'"),
        ("display_name>x", "display_name supports only"),
        ("create_time:x", "does not support ':'"),
        ("name=x", "unsupported filter field 'name'"),
        # Not a documented ListCustomJobs filter field: a client relying on it would break on the API.
        ('update_time>"2026-01-01T00:00:00Z"', "unsupported filter field 'update_time'"),
        ("state=JOB_STATE_RUNNING OR", "expected a field name"),
        ("state==x", "expected a value"),
        ("state=x !", "unexpected character '!'"),
        ("'open", "unterminated string"),
    ],
)
def test_malformed_filters(text: str, message: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_job_filter(text, STATES)
    assert message in str(info.value)
