"""The aggregate conditions of issue #35 in the query language: what they parse to, how they
print (and parse back), and the errors for what they cannot be."""

from __future__ import annotations

import math

import pytest

from core.errors import QueryError
from monitor.plan.windows import retentions
from monitor.query.ast import AggregateCondition, FieldRef
from monitor.query.load import load_queries
from monitor.query.parser import parse_queries

TYPOLOGIES = """
% structuring: ten or more different payers, each under 10,000, within the last hour
fan_in(b) :=
    transfer(a, b) as t, t.amount < 10000,
    count(distinct a) >= 10 over 1h.

% scatter-gather: five or more intermediaries between a and c within a day
scatter_gather(a, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2, t1.ts <= t2.ts, within 24h, distinct,
    count(distinct b) >= 5 over 24h.

% large outflow: more than 50,000 sent by one account within a day
outflow(a) :=
    transfer(a, b) as t,
    sum(t.amount) > 50000 over 24h.

busy(a) := transfer(a, b) as t, count(*) >= 3, min(t.amount) > -2.5, max(t.amount) <= 1e4.
"""


def test_the_issues_typologies_parse_to_their_conditions() -> None:
    fan_in, scatter, outflow, busy = parse_queries(TYPOLOGIES)
    assert fan_in.head == ("b",) and fan_in.body_variables == ("b", "a")
    assert fan_in.aggregates == (AggregateCondition("count_distinct", "a", ">=", 10),)
    assert fan_in.over == 3_600_000
    assert scatter.aggregates[0].name == "count_distinct_b" and scatter.distinct
    assert scatter.within == scatter.over == 86_400_000
    assert outflow.aggregates == (AggregateCondition("sum", FieldRef("t", "amount"), ">", 50000),)
    assert [c.name for c in busy.aggregates] == ["count", "min_t_amount", "max_t_amount"]
    assert [c.threshold for c in busy.aggregates] == [3, -2.5, 10000]
    assert busy.over is None
    assert (fan_in.aggregates[0].line, fan_in.aggregates[0].column) == (5, 5)


def test_a_query_with_aggregates_prints_as_it_parses() -> None:
    for query in parse_queries(TYPOLOGIES):
        assert parse_queries(str(query)) == (query,), str(query)


def test_count_sum_min_and_max_stay_relation_names() -> None:
    (query,) = parse_queries("q(a, b) := count(a, b) as t, sum(b, a), count(*) > 1.")
    assert [a.relation for a in query.atoms] == ["count", "sum"]
    assert query.aggregates[0].kind == "count"


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        (
            "q(b) := transfer(a, b), count(distinct c) >= 2.",
            "counts 'c', which is not a variable of its body",
            (1, 40),
        ),
        (
            "q(b) := transfer(a, b) as t, sum(u.amount) > 2.",
            "reads edge variable 'u', which no atom binds",
            (1, 34),
        ),
        (
            'q(b) := transfer(a, b) as t, t.kind = "x", sum(t.kind) > 2.',
            "field 'kind' of relation 'transfer' is compared with a number, by 'sum(t.kind) > 2'",
            (1, 44),
        ),
        (
            "q(b) := transfer(a, b) as t, sum(t.id) > 2.",
            "reads 'id', an id",
            (1, 34),
        ),
        (
            "q(b) := transfer(a, b) as t, count(*) >= 2, t.amount > 1.",
            "follows an aggregate condition",
            (1, 45),
        ),
        (
            "q(b) := transfer(a, b) as t, count(*) >= 2 over 1h, sum(t.amount) > 1 over 2h.",
            "the conditions of a query share one window",
            (1, 71),
        ),
        ("q(b) := transfer(a, b), count(*) >= 2 over 1h.", "binds none", (1, 39)),
        (
            "q(b) := transfer(a, b) as t, count(*) >= 2 over soon.",
            "expected a duration like 1h or 24h after 'over'",
            (1, 49),
        ),
        ('q(b) := transfer(a, b), count(*) >= "ten".', "compares with a number", (1, 37)),
        (
            "q(b) := transfer(a, b), count(a) >= 2.",
            "an aggregate condition reads like count(distinct v) or count(*)",
            (1, 25),
        ),
        ("q(b) := transfer(a, b), count(*) 2.", "expected one of", (1, 34)),
        ("q(b) := transfer(a, b) as t, min(*) > 2.", "takes a number field", (1, 34)),
    ],
)
def test_bad_aggregates_are_query_errors_at_their_place(
    text: str, message: str, where: tuple[int, int] | None
) -> None:
    with pytest.raises(QueryError) as raised:
        parse_queries(text)
    assert message in raised.value.message, raised.value.message
    if where is not None:
        assert (raised.value.line, raised.value.column) == where


def test_an_aggregate_query_is_planned_as_its_body() -> None:
    """The engines evaluate the body: every variable it binds in the head, no aggregates; its
    window is the retention its relation needs (events older than ``over`` count in no
    group)."""
    fan_in, scatter, outflow, busy = load_queries(TYPOLOGIES)
    body = scatter.body()
    assert body.head == ("a", "c", "b") and not body.aggregates and body.over is None
    assert body.within == scatter.within and body.distinct and body.atoms == scatter.atoms
    assert busy.body().head == ("a", "b")
    assert outflow.body() is not outflow and fan_in.body().body() == fan_in.body()
    assert retentions([fan_in], {"transfer"}, {}) == {"transfer": 3_600_000}
    assert retentions([fan_in, outflow], {"transfer"}, {}) == {"transfer": 86_400_000}
    assert retentions([busy], {"transfer"}, {}) == {"transfer": math.inf}
