"""Query text -> :class:`Query`: the parser, its validation, built-in queries and spec loading."""

from monitor.query.ast import (
    FILTER_OPERATORS,
    PREDICATE_OPERATORS,
    Atom,
    FieldRef,
    Filter,
    Literal,
    Predicate,
    Query,
)
from monitor.query.builtins import BUILTIN_QUERIES, builtin
from monitor.query.load import load_queries, load_queries_many
from monitor.query.parser import parse_queries
from monitor.query.types import ID_FIELDS, field_types

__all__ = [
    "BUILTIN_QUERIES",
    "FILTER_OPERATORS",
    "ID_FIELDS",
    "PREDICATE_OPERATORS",
    "Atom",
    "FieldRef",
    "Filter",
    "Literal",
    "Predicate",
    "Query",
    "builtin",
    "field_types",
    "load_queries",
    "load_queries_many",
    "parse_queries",
]
