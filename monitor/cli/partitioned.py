"""``run`` and ``count`` with ``--workers``: the commands on the partitioned engine
(:mod:`monitor.distributed`), its deltas on stdout, a summary and each shard on stderr.

Ray is imported only here, inside the commands, so the embedded default never pays for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import click

from connectors.files import EdgeFileSource
from core.errors import StateError
from core.records import Checkpoint, mirrored
from core.times import format_time
from monitor.cli.reports import run_lines
from monitor.query.ast import Query
from monitor.service.settings import Settings

if TYPE_CHECKING:  # (the partitioned engine is imported inside the commands)
    from monitor.distributed.filejob import PartitionedTotals

#: ``--workers``, ``--shards`` and ``--ray-address`` as given.
Partitioned = tuple[int, int | None, str | None]


def run_on_shards(
    queries: Sequence[Query],
    settings: Settings,
    edges: str,
    open_source: Callable[[str, Checkpoint | None, int], EdgeFileSource],
    quiet: bool,
    partitioned: Partitioned,
    preload: str | None,
    initial: bool,
    output: str | None,
) -> None:
    """``run --workers``: every epoch of the input through the shards."""
    from monitor.distributed.cluster import ray_shards
    from monitor.distributed.filejob import PartitionedJob, run_partitioned

    started = time.perf_counter()
    job = PartitionedJob(
        edges,
        open_source,
        state_dir=settings.state_dir,
        output=output,
        preload=preload,
        initial=initial,
        progress=None if quiet else (lambda totals: print_progress(totals, started)),
    )
    with ray_shards(*partitioned) as shards:
        totals = run_partitioned(queries, settings, job, shards)
    if quiet:
        return
    seconds = time.perf_counter() - started
    resumed = f" (continuing after epoch {totals.resumed:,})" if totals.resumed else ""
    click.echo(
        f"subgraph-monitor: {totals.updates:,} updates, {totals.epochs:,} epochs{resumed} in "
        f"{seconds:.2f} s on {len(totals.shards)} shards ({totals.rounds:,} rounds of calls)",
        err=True,
    )
    if totals.bad_lines:
        click.echo(f"subgraph-monitor: bad input lines skipped {totals.bad_lines:,}", err=True)
    ignored = ", ".join(f"{k} {v:,}" for k, v in sorted(totals.ignored.items()) if v)
    if ignored:
        click.echo(f"subgraph-monitor: updates ignored: {ignored}", err=True)
    if math.isfinite(totals.watermark):
        late = totals.ignored.get("late", 0)
        click.echo(
            f"subgraph-monitor: event time: watermark {format_time(totals.watermark)}, expired "
            f"{totals.expired:,}, late {late:,}",
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
    from monitor.distributed.count import count_all
    from monitor.distributed.filejob import with_traffic

    batches = source.batches(1 << 20)
    if settings.undirected:
        batches = (mirrored(b) for b in batches)
    with ray_shards(*partitioned) as shards:
        counts, index = count_all(queries, shards, batches, settings.max_prefixes, settings)
        stats = with_traffic(index.stats(), shards)
    for name, matches in counts.items():
        click.echo(f"{name}\t{matches}")
    print_shards(stats)


def print_progress(totals: PartitionedTotals, started: float) -> None:
    """A progress line: updates, epochs and match deltas so far, the rate, and the shards'
    balance (the largest shard's pairs and work against the mean) and traffic."""
    seconds = time.perf_counter() - started
    shards = totals.shards
    pairs = [s["pairs"] for s in shards]
    work = [s.get("proposed", 0) + s.get("intersected", 0) for s in shards]
    traffic = sum(s["sent"] + s["received"] for s in shards)
    click.echo(
        f"subgraph-monitor: {totals.updates:,} updates, {totals.epochs:,} epochs, "
        f"{sum(totals.deltas.values()):,} match deltas in {seconds:.0f} s "
        f"({totals.updates / seconds:,.0f} updates/s); {len(shards)} shards: pairs max/mean "
        f"{_balance(pairs)}, work max/mean {_balance(work)}, {traffic / 2**20:,.1f} MiB exchanged",
        err=True,
    )


def _balance(figures: Sequence[int]) -> str:
    mean = sum(figures) / len(figures) if figures else 0
    return f"{max(figures) / mean:.2f}" if mean else "-"


def print_shards(stats: Sequence[Mapping[str, int]]) -> None:
    """Each shard's pairs, index bytes, work and bytes exchanged, on stderr."""
    for s, figures in enumerate(stats):
        described = ", ".join(f"{key} {value:,}" for key, value in figures.items())
        click.echo(f"subgraph-monitor: shard {s}: {described}", err=True)


def inspect_shards(directory: str) -> None:
    """``state inspect`` of the partitioned engine's state directory: the driver's record, then
    each shard's pairs per relation and position, and its size on disk."""
    from monitor.distributed.durable import DriverStore, shard_directory
    from monitor.distributed.shard_store import ShardStore
    from monitor.index.event_state import unpack_records

    driver = DriverStore.open(directory, read_only=True)
    try:
        meta = driver.meta
    finally:
        driver.close()
    if meta is None:
        raise StateError(f"{directory} holds no committed epoch yet")
    shards = int(meta.settings["shards"])
    lines = [
        f"state directory  {directory} (the partitioned engine's, {shards} shards)",
        f"epoch            {meta.epoch}",
        *run_lines(meta.position, meta.output_bytes, meta.settings, meta.queries),
        "shards",
    ]
    for s in range(shards):
        path = shard_directory(directory, s)
        store = ShardStore.open(path, s, shards, meta.epoch, read_only=True)
        try:
            parts = store.load()
            disk = store.disk_bytes()
            snapshot = store.meta["snapshot_epoch"]
            arity = store.meta.get("arity", {})
            vertices = sum(int.from_bytes(blob[:4], "little") for blob in store.vertices())
            events = sum(
                int(record.diff.sum())
                for blobs in store.events()[1].values()
                for blob in blobs
                for record in unpack_records(blob)
            )
        finally:
            store.close()
        held = ", ".join(
            f"{relation}/{_direction(arity.get(relation, 2), position)} {columns[0].shape[0]:,}"
            for (relation, position), columns in sorted(parts.items())
        )
        lines.append(
            f"  shard {s:<4} vertices {vertices:,}; events {events:,}; pairs {held or 'none'}; "
            f"{disk:,} bytes on disk "
            f"(snapshot at epoch {snapshot})"
        )
    for line in lines:
        click.echo(line)


def _direction(arity: int, position: int) -> str:
    """How ``state inspect`` names a part: by the key it is stored under."""
    if arity == 1:
        return "values"
    if arity == 2:
        return "src" if position else "dst"
    return f"position {position}"  # (keyed by the tuple of the other positions)
