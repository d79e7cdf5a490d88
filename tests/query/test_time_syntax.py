"""Tests for event time in the query language: durations, ``ts`` literals, field arithmetic
(``t1.ts + 10m``, ``0.9 * t1.amount``) and ``within``; and their plans."""

from __future__ import annotations

import pytest

from core.errors import InputError
from core.times import format_duration, parse_duration, parse_time
from monitor.plan.events import rewrite
from monitor.plan.planner import delta_queries
from monitor.query import FieldRef, Literal, Predicate, field_types, parse_queries
from tests.query.test_parser import parse_error, parse_one

EXAMPLES = """\
% a ring of three transfers over 1,000, each after the previous one, all within 24 hours
layering_ring(a, b, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
    t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
    t1.ts < t2.ts, t2.ts < t3.ts,
    within 24h,
    distinct.

% money in and straight out: a deposit into b followed by a transfer out of b within 10 minutes
pass_through(a, b, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2,
    t1.ts <= t2.ts, t2.ts <= t1.ts + 10m,
    t2.amount >= 0.9 * t1.amount,
    distinct.
"""


def test_the_issue_examples_parse_with_within_offsets_and_factors() -> None:
    layering, passing = parse_queries(EXAMPLES)
    assert layering.within == 24 * 3_600_000
    assert Predicate(FieldRef("t1", "ts"), "<", FieldRef("t2", "ts")) in layering.predicates
    gap, scaled = passing.predicates[1], passing.predicates[2]
    assert (gap.right, gap.offset, gap.factor) == (FieldRef("t1", "ts"), 600_000.0, 1.0)
    assert (scaled.right, scaled.offset, scaled.factor) == (FieldRef("t1", "amount"), 0.0, 0.9)
    assert field_types([layering, passing])[("transfer", "ts")] == "number"


def test_time_queries_round_trip() -> None:
    for query in parse_queries(EXAMPLES):
        assert parse_one(str(query)) == query
    assert "t2.ts <= t1.ts + 10m" in str(parse_queries(EXAMPLES)[1])
    assert "t2.ts >= t1.ts - 90s" in str(
        parse_one("q(a, b) := e(a, b) as t1, e(b, a) as t2, t2.ts >= t1.ts - 90s.")
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [("500ms", 500), ("30s", 30_000), ("10m", 600_000), ("24h", 86_400_000), ("1.5d", 1.296e8)],
)
def test_durations(text: str, ms: float) -> None:
    assert parse_duration(text) == ms
    assert parse_duration(format_duration(ms)) == ms


def test_a_ts_literal_is_a_time() -> None:
    query = parse_one('q(a, b) := e(a, b) as t, t.ts >= "2026-12-02T10:00:00+01:00".')
    assert query.predicates[0].right == Literal(parse_time("2026-12-02T09:00:00Z"))


def test_times_are_read_from_milliseconds_and_iso_strings_with_an_offset() -> None:
    assert parse_time(1_700_000_000_000) == 1.7e12
    assert parse_time("1970-01-01T00:00:01.5Z") == 1500.0
    for bad in ("2026-12-02T10:00:00", "yesterday", True, [1], 1e300):
        with pytest.raises(InputError, match="'ts'"):
            parse_time(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "e(a, b) as t1, e(b, a) as t2, t1.amount <= t2.amount + 10m.",
            "one side compares a 'ts' field",
        ),
        ("e(a, b) as t1, e(b, a) as t2, t1.ts <= 2 * t2.ts.", "multiplies a time or an id"),
        ("e(a, b) as t1, e(b, a) as t2, t1.ts <= t2.ts + 5.", "expected a duration like 10m"),
        ("e(a, b) as t1, e(b, a) as t2, t1.amount <= t2.amount * 2.", "write the number first"),
        ("e(a, b) as t1, e(b, a) as t2, t1.amount <= 2 * 3.", "expected a field like t.amount"),
        ('e(a, b) as t1, t1.ts >= "2026-12-02".', "has no zone offset"),
        ("e(a, b) as t1, t1.ts = true.", "'ts' is a time"),
        ("e(a, b) as t1, within 10x.", "expected a duration like 10m, 24h or 7d after 'within'"),
        ("e(a, b) as t1, within 1h, within 2h.", "'within' appears twice"),
        ("e(a, b), within 1h.", "binds none"),
    ],
)
def test_bad_time_syntax_is_a_clear_query_error(text: str, message: str) -> None:
    error = parse_error(f"q(a, b) := {text}")
    assert message in str(error), str(error)


def test_within_plans_as_join_filters_between_every_two_edges() -> None:
    (query,) = parse_queries(EXAMPLES.split("\n\n")[0])
    internal = rewrite(query, {"transfer"}).internal
    texts = {str(p) for p in internal.predicates}
    for a, b in (
        ("t1", "t2"),
        ("t2", "t1"),
        ("t1", "t3"),
        ("t3", "t1"),
        ("t2", "t3"),
        ("t3", "t2"),
    ):
        assert f"{a}.ts <= {b}.ts + 1d" in texts
    plans = "\n".join(q.describe() for q in delta_queries(internal))
    assert "ts <= " in plans and "+ 1d" in plans
