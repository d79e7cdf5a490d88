"""Tests for monitor.query.builtins: the paper's five queries, their exact edge lists."""

from __future__ import annotations

from itertools import combinations

import networkx as nx
import pytest

from core.errors import QueryError
from monitor.query import BUILTIN_QUERIES, Query, builtin, parse_queries

#: The directed edge lists over relation e, in atom order: the paper's Datalog (section 5).
EXPECTED_EDGES = {
    "triangle": [("a1", "a2"), ("a1", "a3"), ("a2", "a3")],
    "4-clique": [
        ("a1", "a2"),
        ("a1", "a3"),
        ("a1", "a4"),
        ("a2", "a3"),
        ("a2", "a4"),
        ("a3", "a4"),
    ],
    "diamond": [("a1", "a2"), ("a2", "a3"), ("a4", "a1"), ("a4", "a3")],
    "house": [
        ("a1", "a2"),
        ("a1", "a3"),
        ("a1", "a4"),
        ("a2", "a3"),
        ("a2", "a4"),
        ("a3", "a4"),
        ("a2", "a5"),
        ("a3", "a5"),
    ],
    "5-clique": [
        ("a1", "a2"),
        ("a1", "a3"),
        ("a1", "a4"),
        ("a1", "a5"),
        ("a2", "a3"),
        ("a2", "a4"),
        ("a2", "a5"),
        ("a3", "a4"),
        ("a3", "a5"),
        ("a4", "a5"),
    ],
}


def edges(query: Query) -> list[tuple[str, ...]]:
    """The variables of every atom of ``query``, in order."""
    return [atom.variables for atom in query.atoms]


def test_the_five_queries_of_the_paper_in_its_order() -> None:
    assert list(BUILTIN_QUERIES) == ["triangle", "4-clique", "diamond", "house", "5-clique"]


@pytest.mark.parametrize("name", list(EXPECTED_EDGES))
def test_exact_edge_lists(name: str) -> None:
    query = builtin(name)
    assert query.name == name
    assert edges(query) == EXPECTED_EDGES[name]
    assert {atom.relation for atom in query.atoms} == {"e"}
    assert query.relations == {"e": 2}
    assert query.head == tuple(f"a{i}" for i in range(1, len(query.head) + 1))
    assert query.filters == ()
    assert not query.distinct


@pytest.mark.parametrize(("name", "size"), [("triangle", 3), ("4-clique", 4), ("5-clique", 5)])
def test_cliques_point_from_every_vertex_to_every_later_one(name: str, size: int) -> None:
    variables = [f"a{i}" for i in range(1, size + 1)]
    assert edges(builtin(name)) == list(combinations(variables, 2))


def undirected(name: str) -> nx.Graph:
    """The query graph of built-in ``name``, without directions."""
    return nx.Graph(edges(builtin(name)))


def test_diamond_is_a_four_cycle_from_a4_to_a3() -> None:
    assert nx.is_isomorphic(undirected("diamond"), nx.cycle_graph(4))
    query_graph = nx.DiGraph(edges(builtin("diamond")))
    assert sorted(nx.all_simple_paths(query_graph, "a4", "a3")) == [
        ["a4", "a1", "a2", "a3"],
        ["a4", "a3"],
    ]


def test_house_is_a_four_clique_with_a_hat() -> None:
    graph = undirected("house")
    assert nx.is_isomorphic(graph.subgraph(["a1", "a2", "a3", "a4"]), nx.complete_graph(4))
    assert sorted(graph.neighbors("a5")) == ["a2", "a3"]


def test_the_paper_datalog_parses_to_the_builtins() -> None:
    """The paper's section 5 text, with a head added, is the built-in query atom for atom."""
    paper = {
        "diamond": "e(a1, a2), e(a2, a3), e(a4, a1), e(a4, a3)",
        "house": "e(a1, a2), e(a1, a3), e(a1, a4), e(a2, a3), e(a2, a4), e(a3, a4), "
        "e(a2, a5), e(a3, a5)",
    }
    for name, body in paper.items():
        head = ", ".join(builtin(name).head)
        (query,) = parse_queries(f"{name}({head}) := {body}.")
        assert [a.variables for a in query.atoms] == [a.variables for a in builtin(name).atoms]


@pytest.mark.parametrize("name", list(BUILTIN_QUERIES))
def test_builtins_are_acyclic_orientations(name: str) -> None:
    assert nx.is_directed_acyclic_graph(nx.DiGraph(edges(builtin(name))))


@pytest.mark.parametrize("name", list(BUILTIN_QUERIES))
def test_positions_point_into_the_builtin_text(name: str) -> None:
    query = builtin(name)
    lines = BUILTIN_QUERIES[name].splitlines()
    assert lines[query.line - 1][query.column - 1 :].startswith(f"{name}(")
    for atom in query.atoms:
        assert lines[atom.line - 1][atom.column - 1 :].startswith(f"e({', '.join(atom.variables)})")


@pytest.mark.parametrize("name", list(BUILTIN_QUERIES))
def test_builtin_equals_parsing_its_text(name: str) -> None:
    assert parse_queries(BUILTIN_QUERIES[name]) == (builtin(name),)


def test_all_builtins_fit_in_one_text() -> None:
    queries = parse_queries("\n".join(BUILTIN_QUERIES.values()))
    assert [q.name for q in queries] == list(BUILTIN_QUERIES)


def test_unknown_builtin_lists_the_builtins() -> None:
    with pytest.raises(QueryError) as caught:
        builtin("tringle")
    assert caught.value.message == (
        "there is no built-in query 'tringle'; the built-in queries are "
        "triangle, 4-clique, diamond, house, 5-clique"
    )
    assert caught.value.name == "tringle"
    assert caught.value.line == 0
