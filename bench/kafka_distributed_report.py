"""``bench/kafka_distributed.md`` from the figures of :mod:`bench.kafka_distributed`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.kafka_distributed import Measured


def rate(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.0f}"


def times(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}x"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def rates(m: Measured) -> str:
    file_single = m.rates["file job, single process"][0]
    rows = []
    for name, (updates, deltas) in m.rates.items():
        workers = name.split(", ")[-1]
        peer = m.rates.get(f"file job, {workers}") if name.startswith("serve, ") else None
        of_file = times(updates / peer[0]) if peer else ""
        rows.append([name, rate(updates), rate(deltas), times(updates / file_single), of_file])
    return table(
        [
            "configuration",
            "updates/s",
            "match deltas/s",
            "of the single process's file job",
            "of the file job on as many workers",
        ],
        rows,
    )


def balance(m: Measured) -> str:
    rows = [
        [str(n), f"{2 * n}", f"{pairs:.2f}", f"{work:.2f}"]
        for n, (pairs, work) in sorted(m.balance.items())
    ]
    return table(["workers", "shards", "pairs, largest / mean", "work, largest / mean"], rows)


def latency(m: Measured) -> str:
    rows = [
        [name, f"{p50 * 1000:,.0f}", f"{p99 * 1000:,.0f}"] for name, (p50, p99) in m.latency.items()
    ]
    return table(["service", "p50 ms", "p99 ms"], rows)


def recovery(m: Measured) -> str:
    rows = []
    for name, r in m.recovery.items():
        detail = ", ".join(
            f"{k.removesuffix('_s')} {v:.2f} s" if k.endswith("_s") else f"{k} {v:,.0f}"
            for k, v in r.items()
            if k not in ("state_bytes", "rebuild_s_per_gb", "to_commit_s")
        )
        seconds = r["to_commit_s"] if "to_commit_s" in r else r.get("rebuild_s", math.nan)
        # Per GB where bytes were replayed; elsewhere the state is too small for the figure to
        # mean anything but the fixed costs (the actors' and Ray's start).
        per_gb = r.get("rebuild_s_per_gb", math.nan)
        rows.append(
            [
                name,
                f"{seconds:.2f}",
                f"{r['state_bytes'] / 2**20:,.1f}",
                "n/a" if math.isnan(per_gb) else f"{per_gb:,.1f}",
                detail,
            ]
        )
    return table(
        ["fault", "recovery s", "shards' state MiB", "s per GB replayed", "of which"],
        rows,
    )


def goals(figures: list[Measured]) -> str:
    rows = []
    for m in figures:
        serve = m.rates.get("serve, 2 worker(s)")
        file = m.rates.get("file job, 2 worker(s)")
        if serve and file:
            ratio = serve[0] / file[0]
            met = "met" if ratio >= 0.7 else f"missed by {0.7 - ratio:.2f}x"
            rows.append(
                [f"{m.name}: serve at 2 workers / file job at 2 workers >= 0.7x", times(ratio), met]
            )
        shard = m.recovery.get("shard killed (ray.kill)")
        if shard:
            seconds = shard["to_commit_s"]
            met = "met" if seconds < 10 else f"missed by {seconds - 10:.1f} s"
            rows.append([f"{m.name}: a killed shard recovered in < 10 s", f"{seconds:.2f} s", met])
        embedded = m.rates.get("serve, embedded")
        for n in (1, 2, 3):
            replicated = m.rates.get(f"replicated, {n} worker(s)")
            partitioned = m.rates.get(f"serve, {n} worker(s)") or m.rates.get("serve, 4 worker(s)")
            if replicated and partitioned and embedded:
                rows.append(
                    [
                        f"{m.name}: partitioned at {n} / replicated at {n}",
                        times(partitioned[0] / replicated[0]),
                        "partitioned at least as fast"
                        if partitioned[0] >= replicated[0]
                        else "replicated faster",
                    ]
                )
    return table(["goal", "measured", ""], rows)


def report(figures: list[Measured], machine: dict[str, str], minutes: float, quick: bool) -> str:
    parts = [
        "# The Kafka service on the partitioned engine (bench.kafka_distributed)",
        "",
        "Written by `python -m bench.kafka_distributed` (issue #34): see its docstring for what",
        "runs. One run per figure on a shared machine: "
        + ", ".join(f"{k} {v}" for k, v in machine.items())
        + f"; {minutes:.1f} minutes{' (--quick: a smoke run, not figures)' if quick else ''}.",
        "Output in batches (`SGM_OUTPUT_FORMAT=batches`); `N worker(s)` is `SGM_WORKERS=N`",
        "with the default shards (two per worker), on one machine of two cores (workers beyond",
        "two share them).",
        "",
        "## Goals",
        "",
        goals(figures),
    ]
    for m in figures:
        parts += [
            "",
            f"## {m.name}",
            "",
            m.what + f"; {m.partitions} input partitions.",
            "",
            rates(m),
            "",
            "Balance of the distributed service's shards at the end (from its `/metrics`):",
            "",
            balance(m),
            "",
            "Latency, record timestamp to committed output, at a steady rate:",
            "",
            latency(m),
        ]
        if m.recovery:
            parts += ["", "Recovery at 2 workers:", "", recovery(m)]
    return "\n".join(parts) + "\n"
