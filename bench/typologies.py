"""The typologies benchmark (issue #35): ``python -m bench.typologies``, ``typologies.md``.

The timestamped payments stream of :mod:`bench.timed_stream` (power-law accounts, 10% of the
events up to ``--lateness-ms`` late) through the aggregate typologies, ours and Flink SQL's, in
the same run, on one core (``--cpu``):

- **ours, in process** (the engine, the event store and the groups; no JSON), each query in a
  process of its own (its RSS its own), in epochs of ``--batch`` events. Timed: each epoch's
  ``process`` and ``commit``. Reported: events/s, rows/s (groups starting or stopping to hold),
  p50/p99 epoch latency, bytes per live event (store and derived relations), the groups'
  state per group, and the RSS after every tenth of the stream (flat once the window is full).
- **ours, end to end**: ``subgraph-monitor run`` on the stream as JSON lines, output to
  ``/dev/null``: what a user gets, the JSON decoding and the output included.
- **Flink SQL** (:mod:`bench.flink_sql`, when ``make flink`` installed it): ``fan_in`` and
  ``outflow`` as ``GROUP BY ... HAVING`` over HOP windows (size the query's window, slide
  ``--hop``), ``scatter_gather`` as an interval join into the same, ``round_trip`` as a union
  of chains of interval joins of 2 to 4 hops; counted per day.
- ``to_new_account`` reads the account table of :mod:`bench.accounts`: every account's record
  first, then one update per 50 transfers among them, the same records in the same epochs in
  process and end to end; its events/s count every record (table, transfers, updates). Its
  transfers live a day (``--retention transfer=1d``): one transfer's match has no span.

Where the semantics differ: ours slides with every epoch (a group is re-checked whenever its
bindings change or leave the window, and reported once per episode of holding); Flink's HOP
window checks each window of the slide, and reports a group once per window in which it holds.
So ours gives episodes, Flink gives (group, window) pairs: the counts agree only in kind, and the
report prints both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.accounts import accounts_of, concat, positions, records, write_with_table
from bench.end_to_end import run_cli
from bench.flink_sql import MATCHES, missing, run_flink
from bench.timed_payments import _rss_mib, stream_file, stream_of, write_stream
from bench.timed_stream import batch, csv_lines, json_lines
from core.records import EventUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "typologies.md"
WORKDIR = ROOT / ".cache" / "bench" / "windows"
SAMPLES = 10
QUERIES = {
    "fan_in": """fan_in(b) :=
        transfer(a, b) as t, t.amount < 10000,
        count(distinct a) >= 10 over 1h.""",
    "outflow": """outflow(a) :=
        transfer(a, b) as t,
        sum(t.amount) > 50000 over 24h.""",
    "scatter_gather": """scatter_gather(a, c) :=
        transfer(a, b) as t1, transfer(b, c) as t2, t1.ts <= t2.ts, within 24h, distinct,
        count(distinct b) >= 5 over 24h.""",
    "round_trip": """round_trip(a) :=
        transfer{2,6}(a, a) as p,
        p.amount >= 1000, next(p).ts > p.ts, next(p).amount >= 0.8 * p.amount,
        within 7d, distinct.""",
    # (the lengths Flink SQL's union of interval joins covers: the counts should agree)
    "round_trip_4": """round_trip_4(a) :=
        transfer{2,4}(a, a) as p,
        p.amount >= 1000, next(p).ts > p.ts, next(p).amount >= 0.8 * p.amount,
        within 7d, distinct.""",
    "to_new_account": """to_new_account(a, b) :=
        transfer(a, b) as t, account(a) as x, account(b) as y,
        x.risk = "high", y.opened >= t.ts - 30d.""",
}
#: The queries that read the account table (:mod:`bench.accounts`): it comes first, whole,
#: then its updates among the transfers.
TABLES = {"to_new_account"}
#: Retentions a query is run with: a single transfer's match has no span of its own, and an
#: alert on one needs its transfer for a day, not forever.
RETENTIONS = {"to_new_account": {"transfer": 86_400_000.0}}


def ours(query: str, args: argparse.Namespace) -> dict[str, Any]:
    """The whole stream through ``query`` in epochs of ``args.batch``; the figures."""
    stream = stream_of(args)
    settings = Settings(
        batch_size=args.batch,
        allowed_lateness=float(args.lateness_ms),
        retention=RETENTIONS.get(query, {}),
    )
    processor = EpochProcessor(parse_queries(QUERIES[query]), settings)
    grouped = processor.grouped.get(query)  # (None: a path query, rows are its matches)
    n, size = len(stream), args.batch
    epochs: list[float] = []
    plus = minus = 0
    samples: list[dict[str, float]] = []
    table = accounts_of(stream, args.accounts, args.days, args.seed) if query in TABLES else None

    records_in = n + (0 if table is None else len(table) + len(table.at))

    def timed(updates: UpdateBatch) -> None:
        nonlocal plus, minus
        started = time.perf_counter()
        out = processor.process(updates)
        processor.commit()
        epochs.append(time.perf_counter() - started)
        for q in out.queries:
            up = int((q.diff > 0).sum())
            plus, minus = plus + up, minus + len(q) - up
        lo, hi = updates.first_seq, updates.first_seq + updates.count
        if hi * SAMPLES // records_in > lo * SAMPLES // records_in:
            live = sum(len(s) for s in processor.events.stores.values())
            groups = 0 if grouped is None else len(grouped.groups)
            samples.append(
                {
                    "events": hi,
                    "rss_mib": _rss_mib(),
                    "live": live,
                    "event_b": (processor.events.nbytes + processor.events.derived_nbytes)
                    / max(live, 1),
                    "groups": groups,
                    "group_b": 0 if grouped is None else grouped.nbytes / max(groups, 1),
                }
            )

    if table is None:
        for lo in range(0, n, size):
            timed(batch(stream, lo, min(lo + size, n)))
    else:  # the records as the JSON lines hold them (bench.accounts.positions), cut alike
        keys = np.arange(len(table), dtype=np.int64)
        transfer_at, update_at = positions(table, n)
        total = len(table) + n + len(table.at)
        for lo in range(0, total, size):
            hi = min(lo + size, total)
            events: dict[str, EventUpdates] = {}
            t_lo, t_hi = np.searchsorted(transfer_at, [lo, hi])
            if t_hi > t_lo:
                part = batch(stream, int(t_lo), int(t_hi)).events["transfer"]
                events["transfer"] = replace(part, seq=transfer_at[t_lo:t_hi])
            first, last = min(lo, len(table)), min(hi, len(table))
            u_lo, u_hi = np.searchsorted(update_at, [lo, hi])
            accounts = [
                records(keys[first:last], table.risk[first:last], table.opened[first:last], first)
            ]
            mine = table.keys[u_lo:u_hi]
            accounts.append(records(mine, table.new_risk[u_lo:u_hi], table.opened[mine], 0))
            accounts[-1] = replace(accounts[-1], seq=update_at[u_lo:u_hi])
            kept = [a for a in accounts if len(a)]
            if kept:
                events["account"] = kept[0] if len(kept) == 1 else concat(kept)
            timed(UpdateBatch({}, lo, hi - lo, None, events))
    seconds = sum(epochs)
    p50, p99 = np.percentile(np.array(epochs) * 1000, [50, 99])
    total = records_in
    return {
        "query": query,
        "events": total,
        "events_s": total / seconds,
        "rows_s": (plus + minus) / seconds,
        "plus": plus,
        "minus": minus,
        "p50_ms": float(p50),
        "p99_ms": float(p99),
        "seconds": seconds,
        "window": grouped is not None and grouped.window is not None,
        "samples": samples,
    }


def run_ours(args: argparse.Namespace, query: str) -> dict[str, Any]:
    """:func:`ours` in a process of its own."""
    command = [sys.executable, "-m", "bench.typologies", "--worker", query]
    for name in ("events", "days", "accounts", "seed", "lateness_ms", "batch"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def end_to_end(query: str, args: argparse.Namespace, jsonl: Path) -> dict[str, Any]:
    events = args.events
    flags = ["--query", QUERIES[query], "--batch-size", str(args.batch)]
    if query in TABLES:
        stream = stream_of(args)
        table = accounts_of(stream, args.accounts, args.days, args.seed)
        jsonl = jsonl.with_name(jsonl.stem + "-accounts.jsonl")
        write_with_table(stream, table, jsonl)
        flags += ["--table", "account"]
        events += len(table) + len(table.at)
    for relation, ms in RETENTIONS.get(query, {}).items():
        flags += ["--retention", f"{relation}={ms:.0f}ms"]
    done = run_cli([*flags, "--edges", str(jsonl), "--allowed-lateness", f"{args.lateness_ms}ms"])
    return {
        "events_s": events / done.wall_s,
        "rss_mib": done.rss_mib,
        "plus": sum(done.plus(q.name) for q in parse_queries(QUERIES[query])),
        "minus": sum(done.minus(q.name) for q in parse_queries(QUERIES[query])),
    }


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Typologies: aggregates over windows (issue #35)",
        "",
        f"`python -m bench.typologies --events {args.events} --batch {args.batch}` on one core: "
        f"{args.events:,} transfers over {args.days:g} days among {args.accounts:,} accounts "
        f"(`bench.timed_stream`, seed {args.seed}, {args.lateness_ms} ms lateness), epochs of "
        f"{args.batch:,} events. Figures from one run; the module docstring says what each is.",
        "",
        "| query | ours in process, events/s | ours end to end, events/s | rows +1/-1 | "
        "p50 / p99 epoch ms | groups at end | state B/group | event B (store+index) | "
        "RSS MiB at 50% / 100% | Flink SQL events/s | Flink rows |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for query, r in results.items():
        o, e, f = r["ours"], r.get("e2e"), r.get("flink")
        last, half = o["samples"][-1], o["samples"][len(o["samples"]) // 2 - 1]
        flink_rate = "—"
        flink_rows = f"failed: {f['error'].strip()}" if f and f.get("error") else "not run"
        if f and f.get("matches") is not None:
            flink_rate = f"{args.events / f['seconds']:,.0f}"
            flink_rows = f"{f['matches']:,}"
        elif f and f.get("seconds") and f.get("matches") is None:
            flink_rows = f"stopped at {f['seconds']:.0f} s"
        lines.append(
            f"| {query} | {o['events_s']:,.0f} | "
            f"{'—' if e is None else format(e['events_s'], ',.0f')} | "
            f"{o['plus']:,}/{o['minus']:,} | {o['p50_ms']:.0f} / {o['p99_ms']:.0f} | "
            f"{last['groups']:,} | {last['group_b']:.0f} | {last['event_b']:.0f} | "
            f"{half['rss_mib']:.0f} / {last['rss_mib']:.0f} | {flink_rate} | {flink_rows} |"
        )
    lines += ["", "RSS (MiB) after each tenth of the stream:", ""]
    for query, r in results.items():
        rss = ", ".join(f"{s['rss_mib']:.0f}" for s in r["ours"]["samples"])
        lines.append(f"- {query}: {rss}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--accounts", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=50_000, help="events per epoch")
    parser.add_argument("--lateness-ms", type=int, default=60_000)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--no-e2e", action="store_true")
    parser.add_argument("--no-flink", action="store_true")
    parser.add_argument(
        "--flink-timeout", type=float, default=1800.0, help="seconds before a Flink job is stopped"
    )
    parser.add_argument("--workdir", type=Path, default=WORKDIR)
    parser.add_argument("--worker", choices=sorted(QUERIES), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # every process started from here runs on it
    if args.worker is not None:
        print(json.dumps(ours(args.worker, args)), flush=True)
        return 0
    queries = [q for q in args.queries.split(",") if q]
    stream = stream_of(args)
    results: dict[str, dict[str, Any]] = {}
    jsonl = stream_file(args, "jsonl")
    csv = stream_file(args, "csv")
    if not args.no_e2e:
        write_stream(stream, jsonl, json_lines)
    flink_missing = None if args.no_flink else missing()
    if not args.no_flink and flink_missing is None:
        write_stream(stream, csv, csv_lines)
    for query in queries:
        results[query] = {"ours": run_ours(args, query)}
        if not args.no_e2e:
            results[query]["e2e"] = end_to_end(query, args, jsonl)
        if not args.no_flink and flink_missing is None and query in MATCHES:
            flink = run_flink(csv, query, args.lateness_ms, timeout=args.flink_timeout)
            results[query]["flink"] = flink
        print(json.dumps({query: results[query]}), file=sys.stderr, flush=True)
    text = report(args, results)
    if flink_missing is not None and not args.no_flink:
        text += f"\nFlink SQL not run: {flink_missing}\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
