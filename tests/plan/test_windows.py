"""Spans of queries (the bound their time predicates put on two events) and default retention."""

from __future__ import annotations

import math

import pytest

from core.times import parse_retention
from monitor.plan.windows import describe, retentions, span
from monitor.query.parser import parse_queries

MINUTE = 60_000


def one(text: str):  # type: ignore[no-untyped-def]
    return parse_queries(text)[0]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("q(a, b) := t(a, b) as x, t(b, a) as y, within 15m.", 15),
        ("q(a, b, c) := t(a, b) as x, t(b, c) as y, x.ts <= y.ts, y.ts <= x.ts + 10m.", 10),
        # order and within: the bound is within's
        (
            "q(a, b, c) := t(a, b) as x, t(b, c) as y, t(c, a) as z, x.ts < y.ts, y.ts < z.ts,"
            " within 24h.",
            24 * 60,
        ),
        # a chain of gaps: x..y at most 5m, y..z at most 7m, order known: x..z at most 12m
        (
            "q(a, b, c) := t(a, b) as x, t(b, c) as y, t(c, a) as z, x.ts <= y.ts,"
            " y.ts <= x.ts + 5m, y.ts <= z.ts, z.ts <= y.ts + 7m.",
            12,
        ),
        # both directions bounded by gaps on either side
        ("q(a, b) := t(a, b) as x, t(b, a) as y, y.ts >= x.ts - 5m, y.ts <= x.ts + 3m.", 5),
        ("q(a, b) := t(a, b) as x, within 1m.", 0),
    ],
)
def test_the_span_is_the_tightest_bound_the_predicates_give(text: str, minutes: float) -> None:
    assert span(one(text)) == minutes * MINUTE


@pytest.mark.parametrize(
    "text",
    [
        "q(a, b, c) := t(a, b) as x, t(b, c) as y, x.ts < y.ts.",  # order only: no bound
        "q(a, b, c) := t(a, b) as x, t(b, c) as y, y.ts <= x.ts + 10m.",  # one side only
        "q(a, b, c) := t(a, b) as x, t(b, c) as y, y.amount >= 0.5 * x.amount.",
        "q(a, b) := t(a, b), t(b, a).",  # no edge variable at all
        'q(a, b) := t(a, b) as x, x.channel = "wire".',  # one event, no time at all
    ],
)
def test_an_unbounded_query_spans_forever(text: str) -> None:
    assert math.isinf(span(one(text)))


def test_retention_is_the_longest_span_of_the_queries_reading_a_relation() -> None:
    queries = parse_queries(
        """
        a(x, y) := transfer(x, y) as t, transfer(y, x) as u, within 1h.
        b(x, y) := transfer(x, y) as t, transfer(y, x) as u, within 2h.
        c(x, y) := login(x, y) as l, login(y, x) as m, within 5m.
        d(x, y) := login(x, y) as l, device(x, y).
        e(x, y) := payout(x, y) as p, payout(y, x) as q, within 1d.
        """
    )
    found = retentions(queries, {"transfer", "login", "payout"}, {"payout": 30 * MINUTE})
    # d reads login with a tuple relation beside it: a device may come any time later
    assert found == {"transfer": 120 * MINUTE, "login": math.inf, "payout": 30 * MINUTE}
    assert describe(found) == "login forever, payout 30m, transfer 2h"


def test_retention_settings_parse_durations_and_forever() -> None:
    assert parse_retention("transfer=24h, logins=90s,x=none") == {
        "transfer": 24 * 60 * MINUTE,
        "logins": 90_000,
        "x": math.inf,
    }
    for bad in ("transfer", "transfer=", "=1h", "transfer=24 hours", "transfer=1y"):
        with pytest.raises(ValueError, match=r"transfer=24h|duration"):
            parse_retention(bad)
