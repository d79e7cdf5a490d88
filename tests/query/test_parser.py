"""Tests for monitor.query.parser: every syntax form, positions, and every validation error."""

from __future__ import annotations

import pytest

from core.errors import QueryError
from monitor.query import FILTER_OPERATORS, Atom, Filter, Query, parse_queries

DESIGN_EXAMPLES = """\
triangle(a, b, c) := e(a, b), e(b, c), e(a, c).
cycle3(a, b, c)   := transfer(a, b), transfer(b, c), transfer(c, a), distinct.
ring(a, b, c)     := shares_device(a, b), shares_device(b, c), shares_device(a, c), a < b, b < c.
flagged_pair(a, b) := transfer(a, b), flagged(a).
"""


def parse_one(text: str) -> Query:
    """The single query of ``text``."""
    (query,) = parse_queries(text)
    return query


def parse_error(text: str, source: str = "<query>") -> QueryError:
    """The QueryError that parsing ``text`` raises."""
    with pytest.raises(QueryError) as caught:
        parse_queries(text, source=source)
    return caught.value


# ---------------------------------------------------------------------------------------------
# syntax forms


def test_design_examples_parse_to_the_expected_queries() -> None:
    queries = parse_queries(DESIGN_EXAMPLES)
    assert queries == (
        Query(
            "triangle",
            ("a", "b", "c"),
            (Atom("e", ("a", "b")), Atom("e", ("b", "c")), Atom("e", ("a", "c"))),
        ),
        Query(
            "cycle3",
            ("a", "b", "c"),
            (
                Atom("transfer", ("a", "b")),
                Atom("transfer", ("b", "c")),
                Atom("transfer", ("c", "a")),
            ),
            distinct=True,
        ),
        Query(
            "ring",
            ("a", "b", "c"),
            (
                Atom("shares_device", ("a", "b")),
                Atom("shares_device", ("b", "c")),
                Atom("shares_device", ("a", "c")),
            ),
            filters=(Filter("a", "<", "b"), Filter("b", "<", "c")),
        ),
        Query(
            "flagged_pair",
            ("a", "b"),
            (Atom("transfer", ("a", "b")), Atom("flagged", ("a",))),
        ),
    )


def test_empty_text_and_comment_only_text_hold_no_queries() -> None:
    assert parse_queries("") == ()
    assert parse_queries("  \n% a comment\n# another one\n\t\n") == ()


def test_comments_whitespace_and_line_breaks_anywhere() -> None:
    text = (
        "% leading comment\n"
        "q(a, # head comment\n"
        "  b) :=   % after :=\n"
        "\te(a,b)  ,e(b ,a) # trailing\n"
        ". % after the end"
    )
    query = parse_one(text)
    assert query.atoms == (Atom("e", ("a", "b")), Atom("e", ("b", "a")))


def test_comment_characters_inside_a_comment_are_ignored() -> None:
    assert parse_one("q(a) := e(a). % 50% of # this is comment").name == "q"


def test_query_without_spaces() -> None:
    assert parse_one("q(a,b):=e(a,b),a!=b.").filters == (Filter("a", "!=", "b"),)


@pytest.mark.parametrize("op", FILTER_OPERATORS)
def test_every_filter_operator(op: str) -> None:
    query = parse_one(f"q(a, b) := e(a, b), a {op} b.")
    assert query.filters == (Filter("a", op, "b"),)


def test_atoms_of_any_arity() -> None:
    query = parse_one("q(a, b, c, d) := flagged(a), e(a, b), t(a, b, c), w(a, b, c, d).")
    assert [len(atom.variables) for atom in query.atoms] == [1, 2, 3, 4]
    assert query.relations == {"flagged": 1, "e": 2, "t": 3, "w": 4}


def test_repeated_variable_inside_one_atom_is_allowed() -> None:
    query = parse_one("loop(a) := e(a, a).")
    assert query.atoms == (Atom("e", ("a", "a")),)


def test_single_variable_query() -> None:
    assert parse_one("f(a) := flagged(a).") == Query("f", ("a",), (Atom("flagged", ("a",)),))


@pytest.mark.parametrize(
    "text",
    [
        "q(a, b) := distinct, e(a, b).",
        "q(a, b) := e(a, b), distinct, a < b.",
        "q(a, b) := e(a, b), a < b, distinct.",
    ],
)
def test_distinct_anywhere_in_the_body(text: str) -> None:
    query = parse_one(text)
    assert query.distinct
    assert query.atoms == (Atom("e", ("a", "b")),)


def test_head_order_is_kept_and_may_differ_from_the_body_order() -> None:
    query = parse_one("q(c, a, b) := e(a, b), e(b, c).")
    assert query.head == ("c", "a", "b")
    assert query.variables == ("c", "a", "b")


@pytest.mark.parametrize("name", ["4-clique", "5-clique", "my-query", "_q", "Q2", "x_1-y"])
def test_query_names(name: str) -> None:
    assert parse_one(f"{name}(a) := e(a).").name == name


@pytest.mark.parametrize("relation", ["shares-device", "shares_device", "E", "_e", "e2"])
def test_relation_names(relation: str) -> None:
    assert parse_one(f"q(a) := {relation}(a).").atoms[0].relation == relation


@pytest.mark.parametrize("variable", ["a1", "_x", "Account", "a_b"])
def test_variable_names(variable: str) -> None:
    assert parse_one(f"q({variable}) := e({variable}).").head == (variable,)


def test_several_queries_share_relations_with_the_same_arity() -> None:
    queries = parse_queries("p(a, b) := e(a, b). q(b, c) := e(b, c), f(c).")
    assert [q.name for q in queries] == ["p", "q"]


def test_str_round_trips() -> None:
    for query in parse_queries(DESIGN_EXAMPLES):
        assert parse_one(str(query)) == query


# ---------------------------------------------------------------------------------------------
# positions


def test_positions_of_queries_atoms_and_filters() -> None:
    text = "% header\nfirst(a) := e(a, a).\n  ring(a, b) :=\n    r(a, b),\n\tr(b, a), a < b.\n"
    first, ring = parse_queries(text)
    assert (first.line, first.column) == (2, 1)
    assert [(a.line, a.column) for a in first.atoms] == [(2, 13)]
    assert (ring.line, ring.column) == (3, 3)
    assert [(a.line, a.column) for a in ring.atoms] == [(4, 5), (5, 2)]
    assert [(f.line, f.column) for f in ring.filters] == [(5, 11)]


def test_positions_of_the_design_examples() -> None:
    queries = parse_queries(DESIGN_EXAMPLES)
    assert [(q.line, q.column) for q in queries] == [(1, 1), (2, 1), (3, 1), (4, 1)]
    ring = queries[2]
    assert [(a.line, a.column) for a in ring.atoms] == [(3, 22), (3, 43), (3, 64)]
    assert [(f.line, f.column) for f in ring.filters] == [(3, 85), (3, 92)]
    lines = DESIGN_EXAMPLES.splitlines()
    for atom in ring.atoms:
        assert lines[atom.line - 1][atom.column - 1 :].startswith("shares_device(")


# ---------------------------------------------------------------------------------------------
# syntax errors


@pytest.mark.parametrize(
    ("text", "message", "line", "column", "name"),
    [
        (
            "q(a) = e(a).",
            "expected ':=' after the head of query 'q', found '='",
            1,
            6,
            "q",
        ),
        (
            "q(a) e(a).",
            "expected ':=' after the head of query 'q', found 'e'",
            1,
            6,
            "q",
        ),
        (
            "q(a) : e(a).",
            "expected ':=' after the head of query 'q', found ':'",
            1,
            6,
            "q",
        ),
        (
            "q a := e(a).",
            "expected '(' after the query name 'q', found 'a'",
            1,
            3,
            "q",
        ),
        (
            ", q(a) := e(a).",
            "expected a query name to start a query, found ','",
            1,
            1,
            None,
        ),
        (
            "q() := e(a).",
            "expected a variable in the head of query 'q', found ')'",
            1,
            3,
            "q",
        ),
        (
            "q(a b) := e(a).",
            "expected ',' or ')' in the head of query 'q', found 'b'",
            1,
            5,
            "q",
        ),
        (
            "q(a) := .",
            "expected an atom like e(a, b), a filter like a < b, or 'distinct' in the body of "
            "query 'q', found '.'",
            1,
            9,
            "q",
        ),
        (
            "q(a) := e().",
            "expected a variable in atom 'e' of query 'q', found ')'",
            1,
            11,
            "q",
        ),
        (
            "q(a) := e(a",
            "expected ',' or ')' in atom 'e' of query 'q', found end of text",
            1,
            12,
            "q",
        ),
        (
            "q(a) := e(a)\n",
            "expected ',' or '.' in the body of query 'q' (every query ends with '.'), "
            "found end of text",
            2,
            1,
            "q",
        ),
        (
            "q(a) := e(a) $",
            "expected ',' or '.' in the body of query 'q' (every query ends with '.'), found '$'",
            1,
            14,
            "q",
        ),
        (
            "q(a, b) := e(a, b), a b.",
            "expected '(' (for an atom) or one of <, <=, >, >=, != (for a filter) after 'a' in "
            "the body of query 'q', found 'b'",
            1,
            23,
            "q",
        ),
        (
            "q(a, b) := e(a, b), a = b.",
            "'=' is not a filter operator in query 'q'; filters use one of <, <=, >, >=, != "
            "(to require equal values, use the same variable twice)",
            1,
            23,
            "q",
        ),
        (
            "q(a, b) := e(a, b), a ! b.",
            "expected '(' (for an atom) or one of <, <=, >, >=, != (for a filter) after 'a' in "
            "the body of query 'q', found '!'",
            1,
            23,
            "q",
        ),
        (
            "q(a, b) := e(a, b), a < .",
            "expected a variable after '<' in query 'q', found '.'",
            1,
            25,
            "q",
        ),
        (
            "q(a) := é(a).",
            "expected an atom like e(a, b), a filter like a < b, or 'distinct' in the body of "
            "query 'q', found 'é'",
            1,
            9,
            "q",
        ),
    ],
)
def test_syntax_errors(text: str, message: str, line: int, column: int, name: str | None) -> None:
    error = parse_error(text)
    assert error.message == message
    assert (error.line, error.column, error.name) == (line, column, name)
    assert str(error) == f"line {line}, column {column}: {message}"


@pytest.mark.parametrize(
    ("text", "message", "column", "name"),
    [
        (
            "4(a) := e(a).",
            "'4' is not a valid query name; query names use ASCII letters, digits, '_' and '-', "
            "and start with a letter or '_' (or with a digit when they contain a letter, "
            "like 4-clique)",
            1,
            "4",
        ),
        (
            "4-5(a) := e(a).",
            "'4-5' is not a valid query name; query names use ASCII letters, digits, '_' and '-', "
            "and start with a letter or '_' (or with a digit when they contain a letter, "
            "like 4-clique)",
            1,
            "4-5",
        ),
        (
            "q(a) := 1e(a).",
            "'1e' is not a valid relation name; relation names use ASCII letters, digits, '_' "
            "and '-', and start with a letter or '_'",
            9,
            "1e",
        ),
        (
            "q(a-b) := e(a).",
            "'a-b' is not a valid variable in the head of query 'q'; variables use ASCII "
            "letters, digits and '_', and start with a letter or '_'",
            3,
            "a-b",
        ),
        (
            "q(a) := e(1a).",
            "'1a' is not a valid variable in atom 'e' of query 'q'; variables use ASCII "
            "letters, digits and '_', and start with a letter or '_'",
            11,
            "1a",
        ),
        (
            "q(a, b) := e(a, b), a < 1.",
            "'1' is not a valid variable in a filter of query 'q'; variables use ASCII "
            "letters, digits and '_', and start with a letter or '_'",
            25,
            "1",
        ),
        (
            "q(distinct) := e(distinct).",
            "'distinct' is a keyword, not a variable, in the head of query 'q'",
            3,
            "distinct",
        ),
        (
            "q(a) := distinct(a).",
            "'distinct' is not a valid relation name; 'distinct' is a keyword",
            9,
            "distinct",
        ),
        (
            "q(a) := e(a), distinct < a.",
            "'distinct' is not a valid variable in a filter of query 'q'; variables use ASCII "
            "letters, digits and '_', and start with a letter or '_'",
            15,
            "distinct",
        ),
    ],
)
def test_invalid_names(text: str, message: str, column: int, name: str) -> None:
    error = parse_error(text)
    assert error.message == message
    assert (error.line, error.column, error.name) == (1, column, name)


# ---------------------------------------------------------------------------------------------
# validation errors


@pytest.mark.parametrize(
    ("text", "message", "line", "column", "name"),
    [
        pytest.param(
            "q(a, b, c) := e(a, b).",
            "head variable 'c' of query 'q' is not used by any atom; every head variable must "
            "appear in an atom of the body",
            1,
            9,
            "c",
            id="head-variable-unused",
        ),
        pytest.param(
            "q(a, b, c) := e(a, b), a < c.",
            "head variable 'c' of query 'q' is not used by any atom; every head variable must "
            "appear in an atom of the body",
            1,
            9,
            "c",
            id="head-variable-only-in-filter",
        ),
        pytest.param(
            "q(a, b) :=\n  e(a, b),\n  a < z.",
            "filter variable 'z' of query 'q' is not used by any atom; filters may only compare "
            "variables that atoms bind",
            3,
            7,
            "z",
            id="filter-variable-unknown",
        ),
        pytest.param(
            "q(a, b) := e(a, b), z > a.",
            "filter variable 'z' of query 'q' is not used by any atom; filters may only compare "
            "variables that atoms bind",
            1,
            21,
            "z",
            id="filter-left-variable-unknown",
        ),
        pytest.param(
            "q(a, b) := e(a, b),\n           e(b, c).",
            "variable 'c' is used in the body of query 'q' but is not in its head; every "
            "variable of the body must be listed in the head",
            2,
            17,
            "c",
            id="body-variable-not-in-head",
        ),
        pytest.param(
            "q(a, b, a) := e(a, b).",
            "variable 'a' appears twice in the head of query 'q'; list each variable once",
            1,
            9,
            "a",
            id="duplicate-head-variable",
        ),
        pytest.param(
            "q(a, b, c, d) := e(a, b), e(c, d).",
            "c is not connected to the other variables of query 'q'; every atom must share a "
            "variable with the rest of the query",
            1,
            29,
            "c",
            id="two-components",
        ),
        pytest.param(
            "q(a, b, c, d) := e(a, b), f(c), e(b, d).",
            "c is not connected to the other variables of query 'q'; every atom must share a "
            "variable with the rest of the query",
            1,
            29,
            "c",
            id="isolated-atom-in-the-middle",
        ),
        pytest.param(
            "q(a, b, c) := f(c), e(a, b).",
            "a is not connected to the other variables of query 'q'; every atom must share a "
            "variable with the rest of the query",
            1,
            23,
            "a",
            id="first-unconnected-by-position",
        ),
        pytest.param(
            "q(a, b) := e(a, b), e(a, b, b).",
            "relation 'e' is used with 3 variables here but with 2 at line 1, column 12; a "
            "relation has one arity everywhere",
            1,
            21,
            "e",
            id="two-arities-in-one-query",
        ),
        pytest.param(
            "p(a, b) := e(a, b).\nq(a) := e(a).",
            "relation 'e' is used with 1 variable here but with 2 at line 1, column 12; a "
            "relation has one arity everywhere",
            2,
            9,
            "e",
            id="two-arities-across-queries",
        ),
        pytest.param(
            "q(a) := a < b.",
            "query 'q' has no atoms; its body needs at least one atom like e(a, b)",
            1,
            1,
            "q",
            id="no-atoms",
        ),
        pytest.param(
            "q(a) := distinct.",
            "query 'q' has no atoms; its body needs at least one atom like e(a, b)",
            1,
            1,
            "q",
            id="only-distinct",
        ),
        pytest.param(
            "q(a) := e(a).\n\n  q(b) := f(b).",
            "query 'q' is already defined at line 1, column 1; each query needs its own name",
            3,
            3,
            "q",
            id="duplicate-query-name",
        ),
        pytest.param(
            "q(a, b) := e(a, b), distinct, a < b, distinct.",
            "'distinct' appears twice in query 'q' (first at line 1, column 21); write it once",
            1,
            38,
            "distinct",
            id="distinct-twice",
        ),
        pytest.param(
            "q(a, b) := e(a, b), a <= a.",
            "filter 'a <= a' compares variable 'a' with itself in query 'q'; a filter compares "
            "two different variables",
            1,
            21,
            "a",
            id="filter-with-itself",
        ),
    ],
)
def test_validation_errors(
    text: str, message: str, line: int, column: int, name: str | None
) -> None:
    error = parse_error(text)
    assert error.message == message
    assert (error.line, error.column, error.name) == (line, column, name)


def test_connectivity_follows_chains_in_any_atom_order() -> None:
    query = parse_one("q(a, b, c, d) := e(c, d), e(a, b), e(b, c).")
    assert query.head == ("a", "b", "c", "d")


def test_errors_name_the_source_when_one_is_given() -> None:
    error = parse_error("q(a, b) := e(a).", source="queries/fraud.dl")
    assert error.message == (
        "head variable 'b' of query 'q' is not used by any atom; every head variable must "
        "appear in an atom of the body (in queries/fraud.dl)"
    )
    assert (error.line, error.column, error.name) == (1, 6, "b")


def test_the_first_error_in_text_order_is_reported() -> None:
    error = parse_error("ok(a) := e(a, a).\nbad(a) := e(a, b).\nworse(a := f(a).")
    assert (error.line, error.name) == (2, "b")


def test_a_query_hashes_its_compared_fields_once_and_pickles_without_the_hash() -> None:
    """The planner's memos key on queries (:meth:`Query.__hash__`): equal queries hash equal
    wherever their text stood, and a query sent to another process (Ray's workers) hashes as
    that process hashes an equal one, not as the sender did (strings hash per process)."""
    import pickle
    import subprocess
    import sys

    text = "ring(a, b) := transfer(a, b) as t, transfer(b, a) as u, t.ts < u.ts, within 1h."
    first, moved = parse_one(text), parse_one("\n\n   " + text)
    assert (first.line, first.column) != (moved.line, moved.column)
    assert first == moved and hash(first) == hash(moved)
    assert hash(first) == hash(first)  # (the cached value)
    changed = parse_one(text.replace("1h", "2h"))
    assert hash(changed) != hash(first)
    shipped = pickle.dumps(first)
    check = (
        "import pickle, sys\n"
        "from monitor.query import parse_queries\n"
        "shipped = pickle.loads(sys.stdin.buffer.read())\n"
        f"(fresh,) = parse_queries({text!r})\n"
        "print(hash(shipped) == hash(fresh), {shipped: 1}.get(fresh))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], input=shipped, capture_output=True, check=True
    )
    assert done.stdout.split() == [b"True", b"1"]
