"""Query text -> :class:`Query`: the parser, its validation, built-in queries and spec loading."""

from monitor.query.ast import FILTER_OPERATORS, Atom, Filter, Query
from monitor.query.builtins import BUILTIN_QUERIES, builtin
from monitor.query.load import load_queries, load_queries_many
from monitor.query.parser import parse_queries

__all__ = [
    "BUILTIN_QUERIES",
    "FILTER_OPERATORS",
    "Atom",
    "Filter",
    "Query",
    "builtin",
    "load_queries",
    "load_queries_many",
    "parse_queries",
]
