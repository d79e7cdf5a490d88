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

workers_option = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    envvar="SGM_WORKERS",
    help="Run on the partitioned engine with this many Ray workers (a local Ray cluster, or "
    "the one --ray-address names) [default: the embedded single process].",
)
shards_option = click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    envvar="SGM_SHARDS",
    help="Index partitions of the partitioned engine [default: 2 per worker].",
)
ray_address_option = click.option(
    "--ray-address",
    default=None,
    envvar="SGM_RAY_ADDRESS",
    help="Join this Ray cluster instead of starting a local one (with --workers).",
)

output_limit_option = click.option(
    "--output-limit",
    type=int,
    default=None,
    help="Aggregate rows: at most this many ids of the events that contribute to the group, "
    "as 'events' (0: none) [default: 100].",
)
table_option = click.option(
    "--table",
    "tables",
    multiple=True,
    help="A relation that is a table of vertex attributes, read as account(a) as x: its "
    "records name their vertex by 'key', the latest per key wins, a delete removes it "
    "(repeat or comma separate; a query's account(a) as x makes one too, this checks it).",
)
