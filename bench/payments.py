"""Events benchmark: ``python -m bench.payments`` writes ``bench/payments.md``.

A generated payments stream: accounts with power-law activity (Zipf-like choice of payers and
payees), parallel transfers, lognormal amounts in cents, a ``channel`` field (wire/card/cash),
an event time ``ts`` (milliseconds, about 33 ms apart: two days for 5M transfers) and string
ids (``tx-N``): two numeric fields, a string field and a string id per event. Planted rings of
three transfers of 1,000 or more come at a known rate, and deletes by id. The first ``--load``
events are preloaded; the next ``--stream`` events (with 5% deletes of earlier ids) are
streamed in epochs of ``--batch``, in process (no JSON decoding; the engine and the event store
only). Beside each query with fields, in the same run, the same pattern without fields and
without edge variables over the pair graph (``transfer(a, b)``, set semantics), on the same
stream: the baseline (streamed for at most ``--budget`` seconds: on this stream the unselective
4-cycle over all pairs is slow). Memory is the event store plus the index relations kept for
the events (their shared pair keys included), per live event, and the process's peak RSS.

Beside each query in process, the same query **end to end**, what a user gets (skipped with
``--no-e2e``): ``subgraph-monitor run --preload`` the same first events ``--edges`` the same
epochs (inserts then deletes by id), written as JSON lines, its output to ``/dev/null``
(:mod:`bench.end_to_end`). The stream's rate is over the process's own clock from the end of
its first epoch to the end of its last (a progress line after every epoch), so it holds
reading and decoding the stream's JSON, the engine, and encoding and writing the output, and
neither the process's start nor the preload: the rest of its wall time, from its start to its
exit, is reported beside it. Its match deltas (from its summary) must be the in-process run's.
The JSON lines are kept in ``--workdir`` for the next run with the same arguments.

Then an A/B against ``--before`` (a commit), in the same run: each query from scratch over that
commit's code and over this tree's, alternately (:mod:`bench.against`).
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.timed_stream import Texts, format_rows
from core.records import EventUpdates, RelationUpdates, UpdateBatch
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

OUT = Path(__file__).resolve().parent / "payments.md"
WORKDIR = Path(__file__).resolve().parent.parent / ".cache" / "bench" / "payments"
QUERIES = {
    "big_ring": """big_ring(a, b, c) :=
        transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
        t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
        t2.amount <= t1.amount, t3.amount <= t2.amount,
        t1.channel != "cash", distinct.""",
    "ring4": """ring4(a, b, c, d) :=
        transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, d) as t3, transfer(d, a) as t4,
        t1.amount >= 5000, t2.amount >= 5000, t3.amount >= 5000, t4.amount >= 5000, distinct.""",
}
BASELINES = {
    "big_ring": "ring3(a, b, c) := transfer(a, b), transfer(b, c), transfer(c, a), distinct.",
    "ring4": "ring4(a, b, c, d) := transfer(a, b), transfer(b, c), transfer(c, d), "
    "transfer(d, a), distinct.",
}
CHANNELS = np.array(["wire", "card", "cash"], dtype=object)
#: The first event's time: 2026-01-01T00:00:00Z in milliseconds.
START_MS = 1_767_225_600_000
#: The commit the A/B measures against by default (before issue #11's fourth round: ids as
#: text, numbers as ``float64``, a tuple key per pair and selection).
BEFORE_COMMIT = "25a6082"


def payments(n: int, accounts: int, seed: int, ring_every: int = 2000) -> dict[str, np.ndarray]:
    """``n`` transfers; every ``ring_every``-th position starts a planted 3-ring."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, accounts + 1) ** 0.8
    weights /= weights.sum()
    src = rng.choice(accounts, n, p=weights)
    dst = rng.choice(accounts, n, p=weights)
    amount = np.round(rng.lognormal(5.5, 1.6, n), 2)
    channel = CHANNELS[rng.choice(3, n, p=[0.5, 0.35, 0.15])]
    ts = (START_MS + np.cumsum(rng.integers(0, 67, n))).astype(np.float64)
    for start in range(0, n - 3, ring_every):  # a ring of big transfers among three accounts
        a, b, c = rng.choice(accounts, 3, replace=False)
        src[start : start + 3] = (a, b, c)
        dst[start : start + 3] = (b, c, a)
        amount[start : start + 3] = (5000.0, 4000.0, 3000.0)
        channel[start : start + 3] = "wire"
    ids = np.array([f"tx-{i}" for i in range(n)], dtype=object)
    return {"ids": ids, "src": src, "dst": dst, "amount": amount, "channel": channel, "ts": ts}


def batch(data: dict[str, np.ndarray], lo: int, hi: int, deletes: np.ndarray) -> UpdateBatch:
    """Inserts ``lo..hi`` then the deletes, as one batch of events."""
    n, d = hi - lo, deletes.shape[0]
    ids = np.concatenate([data["ids"][lo:hi], data["ids"][deletes]])
    fields = {
        "amount": np.concatenate([data["amount"][lo:hi], np.full(d, np.nan)]),
        "channel": np.concatenate([data["channel"][lo:hi], np.full(d, None, dtype=object)]),
        "ts": np.concatenate([data["ts"][lo:hi], np.full(d, np.nan)]),
    }
    events = EventUpdates(
        ids,
        np.concatenate([np.ones(n, np.int8), -np.ones(d, np.int8)]),
        np.arange(lo, lo + n + d, dtype=np.int64),
        np.concatenate([data["src"][lo:hi], np.zeros(d, np.int64)]),
        np.concatenate([data["dst"][lo:hi], np.zeros(d, np.int64)]),
        fields,
    )
    return UpdateBatch({}, lo, n + d, None, {"transfer": events})


def epochs(load: int, stream: int, size: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """The streamed epochs: inserts ``lo..hi``, then deletes of the events at the positions
    given (as many as 5% of the inserts, drawn from every event so far, the same every run)."""
    rng = np.random.default_rng(7)
    for lo in range(load, load + stream, size):
        hi = min(lo + size, load + stream)
        yield lo, hi, rng.choice(hi, (hi - lo) // 20, replace=False)


def json_lines(data: dict[str, np.ndarray], lo: int, hi: int) -> bytes:
    """Inserts ``lo..hi`` as ``subgraph-monitor run`` reads them; every value reads back as the
    in-process batch's (amounts are whole cents, times whole milliseconds)."""
    cents = np.rint(data["amount"][lo:hi] * 100).astype(np.int64)
    channel = data["channel"][lo:hi]
    codes = np.zeros(hi - lo, np.int64)
    for code, name in enumerate(CHANNELS.tolist()):
        codes[channel == name] = code
    return format_rows(
        *(b'{"op":"insert","relation":"transfer","id":"tx-', np.arange(lo, hi, dtype=np.int64)),
        *(b'","src":', data["src"][lo:hi], b',"dst":', data["dst"][lo:hi], b',"amount":'),
        *(cents // 100, b".", (cents % 100, 2), b',"channel":"'),
        Texts(codes, tuple(c.encode() for c in CHANNELS.tolist())),
        *(b'","ts":', data["ts"][lo:hi].astype(np.int64), b"}\n"),
    )


def delete_lines(positions: np.ndarray) -> bytes:
    """Deletes by id of the events at ``positions``."""
    ids = positions.astype(np.int64)
    return format_rows(b'{"op":"delete","relation":"transfer","id":"tx-', ids, b'"}\n')


def write_inputs(
    data: dict[str, np.ndarray], load: int, stream: int, size: int, workdir: Path, name: str
) -> tuple[Path, Path]:
    """The preloaded events and the streamed epochs of :func:`epochs` as JSON lines in
    ``workdir`` (files named ``name``, kept: written again only if absent)."""
    preload, edges = (workdir / f"{name}-{part}.jsonl" for part in ("load", "stream"))
    step = 500_000
    _write(preload, (json_lines(data, lo, min(lo + step, load)) for lo in range(0, load, step)))
    epochs_lines = (
        json_lines(data, lo, hi) + delete_lines(d) for lo, hi, d in epochs(load, stream, size)
    )
    _write(edges, epochs_lines)
    return preload, edges


def _write(path: Path, chunks: Iterator[bytes]) -> None:
    """``chunks`` into ``path`` unless it is there (written whole, through a temporary file)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with part.open("wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    part.replace(path)


def end_to_end(query: str, preload: Path, edges: Path, size: int) -> dict[str, float]:
    """``subgraph-monitor run`` of ``query``: ``preload``, then ``edges`` in the epochs of
    :func:`epochs` (``size`` inserts and 5% deletes each); the stream's rate from the end of
    the first epoch to the end of the last, on the process's clock."""
    (name,) = (q.name for q in parse_queries(query))
    flags = ["--query", query, "--preload", str(preload), "--batch-size", str(size + size // 20)]
    # (imported here: the A/B's child runs this module over an older tree, which lacks it)
    from bench.end_to_end import run_cli

    done = run_cli([*flags, "--edges", str(edges)], env={"SGM_PROGRESS_SECONDS": "1e-9"})
    (updates, _, at), (last, _, end) = done.progress[0], done.progress[-1]
    timed = end - at
    return {
        "events_s": (last - updates) / timed if timed > 0 else math.nan,
        "other_s": done.wall_s - timed,
        "wall_s": done.wall_s,
        "plus": done.plus(name),
        "minus": done.minus(name),
        "deltas": done.plus(name) + done.minus(name),
        "rss_mib": done.rss_mib,
    }


def pairs_batch(data: dict[str, np.ndarray], lo: int, hi: int, deletes: np.ndarray) -> UpdateBatch:
    """The same stream as pairs (set semantics, no ids, no fields): the baseline."""
    src = np.concatenate([data["src"][lo:hi], data["src"][deletes]])
    dst = np.concatenate([data["dst"][lo:hi], data["dst"][deletes]])
    n, d = hi - lo, deletes.shape[0]
    diff = np.concatenate([np.ones(n, np.int8), -np.ones(d, np.int8)])
    part = RelationUpdates([src, dst], diff, np.arange(lo, lo + n + d, dtype=np.int64))
    return UpdateBatch({"transfer": part}, lo, n + d)


def run(
    query: str,
    data: dict[str, np.ndarray],
    load: int,
    stream: int,
    size: int,
    fields: bool,
    budget: float = float("inf"),
    parts: dict[str, float] | None = None,
) -> dict[str, float]:
    """Preload ``load`` events, stream ``stream`` more (stopping after ``budget`` seconds of
    streaming, at least one epoch); rates are over the epochs streamed. ``parts`` receives the
    bytes per live event of every component of the event store and the derived relations."""
    parts = {} if parts is None else parts
    processor = EpochProcessor(parse_queries(query), Settings(batch_size=size))
    make = batch if fields else pairs_batch
    started = time.perf_counter()
    for lo in range(0, load, 500_000):
        processor.preload(make(data, lo, min(load, lo + 500_000), np.empty(0, np.int64)))
    loaded = time.perf_counter() - started
    events = deltas = epochs_run = 0
    seconds = wall = 0.0  # the process's CPU time (the machine is shared), and wall time
    for lo, hi, deletes in epochs(load, stream, size):
        update = make(data, lo, hi, deletes)
        t, cpu = time.perf_counter(), time.process_time()
        out = processor.process(update)
        processor.commit()
        seconds += time.process_time() - cpu
        wall += time.perf_counter() - t
        events += hi - lo + deletes.shape[0]
        deltas += out.deltas
        epochs_run += 1
        if seconds > budget:
            break
    live = sum(len(s) for s in processor.events.stores.values())
    store = processor.events.nbytes
    derived = getattr(processor.events, "derived_nbytes", None)  # older commits (the A/B)
    if derived is None:
        derived = sum(processor.index.relations[n].nbytes for n in processor.events.derived)
    for component, nbytes in processor.events.breakdown().items():
        parts[component] = nbytes / max(live, 1)
    return {
        "load_s": loaded,
        "events_s": events / seconds,
        "deltas_s": deltas / seconds,
        "wall_events_s": events / wall,
        "epoch_ms": 1000 * seconds / epochs_run,
        "deltas": deltas,
        "live": live,
        "store_b": store / max(live, 1),
        "index_b": derived / max(live, 1),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure(query: str, load: int, stream: int, batch_size: int, accounts: int) -> dict[str, float]:
    """One query with fields on the stream of the default seed, from scratch (what the A/B runs
    in a child process, over this tree's code or an earlier commit's)."""
    data = payments(load + stream, accounts, seed=1)
    return run(QUERIES[query], data, load, stream, batch_size, True)


def before_and_after(args: argparse.Namespace) -> list[str]:
    """The A/B against ``args.before``: each query measured from scratch over that commit's
    code and over this tree's, interleaved, ``args.rounds`` times each (:mod:`bench.against`)."""
    from bench.against import interleaved  # not at the top: the child imports this module

    lines = [
        f"A/B against commit {args.before}, in this run: each query measured from scratch in a "
        f"child process over that commit's code and over this tree's, alternately, "
        f"{args.rounds} times each (`bench.against`); medians, and every round's events/s.",
        "",
        "| query | events/s before | after | after / before | rounds before | rounds after | "
        "B/live event (store + index) before | after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in QUERIES:
        kwargs = {
            "query": name,
            "load": args.load,
            "stream": args.stream,
            "batch_size": args.batch,
            "accounts": args.accounts,
        }
        small = {**kwargs, "load": 20_000, "stream": 20_000, "accounts": 5_000}
        before, after = interleaved(
            args.before, Path(__file__), "measure", args.rounds, warmup=small, **kwargs
        )
        b, a = (statistics.median(r["events_s"] for r in side) for side in (before, after))
        rounds = [", ".join(f"{r['events_s']:,.0f}" for r in side) for side in (before, after)]
        lines.append(
            f"| {name} | {b:,.0f} | {a:,.0f} | {a / b:.2f} | {rounds[0]} | {rounds[1]} | "
            f"{before[0]['store_b']:.0f} + {before[0]['index_b']:.0f} | "
            f"{after[0]['store_b']:.0f} + {after[0]['index_b']:.0f} |"
        )
    return lines


def by_epoch_size(args: argparse.Namespace, data: dict[str, np.ndarray]) -> list[str]:
    """``big_ring`` streamed once in epochs of each size of ``args.epochs``: what a longer
    epoch buys (fixed costs per epoch, and sorted searches over more keys at once) and what it
    costs (each epoch's updates wait for it to close)."""
    lines = [
        "`big_ring` by epoch size (`--epochs`), one run each in this process, the same stream: "
        "an epoch has fixed costs (index commits, one pass of every delta query), and its "
        "deltas come out when it closes.",
        "",
        "| epoch (events) | events/s | match deltas/s | mean ms per epoch |",
        "|---|---|---|---|",
    ]
    for size in (int(s) for s in args.epochs.split(",")):
        r = run(QUERIES["big_ring"], data, args.load, args.stream, size, True)
        print("big_ring epochs of", size, r, flush=True)
        lines.append(
            f"| {size:,} | {r['events_s']:,.0f} | {r['deltas_s']:,.0f} | {r['epoch_ms']:,.0f} |"
        )
    return lines


def end_to_end_table(ends: dict[str, dict[str, float]]) -> list[str]:
    """The end-to-end runs: the process's memory, and whether its match deltas are the
    in-process run's."""
    lines = [
        "End to end, the `subgraph-monitor run` processes (`bench/end_to_end.py`):",
        "",
        "| query | wall s, start to exit | peak RSS MiB | match deltas (+1, -1) | in process | "
        "equal |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in ends.items():
        equal = "yes" if e["deltas"] == e["in_process"] else "**no**"
        lines.append(
            f"| {name} | {e['wall_s']:,.1f} | {e['rss_mib']:,.0f} | {e['deltas']:,.0f} "
            f"({e['plus']:,.0f}, {e['minus']:,.0f}) | {e['in_process']:,.0f} | {equal} |"
        )
    return lines


def where_the_bytes_go(breakdown: dict[str, dict[str, float]]) -> list[str]:
    """A table of bytes per live event by component (arrays at their capacity), per query:
    the event store (ids, pair, fields), then the relations derived for the selections."""
    names = list(breakdown)
    components = sorted({c for parts in breakdown.values() for c in parts}, key=_component_order)
    lines = [
        "Where the bytes go, per live event (after the stream; arrays at their capacity):",
        "",
        "| component | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for component in components:
        cells = " | ".join(f"{breakdown[n].get(component, 0.0):.1f}" for n in names)
        lines.append(f"| {component} | {cells} |")
    totals = " | ".join(f"**{sum(breakdown[n].values()):.1f}**" for n in names)
    lines.append(f"| **total** | {totals} |")
    return lines


def _component_order(component: str) -> tuple[int, str]:
    return (1 if "relations" in component else 0, component)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=5_000_000)
    parser.add_argument("--stream", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--accounts", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--budget", type=float, default=60.0, help="seconds of streaming for each baseline"
    )
    parser.add_argument(
        "--before", default=BEFORE_COMMIT, help="the commit to A/B against ('' for none)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds per query and side")
    parser.add_argument(
        "--epochs",
        default="10000,25000,50000",
        help="epoch sizes big_ring is streamed in once each, for the throughput against the "
        "epoch's length ('' for none)",
    )
    parser.add_argument(
        "--no-e2e", action="store_true", help="in process only, not `subgraph-monitor run`"
    )
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="the JSON lines")
    args = parser.parse_args()
    data = payments(args.load + args.stream, args.accounts, seed=1)
    if not args.no_e2e:
        name = f"payments-{args.accounts}a-{args.load}-{args.stream}-{args.batch}"
        inputs = write_inputs(data, args.load, args.stream, args.batch, args.workdir, name)
    lines = [
        "Generated by `python -m bench.payments` (method in its docstring): "
        f"{args.load:,} events preloaded over {args.accounts:,} accounts, {args.stream:,} "
        f"streamed with 5% deletes in epochs of {args.batch:,}, one core. *In process* is the "
        "engine alone (batches built from numpy arrays; rates over the process's CPU time in "
        "`process` and `commit`); *end to end* is what a user gets, `subgraph-monitor run "
        "--preload` on the same events as JSON lines (the stream's rate over the process's "
        "own wall clock from its first epoch's end to its last's, JSON decoding and output "
        "included; *start, preload, first epoch*: the rest of its wall time, from its start to "
        "its exit). The machine is shared; in-process wall-clock rates in the log.",
        "",
        "| query | with fields, in process: events/s | end to end: events/s | match deltas/s "
        "(in process) | preload s: in process | end to end: start, preload, first epoch s | "
        "B/live event (store + index) | baseline on pairs (in process): events/s | "
        "ratio (in process) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    breakdown: dict[str, dict[str, float]] = {}
    ends: dict[str, dict[str, float]] = {}
    for name, text in QUERIES.items():
        breakdown[name] = {}
        ours = run(text, data, args.load, args.stream, args.batch, True, parts=breakdown[name])
        print(name, ours, flush=True)
        base = run(BASELINES[name], data, args.load, args.stream, args.batch, False, args.budget)
        print(name, "baseline", base, flush=True)
        if not args.no_e2e:
            ends[name] = {**end_to_end(text, *inputs, args.batch), "in_process": ours["deltas"]}
            print(name, "end to end", ends[name], flush=True)
        e2e = ends.get(name)
        lines.append(
            f"| {name} | {ours['events_s']:,.0f} | "
            f"{'not run' if e2e is None else format(e2e['events_s'], ',.0f')} | "
            f"{ours['deltas_s']:,.0f} | {ours['load_s']:.1f} | "
            f"{'' if e2e is None else format(e2e['other_s'], '.1f')} | "
            f"{ours['store_b']:.0f} + {ours['index_b']:.0f} | "
            f"{base['events_s']:,.0f} | {ours['events_s'] / base['events_s']:.2f} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines += ["", f"Peak RSS of the run: {peak:,.0f} MiB.", ""]
    if ends:
        lines += [*end_to_end_table(ends), ""]
    if args.epochs:
        lines += [*by_epoch_size(args, data), ""]
    if args.before:
        lines += [*before_and_after(args), ""]
    lines += where_the_bytes_go(breakdown)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
