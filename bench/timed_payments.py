"""Event-time benchmark (issue #12): ``python -m bench.timed_payments``, ``timed_payments.md``.

One generated stream (:mod:`bench.timed_stream`: by default 10M transfers over 30 simulated
days, 1M accounts, planted rings and pass-throughs) runs through ``layering_ring`` and
``pass_through``, ours and Flink SQL's, in the same run. Ours runs each query with the
retentions of ``--runs``: by default 24 hours (the issue's window), and ``pass_through`` also
at the engine's default (its span, 10 minutes, the state Flink keeps).

- **ours, in process** (no JSON decoding: the engine and the event store only), each query in a
  process of its own (so that its RSS is its own), in epochs of ``--batch`` events. Timed: each
  epoch's ``process`` and ``commit`` (making the batch's string ids is not). Reported: events/s,
  match deltas/s (+1 and -1), p50/p99 epoch latency, bytes per live event (event store plus the
  relations derived from it, arrays at capacity), the process's RSS after every tenth of the
  stream, and how many planted patterns came out as matches.
- **ours, end to end** (:mod:`bench.end_to_end`; skipped with ``--no-e2e``): what a user
  gets, ``subgraph-monitor run`` on the same stream written as JSON lines, with the same epoch
  size, retention and allowed lateness, its output to ``/dev/null``. Timed from the process's
  start to its exit, so the interpreter's start, the imports, decoding the JSON and encoding the
  output are included. Reported: events/s, the process's peak RSS, and its ``+1`` and ``-1``
  deltas (from its summary), which must be the in-process run's.
- **Flink SQL** (:mod:`bench.flink_sql`), the same queries as interval joins over the same
  stream written as CSV, streaming mode, parallelism 1, a Flink of its own per query. Timed:
  submitting the job to its last result, so parsing the CSV and starting the job are included
  (starting its JVM is not); the ``scan`` row (the source alone, counted per day) shows what
  they cost.

All pinned to one core (``--cpu``). With inserts only and no late event, our number of ``+1``
deltas is the number of join results; the report says whether they agree. The CSV and the JSON
lines are written to ``--workdir``, named by the stream's parameters, and kept for the next run
with the same ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.end_to_end import run_cli
from bench.flink_sql import missing, run_flink
from bench.timed_report import SAMPLES, report
from bench.timed_stream import TimedStream, batch, csv_lines, json_lines, timed_payments
from core.columns import python_values
from monitor.query.parser import parse_queries
from monitor.service.epoch_output import EpochOutput
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "timed_payments.md"
WORKDIR = ROOT / ".cache" / "bench" / "windows"
QUERIES = {
    "layering_ring": """layering_ring(a, b, c) :=
        transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
        t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
        t1.ts < t2.ts, t2.ts < t3.ts,
        within 24h,
        distinct.""",
    "pass_through": """pass_through(a, b, c) :=
        transfer(a, b) as t1, transfer(b, c) as t2,
        t1.ts <= t2.ts, t2.ts <= t1.ts + 10m,
        t2.amount >= 0.9 * t1.amount,
        distinct.""",
}


def time_settings(retention: str, lateness_ms: int) -> dict[str, Any]:
    """The event-time settings: ``retention`` of transfers (``default``: the engine's, the
    query's span) and the allowed lateness."""
    settings: dict[str, Any] = {"allowed_lateness": float(lateness_ms)}
    if retention != "default":
        settings["retention"] = f"transfer={retention}"
    return settings


def time_flags(retention: str, lateness_ms: int) -> list[str]:
    """:func:`time_settings` as ``subgraph-monitor run``'s options."""
    flags = ["--allowed-lateness", f"{lateness_ms}ms"]
    if retention != "default":
        flags += ["--retention", f"transfer={retention}"]
    return flags


def ours(
    query: str, stream: TimedStream, size: int, retention: str, lateness_ms: int
) -> dict[str, Any]:
    """Stream all of ``stream`` through ``query`` in epochs of ``size``; the figures."""
    settings = Settings(batch_size=size, **time_settings(retention, lateness_ms))
    processor = EpochProcessor(parse_queries(QUERIES[query]), settings)
    planted = stream.rings if query == "layering_ring" else stream.passes
    wanted = {tuple(f"tx-{p}" for p in row) for row in planted.tolist()}
    firsts = {ids[0] for ids in wanted}
    n = len(stream)
    epochs: list[float] = []
    plus = minus = expired = late = 0
    found: set[tuple[str, ...]] = set()
    rss: list[dict[str, float]] = []
    started = time.perf_counter()
    for lo in range(0, n, size):
        hi = min(lo + size, n)
        updates = batch(stream, lo, hi)
        t = time.perf_counter()
        out = processor.process(updates)
        processor.commit()
        epochs.append(time.perf_counter() - t)
        for q in out.queries:
            up = q.diff > 0
            plus += int(up.sum())
            minus += int((~up).sum())
            found |= _planted_among(q.edges, up, firsts)
        expired += out.expired
        late += sum(len(v) for v in out.late.values())
        if hi * SAMPLES // n > lo * SAMPLES // n:
            rss.append({"events": hi, "rss_mib": _rss_mib(), **_memory(processor, out)})
    seconds = sum(epochs)
    latency = np.percentile(np.array(epochs) * 1000, [50, 99])
    return {
        "query": query,
        "events": n,
        "events_s": n / seconds,
        "deltas_s": (plus + minus) / seconds,
        "plus": plus,
        "minus": minus,
        "expired": expired,
        "late": late,
        "p50_ms": float(latency[0]),
        "p99_ms": float(latency[1]),
        "seconds": seconds,
        "wall_s": time.perf_counter() - started,
        "planted": len(wanted),
        "planted_found": len(found & wanted),
        "samples": rss,
        "stream_mib": stream.nbytes / 2**20,
        "retention_ms": processor.retention.get("transfer", float("inf")),
    }


def _planted_among(
    edges: Mapping[str, Mapping[str, Any]], up: np.ndarray[Any, Any], firsts: set[str]
) -> set[tuple[str, ...]]:
    """The appearing matches whose first event starts a planted pattern, as id tuples."""
    ids = [np.asarray(python_values(e["id"]), dtype=object) for e in edges.values()]
    rows = up & np.fromiter((i in firsts for i in ids[0]), np.bool_, ids[0].shape[0])
    return set(zip(*(column[rows].tolist() for column in ids), strict=True))


def _memory(processor: EpochProcessor, out: EpochOutput) -> dict[str, float]:
    """Live events, and bytes per live event in the event store and the derived relations."""
    live = sum(len(s) for s in processor.events.stores.values())
    derived = processor.events.derived_nbytes
    return {
        "live": live,
        "store_b": processor.events.nbytes / max(live, 1),
        "index_b": derived / max(live, 1),
        "watermark": out.watermark,
    }


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stream_of(args: argparse.Namespace) -> TimedStream:
    return timed_payments(args.events, args.days, args.accounts, args.seed, args.lateness_ms)


def worker(args: argparse.Namespace) -> int:
    """``--worker QUERY``: ours on one query, in this process; one JSON line on stdout."""
    stream = stream_of(args)
    run = (args.worker, stream, args.batch, args.retention, args.lateness_ms)
    if args.profile is None:
        figures = ours(*run)
    else:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        figures = profiler.runcall(ours, *run)
        with args.profile.open("w") as handle:
            stats = pstats.Stats(profiler, stream=handle).strip_dirs()
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(40)
    print(json.dumps(figures), flush=True)
    return 0


def run_ours(args: argparse.Namespace, query: str, retention: str) -> dict[str, Any]:
    """:func:`worker` in a process of its own, with this run's stream arguments."""
    command = [sys.executable, "-m", "bench.timed_payments", "--worker", query]
    names = ["events", "days", "accounts", "seed", "lateness_ms", "batch"]
    for name in names:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--retention", retention]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    figures["retention"] = retention
    return figures


def end_to_end(
    query: str, events: int, jsonl: Path, size: int, retention: str, lateness_ms: int
) -> dict[str, Any]:
    """``subgraph-monitor run`` on ``jsonl`` (``events`` events) through ``query``, in epochs
    of ``size``, with the same time settings as :func:`ours`; the figures."""
    flags = ["--query", QUERIES[query], "--edges", str(jsonl), "--batch-size", str(size)]
    done = run_cli([*flags, *time_flags(retention, lateness_ms)])
    figures = {k: v for k, v in asdict(done).items() if k != "progress"}
    figures.update(events_s=events / done.wall_s, plus=done.plus(query), minus=done.minus(query))
    return figures


def runs_of(text: str) -> list[tuple[str, str]]:
    """``query=retention`` pairs (``default``: the engine's retention, the query's span)."""
    pairs = [tuple(item.split("=", 1)) for item in text.split(",") if item]
    for pair in pairs:
        if len(pair) != 2 or pair[0] not in QUERIES:
            raise SystemExit(f"--runs: expected query=retention with a query of {list(QUERIES)}")
    return [(q, r) for q, r in pairs]


def stream_file(args: argparse.Namespace, suffix: str) -> Path:
    """Where the stream of these arguments is written (``csv`` for Flink, ``jsonl`` for
    ``subgraph-monitor run``): named by every parameter of :func:`stream_of`."""
    name = f"transfers-{args.events}-{args.days:g}d-{args.accounts}a-{args.lateness_ms}ms"
    workdir: Path = args.workdir
    return workdir / f"{name}-{args.seed}.{suffix}"


def write_stream(stream: TimedStream, path: Path, lines: Any, chunk: int = 1_000_000) -> None:
    """``lines(stream, lo, hi)`` for the whole stream into ``path``, a chunk at a time, unless
    the file is there (written whole: a run stopped halfway leaves only a temporary file)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with part.open("wb") as handle:
        for lo in range(0, len(stream), chunk):
            handle.write(lines(stream, lo, min(lo + chunk, len(stream))))
    part.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--accounts", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10_000, help="events per epoch")
    parser.add_argument(
        "--runs",
        default="layering_ring=24h,pass_through=24h,pass_through=default",
        help="ours: query=retention of transfers, comma list (default: the query's span)",
    )
    parser.add_argument("--retention", default="24h", help=argparse.SUPPRESS)  # --worker's
    parser.add_argument("--lateness-ms", type=int, default=5_000, help="allowed lateness")
    parser.add_argument(
        "--quick", action="store_true", help="1M events over 3 days, 100k accounts (development)"
    )
    parser.add_argument("--no-flink", action="store_true", help="ours only")
    parser.add_argument(
        "--no-e2e", action="store_true", help="ours in process only, not `subgraph-monitor run`"
    )
    parser.add_argument("--flink-heap", default="8g", help="the Flink JVM's -Xmx")
    parser.add_argument(
        "--flink-timeout", type=float, default=3600, help="seconds before a Flink job is killed"
    )
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument(
        "--workdir", type=Path, default=WORKDIR, help="the CSV and JSON lines, results.json"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker", choices=sorted(QUERIES), help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=Path, help="with --worker: cProfile stats to here")
    parser.add_argument(
        "--report-only", action="store_true", help="the report of the last run's results.json"
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.days, args.accounts = 1_000_000, 3.0, 100_000
    if args.worker:
        return worker(args)
    if args.report_only:  # the figures of the last run with these arguments, written anew
        saved = json.loads((args.workdir / "results.json").read_text())
        text = report(
            args, stream_of(args), saved["ours"], saved["flink"], saved["why_not"], saved["seconds"]
        )
        args.out.write_text(text)
        return 0
    os.sched_setaffinity(0, {args.cpu})  # every process started from here runs on it
    begun = time.perf_counter()
    stream = stream_of(args)
    why_not = "--no-flink" if args.no_flink else missing()
    csv, jsonl = stream_file(args, "csv"), stream_file(args, "jsonl")
    if why_not is None:
        write_stream(stream, csv, csv_lines)
    if not args.no_e2e:
        write_stream(stream, jsonl, json_lines)
    results: list[dict[str, Any]] = []
    flink: dict[str, dict[str, Any]] = {}
    for query, retention in runs_of(args.runs):
        results.append(run_ours(args, query, retention))
        if not args.no_e2e:
            run = (query, len(stream), jsonl, args.batch, retention, args.lateness_ms)
            results[-1]["e2e"] = end_to_end(*run)
        print(json.dumps({k: v for k, v in results[-1].items() if k != "samples"}), flush=True)
        if why_not is None and query not in flink:
            flink[query] = run_flink(
                csv, query, args.lateness_ms, args.flink_heap, args.flink_timeout
            )
            print(json.dumps(flink[query]), flush=True)
    if why_not is None:
        flink["scan"] = run_flink(csv, "scan", args.lateness_ms, args.flink_heap)
    seconds = time.perf_counter() - begun
    saved = {"ours": results, "flink": flink, "why_not": why_not, "seconds": seconds}
    (args.workdir / "results.json").write_text(json.dumps(saved))
    text = report(args, stream, results, flink, why_not, seconds)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
