"""``bench/kafka.md`` from :mod:`bench.kafka`'s rounds: a method paragraph, one table per
workload with its columns side by side, the scale-out table and the client's ceilings."""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass

from bench.kafka_serve import BATCH
from bench.machine import machine_info

#: The outputs compared, by name: ``records``, ``batches`` (JSON Lines) and ``arrow``
#: (``batches`` encoded as Arrow, ``SGM_BATCH_ENCODING=arrow``).
FORMATS = ("records", "batches", "arrow")

#: How each output is named in the tables.
LABELS = {"records": "records", "batches": "batches", "arrow": "batches as Arrow"}


def format_env(output: str) -> dict[str, str]:
    """The service's settings for one of :data:`FORMATS`."""
    if output == "arrow":
        return {"SGM_OUTPUT_FORMAT": "batches", "SGM_BATCH_ENCODING": "arrow"}
    return {"SGM_OUTPUT_FORMAT": output}


@dataclass(frozen=True)
class Figures:
    """What one workload measured: per round, the figures by name (``file``, ``records``,
    ``batches``, ``N records`` for N workers, ``... deltas`` for match deltas/s, ``consumer``
    and ``producer`` for the ceilings); per format (``records``, ``N records`` for N workers),
    the latency run's p50 and p99 seconds."""

    name: str
    what: str
    partitions: int
    rounds: list[dict[str, float]]
    latency: dict[str, tuple[float, float]]
    #: The scale-out's worker counts (none: no scale-out on this workload).
    workers: list[int]

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.rounds)

    def ratio(self, key: str, of: str) -> float:
        """The median over the rounds of each round's ``key / of``."""
        ratios = [r[key] / r[of] for r in self.rounds if r[of]]
        return statistics.median(ratios) if ratios else math.nan


def share(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def rate(x: float) -> str:
    return f"{x:,.0f}"


def milliseconds(quantiles: tuple[float, float]) -> str:
    return "{:,.0f} / {:,.0f} ms".format(*(1000 * s for s in quantiles))


def side_by_side(f: Figures) -> str:
    """The workload's table: the file job, ``serve`` in each format, the two ceilings."""
    head = [
        "file job",
        *(f"`serve`, {LABELS[o]}" for o in FORMATS),
        "bare consumer",
        "bare producer",
    ]
    rows = [
        ["updates/s", rate(f.median("file"))]
        + [rate(f.median(o)) for o in FORMATS]
        + [f"{rate(f.median('consumer'))} records/s", "-"],
        ["match deltas/s", rate(f.median("file deltas"))]
        + [rate(f.median(f"{o} deltas")) for o in FORMATS]
        + ["-", f"{rate(f.median('producer'))} records/s"],
        ["updates/s, of the consumer ceiling", "-"]
        + [share(f.ratio(o, "consumer")) for o in FORMATS]
        + ["100%", "-"],
        ["match deltas/s, of the producer ceiling", "-"]
        + [share(f.ratio(f"{o} deltas", "producer")) for o in FORMATS]
        + ["-", "100%"],
        ["updates/s, of the file job", "100%"]
        + [share(f.ratio(o, "file")) for o in FORMATS]
        + ["-", "-"],
        ["produce -> commit latency, p50 / p99", "-"]
        + [milliseconds(f.latency[o]) for o in FORMATS]
        + ["-", "-"],
    ]
    return table([f"{f.name}, medians of {len(f.rounds)}", *head], rows)


def scale_out(f: Figures, workers: list[int]) -> str:
    """Scale-out on the workload's topic: each worker count in each format."""
    rows = []
    for n in workers:
        for o in FORMATS:
            key = f"{n} {o}"
            rows.append(
                [
                    str(n),
                    LABELS[o],
                    rate(f.median(key)),
                    rate(f.median(f"{key} deltas")),
                    share(f.ratio(key, "consumer")),
                    share(f.ratio(f"{key} deltas", "producer")),
                    f"{f.ratio(key, f'{workers[0]} {o}'):.2f}x",
                    milliseconds(f.latency[key]),
                ]
            )
    head = [
        "workers",
        "output",
        "updates/s",
        "match deltas/s",
        "updates/s, of the consumer ceiling",
        "match deltas/s, of the producer ceiling",
        f"vs {workers[0]} worker(s), same output",
        "produce -> commit latency, p50 / p99",
    ]
    return table(head, rows)


def ceilings(figures: list[Figures]) -> str:
    rows = [
        [
            f.name,
            rate(f.median("consumer")),
            f"{f.median('consumer bytes'):,.0f}",
            rate(f.median("producer")),
            f"{f.median('producer bytes'):,.0f}",
        ]
        for f in figures
    ]
    head = [
        "workload",
        "bare consumer, records/s",
        "bytes per input record",
        "bare producer, records/s",
        "bytes per output record",
    ]
    return table(head, rows)


def headline(f: Figures) -> str:
    """One line of the workload's figures: ``serve`` against the file job and the ceilings,
    the scale-out from the fewest workers to the most, the latency."""
    names = ", ".join(f"`{LABELS[o]}`" for o in FORMATS)
    line = (
        f"- **{f.name}** ({names}): `serve` applies "
        + " / ".join(rate(f.median(o)) for o in FORMATS)
        + " updates/s ("
        + " / ".join(share(f.ratio(o, "file")) for o in FORMATS)
        + f" of the file job's {rate(f.median('file'))}); "
        + " / ".join(rate(f.median(f"{o} deltas")) for o in FORMATS)
        + " match deltas/s ("
        + " / ".join(share(f.ratio(f"{o} deltas", "producer")) for o in FORMATS)
        + f" of the bare producer's {rate(f.median('producer'))} records/s); the bare consumer "
        f"reads {rate(f.median('consumer'))} records/s; latency p50 / p99 "
        + ", ".join(milliseconds(f.latency[o]) for o in FORMATS)
    )
    if f.workers:
        few, most = f.workers[0], f.workers[-1]
        line += f"; {few} -> {most} workers: " + ", ".join(
            f"{rate(f.median(f'{few} {o}'))} -> {rate(f.median(f'{most} {o}'))} updates/s "
            f"with `{LABELS[o]}`"
            for o in FORMATS
        )
    return line + "."


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def report(figures: list[Figures], args: argparse.Namespace, load: str, minutes: float) -> str:
    """The whole ``bench/kafka.md``."""
    info = machine_info()
    command = "python -m bench.kafka" + (" --quick" if args.quick else "")
    parts = [
        f"Generated by `{command}` in {minutes:.1f} minutes: commit {info['git commit']}, "
        f"{info['date']}, {info['CPU']}, {info['logical cores']} cores, {info['memory']}; "
        f"load average (1/5/15 min) {load} at the start, "
        f"{info['load average at the end (1/5/15 min)']} at the end. The broker, the service "
        "and the bare clients share the cores; nothing is pinned.",
        "",
        f"Medians of {len(figures[0].rounds)} rounds, latency at {args.rate:,.0f} records/s:",
        "",
        *[headline(f) for f in figures],
        "",
        "Method. A local single-node broker; each workload's records are produced once to one "
        "input topic and, for the file job, written to a JSON Lines file. In each of "
        f"{len(figures[0].rounds)} rounds, on the same records: the file job (`subgraph-monitor "
        "run`, its own summary line); `serve` with `SGM_OUTPUT_FORMAT=records`, `=batches` "
        "and `=batches` with `SGM_BATCH_ENCODING=arrow` (order turning by round), each in a "
        "new group reading the topic from "
        "its start, rated over the time from its first partition assignment to its last "
        f"committed epoch, epochs of {BATCH:,} updates; a bare consumer "
        "(`consume(num_messages=10000)`, `read_committed`, nothing decoded) reading the input "
        "topic; bare `produce()` of the records `serve` wrote in the `records` format, "
        "encoded beforehand, one transaction per epoch. The tables have medians over the "
        "rounds and the medians of each round's ratios: `serve`'s updates/s to the consumer "
        "ceiling and to the file job, its match deltas/s to the producer ceiling (a `batches` "
        "record holds many deltas, so it can exceed 100%). Latency: a separate run per "
        f"format, {args.rate:,.0f} records/s for {args.seconds:.0f} s into a new topic while "
        "`serve` runs with epochs closing after 200 ms; record timestamp to committed output, "
        "from the service's `end_to_end_latency_seconds` histogram (interpolated within its "
        "buckets: 250 ms, 500 ms, 1 s, 2.5 s, ...). The file job reads the records in stream "
        "order, `serve` each partition as its fetches come: where deletes follow inserts (the "
        "triangle stream) it may apply one partition's deletes before another partition's "
        "inserts, and then emits fewer match deltas for the same end result. Its match "
        "deltas/s count its own deltas.",
        "",
    ]
    for f in figures:
        parts += [
            f"**{f.name}**: {f.what}; {f.partitions} partitions.",
            "",
            side_by_side(f),
        ]
        if f.workers:
            parts += [
                f"**scale-out**, {f.name}: {', '.join(map(str, f.workers))} workers in one group "
                "(`SGM_CONTROL_TOPIC`, `bench.cluster.measure`) on a new topic of the same "
                "records, produced once every worker holds partitions of it; rated over the "
                "epochs after the first, as the worker that committed the most logged them; "
                "ratios to the same round's ceilings; latency from a run per worker count and "
                "format as above, the workers' histograms summed.",
                "",
                scale_out(f, f.workers),
            ]
    parts += ["**The client's ceilings** (medians over the rounds):", "", ceilings(figures)]
    return "\n".join(parts)
