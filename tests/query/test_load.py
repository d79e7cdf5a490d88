"""Tests for monitor.query.load: specs as built-in names, files and inline text."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import QueryError
from monitor.query import Atom, builtin, load_queries, load_queries_many

NAMES = "triangle, 4-clique, diamond, house, 5-clique"


def load_error(spec: str) -> QueryError:
    """The QueryError that loading ``spec`` raises."""
    with pytest.raises(QueryError) as caught:
        load_queries(spec)
    return caught.value


@pytest.mark.parametrize("name", ["triangle", "4-clique", "diamond", "house", "5-clique"])
def test_builtin_name(name: str) -> None:
    (query,) = load_queries(name)
    assert query == builtin(name)
    assert (query.line, query.column) == (builtin(name).line, builtin(name).column)


def test_file(tmp_path: Path) -> None:
    path = tmp_path / "fraud.dl"
    path.write_text(
        "% fraud patterns — ünïcode in a comment\n"
        "cycle3(a, b, c) := transfer(a, b), transfer(b, c), transfer(c, a), distinct.\n"
        "flagged_pair(a, b) := transfer(a, b), flagged(a).\n",
        encoding="utf-8",
    )
    cycle3, flagged_pair = load_queries(str(path))
    assert cycle3.distinct
    assert flagged_pair.atoms == (Atom("transfer", ("a", "b")), Atom("flagged", ("a",)))
    assert (flagged_pair.line, flagged_pair.column) == (3, 1)


def test_error_in_a_file_names_the_file_and_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.dl"
    path.write_text("ok(a) := e(a, a).\nbad(a, b) := e(a, b), e(b, c).\n", encoding="utf-8")
    error = load_error(str(path))
    assert error.message == (
        "variable 'c' is used in the body of query 'bad' but is not in its head; every variable "
        f"of the body must be listed in the head (in {path})"
    )
    assert (error.line, error.column, error.name) == (2, 28, "c")


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.dl"
    path.write_bytes("q(a) := e(a). % caf\xe9".encode("latin-1"))
    error = load_error(str(path))
    assert error.message.startswith(f"query file '{path}' is not UTF-8 text (")
    assert error.message.endswith("); save it as UTF-8")
    assert error.name == str(path)


def test_file_without_queries(tmp_path: Path) -> None:
    path = tmp_path / "empty.dl"
    path.write_text("% nothing here yet\n", encoding="utf-8")
    error = load_error(str(path))
    assert error.message == (
        f"file '{path}' holds no query; write at least one, like "
        "triangle(a, b, c) := e(a, b), e(b, c), e(a, c)."
    )


def test_builtin_name_wins_over_a_file_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "triangle").write_text("other(a) := e(a, a).", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load_queries("triangle") == (builtin("triangle"),)


def test_inline_text() -> None:
    (query,) = load_queries("ring(a, b) := shares_device(a, b), a < b.")
    assert query.name == "ring"
    assert (query.atoms[0].line, query.atoms[0].column) == (1, 15)


def test_inline_text_with_a_syntax_error_raises_the_parse_error() -> None:
    error = load_error("q(a) := e(a")
    assert error.message == "expected ',' or ')' in atom 'e' of query 'q', found end of text"
    assert (error.line, error.column, error.name) == (1, 12, "q")


def test_misspelt_builtin_is_neither_name_file_nor_text() -> None:
    error = load_error("tringle")
    assert error.message == (
        f"'tringle' is neither a built-in query name ({NAMES}), nor an existing file, nor valid "
        "query text (line 1, column 8: expected '(' after the query name 'tringle', found end "
        "of text). Did you mean 'triangle'?"
    )
    assert (error.line, error.column, error.name) == (0, 0, "tringle")


def test_missing_file_is_neither_name_file_nor_text(tmp_path: Path) -> None:
    spec = str(tmp_path / "missing.dl")
    error = load_error(spec)
    assert error.message.startswith(f"'{spec}' is neither a built-in query name ({NAMES}), nor ")
    assert "nor an existing file, nor valid query text (line 1, column" in error.message
    assert error.name == spec


def test_directory_is_not_a_query_file(tmp_path: Path) -> None:
    error = load_error(str(tmp_path))
    assert "is neither a built-in query name" in error.message


def test_spec_too_long_for_a_path_is_not_a_crash() -> None:
    error = load_error("x" * 5000)
    assert "is neither a built-in query name" in error.message


@pytest.mark.parametrize("spec", ["", "   ", "% just a comment"])
def test_spec_without_queries(spec: str) -> None:
    error = load_error(spec)
    assert error.message.endswith(
        "holds no query; write at least one, like triangle(a, b, c) := e(a, b), e(b, c), e(a, c)."
    )
    assert error.name == spec


def test_many_specs_combine_in_order(tmp_path: Path) -> None:
    path = tmp_path / "more.dl"
    path.write_text("p2(a, b) := e(a, b), e(b, a), a < b.\n", encoding="utf-8")
    queries = load_queries_many(["triangle", str(path), "loop(a) := e(a, a)."])
    assert [q.name for q in queries] == ["triangle", "p2", "loop"]


def test_many_specs_reject_duplicate_names(tmp_path: Path) -> None:
    path = tmp_path / "dup.dl"
    path.write_text("x(a) := f(a).\n\ntriangle(a) := e(a, a).\n", encoding="utf-8")
    with pytest.raises(QueryError) as caught:
        load_queries_many(["triangle", str(path)])
    error = caught.value
    assert error.message == (
        f"query 'triangle' from file '{path}' is already defined by built-in 'triangle'; "
        "each query needs its own name"
    )
    assert (error.line, error.column, error.name) == (3, 1, "triangle")


def test_many_specs_reject_the_same_spec_twice() -> None:
    with pytest.raises(QueryError) as caught:
        load_queries_many(["house", "house"])
    assert caught.value.name == "house"


def test_many_specs_reject_conflicting_arities() -> None:
    with pytest.raises(QueryError) as caught:
        load_queries_many(["5-clique", "hyper(a, b, c) := e(a, b, c)."])
    error = caught.value
    assert error.message == (
        "relation 'e' has arity 3 in 'hyper(a, b, c) := e(a, b, c).' but arity 2 in "
        "built-in '5-clique'; a relation has one arity everywhere"
    )
    assert (error.line, error.column, error.name) == (1, 19, "e")


def test_many_specs_without_specs() -> None:
    assert load_queries_many([]) == ()


def test_many_specs_name_long_inline_text_as_inline_text() -> None:
    spec = "p(a, b) :=\n    e(a, b).\nq(a) := e(a)."
    with pytest.raises(QueryError) as caught:
        load_queries_many([spec])
    assert caught.value.message.startswith("relation 'e' is used with 1 variable here")
    with pytest.raises(QueryError) as caught:
        load_queries_many(["triangle", "hyper(a, b, c) :=\n    e(a, b, c)."])
    assert caught.value.message.startswith("relation 'e' has arity 3 in inline text but")
    assert (caught.value.line, caught.value.column) == (2, 5)
