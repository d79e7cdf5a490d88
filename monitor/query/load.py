"""Turn the query specs a user gives (built-in names, files, inline text) into queries.

A spec is tried, in order, as:

1. the name of a built-in query (:data:`~monitor.query.builtins.BUILTIN_QUERIES`);
2. the path of an existing file, read as UTF-8 query text;
3. inline query text.

Text containing ``:=`` is plainly meant as a query, so its parse error is raised as it is; any
other spec that is none of the three gets one error saying so, with the parse error inside. When
several specs are combined, query names stay unique and each relation keeps one arity across them.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from core.errors import QueryError
from monitor.query.ast import Atom, Query
from monitor.query.builtins import BUILTIN_QUERIES, builtin
from monitor.query.parser import parse_queries


def load_queries(spec: str) -> tuple[Query, ...]:
    """The queries ``spec`` names: a built-in query, every query of a file, or inline text.

    Raises :class:`QueryError` when ``spec`` is none of these, or holds no query at all.
    """
    if spec in BUILTIN_QUERIES:
        return (builtin(spec),)
    path = Path(spec)
    if _is_file(path):
        queries = parse_queries(_read(path), source=spec)
    else:
        try:
            queries = parse_queries(spec)
        except QueryError as error:
            if ":=" in spec:
                raise
            raise _not_a_spec(spec, error) from error
    if not queries:
        raise QueryError(
            f"{_describe(spec)} holds no query; write at least one, like "
            "triangle(a, b, c) := e(a, b), e(b, c), e(a, c).",
            name=spec,
        )
    return queries


def load_queries_many(specs: Sequence[str]) -> tuple[Query, ...]:
    """The queries of every spec in ``specs``, in order, checked to fit together.

    Raises :class:`QueryError` when two specs define a query of the same name, or use one relation
    with two arities; the error points at the later definition or atom.
    """
    queries: list[Query] = []
    names: dict[str, str] = {}
    arities: dict[str, tuple[int, str]] = {}
    for spec in specs:
        for query in load_queries(spec):
            if query.name in names:
                raise QueryError(
                    f"query '{query.name}' from {_describe(spec)} is already defined by "
                    f"{_describe(names[query.name])}; each query needs its own name",
                    line=query.line,
                    column=query.column,
                    name=query.name,
                )
            names[query.name] = spec
            for atom in query.atoms:
                _check_arity(atom, spec, arities)
            queries.append(query)
    return tuple(queries)


def _check_arity(atom: Atom, spec: str, arities: dict[str, tuple[int, str]]) -> None:
    """Record ``atom``'s relation arity, failing if an earlier spec used another arity."""
    arity, first_spec = arities.setdefault(atom.relation, (len(atom.variables), spec))
    if arity != len(atom.variables):
        raise QueryError(
            f"relation '{atom.relation}' has arity {len(atom.variables)} in {_describe(spec)} "
            f"but arity {arity} in {_describe(first_spec)}; "
            "a relation has one arity everywhere",
            line=atom.line,
            column=atom.column,
            name=atom.relation,
        )


def _describe(spec: str) -> str:
    """How messages name a spec: ``built-in 'house'``, ``file 'q.dl'``, ``'q(a) := f(a).'``."""
    if spec in BUILTIN_QUERIES:
        return f"built-in '{spec}'"
    if _is_file(Path(spec)):
        return f"file '{spec}'"
    return f"'{spec}'" if "\n" not in spec and len(spec) <= 60 else "inline text"


def _is_file(path: Path) -> bool:
    """Whether ``path`` names an existing file; text that cannot be a path is not one."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _read(path: Path) -> str:
    """The UTF-8 text of the query file ``path``."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise QueryError(
            f"query file '{path}' is not UTF-8 text ({error}); save it as UTF-8",
            name=str(path),
        ) from error
    except OSError as error:
        raise QueryError(
            f"cannot read query file '{path}': {error.strerror or error}", name=str(path)
        ) from error


def _not_a_spec(spec: str, error: QueryError) -> QueryError:
    """The error for a spec that is no built-in name, no existing file and no valid query text."""
    close = difflib.get_close_matches(spec, BUILTIN_QUERIES, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return QueryError(
        f"'{spec}' is neither a built-in query name ({', '.join(BUILTIN_QUERIES)}), nor an "
        f"existing file, nor valid query text ({error}).{hint}",
        name=spec,
    )
