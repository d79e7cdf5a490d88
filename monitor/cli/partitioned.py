"""``run`` and ``count`` with ``--workers``: the commands on the partitioned engine
(:mod:`monitor.distributed`), its deltas on stdout, a summary and each shard on stderr.

What the partitioned engine cannot run is refused before Ray starts; Ray is imported only here,
inside the commands, so the embedded default never pays for it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence

import click

from connectors.files import EdgeFileSource
from connectors.sinks import JsonLinesSink
from core.records import exact_batches, mirrored
from monitor.query.ast import Query
from monitor.service.settings import Settings

#: ``--workers``, ``--shards`` and ``--ray-address`` as given.
Partitioned = tuple[int, int | None, str | None]


def run_on_shards(
    queries: Sequence[Query],
    settings: Settings,
    source: EdgeFileSource,
    quiet: bool,
    partitioned: Partitioned,
    preload: str | None,
    initial: bool,
    output: str | None,
) -> None:
    """``run --workers``: every epoch of ``source`` through the shards."""
    from monitor.distributed.cluster import ray_shards
    from monitor.distributed.count import refuse_unsupported
    from monitor.distributed.filejob import refuse_options, run_partitioned

    refuse_options(state_dir=settings.state_dir, preload=preload, initial=initial, output=output)
    refuse_unsupported(queries)  # (before Ray starts)
    started = time.perf_counter()
    batches = exact_batches(source.batches(settings.batch_size), settings.batch_size)
    with ray_shards(*partitioned) as shards:
        totals = run_partitioned(
            queries, settings, batches, JsonLinesSink(sys.stdout.buffer), shards
        )
    if quiet:
        return
    seconds = time.perf_counter() - started
    click.echo(
        f"subgraph-monitor: {totals.updates:,} updates, {totals.epochs:,} epochs in "
        f"{seconds:.2f} s on {len(totals.shards)} shards ({totals.rounds:,} rounds of calls)",
        err=True,
    )
    for query in queries:
        plus, minus = totals.deltas[(query.name, 1)], totals.deltas[(query.name, -1)]
        click.echo(
            f"subgraph-monitor: query {query.name}: +{plus:,} -{minus:,} match deltas", err=True
        )
    print_shards(totals.shards)


def count_on_shards(
    queries: Sequence[Query],
    settings: Settings,
    source: EdgeFileSource,
    partitioned: Partitioned,
) -> None:
    """``count --workers``: the current matches of every query, counted on the shards."""
    from monitor.distributed.cluster import ray_shards
    from monitor.distributed.count import count_all, refuse_unsupported
    from monitor.distributed.filejob import with_traffic

    refuse_unsupported(queries)  # (before Ray starts)
    batches = source.batches(1 << 20)
    if settings.undirected:
        batches = (mirrored(b) for b in batches)
    with ray_shards(*partitioned) as shards:
        counts, index = count_all(queries, shards, batches, settings.max_prefixes)
        stats = with_traffic(index.stats(), shards)
    for name, matches in counts.items():
        click.echo(f"{name}\t{matches}")
    print_shards(stats)


def print_shards(stats: Sequence[Mapping[str, int]]) -> None:
    """Each shard's pairs, index bytes, work and bytes exchanged, on stderr."""
    for s, figures in enumerate(stats):
        described = ", ".join(f"{key} {value:,}" for key, value in figures.items())
        click.echo(f"subgraph-monitor: shard {s}: {described}", err=True)
