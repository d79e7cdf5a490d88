"""Options several commands share (``run`` and ``count`` read edges the same way)."""

from __future__ import annotations

import click

query_option = click.option(
    "--query",
    "-q",
    "query_specs",
    multiple=True,
    required=True,
    help="A built-in query name, a query file, or inline query text (repeatable).",
)
edges_option = click.option(
    "--edges",
    "-e",
    "edges",
    required=True,
    help="Edge updates: a file (.gz read transparently) or '-' for stdin.",
)
undirected_option = click.option(
    "--undirected",
    is_flag=True,
    default=None,
    help="Every binary edge is inserted/deleted in both directions.",
)
format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "text", "json"]),
    default="auto",
    show_default=True,
    help="Input format (auto: JSON if the first record starts with '{').",
)
relation_option = click.option(
    "--relation",
    "default_relation",
    default=None,
    help="Relation of records that name none [default: e].",
)
strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Stop at the first bad input line (exit 3) instead of skipping it.",
)
prefixes_option = click.option(
    "--max-prefixes",
    type=int,
    default=None,
    help="Prefixes alive at once during evaluation (bounds memory) [default: 1048576].",
)
