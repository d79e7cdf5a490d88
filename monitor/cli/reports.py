"""What a file run says on stderr (skipped lines, progress, the summary at the end), and what
``state inspect`` says of a state directory."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from core.errors import StateError
from core.records import DeadLetter
from core.times import format_duration, format_time
from monitor.engine.shared import PlanTrie
from monitor.index.graph import GraphIndex
from monitor.index.store import StateStore
from monitor.plan.events import event_relations, rewrite
from monitor.plan.plan import DeltaQuery
from monitor.plan.planner import delta_queries, static_plan
from monitor.plan.windows import describe, retentions, span
from monitor.query.ast import Query
from monitor.service.epoch_output import RunTotals
from monitor.service.filejob import Progress
from monitor.service.kept_matches import keeping


def dead_letter_reporter(quiet: bool) -> Callable[[DeadLetter], None]:
    """Print the first 20 bad lines on stderr (unless ``quiet``), then only count them."""
    shown = 0

    def report(letter: DeadLetter) -> None:
        nonlocal shown
        shown += 1
        if quiet:
            return
        if shown <= 20:
            click.echo(f"subgraph-monitor: skipped {letter.position}: {letter.reason}", err=True)
        elif shown == 21:
            click.echo("subgraph-monitor: further bad lines are counted, not shown", err=True)

    return report


def print_progress(p: Progress) -> None:
    """One progress line of a long run on stderr."""
    share = f" ({100 * p.fraction:.0f}%)" if p.fraction is not None else ""
    rate = p.updates / p.seconds if p.seconds else 0.0
    click.echo(
        f"subgraph-monitor: {p.updates:,} updates read{share}, {p.epochs:,} epochs, "
        f"{p.deltas:,} match deltas, {rate:,.0f} updates/s",
        err=True,
    )


def print_summary(totals: RunTotals, bad_lines: int, seconds: float) -> None:
    """The end of a run on stderr: what was read, applied and ignored, event time, deltas."""
    ignored = ", ".join(f"{k} {v:,}" for k, v in sorted(totals.ignored.items()) if v) or "none"
    lines = [
        f"updates read {totals.updates:,}, applied {totals.applied:,}, ignored: {ignored}",
        f"bad input lines skipped {bad_lines:,}",
        f"epochs {totals.epochs:,}",
    ]
    if math.isfinite(totals.watermark):
        late = totals.ignored.get("late", 0)
        lines.append(
            f"event time: watermark {format_time(totals.watermark)}, expired "
            f"{totals.expired:,}, late {late:,}"
        )
    for query in sorted({q for q, _ in totals.deltas}):
        plus, minus = totals.deltas[(query, 1)], totals.deltas[(query, -1)]
        lines.append(f"query {query}: +{plus:,} -{minus:,} match deltas")
    deltas = sum(totals.deltas.values())
    rate_u = totals.updates / seconds if seconds else 0.0
    rate_d = deltas / seconds if seconds else 0.0
    lines.append(f"elapsed {seconds:.2f} s: {rate_u:,.0f} updates/s, {rate_d:,.0f} match deltas/s")
    for line in lines:
        click.echo(f"subgraph-monitor: {line}", err=True)


def print_state(directory: str) -> None:
    """``state inspect`` of a single process's state directory: its epoch, input position,
    queries, relations and size on disk."""
    with StateStore.open(directory, read_only=True) as store:
        meta = store.meta
        if meta is None:
            raise StateError(f"{directory} holds no committed epoch yet")
        index = GraphIndex()
        store.load(index)
        disk = store.disk_bytes()
    stored = index.edge_count() + sum(len(e) for e in index.event_stores.values())
    lines = [
        f"state directory  {directory}",
        f"format version   {meta.format_version}",
        f"epoch            {meta.epoch} (snapshot at epoch {meta.snapshot_epoch})",
        *run_lines(meta.position, meta.output_bytes, meta.settings, meta.queries),
        "relations",
        *(
            f"  {name:<20} arity {rel.arity}  {len(rel):>12,} tuples"
            for name, rel in sorted(index.relations.items())
        ),
        *(
            f"  {name:<20} events   {len(events):>12,} live  fields "
            + (", ".join(f"{f} ({c.kind})" for f, c in events.fields.items()) or "none")
            for name, events in sorted(index.event_stores.items())
        ),
        f"vertices         {len(index.dictionary):,}",
        f"size on disk     {disk:,} bytes"
        + (f" ({disk / stored:.1f} per tuple or event)" if stored else ""),
    ]
    for line in lines:
        click.echo(line)


def run_lines(
    position: Mapping[str, Any],
    output_bytes: int | None,
    settings: Mapping[str, Any],
    queries: Sequence[str],
) -> list[str]:
    """What a state directory says of its run: the input position, the output, the settings
    and the queries."""
    checkpoint = position.get("checkpoint") or {}
    return [
        f"input            {position.get('input')}: {position.get('seq', 0):,} updates "
        f"consumed (byte offset {checkpoint.get('offset', 0):,}, "
        f"line {checkpoint.get('line', 0):,})",
        "output           "
        + ("stdout" if output_bytes is None else f"{output_bytes:,} bytes committed"),
        "settings         " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())),
        "queries",
        *(f"  {q}" for q in queries),
    ]


def describe_groups(query: Query) -> str:
    """What ``explain`` says of an aggregate query's groups."""
    conditions = ", ".join(str(c) for c in query.aggregates)
    line = f"groups by ({', '.join(query.head)}), kept from the body's changes: {conditions}"
    if query.over is not None:
        line += (
            f"; counting the bindings whose earliest event lies within "
            f"{format_duration(query.over)} of the watermark"
        )
    return line


def print_plans(queries: Sequence[Query]) -> None:
    """What ``explain`` prints: each query, rewritten over the index, its bounds and span, every
    delta query and the static plan; then what the plans share and the retentions."""
    events = event_relations(tuple(queries))
    window = retentions(queries, events, {}) if events else {}
    plans: list[tuple[str, DeltaQuery]] = []
    for query in queries:
        click.echo(f"# {query}")
        rewritten = rewrite(query, events, bounds=True)
        internal = rewritten.internal
        plans += [(query.name, plan) for plan in delta_queries(internal)]
        if internal is not query:
            click.echo(f"# over the index: {internal}")
        if query.aggregates:
            click.echo(f"# {describe_groups(query)}")
        for bound in rewritten.degrees:
            click.echo(f"# degree bound (one process; monitor/plan/degrees.py): {bound}")
        if query.edges:
            reach = span(query)
            click.echo(f"# span: {'unbounded' if math.isinf(reach) else format_duration(reach)}")
        if keeping(rewritten, window):
            click.echo(
                "# live matches kept (monitor/engine/live_matches.py, --live-matches): "
                "expiries and deletes retract them by lookup, the plans seeded by insertions "
                "alone run"
            )
        for plan in delta_queries(internal):
            click.echo(plan.describe())
        click.echo(static_plan(internal).describe())
        click.echo()
    shared = PlanTrie(plans).shared
    if shared:
        click.echo(
            f"# stages run once for several delta queries (monitor/engine/shared.py): {shared}"
        )
    if events:
        click.echo(f"# retention by default (--retention overrides): {describe(window)}")
        tables = sorted(frozenset().union(*(q.tables for q in queries)))
        if tables:
            click.echo(
                f"# tables (a record per vertex by 'key', the latest wins, never expiring): "
                f"{', '.join(tables)}"
            )
