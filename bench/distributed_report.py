"""``bench/distributed.md``: the tables of one run of ``bench.distributed`` and its goals.

The goals (issue #33, "Benchmark") are computed from the run's figures by :func:`goals`; each
is *met* or *missed by* the distance to its bound, in the bound's unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.distributed_runs import Capacity, Graph, Outcome

MB = 1 << 20


@dataclass(frozen=True)
class Section:
    """One graph and query: every configuration's outcome, the single process's first."""

    graph: Graph
    query: str
    batch: int
    outcomes: list[Outcome]
    #: Why dataflow-join has no row here (None: it has).
    peer_note: str | None = None

    @property
    def single(self) -> Outcome:
        return self.outcomes[0]

    def find(self, kind: str, workers: int) -> Outcome | None:
        for o in self.outcomes:
            if o.kind == kind and o.workers == workers and o.ok:
                return o
        return None


def _ratio(a: Outcome, b: Outcome | None) -> str:
    return f"{a.rate / b.rate:.2f}" if b is not None and b.ok and a.ok else "-"


def _max_mean(values: Sequence[int]) -> float:
    array = np.array(values, float)
    return float(array.max() / array.mean()) if array.size and array.mean() > 0 else float("nan")


def _check(o: Outcome, section: Section) -> str:
    if o.mismatch is not None:
        return f"**MISMATCH**: {o.mismatch}"
    if o is section.single:
        return f"{o.deltas:,}"
    return "= single" if o.kind != "peer" else "= ours"


def row(o: Outcome, section: Section) -> str:
    """One configuration's line of a section's table."""
    if not o.ok:
        return f"| {o.label} | {o.error} |" + " - |" * 10
    single = section.single
    peer = section.find("peer", o.workers) if o.kind != "peer" and o.workers <= 2 else None
    p50, p99 = np.percentile(np.array(o.latencies) * 1e3, [50, 99]) if o.latencies else (0, 0)
    cells = [
        o.label,
        f"{o.rate:,.0f}",
        _ratio(o, single),
        _ratio(o, peer),
        f"{p50:,.0f} / {p99:,.0f}",
    ]
    if o.kind == "peer":
        cells += ["-", "-", "-", "-"]
    else:
        largest = max(o.shard_bytes)
        share = single.shard_bytes[0] / o.workers
        cells.append(f"{largest / MB:,.1f} MB ({largest / share:.2f}x)")
        cells.append(f"{_max_mean(o.shard_bytes):.2f}" if o.kind != "single" else "-")
        cells.append(f"{o.exchanged / o.updates:,.0f}" if o.kind != "single" else "-")
        cells.append(_split(o) if o.kind != "single" else "-")
    rss = f"{o.rss_driver / MB:,.0f}"
    if o.rss_shards:
        rss += " + " + ", ".join(f"{r / MB:,.0f}" for r in o.rss_shards)
    cells.append(rss)
    cells.append(f"{_max_mean(o.work):.2f}" if o.work else "-")
    cells.append(_check(o, section))
    return "| " + " | ".join(cells) + " |"


def _split(o: Outcome) -> str:
    """Shares of the epochs: the driver outside the calls / the shards' compute / calls and
    waits."""
    driver = o.seconds - o.call_seconds
    waits = o.call_seconds - o.compute_seconds
    return " / ".join(f"{100 * x / o.seconds:.0f}" for x in (driver, o.compute_seconds, waits))


HEADER = (
    "| configuration | updates/s | vs single | vs dataflow-join | epoch p50 / p99 ms "
    "| index, largest shard (x single / S) | index max/mean | exchanged B/update "
    "| epoch % driver / shards / calls+waits | peak RSS MB (driver + shards) | work max/mean "
    "| match changes |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
)


def section_text(section: Section) -> list[str]:
    g, single = section.graph, section.single
    epochs = -(-g.streamed // section.batch)
    lines = [
        f"### {g.title}, {section.query}: {g.edges.shape[0]:,} edges, {g.preloaded:,} preloaded, "
        f"{g.streamed:,} streamed in {epochs:,} epochs of {section.batch:,}; "
        f"{single.deltas:,} match changes",
        "",
        HEADER,
        *(row(o, section) for o in section.outcomes),
    ]
    if section.peer_note is not None:
        lines.append(f"| dataflow-join | skipped: {section.peer_note} |" + " - |" * 10)
    return [*lines, ""]


def capacity_text(c: Capacity) -> list[str]:
    lines = [
        f"### Capacity: {c.graph}, all {c.edges:,} edges loaded at once, shards in this process",
        "",
        f"The single process's index: {c.single_bytes:,} bytes ({c.single_bytes / MB:,.1f} MB), "
        f"loaded in {c.single_seconds:.1f} s.",
        "",
        "| shards S | load s | largest shard bytes | single / S | largest / (single / S) "
        "| max/mean |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s, (sizes, seconds) in sorted(c.shards.items()):
        share = c.single_bytes / s
        lines.append(
            f"| {s} | {seconds:.1f} | {max(sizes):,} | {share:,.0f} | {max(sizes) / share:.2f} "
            f"| {_max_mean(sizes):.2f} |"
        )
    return [*lines, ""]


def profile_text(sections: Sequence[Section]) -> list[str]:
    """Where an epoch of the Ray configurations goes, ms per epoch (and rounds and MB)."""
    lines = [
        "### Where a Ray epoch goes (ms per epoch; rounds and MB exchanged per epoch)",
        "",
        "*Driver*: outside the calls to the shards (routing, prefixes, the evaluator). *Calls*: "
        "inside them, of which *compute* (the slowest shard of each round, summed over rounds) "
        "and *calls + waits* (the rest). Then the shards' own seconds per method, summed over "
        "shards (with several shards on two cores, more than the compute on the critical path): "
        "*extend* proposes and intersects at the extenders a shard holds too, *contains* "
        "intersects the proposals sent on from other shards.",
        "",
        "| graph, query | configuration | epoch | driver | calls | compute | calls + waits "
        "| rounds | MB exchanged | stage | count | extend | contains | commit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for section in sections:
        for o in section.outcomes:
            if o.kind != "Ray" or not o.ok:
                continue
            n = len(o.latencies)
            ms = [
                o.seconds,
                o.seconds - o.call_seconds,
                o.call_seconds,
                o.compute_seconds,
                o.call_seconds - o.compute_seconds,
            ]
            methods = [
                o.methods.get(m, 0.0)
                for m in ("stage_many", "count_many", "extend_many", "contains_many", "commit")
            ]
            cells = [f"{1e3 * x / n:,.0f}" for x in ms]
            cells += [f"{o.rounds / n:,.0f}", f"{o.exchanged / n / MB:,.0f}"]
            cells += [f"{1e3 * x / n:,.0f}" for x in methods]
            lines.append(
                f"| {section.graph.title}, {section.query} | {o.label} | "
                + " | ".join(cells)
                + " |"
            )
    return [*lines, ""]


@dataclass(frozen=True)
class Goal:
    goal: str
    where: str
    figure: str
    verdict: str


def verdict(figure: float, bound: float, at_most: bool, unit: str) -> str:
    """``met``, or ``missed by`` the distance to ``bound``."""
    if (figure <= bound) if at_most else (figure >= bound):
        return "met"
    if unit == "%":
        return f"missed by {100 * abs(figure - bound):.0f} points"
    return f"missed by {abs(figure - bound):.2f}x"


def _fmt(figure: float, unit: str) -> str:
    return f"{100 * figure:.0f}%" if unit == "%" else f"{figure:.2f}x"


def goals(sections: Sequence[Section], capacity: Capacity | None, target: str) -> list[Goal]:
    """Issue #33's goals from the figures; ``target`` is the graph of the work and capacity
    goals (R-MAT 10M in a full run)."""
    found: list[Goal] = []

    def add(goal: str, where: str, figure: float, bound: float, at_most: bool, unit: str) -> None:
        found.append(Goal(goal, where, _fmt(figure, unit), verdict(figure, bound, at_most, unit)))

    bytes_goal = "index bytes per shard <= 1.3x single / S"
    for s in (4, 8):
        if capacity is not None and s in capacity.shards:
            sizes = capacity.shards[s][0]
            add(
                bytes_goal,
                f"{capacity.graph}, S = {s}",
                max(sizes) / (capacity.single_bytes / s),
                1.3,
                True,
                "x",
            )
        else:
            found.append(Goal(bytes_goal, f"S = {s}", "-", "not measured in this run"))
    for section in sections:
        four = section.find("in process", 4) or section.find("Ray", 4)
        if section.graph.name == target and four is not None:
            where = f"{section.graph.title}, {section.query}, streamed epochs, S = 4"
            add("work max/mean <= 1.5 at S = 4", where, _max_mean(four.work), 1.5, True, "x")
    for section in sections:
        ours, peer = section.find("Ray", 2), section.find("peer", 2)
        if ours is not None and peer is not None:
            where = f"{section.graph.title}, {section.query}: 2 Ray shards / -w2"
            add(
                ">= 0.5x dataflow-join -w2 at 2 workers",
                where,
                ours.rate / peer.rate,
                0.5,
                False,
                "x",
            )
    for section in sections:
        rays = [o for o in section.outcomes if o.kind == "Ray" and o.ok]
        if section.query == "4-clique" and rays:
            best = max(rays, key=lambda o: o.rate)
            where = f"{section.graph.title}, batch {section.batch:,}: {best.label}, the fastest"
            add(
                ">= 1.3x our single process on 4-cliques",
                where,
                best.rate / section.single.rate,
                1.3,
                False,
                "x",
            )
    for s in sorted({o.workers for sec in sections for o in sec.outcomes if o.kind == "Ray"}):
        shares = [
            ((o.call_seconds - o.compute_seconds) / o.seconds, f"{sec.graph.title}, {sec.query}")
            for sec in sections
            for o in sec.outcomes
            if o.kind == "Ray" and o.workers == s and o.ok
        ]
        if shares:
            worst, where = max(shares)
            where = f"{s} Ray shard{'s' if s > 1 else ''}, the worst of {len(shares)}: {where}"
            add("Ray calls and waits <= 20% of an epoch", where, worst, 0.2, True, "%")
    return found


def goals_text(found: Sequence[Goal]) -> list[str]:
    lines = ["## Goals", "", "| goal | where | figure | verdict |", "|---|---|---:|---|"]
    lines += [f"| {g.goal} | {g.where} | {g.figure} | {g.verdict} |" for g in found]
    return [*lines, ""]
