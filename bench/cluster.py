"""Scale-out figures: ``python -m bench.cluster`` writes ``bench/cluster.md``.

A local broker (``scripts/kafka_local``); 1, 2 and 3 ``serve`` workers in one group
(``SGM_CONTROL_TOPIC``) on a new 6-partition topic, symmetry-broken triangles, epochs of 10,000
updates; once every worker holds partitions of the topic and one of them leads, ego-Facebook's
edges (inserts, then 10% deletes, JSON records keyed by edge) are produced to it as fast as the
client goes (the workers would otherwise start on a full topic, and a worker that joins takes a
few seconds, in which the first one does most of a stream this short). Throughput is the
records of the epochs after the first over the time from the first epoch's commit to the last
one's, as one worker logged them (the one that committed the most epochs: worker 0 unless it
joined late); memory is each worker's peak resident set (``VmHWM``). On this machine the
workers share 2 cores with the broker, so the figures say what the protocol costs and splits,
not what a cluster of machines would reach: see bench/NOTES.md. The last column is the
barrier's own delay: the median over the epochs of how long after an epoch's last seed
transaction committed the other workers committed the epoch (which includes writing it to
their index and state).

``--runs 1,3`` measures only those worker counts (consolidated); ``--profile DIR`` runs worker 0
of each run under cProfile and writes ``DIR/workers-N.prof`` (read it with ``pstats``);
``--rebuild`` then starts a worker with a new volume and times its rebuild from the changelog,
after the first run (after every run with ``--profile``, profiled into
``DIR/workers-N-rebuild.prof``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from bench.kafka_serve import (
    consumed,
    edge_records,
    log_lines,
    metrics,
    produce_records,
    quantiles,
    serve_env,
    stamp,
    stream,
    topics,
)
from scripts.kafka_local import KafkaBroker

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "cluster.md"
QUERY = "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c."
BATCH = 10_000
REBUILT = "state rebuilt from the changelog"
#: A worker's log lines that change its partitions, and that start and end its leading.
ASSIGNMENT = ("partitions assigned", "partitions revoked")
LEADING = ("leading: publishing the epochs", "no longer leading")
PARTITIONS = 6


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def done(bootstrap: str, group: str, topic: str) -> bool:
    """Whether the group committed every partition's end (a coordinator still loading: no)."""
    try:
        return consumed(bootstrap, group, topic)
    except KafkaException:
        return False


def start(
    bootstrap: str,
    tmp: Path,
    topic: str,
    group: str,
    name: str,
    env: dict[str, str],
    profile: Path | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """One ``serve`` worker of ``group`` on ``topic`` (under cProfile into ``profile``)."""
    log = tmp / f"{group}-{name}.log"
    env = {
        **serve_env(
            bootstrap,
            topic,
            group,
            tmp / group / name,
            SGM_CONTROL_TOPIC=f"{group}-control",
            SGM_INSTANCE_ID=name,
        ),
        **env,
    }
    command = [sys.executable, "-m", "monitor", "serve"]
    if profile is not None:
        profile.parent.mkdir(parents=True, exist_ok=True)
        command[1:1] = ["-m", "cProfile", "-o", str(profile)]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb")
    )
    return proc, log


def rebuild(
    bootstrap: str,
    tmp: Path,
    topic: str,
    group: str,
    profile: Path | None,
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """A worker with a new volume joins the stopped group: how long its rebuild from the
    changelog takes (its own log line), then it is stopped."""
    proc, log = start(bootstrap, tmp, topic, group, "rebuilt", env or {}, profile)
    deadline = time.monotonic() + 600
    while True:
        found = [x for x in log_lines(log) if x.get("message") == REBUILT]
        if found:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"no rebuild from the changelog of {group}")
        time.sleep(0.2)
    proc.terminate()
    proc.wait(60)
    return {
        "rebuild_s": float(found[0]["seconds"]),
        "rebuild_records": int(found[0]["changelog_records"]),
        "rebuild_tuples": int(found[0]["tuples"]),
    }


def barrier_lag(logs: list[list[dict[str, Any]]]) -> float:
    """Median over the epochs after the first of how long after the epoch's last seed commit
    (its ``seeds published`` line) the other workers committed it (``epoch committed``): the
    barrier's own delay, plus committing the index; nan with one worker."""
    published: dict[int, list[tuple[float, int]]] = {}
    for k, lines in enumerate(logs):
        for x in lines:
            if x.get("message") == "seeds published":
                published.setdefault(int(x["epoch"]), []).append((stamp(x), k))
    lags = []
    for k, lines in enumerate(logs):
        for x in lines:
            epoch = int(x.get("epoch", 0))
            if x.get("message") == "epoch committed" and epoch > 1 and epoch in published:
                last, owner = max(published[epoch])
                if owner != k:
                    lags.append(stamp(x) - last)
    return float(statistics.median(lags)) if lags else math.nan


def run(
    bootstrap: str,
    tmp: Path,
    workers: int,
    rows: list[tuple[int, int, int]],
    consolidate: bool = True,
    profile: Path | None = None,
    rebuilt: bool = False,
) -> dict[str, float]:
    """``workers`` on a new topic of :data:`PARTITIONS` partitions, fed ``rows``."""
    topic = f"scale-{workers}-{uuid.uuid4().hex[:6]}"
    topics(bootstrap, (topic, PARTITIONS), (f"{topic}-out", 1), (f"{topic}-dlq", 1))
    return measure(
        bootstrap, tmp, topic, workers, edge_records(rows), consolidate, profile, rebuilt
    )


def joined(logs: list[Path], topic: str, partitions: int) -> bool:
    """Whether every worker holds partitions of ``topic``, together all of them (each worker's
    last assignment, not revoked since), and one of them leads (publishes the epochs)."""
    held: list[set[str]] = []
    leading = False
    for log in logs:
        lines = log_lines(log)
        changes = [x for x in lines if x.get("message") in ASSIGNMENT]
        last = changes[-1] if changes else {}
        mine = last.get("partitions", []) if last.get("message") == ASSIGNMENT[0] else []
        held.append({p for p in mine if p.rsplit(":", 1)[0] == topic})
        leads = [x["message"] for x in lines if x.get("message") in LEADING]
        leading = leading or (bool(leads) and leads[-1] == LEADING[0])
    return leading and all(held) and len(set().union(*held)) == partitions


def measure(
    bootstrap: str,
    tmp: Path,
    topic: str,
    workers: int,
    records: list[tuple[bytes, bytes]],
    consolidate: bool = True,
    profile: Path | None = None,
    rebuilt: bool = False,
    env: dict[str, str] | None = None,
    rate: float = 0,
) -> dict[str, float]:
    """``workers`` in a new group on the empty ``topic`` of :data:`PARTITIONS` partitions;
    once they hold all its partitions, ``records`` produced to it (as fast as the client goes,
    or ``rate`` a second); measured once they have committed its end, with p50 and p99 of
    record timestamp to committed output over all the workers. ``env`` adds settings to every
    worker's (an output format, the epochs' delay)."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    name = f"workers-{workers}{'' if consolidate else '-sums'}"
    for i in range(workers):
        settings = {"SGM_CONSOLIDATE_ACROSS_WORKERS": str(consolidate).lower(), **(env or {})}
        profiled = profile / f"{name}.prof" if profile is not None and i == 0 else None
        procs.append(start(bootstrap, tmp, topic, group, f"w{i}", settings, profiled))
    deadline = time.monotonic() + 120
    while not joined([log for _, log in procs], topic, PARTITIONS):
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            raise RuntimeError(f"{workers} workers did not all join {group} on {topic}")
        time.sleep(0.2)
    produce_records(bootstrap, topic, records, rate)
    deadline = time.monotonic() + 900
    while not done(bootstrap, group, topic):
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            raise RuntimeError(f"{workers} workers did not consume {topic}")
        time.sleep(0.5)
    p50, p99 = quantiles([metrics(log) for _, log in procs])
    rss = [peak_rss(p.pid) for p, _ in procs]
    for proc, _ in procs:
        proc.terminate()
    for proc, _ in procs:
        proc.wait(60)
    logs = [log_lines(log) for _, log in procs]
    # Every worker commits every epoch once it has joined: the rate is read from the one that
    # committed the most (worker 0, unless it joined after others had begun).
    committed = max(
        ([x for x in ls if x.get("message") == "epoch committed"] for ls in logs), key=len
    )
    if len(committed) < 2:
        raise RuntimeError(f"no worker committed more than {len(committed)} epoch(s) of {topic}")
    first, last = committed[0], committed[-1]
    updates = sum(int(x["updates"]) for x in committed[1:])
    seconds = stamp(last) - stamp(first)
    seeds = [x for ls in logs for x in ls if x.get("message") == "seeds published"]
    deltas = sum(int(x["deltas"]) for x in seeds)
    # The deltas of the epochs whose records the rate counts (all but the first).
    rated = {int(x["epoch"]) for x in committed[1:]}
    counted = sum(int(x["deltas"]) for x in seeds if int(x["epoch"]) in rated)
    # Per epoch of that worker: reading and decoding (every worker does it all), then staging,
    # evaluating its share and the transaction (published_s), then the wait for the others.
    timed = [x for x in committed[1:] if x.get("published_s") is not None]
    read = sum(float(x["read_s"]) for x in timed) / max(len(timed), 1)
    publish = sum(float(x["published_s"]) - float(x["read_s"]) for x in timed) / max(len(timed), 1)
    barrier = sum(float(x["barrier_s"]) for x in timed) / max(len(timed), 1)
    measured = {"lag_s": barrier_lag(logs)}
    if rebuilt:
        at = profile / f"{name}-rebuild.prof" if profile is not None else None
        measured.update(rebuild(bootstrap, tmp, topic, group, at, env or {}))
    return {
        **measured,
        "read_s": read,
        "publish_s": publish,
        "barrier_s": barrier,
        "workers": workers,
        "rate": updates / seconds,
        "p50_s": p50,
        "p99_s": p99,
        "deltas_rate": counted / seconds,
        "epochs": len(committed),
        "seconds": seconds,
        "rss_mib": max(rss) / 2**20,
        "transactions": len(seeds),
        "deltas": deltas,
        "consolidated": consolidate,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--runs", help="only these worker counts, consolidated: 1,3")
    parser.add_argument("--profile", type=Path, help="cProfile worker 0 into this directory")
    parser.add_argument(
        "--rebuild", action="store_true", help="after each run, time a rebuild from the changelog"
    )
    args = parser.parse_args()
    plan = [(1, True), (2, True), (2, False), (3, True), (3, False)]
    if args.runs:
        plan = [(int(n), True) for n in args.runs.split(",")]
    rows = stream()
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        broker = KafkaBroker(tmp / "broker")
        broker.start()
        try:
            # Each worker count consolidated (the default) and, for 2 and 3, with per-worker
            # sums (SGM_CONSOLIDATE_ACROSS_WORKERS=false), back to back.
            for k, (workers, consolidate) in enumerate(plan):
                rebuilt = args.rebuild and (k == 0 or args.profile is not None)
                result = run(
                    broker.bootstrap, tmp, workers, rows, consolidate, args.profile, rebuilt
                )
                print(result, file=sys.stderr)
                results.append(result)
        finally:
            broker.close()
    base = results[0]["rate"]
    lines = [
        "Generated by `python -m bench.cluster`: a local single-node broker, ego-Facebook as "
        f"{len(rows):,} JSON records (inserts, then 10% deletes) on {PARTITIONS} partitions, "
        f"symmetry-broken triangles, epochs of {BATCH:,} updates, all workers on this 2-core "
        "machine with the broker.\n",
        "| workers | output | updates/s | vs 1 | epochs | seed transactions | delta records "
        "| peak RSS per worker "
        "| per epoch of one worker: read+decode / stage+evaluate+transaction / barrier wait "
        "| others commit after the last seed commit (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mode = "consolidated" if r["consolidated"] else "per-worker sums"
        lines.append(
            f"| {r['workers']:.0f} | {mode} | {r['rate']:,.0f} | {r['rate'] / base:.2f}x | "
            f"{r['epochs']:.0f} | {r['transactions']:.0f} | {r['deltas']:,.0f} | "
            f"{r['rss_mib']:,.0f} MiB | "
            f"{r['read_s'] * 1000:,.0f} / {r['publish_s'] * 1000:,.0f} / "
            f"{r['barrier_s'] * 1000:,.0f} ms | "
            + ("-" if math.isnan(r["lag_s"]) else f"{r['lag_s'] * 1000:,.0f} ms")
            + " |"
        )
    for r in results:
        if "rebuild_s" in r:
            mode = "consolidated" if r["consolidated"] else "per-worker sums"
            lines.append(
                f"\nA worker with a new volume after the {r['workers']:.0f}-worker run ({mode}) "
                f"rebuilt {r['rebuild_tuples']:,.0f} tuples from {r['rebuild_records']:,.0f} "
                f"changelog records in {r['rebuild_s']:.2f} s."
            )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
