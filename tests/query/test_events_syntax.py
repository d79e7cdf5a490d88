"""Tests for edge variables (``as``), field predicates and field types in the query language."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import QueryError
from monitor.query import (
    FILTER_OPERATORS,
    ID_FIELDS,
    PREDICATE_OPERATORS,
    Atom,
    FieldRef,
    Filter,
    Literal,
    Predicate,
    Query,
    field_types,
    parse_queries,
)
from tests.query.test_parser import parse_error, parse_one

EXAMPLES = """\
% three transfers of 1,000 or more that form a ring
big_ring(a, b, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
    t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
    t2.amount <= t1.amount, t3.amount <= t2.amount,
    t1.channel != "cash",
    distinct.

shared_device(a, b, d) := uses_device(a, d), uses_device(b, d), transfer(a, b), distinct.
flag(a, b) := transfer(a, b) as t, t.suspicious = true, t.amount > -2.5e3.
"""


def field(edge: str, name: str) -> FieldRef:
    return FieldRef(edge, name)


# ---------------------------------------------------------------------------------------------
# the examples


def test_big_ring_binds_edges_and_compares_their_fields() -> None:
    big_ring = parse_queries(EXAMPLES)[0]
    assert big_ring.head == ("a", "b", "c")
    assert big_ring.atoms == (
        Atom("transfer", ("a", "b"), edge="t1"),
        Atom("transfer", ("b", "c"), edge="t2"),
        Atom("transfer", ("c", "a"), edge="t3"),
    )
    assert [atom.edge for atom in big_ring.atoms] == ["t1", "t2", "t3"]
    assert big_ring.edges == ("t1", "t2", "t3")
    assert big_ring.predicates == (
        Predicate(field("t1", "amount"), ">=", Literal(1000)),
        Predicate(field("t2", "amount"), ">=", Literal(1000)),
        Predicate(field("t3", "amount"), ">=", Literal(1000)),
        Predicate(field("t2", "amount"), "<=", field("t1", "amount")),
        Predicate(field("t3", "amount"), "<=", field("t2", "amount")),
        Predicate(field("t1", "channel"), "!=", Literal("cash")),
    )
    assert [p.is_selection for p in big_ring.predicates] == [True, True, True, False, False, True]
    assert big_ring.predicates[3].edges == ("t2", "t1")
    thresholds = [p.right for p in big_ring.predicates[:3]]
    assert all(isinstance(r, Literal) and type(r.value) is int for r in thresholds)
    assert big_ring.distinct
    assert big_ring.filters == ()
    assert big_ring.has_events


def test_shared_device_has_no_events() -> None:
    shared = parse_queries(EXAMPLES)[1]
    assert shared.atoms == (
        Atom("uses_device", ("a", "d")),
        Atom("uses_device", ("b", "d")),
        Atom("transfer", ("a", "b")),
    )
    assert all(atom.edge is None for atom in shared.atoms)
    assert shared.predicates == ()
    assert shared.distinct
    assert not shared.has_events


def test_flag_compares_with_a_boolean_and_a_negative_float() -> None:
    flag = parse_queries(EXAMPLES)[2]
    assert flag.atoms == (Atom("transfer", ("a", "b"), edge="t"),)
    suspicious, amount = flag.predicates
    assert (suspicious.left, suspicious.op, suspicious.right) == (
        field("t", "suspicious"),
        "=",
        Literal(True),
    )
    assert isinstance(suspicious.right, Literal)
    assert suspicious.right.value is True
    assert suspicious.right.kind == "bool"
    assert (amount.left, amount.op) == (field("t", "amount"), ">")
    assert isinstance(amount.right, Literal)
    assert type(amount.right.value) is float
    assert amount.right.value == -2500.0
    assert suspicious.is_selection
    assert amount.is_selection


def test_examples_fix_the_field_types() -> None:
    assert field_types(parse_queries(EXAMPLES)) == {
        ("transfer", "amount"): "number",
        ("transfer", "channel"): "string",
        ("transfer", "suspicious"): "bool",
    }


def test_examples_round_trip() -> None:
    queries = parse_queries(EXAMPLES)
    for query in queries:
        assert parse_one(str(query)) == query
    assert parse_queries("\n".join(map(str, queries))) == queries


def test_positions_of_predicates_and_bound_atoms() -> None:
    big_ring, _, flag = parse_queries(EXAMPLES)
    assert [(a.line, a.column) for a in big_ring.atoms] == [(3, 5), (3, 27), (3, 49)]
    assert [(p.line, p.column) for p in big_ring.predicates] == [
        (4, 5),
        (4, 24),
        (4, 43),
        (5, 5),
        (5, 29),
        (6, 5),
    ]
    assert [(p.line, p.column) for p in flag.predicates] == [(10, 36), (10, 57)]


# ---------------------------------------------------------------------------------------------
# tokens: the query-ending '.', numbers, strings


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("1000", 1000),
        ("-5", -5),
        ("0", 0),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ("-2.5e3", -2500.0),
        ("1E3", 1000.0),
        ("1e+16", 1e16),
        ("2.5e-3", 0.0025),
        ("-0.0", -0.0),
        ('"cash"', "cash"),
        ('""', ""),
        (r'"say \"hi\""', 'say "hi"'),
        (r'"back\\slash"', "back\\slash"),
        ('"a.b, c) % not a comment"', "a.b, c) % not a comment"),
        ("true", True),
        ("false", False),
    ],
)
def test_literals(literal: str, value: object) -> None:
    query = parse_one(f"q(a, b) := e(a, b) as t, t.x = {literal}.")
    (predicate,) = query.predicates
    assert isinstance(predicate.right, Literal)
    assert predicate.right.value == value
    assert type(predicate.right.value) is type(value)
    assert parse_one(str(query)) == query


@pytest.mark.parametrize(
    "text",
    [
        "q(a, b) := e(a, b) as t, t.x >= 1000.",
        "q(a, b) := e(a, b) as t, t.x >= 1000.\n",
        "q(a, b) := e(a, b) as t, t.x >= 1000.% comment",
        "q(a, b) := e(a, b) as t, t.x >= 1000.# comment",
        "q(a, b) := e(a, b) as t, t.x >= 1000 .",
        "q(a,b):=e(a,b)as t,t.x>=1000.",
    ],
)
def test_the_dot_after_a_number_ends_the_query(text: str) -> None:
    query = parse_one(text)
    assert query.predicates == (Predicate(field("t", "x"), ">=", Literal(1000)),)


def test_a_dot_between_digits_is_a_decimal_point() -> None:
    first, second = parse_queries(
        "p(a, b) := e(a, b) as t, t.x > 2.5. q(a, b) := e(a, b) as t, t.x < 3.5e1."
    )
    assert first.predicates[0].right == Literal(2.5)
    assert second.predicates[0].right == Literal(35.0)


def test_a_dot_after_a_field_or_a_boolean_ends_the_query() -> None:
    first, second = parse_queries(
        "p(a, b) := e(a, b) as t, e(b, a) as u, t.x != u.x.\n"
        "q(a, b) := e(a, b) as t, t.ok = false.\n"
    )
    assert first.predicates[0].right == field("u", "x")
    assert second.predicates[0].right == Literal(False)


def test_predicates_without_spaces() -> None:
    query = parse_one('q(a,b):=e(a,b)as t,e(b,a)as u,t.x>-5,t.y="z",t.x<=u.x,t.id!=u.id.')
    assert [str(p) for p in query.predicates] == [
        "t.x > -5",
        't.y = "z"',
        "t.x <= u.x",
        "t.id != u.id",
    ]


@pytest.mark.parametrize("op", PREDICATE_OPERATORS)
def test_every_predicate_operator(op: str) -> None:
    query = parse_one(f"q(a, b) := e(a, b) as t, e(b, a) as u, t.x {op} 1, t.x {op} u.x.")
    assert [p.op for p in query.predicates] == [op, op]


def test_id_fields_compare_with_each_other_and_with_string_or_number_literals() -> None:
    query = parse_one(
        "q(a, b) := e(a, b) as t, e(b, a) as u,\n"
        '  t.src = u.dst, t.dst != u.src, t.id != u.id, t.src = "alice", u.id = 17.'
    )
    assert [str(p) for p in query.predicates] == [
        "t.src = u.dst",
        "t.dst != u.src",
        "t.id != u.id",
        't.src = "alice"',
        "u.id = 17",
    ]
    assert field_types([query]) == {}
    assert set(ID_FIELDS) == {"id", "src", "dst"}


def test_items_in_any_order_and_predicates_before_their_atom() -> None:
    query = parse_one("q(a, b) := t.x > 1, distinct, a < b, e(a, b) as t.")
    assert query.predicates == (Predicate(field("t", "x"), ">", Literal(1)),)
    assert query.atoms == (Atom("e", ("a", "b"), edge="t"),)
    assert query.filters == (Filter("a", "<", "b"),)
    assert query.distinct


def test_keywords_of_other_positions_stay_usable() -> None:
    query = parse_one("q(true, b) := e(true, b) as t, t.as = 1, t.distinct = 2, true < b.")
    assert query.head == ("true", "b")
    assert [p.left.name for p in query.predicates] == ["as", "distinct"]


def test_equals_between_vertex_variables_is_still_refused() -> None:
    error = parse_error("q(a, b) := e(a, b) as t, a = b.")
    assert error.message == (
        "'=' is not a filter operator in query 'q'; filters use one of <, <=, >, >=, != "
        "(to require equal values, use the same variable twice)"
    )
    assert (error.line, error.column, error.name) == (1, 28, "q")


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("text", "part", "line", "column", "name"),
    [
        pytest.param(
            "q(a, b) := r(a, b, b) as t.",
            "atom 'r(a, b, b)' binds edge variable 't' with 'as', but only binary relations "
            "hold events (src, dst)",
            1,
            26,
            "t",
            id="as-on-ternary",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t,\n  e(b, a) as t.",
            "edge variable 't' is bound twice in query 'q' (first by 'e(a, b) as t' at line 1, "
            "column 12)",
            2,
            14,
            "t",
            id="edge-bound-twice",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as b.",
            "'b' is both an edge variable and a vertex variable (in 'e(a, b) as b')",
            1,
            23,
            "b",
            id="edge-is-a-vertex-variable",
        ),
        pytest.param(
            "q(a, b, t) := e(a, b) as t.",
            "'t' is listed in the head of query 'q' but is an edge variable (bound by "
            "'e(a, b) as t'); the head lists vertex variables only",
            1,
            9,
            "t",
            id="edge-in-head",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, u.amount > 5.",
            "predicate 'u.amount > 5' of query 'q' uses edge variable 'u', which no atom binds",
            1,
            26,
            "u",
            id="unbound-edge-left",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.amount > u.amount.",
            "uses edge variable 'u', which no atom binds",
            1,
            37,
            "u",
            id="unbound-edge-right",
        ),
        pytest.param(
            "p(a, b) := e(a, b) as t.\nq(a, b) := e(a, b), t.amount > 5.",
            "predicate 't.amount > 5' of query 'q' uses edge variable 't', which no atom binds",
            2,
            21,
            "t",
            id="edge-bound-in-another-query",
        ),
        pytest.param(
            "q(a, b) := e(a, b), a.amount > 5.",
            "reads field 'amount' of vertex variable 'a'; fields belong to events",
            1,
            21,
            "a",
            id="field-of-a-vertex-variable",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.amount <= t.amount.",
            "predicate 't.amount <= t.amount' of query 'q' compares field 't.amount' with itself",
            1,
            26,
            "amount",
            id="field-with-itself",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, t.channel < "cash".',
            "compares field 'channel' with a string using '<'; <, <=, > and >= need numbers, "
            "and strings and booleans compare with = and != only",
            1,
            36,
            "channel",
            id="order-with-string",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.ok >= true.",
            "compares field 'ok' with a boolean using '>='; <, <=, > and >= need numbers",
            1,
            31,
            "ok",
            id="order-with-boolean",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.src > 5.",
            "orders field 'src', the source vertex id, with '>'; id, src and dst compare with = "
            "and != only",
            1,
            32,
            "src",
            id="order-on-src",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, e(b, a) as u, t.id < u.id.",
            "orders field 'id', the event id, with '<'",
            1,
            45,
            "id",
            id="order-on-id",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.dst = false.",
            "compares field 'dst', the destination vertex id, with false; id, src and dst "
            "compare with = and != only, against a string or number literal",
            1,
            34,
            "dst",
            id="id-field-with-boolean",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.amount = t.src.",
            "compares field 'src', the source vertex id, with field 'amount'",
            1,
            26,
            "amount",
            id="id-field-with-a-plain-field",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, e(b, a) as u, t.src != u.amount.",
            "compares field 'src', the source vertex id, with field 'amount'",
            1,
            49,
            "amount",
            id="id-field-with-a-plain-field-right",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, t.amount > 5,\n    t.amount = "5".',
            "field 'amount' of relation 'e' is compared with a string here but with a number at "
            "line 1, column 26; a field has one type",
            2,
            5,
            "amount",
            id="two-types-in-one-query",
        ),
        pytest.param(
            "p(a, b) := transfer(a, b) as t, t.amount >= 1000.\n"
            'q(a, b) := transfer(a, b) as u, u.amount = "x".',
            "field 'amount' of relation 'transfer' is compared with a string here but with a "
            "number at line 1, column 33; a field has one type",
            2,
            33,
            "amount",
            id="two-types-across-queries",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, e(b, a) as u, t.x = u.y, u.y = true, t.x = 1.",
            "field 'x' of relation 'e' is compared with a number here but with field 'y' of "
            "relation 'e' (a boolean) at line 1, column 40; a field has one type",
            1,
            63,
            "x",
            id="type-through-a-field-comparison",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, e(b, a) as u, t.x = 1, u.y = "s", t.x != u.y.',
            "field 'y' of relation 'e' is compared with field 'x' of relation 'e' (a number) "
            "here but with a string at line 1, column 49; a field has one type",
            1,
            60,
            "y",
            id="field-comparison-of-two-types",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, e(b, a) as u, t.c = "s", t.c < u.c.',
            "field 'c' of relation 'e' is compared with field 'c' of relation 'e' using '<' "
            "(numbers only) here but with a string at line 1, column 40",
            1,
            51,
            "c",
            id="ordering-string-fields",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, e(b, a) as u, t.c <= u.d, u.d = false.",
            "field 'd' of relation 'e' is compared with a boolean here but with field 'c' of "
            "relation 'e' using '<=' (numbers only) at line 1, column 40",
            1,
            52,
            "d",
            id="ordered-field-then-boolean",
        ),
        pytest.param(
            "q(as) := e(as).",
            "'as' is a keyword, not a variable, in the head of query 'q'",
            1,
            3,
            "as",
            id="as-in-head",
        ),
        pytest.param(
            "q(a) := e(as).",
            "'as' is a keyword, not a variable, in atom 'e' of query 'q'",
            1,
            11,
            "as",
            id="as-in-atom",
        ),
        pytest.param(
            "q(a, b) := as(a, b).",
            "'as' is not a valid relation name; 'as' is a keyword",
            1,
            12,
            "as",
            id="as-as-relation",
        ),
        pytest.param(
            "q(a, b) := e(a, b), as < a.",
            "'as' is not a valid variable in a filter of query 'q'; 'as' is a keyword",
            1,
            21,
            "as",
            id="as-in-filter",
        ),
        pytest.param(
            "q(a, b) := e(a, b), as t.",
            "'as' starts an item in the body of query 'q'; it binds an edge variable right "
            "after an atom",
            1,
            21,
            "as",
            id="as-out-of-place",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as distinct.",
            "'distinct' is a keyword, not an edge variable, after 'as' in atom 'e(a, b)'",
            1,
            23,
            "distinct",
            id="keyword-as-edge-variable",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as 1t.",
            "'1t' is not a valid edge variable after 'as' in atom 'e(a, b)' of query 'q'; "
            "variables use ASCII letters",
            1,
            23,
            "1t",
            id="invalid-edge-variable",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as.",
            "expected an edge variable after 'as' in atom 'e(a, b)' of query 'q', found '.'",
            1,
            22,
            "q",
            id="as-without-variable",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, a < t.",
            "filter variable 't' of query 'q' is an edge variable; filters compare vertex "
            "variables",
            1,
            30,
            "t",
            id="edge-variable-in-filter",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, a < t.x.",
            "filter 'a < t.x' of query 'q' compares vertex variable 'a' with field 't.x'",
            1,
            30,
            "t.x",
            id="field-in-filter",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.x.y > 1.",
            "'t.x.y' is not a valid field reference in query 'q'; a field reference is an edge "
            "variable, '.' and a field name with no spaces, like t.amount",
            1,
            26,
            "t.x.y",
            id="field-with-two-dots",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.1x > 1.",
            "'t.1x' is not a valid field reference in query 'q'",
            1,
            26,
            "t.1x",
            id="invalid-field-name",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.amount 5.",
            "expected one of <, <=, >, >=, =, != after field 't.amount' in query 'q', found '5'",
            1,
            35,
            "q",
            id="predicate-without-operator",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.x > .",
            "expected a field like t.amount, a number, a double-quoted string, true or false "
            "after '>' in query 'q', found '.'",
            1,
            32,
            "q",
            id="predicate-without-operand",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.channel = cash.",
            "found 'cash' (write a string in double quotes: \"cash\")",
            1,
            38,
            "q",
            id="unquoted-string",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, 1000 <= t.amount.",
            "'1000' cannot start an item in the body of query 'q'; a predicate puts the field "
            "first",
            1,
            26,
            "q",
            id="literal-first",
        ),
        pytest.param(
            "q(a, b) := e(a, b) as t, t.x < 1e999.",
            "number 1e999 in query 'q' is too large",
            1,
            32,
            "q",
            id="number-too-large",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t,\n  t.note = "unclosed.\nr(a) := f(a).',
            "string not closed: a string ends with '\"' on the line it starts",
            2,
            12,
            "q",
            id="unterminated-string",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, t.note = "unclosed',
            "string not closed",
            1,
            35,
            "q",
            id="unterminated-string-at-end",
        ),
        pytest.param(
            'q(a, b) := e(a, b) as t, t.note = "tab\\t".',
            "unknown escape '\\t' in a string; inside a string, write \\\" for a quote and \\\\ "
            "for a backslash",
            1,
            39,
            "q",
            id="unknown-escape",
        ),
    ],
)
def test_errors(text: str, part: str, line: int, column: int, name: str) -> None:
    error = parse_error(text)
    assert part in error.message
    assert (error.line, error.column, error.name) == (line, column, name)


def test_type_errors_name_the_source() -> None:
    error = parse_error('q(a, b) := e(a, b) as t, t.x = 1, t.x = "1".', source="fraud.dl")
    assert error.message.endswith("; a field has one type (in fraud.dl)")
    assert (error.line, error.column, error.name) == (1, 35, "x")


def test_the_first_error_in_text_order_is_reported() -> None:
    error = parse_error(
        'p(a, b) := e(a, b) as t, t.x = 1.\nq(a, b) := e(a, b) as t, t.x = "s".\nr(a := f(a).\n'
    )
    assert (error.line, error.column, error.name) == (2, 26, "x")


# ---------------------------------------------------------------------------------------------
# field_types


def test_field_types_follow_field_comparisons_both_ways() -> None:
    queries = parse_queries(
        "p(a, b) := e(a, b) as t, e(b, a) as u, t.x = u.y, t.z != u.w.\n"
        'q(a, b) := e(a, b) as t, e(b, a) as u, u.y = "s", t.w = true.\n'
        "r(a, b) := f(a, b) as t, f(b, a) as u, t.x < u.y.\n"
    )
    assert field_types(queries) == {
        ("e", "y"): "string",
        ("e", "x"): "string",
        ("e", "w"): "bool",
        ("e", "z"): "bool",
        ("f", "x"): "number",
        ("f", "y"): "number",
    }


def test_field_types_keep_relations_apart_and_skip_id_fields() -> None:
    queries = parse_queries(
        'p(a, b) := e(a, b) as t, f(b, a) as u, t.x = 1, u.x = "s", t.src = "a", u.id = 1.'
    )
    assert field_types(queries) == {("e", "x"): "number", ("f", "x"): "string"}


def test_field_types_of_no_queries() -> None:
    assert field_types([]) == {}
    assert field_types(parse_queries("q(a, b) := e(a, b).")) == {}


def test_field_types_raise_at_the_second_use() -> None:
    first = Query(
        "p",
        ("a", "b"),
        (Atom("e", ("a", "b"), edge="t"),),
        predicates=(Predicate(field("t", "x"), "=", Literal("s"), line=1, column=5),),
    )
    second = Query(
        "q",
        ("a", "b"),
        (Atom("e", ("a", "b"), edge="u"),),
        predicates=(Predicate(field("u", "x"), ">", Literal(2.5), line=7, column=3),),
    )
    with pytest.raises(QueryError) as caught:
        field_types([first, second])
    assert caught.value.message == (
        "field 'x' of relation 'e' is compared with a number here but with a string at line 1, "
        "column 5; a field has one type"
    )
    assert (caught.value.line, caught.value.column, caught.value.name) == (7, 3, "x")


# ---------------------------------------------------------------------------------------------
# round trip over generated queries

IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True).filter(
    lambda word: word not in ("as", "distinct")
)
#: Field name -> type, the same in every relation, so that generated texts type consistently.
FIELD_TYPES = {
    "amount": "number",
    "fee": "number",
    "channel": "string",
    "note": "string",
    "flagged": "bool",
}
LITERALS = {
    "number": st.integers(-(10**15), 10**15) | st.floats(allow_nan=False, allow_infinity=False),
    "string": st.text(st.characters(exclude_characters="\n"), max_size=8),
    "bool": st.booleans(),
}


@st.composite
def predicates(draw: st.DrawFn, edges: list[str]) -> Predicate:
    """A valid predicate over ``edges``."""
    left_edge = draw(st.sampled_from(edges))
    form = draw(st.sampled_from(["literal", "field", "id"]))
    if form == "id":
        left = field(left_edge, draw(st.sampled_from(sorted(ID_FIELDS))))
        right_id = field(draw(st.sampled_from(edges)), draw(st.sampled_from(sorted(ID_FIELDS))))
        literal = draw(st.one_of(LITERALS["number"], LITERALS["string"]).map(Literal))
        use_field = right_id != left and draw(st.booleans())
        op = draw(st.sampled_from(["=", "!="]))
        return Predicate(left, op, right_id if use_field else literal)
    name = draw(st.sampled_from(sorted(FIELD_TYPES)))
    kind = FIELD_TYPES[name]
    left = field(left_edge, name)
    ops = PREDICATE_OPERATORS if kind == "number" else ("=", "!=")
    op = draw(st.sampled_from(ops))
    if form == "field":
        same_kind = sorted(n for n, k in FIELD_TYPES.items() if k == kind)
        right = field(draw(st.sampled_from(edges)), draw(st.sampled_from(same_kind)))
        if right != left:
            return Predicate(left, op, right)
    return Predicate(left, op, draw(LITERALS[kind].map(Literal)))


@st.composite
def queries(draw: st.DrawFn, name: str) -> Query:
    """A valid query named ``name``, with edge variables, predicates and literals."""
    n_vertices = draw(st.integers(1, 4))
    n_extra = draw(st.integers(0, 3))
    n_binary = max(n_vertices - 1, 1) + n_extra
    size = n_vertices + n_binary
    names = draw(st.lists(IDENTIFIERS, min_size=size, max_size=size, unique=True))
    vertices, edge_names = names[:n_vertices], names[n_vertices:]
    pairs: list[tuple[str, str]] = []
    for i in range(1, n_vertices):  # a spanning tree: connected, every vertex used
        other = draw(st.sampled_from(vertices[:i]))
        pairs.append((other, vertices[i]) if draw(st.booleans()) else (vertices[i], other))
    vertex = st.sampled_from(vertices)
    while len(pairs) < n_binary:
        pairs.append((draw(vertex), draw(vertex)))
    atoms: list[Atom] = []
    for (src, dst), edge in zip(draw(st.permutations(pairs)), edge_names, strict=True):
        relation = draw(st.sampled_from(["transfer", "uses_device"]))
        atoms.append(Atom(relation, (src, dst), edge=edge if draw(st.booleans()) else None))
    atoms.extend(Atom("flagged", (v,)) for v in draw(st.lists(vertex, max_size=2)))
    edges = [atom.edge for atom in atoms if atom.edge is not None]
    found = draw(st.lists(predicates(edges), max_size=4)) if edges else []
    filters: list[Filter] = []
    if n_vertices > 1:
        for _ in range(draw(st.integers(0, 2))):
            left, right = draw(st.permutations(vertices))[:2]
            filters.append(Filter(left, draw(st.sampled_from(FILTER_OPERATORS)), right))
    return Query(
        name,
        tuple(draw(st.permutations(vertices))),
        tuple(atoms),
        tuple(filters),
        distinct=draw(st.booleans()),
        predicates=tuple(found),
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(*(queries(f"q{i}") for i in range(n)))))
def test_str_round_trips_for_generated_queries(generated: tuple[Query, ...]) -> None:
    for query in generated:
        assert parse_queries(str(query)) == (query,)
    assert parse_queries("\n".join(map(str, generated))) == generated
