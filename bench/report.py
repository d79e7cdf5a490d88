"""BENCHMARKS.md: the machine, the method, the targets, and a table per workload.

Every figure of ours stands beside the baselines' figures from the same run (STYLE rule 9).
The prose that a person writes lives in ``bench/NOTES.md`` and is included verbatim; nothing
in the generated part is edited by hand.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cells import (
    MIB,
    bytes_per_edge,
    epoch_cell,
    latency,
    rate,
    recompute_cell,
    recompute_speedup,
    rss,
    speedup,
    status_note,
    streamed,
    table,
    updates_cell,
)
from bench.machine import machine_info
from bench.queries import query_text
from bench.results import (
    Results,
    check_engines,
    check_recompute,
    rates,
    recompute_rate,
)
from bench.targets import MEMORY_TARGET, TARGETS


@dataclass(frozen=True)
class RunInfo:
    """How the run was made: its command line, parameters and duration."""

    command: str
    parameters: dict[str, Any]
    seconds: float
    figures: Sequence[Path]


def workloads_section(results: Results) -> str:
    rows = []
    for name, w in results.workloads.items():
        pre = results.preloads.get(name, {})
        seconds = pre.get("seconds") or 0.0
        rows.append(
            [
                name,
                f"{w['vertices']:,}",
                f"{w['edges']:,}",
                f"{w['max_degree']:,}",
                f"{w['preloaded_edges']:,}"
                + (f" + {w['preloaded_flags']:,} flags" if w.get("preloaded_flags") else ""),
                f"{w['stream_total']:,}",
                f"{w['stream_deletes']:,} of the first {w['stream_kept']:,}",
                f"{seconds:.2f}",
                rate(w["preloaded_edges"] / seconds) if seconds else "-",
            ]
        )
    return table(
        [
            "workload",
            "vertices",
            "undirected edges",
            "max degree",
            "preloaded",
            "stream length",
            "deletes",
            "preload s",
            "preload edges/s",
        ],
        rows,
    )


def targets_section(results: Results) -> str:
    rows = []
    for t in TARGETS:
        record = results.run(t.workload, t.query, "ours", t.batch)
        measured = rates(record)
        goal = f">= {rate(t.at_least)}"
        where = f"{t.query} on {t.workload}, batch {t.batch:,}"
        if measured is None:
            rows.append([t.label, where, goal, "-", f"not measured ({status_note(record)})"])
            continue
        value = float(getattr(measured, t.figure))
        met = "met" if value >= t.at_least else f"not met ({value / t.at_least:.0%} of it)"
        note = "" if record is None or record.get("status") == "ok" else " (partial run)"
        rows.append([t.label, where, goal, rate(value), met + note])
    workload, limit = MEMORY_TARGET
    mem = results.memory.get(workload)
    where = f"{workload}, whole graph, after compaction"
    if mem and mem.get("stored_edges"):
        value = mem["compacted_bytes"] / mem["stored_edges"]
        met = "met" if value <= limit else "not met"
        rows.append(
            [
                "compacted level, bytes per stored directed edge",
                where,
                f"<= {limit:g}",
                f"{value:.2f}",
                met,
            ]
        )
    else:
        rows.append(
            [
                "compacted level, bytes per stored directed edge",
                where,
                f"<= {limit:g}",
                "-",
                "not measured in this run",
            ]
        )
    return table(["target", "configuration", "goal", "ours", "status"], rows)


def memory_section(results: Results) -> str:
    rows = []
    for name, m in results.memory.items():
        edges = m.get("stored_edges") or 0
        if not edges:
            rows.append([name, "-", "-", "-", "-", "-", "-", status_note(m)])
            continue
        vertices = m["vertices"]
        int64_csr = (2 * 8 * (vertices + 1) + 2 * 8 * edges) / edges
        rows.append(
            [
                name,
                f"{vertices:,}",
                f"{edges:,}",
                f"{m['compacted_bytes'] / edges:.2f}",
                f"{m['index_bytes'] / edges:.2f}",
                f"{int64_csr:.2f}",
                f"{16.0:.2f}",
                rate(m["load_updates"] / m["load_seconds"]) if m.get("load_seconds") else "-",
                f"{m['max_rss_bytes'] / MIB:,.0f}",
            ]
        )
    return table(
        [
            "graph",
            "vertices",
            "stored directed edges",
            "compacted B/edge",
            "whole index B/edge",
            "int64 CSR B/edge (reference)",
            "packed pairs B/edge (reference)",
            "bulk load edges/s",
            "peak RSS MiB",
        ],
        rows,
    )


def workload_table(results: Results, workload: str, limit: float) -> str:
    """Ours beside the binary join and recompute, per query and batch size."""
    rows = []
    notes: list[str] = []
    for query in results.queries(workload):
        recompute = results.recomputes.get((workload, query))
        for batch in results.batch_sizes():
            ours_r = results.run(workload, query, "ours", batch)
            binary_r = results.run(workload, query, "binary", batch)
            if ours_r is None and binary_r is None:
                continue
            ours, binary = rates(ours_r), rates(binary_r)
            again = recompute_rate(recompute, batch, limit)
            checks = {"binary": check_engines(ours_r, binary_r)}
            if batch == max(results.batch_sizes()):
                checks["recount"] = check_recompute(ours_r, recompute)
            check = ", ".join(f"{k} {v}" for k, v in checks.items() if v) or "-"
            for label, record in (("ours", ours_r), ("binary join", binary_r)):
                note = status_note(record)
                if note:
                    notes.append(f"{query}, batch {batch:,}, {label}: {note}")
            rows.append(
                [
                    query,
                    f"{batch:,}",
                    streamed(ours, binary),
                    updates_cell(ours, ours_r, batch),
                    updates_cell(binary, binary_r, batch),
                    recompute_cell(again),
                    rate(ours.deltas_per_s if ours else None),
                    rate(binary.deltas_per_s if binary else None),
                    latency(ours),
                    latency(binary),
                    epoch_cell(again),
                    speedup(ours, binary, ours_r, binary_r, batch),
                    recompute_speedup(ours, again),
                    rss(ours_r, binary_r),
                    bytes_per_edge(ours_r),
                    check,
                ]
            )
    header = [
        "query",
        "batch",
        "updates streamed (ours / binary)",
        "ours updates/s",
        "binary updates/s",
        "recompute updates/s",
        "ours deltas/s",
        "binary deltas/s",
        "ours p50 / p99 ms",
        "binary p50 / p99 ms",
        "recompute s/epoch",
        "speedup vs binary",
        "speedup vs recompute",
        "peak RSS MiB (ours / binary)",
        "index B/edge (whole / compacted)",
        "check",
    ]
    text = table(header, rows)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    recounts = []
    for query in results.queries(workload):
        r = results.recomputes.get((workload, query))
        if r is None:
            continue
        if "count0" in r:
            counted = len(r.get("epochs", [])) + 1
            recounts.append(
                f"{query}: {r['count0']:,} matches after the preload, counted in "
                f"{r['count0_seconds']:.3g} s; {counted} recount(s) measured"
            )
        else:
            recounts.append(f"{query}: {status_note(r)} before the first recount finished")
    if recounts:
        text += "\n\nRecompute baseline: " + "; ".join(recounts) + "."
    return text


def method_section(info: RunInfo, queries: Sequence[str]) -> str:
    p = info.parameters
    caps = ", ".join(
        f"{int(b):,}: {c:,}" for b, c in sorted(p["caps"].items(), key=lambda x: int(x[0]))
    )
    lines = [
        f"- Graphs are undirected: each edge is streamed once and the engine inserts it both ways "
        f"(`Settings(undirected=True)`). The first {p['preload']:.0%} of a graph's edges (in a "
        f"seeded random order) are preloaded; the rest are streamed as inserts with deletes of "
        f"earlier edges mixed in ({p['deletes']:.0%} of streamed updates). The labelled "
        f"workload (`+flags`) puts the edges in `transfer` and flags {p['flagged']:.0%} of the "
        "vertices (`flagged`), half preloaded, half streamed.",
        f"- Each configuration streams epochs from the start of the stream for up to "
        f"{p['budget']:g} s (at least one epoch), and at most this many updates per batch size: "
        f"{caps}. A configuration runs in its own process, forked from a worker that preloaded "
        f"the graph once; it is stopped after {p['limit']:g} s ({p['target_limit']:g} s for "
        "the configurations a target names), and its figures are then those of the epochs it "
        "finished (`<` marks a bound: no epoch finished). A batch size is skipped when the "
        "next smaller one predicts that one epoch would take more than a quarter of the limit "
        f"or hold more than {p['max_deltas']:,} match deltas.",
        "- updates/s and match deltas/s are over the summed epoch times (stage, evaluate, "
        "decode, commit); p50/p99 are per-epoch latencies; peak RSS is the configuration "
        "process's `ru_maxrss`, which includes the preloaded index it inherited; index B/edge "
        "is, per stored directed edge at the end of the run, the whole index (every level and "
        "the vertex dictionary) and its compacted level alone (changes not yet compacted sit "
        "in the committed level).",
        "- *binary join*: the same delta queries, each stage proposing from its first atom only "
        "(a binary join materializing all its extensions), the stage's other atoms applied as "
        "semijoin filters; no count minimization (`bench/baselines.py`).",
        "- *recompute*: after each epoch is applied, all matches are counted from scratch by "
        "the static evaluator. Counting is cheaper than enumerating and diffing, so this "
        f"baseline is flattered. It recounts epochs of the largest batch size for up to "
        f"{p['recompute_budget']:g} s; the other batch sizes (marked `*`) are extrapolated as "
        "the time to apply their epoch plus the mean recount time, since a recount costs the "
        "same whatever the batch. `<` marks a bound: the first recount did not finish within "
        f"{p['recompute_limit']:g} s.",
        "- check: `binary ok` when ours and the binary join produced the same number of match "
        "deltas with the same net sum over the epochs both finished; `recount ok` (largest "
        "batch) when every recount equals the preloaded count plus our accumulated deltas.",
        "- One core: the engine is single-threaded numpy; the workers run with "
        "`OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1`"
        + (f", pinned to CPU {p['cpu']}" if p.get("cpu") is not None else "")
        + ", one configuration at a time.",
        "",
        "Queries:",
        "",
    ]
    lines.extend(f"- `{query_text(q)}`" for q in queries)
    return "\n".join(lines)


def render(
    results: Results,
    info: RunInfo,
    notes: str,
    out_dir: Path,
    persistence: str | None = None,
    kafka: str | None = None,
    cluster: str | None = None,
) -> str:
    """The whole BENCHMARKS.md (``persistence``, ``kafka``, ``cluster``: what those benchmarks
    wrote)."""
    machine = machine_info()
    p = info.parameters
    parts = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.run`; do not edit by hand (rerun it). The notes at the end "
        "come from `bench/NOTES.md`.",
        "",
        f"Command: `{info.command}` — {info.seconds / 60:.1f} minutes.",
        "",
        "## Machine",
        "",
        table(["", ""], [[k, v] for k, v in machine.items()]),
        "",
        "## Targets",
        "",
        targets_section(results),
        "",
        "## Workloads",
        "",
        workloads_section(results),
        "",
        "## Memory",
        "",
        "The whole graph loaded, then every adjacency compacted. A binary relation is stored "
        "twice (forward and reverse), so bytes per stored directed edge count both copies. The "
        "references are computed for the same graph, not measured: the same CSR with 8-byte "
        "offsets and targets, and sorted packed `int64` pairs, both directions.",
        "",
        memory_section(results),
        "",
        "## Method",
        "",
        method_section(info, p["queries"]),
        "",
    ]
    for workload in results.workloads:
        if not results.queries(workload):
            continue
        parts += [f"## {workload}", "", workload_table(results, workload, p["recompute_limit"]), ""]
    if info.figures:
        parts += ["## Throughput", ""]
        for figure in info.figures:
            rel = os.path.relpath(figure, out_dir)
            parts += [f"![{figure.stem}]({rel})", ""]
    if persistence:
        parts += ["## Persistence", "", persistence.strip(), ""]
    if kafka:
        parts += ["## Through Kafka", "", kafka.strip(), ""]
    if cluster:
        parts += ["## Scale-out", "", cluster.strip(), ""]
    if results.failures:
        parts += ["## Failures", ""] + [f"- {f}" for f in results.failures] + [""]
    parts += ["## Notes", "", notes.strip(), ""]
    return "\n".join(parts)


def stdout_summary(results: Results, info: RunInfo) -> str:
    """The figures for the terminal: targets, memory and the per-workload tables."""
    parts = ["Targets", targets_section(results), "", "Memory", memory_section(results), ""]
    for workload in results.workloads:
        if results.queries(workload):
            parts += [
                workload,
                workload_table(results, workload, info.parameters["recompute_limit"]),
                "",
            ]
    return "\n".join(parts)


def python_command() -> str:
    return " ".join(["python -m bench.run", *sys.argv[1:]])
