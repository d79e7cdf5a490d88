"""The partitioned engine against the single process and dataflow-join (issue #33, its
benchmark): ``python -m bench.distributed`` writes ``bench/distributed.md``.

Each graph (ego-Facebook from ``../shared/datasets``, R-MAT 2M and 10M from :mod:`bench.rmat`)
is a simple graph oriented low id -> high id, in a seeded random order; its first half is
preloaded, then the rest is streamed in epochs of ``--batch`` updates: all of ego-Facebook's (5
epochs of 10,000), at most ``--epochs`` of an R-MAT graph's (on two cores, streaming the 5M
updates of R-MAT 10M's second half through every configuration would take days). Every query
(``triangle``, ``4-clique``: the built-ins, one query per run) runs on each configuration from
an empty index (:mod:`bench.distributed_runs`):

- the single process, :class:`~monitor.service.epochs.EpochProcessor`: the baseline and oracle;
- dataflow-join, the paper authors' Rust code (``../shared/peers``) with ``-w1`` and ``-w2``
  on the same updates and batch (:mod:`bench.distributed_peer`; its rows say why when ``cargo``
  or the source is absent);
- ours, :class:`~monitor.distributed.delta.ShardedEpochs`, with ``--shards`` shards in this
  process and as Ray actors (one local cluster, ``num_cpus=2``), timed per round of calls
  (:mod:`bench.distributed_shards`).

Every configuration's match changes must be the single process's, epoch for epoch (their number
and fingerprint; dataflow-join's total count); a row that differs says ``MISMATCH`` and the run
exits 1 after writing the report. Then the capacity: the whole of ``--capacity`` (R-MAT 10M)
loaded into one index and into 1, 2, 4 and 8 shards in this process. The report
(:mod:`bench.distributed_report`) ends with the issue's goals, computed from the figures.
``--quick``: a tiny R-MAT graph, for the test. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.distributed_peer import run_peer
from bench.distributed_report import (
    Section,
    capacity_text,
    goals,
    goals_text,
    profile_text,
    section_text,
)
from bench.distributed_runs import (
    Capacity,
    Graph,
    Outcome,
    capacity,
    open_graph,
    run_sharded,
    run_single,
)
from bench.distributed_shards import TimedLocalShards, TimedRayShards, TimedShards
from bench.machine import machine_info
from bench.reference_build import CACHE, PEERS, ensure_motif
from monitor.query import builtin

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "distributed.md"


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--graphs", default="ego-facebook,rmat-2M,rmat-10M")
    parser.add_argument("--queries", default="triangle,4-clique", help="built-in queries")
    parser.add_argument("--batch", type=int, default=10_000, help="updates per epoch")
    parser.add_argument(
        "--epochs", type=int, default=20, help="epochs streamed per R-MAT graph, at most"
    )
    parser.add_argument("--shards", default="1,2,4", help="our shard counts")
    parser.add_argument("--peer-workers", default="1,2", help="dataflow-join's -w")
    parser.add_argument("--capacity", default="rmat-10M", help="the capacity graph ('none')")
    parser.add_argument("--capacity-shards", default="1,2,4,8")
    parser.add_argument("--no-ray", action="store_true", help="our shards in this process only")
    parser.add_argument("--no-peer", action="store_true", help="leave dataflow-join out")
    parser.add_argument("--quick", action="store_true", help="a tiny R-MAT graph (tests)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="the peer's build, the inputs")
    parser.add_argument("--peers", type=Path, default=PEERS, help="dataflow-join's source")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per peer run")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.quick:  # (what is not given otherwise)
        quick = {"graphs": "rmat-4k", "capacity": "rmat-4k", "batch": 500, "epochs": 4}
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    return args


def measure(graph: Graph, query: str, args: argparse.Namespace, motif: Path | str) -> Section:
    """Every configuration on one graph and query, the single process first."""
    say(f"{graph.title}, {query}: single process")
    single = run_single(graph, builtin(query), args.batch)
    outcomes = [single]
    if isinstance(motif, Path):
        for workers in _ints(args.peer_workers):
            say(f"{graph.title}, {query}: dataflow-join -w{workers}")
            peer = run_peer(
                motif, query, graph, args.batch, workers, args.cache / "inputs", args.timeout
            )
            if peer.ok and peer.deltas != single.deltas:
                peer.mismatch = f"{peer.deltas:,} changes, ours {single.deltas:,}"
            outcomes.append(peer)
    for count in _ints(args.shards):
        kinds: list[tuple[str, Callable[[int], TimedShards]]] = [("in process", TimedLocalShards)]
        if not args.no_ray:
            kinds.append(("Ray", TimedRayShards))
        for kind, make in kinds:
            label = f"{count} shards " + ("as Ray actors" if kind == "Ray" else kind)
            if count == 1:
                label = "1 shard " + ("as a Ray actor" if kind == "Ray" else kind)
            say(f"{graph.title}, {query}: {label}")
            done = run_sharded(graph, builtin(query), args.batch, make(count), label, kind)
            if done.checks != single.checks:
                done.mismatch = _first_difference(done, single)
            outcomes.append(done)
            say(f"  {done.rate:,.0f} updates/s ({done.rate / single.rate:.2f}x single)")
    note = motif if isinstance(motif, str) else None
    return Section(graph, query, args.batch, outcomes, note)


def _first_difference(done: Outcome, single: Outcome) -> str:
    for epoch, (a, b) in enumerate(zip(done.checks, single.checks, strict=False)):
        if a != b:
            return f"epoch {epoch + 1}: {a[0]:,} changes, single {b[0]:,} (or other rows)"
    return f"{len(done.checks)} epochs, single {len(single.checks)}"


def header(args: argparse.Namespace, info: dict[str, str], load: str, minutes: float) -> list[str]:
    ray = "" if args.no_ray else f", Ray {_ray_version()} (`ray.init(num_cpus=2)`)"
    changed = _uncommitted()
    if changed:
        commit = info["git commit"].removesuffix(" (with uncommitted changes)")
        info = {**info, "git commit": f"{commit} with uncommitted changes to {changed}"}
    return [
        "# The partitioned engine against the single process and dataflow-join (issue #33)",
        "",
        f"Generated by `{' '.join(['python -m bench.distributed', *args.argv])}`"
        f" (do not edit by hand): commit {info['git commit']}, {info['date']}; the run took "
        f"{minutes:.1f} minutes. Machine: {info['CPU']}, {info['logical cores']} logical cores "
        f"({info['cores available to the run']} available to the run, shared with other work), "
        f"{info['memory']}; {info['OS']}, Python {info['Python']}, numpy {info['numpy']}{ray}. "
        f"Load average (1/5/15 min) at the start {load}, at the end "
        f"{info['load average at the end (1/5/15 min)']}.",
        "",
        f"Graphs oriented low id -> high id (each undirected edge once), in a seeded random order; "
        f"the first half preloaded, then the rest streamed in epochs of {args.batch:,} updates "
        f"(inserts): all of ego-Facebook's, the first {args.epochs} epochs of an R-MAT graph's "
        "(on two shared cores, all 5M of R-MAT 10M through every configuration would take days); "
        "the same updates for every configuration. One query per run: "
        f"{', '.join(f'`{q}`' for q in args.queries.split(','))} (the built-ins, which are "
        "dataflow-join's motifs). Wall-clock seconds on a shared two-core machine: compare "
        "ratios within a run.",
        "",
    ]


def _uncommitted() -> str:
    """The tracked files that differ from the commit (what the run had beyond it)."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return ", ".join(line[3:] for line in done.stdout.splitlines() if line.strip())


def _ray_version() -> str:
    import ray

    return str(ray.__version__)


def start_ray() -> bool:
    """A local Ray cluster for the run (True: this call started it)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # (The actors import bench.distributed_shards: Ray puts this directory on their path.)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    return True


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    begun, load = time.perf_counter(), ", ".join(f"{x:.2f}" for x in os.getloadavg())
    motif: Path | str = "left out (--no-peer)"
    if not args.no_peer:
        try:
            build = ensure_motif(args.peers, args.cache)
            motif = build.motif or str(build.why_not)
        except RuntimeError as error:  # (the rest of the benchmark runs without it)
            motif = f"its build failed: {str(error).splitlines()[0]}"
    started = not args.no_ray and start_ray()
    sections: list[Section] = []
    absent: list[str] = []
    graphs = args.graphs.split(",")
    for name in graphs:
        graph = open_graph(name, args.cache / "inputs" / "graphs", args.batch, args.epochs)
        if isinstance(graph, str):
            absent.append(f"{name}: {graph}")
            say(f"{name} left out: {graph}")
            continue
        for query in args.queries.split(","):
            sections.append(measure(graph, query, args, motif))
    loaded: Capacity | None = None
    if args.capacity != "none":
        graph = open_graph(args.capacity, args.cache / "inputs" / "graphs", args.batch, 0)
        if isinstance(graph, Graph):
            say(f"capacity: {graph.title}")
            loaded = capacity(graph, _ints(args.capacity_shards), builtin("triangle"))
    if started:
        import ray

        ray.shutdown()
    minutes = (time.perf_counter() - begun) / 60
    lines = header(args, machine_info(), load, minutes)
    lines += [f"*Left out*: {a}." for a in absent] + ([""] if absent else [])
    lines += goals_text(goals(sections, loaded, args.capacity))
    lines += ["## The runs", ""]
    for section in sections:
        lines += section_text(section)
    if loaded is not None:
        lines += capacity_text(loaded)
    lines += profile_text(sections)
    lines += METHOD
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines).rstrip("\n") + "\n")
    print("\n".join(lines))
    wrong = [o for s in sections for o in s.outcomes if o.mismatch is not None]
    return 1 if wrong else 0


METHOD = [
    "## How it is measured",
    "",
    "- *updates/s*: updates streamed over the seconds of the streamed epochs (each timed from "
    "the batch handed over to its match changes out and the index committed; dataflow-join: "
    "from its `indices merged` line to its `elapsed` line, reading and parsing its input "
    "lines included). *vs single*, *vs dataflow-join*: the ratio of updates/s to the single "
    "process's and to dataflow-join's at the same number of workers (1 shard: `-w1`, 2: `-w2`).",
    "- Both turn the changes into external ids (ours: the distinct ids decoded by the shards "
    "that numbered them, one round an epoch); the single process also makes match ids, which "
    "the file job adds to ours: its figure carries that work.",
    "- *index*: bytes of the adjacencies (both positions of `e`) and of the vertex dictionary "
    "after the streamed epochs: the largest shard's and its ratio to the single process's / S; "
    "*index max/mean* over shards.",
    "- *exchanged B/update*: bytes of the arrays sent to the shards and answered by them over "
    "the streamed epochs, per update streamed (in process too: what would cross).",
    "- *epoch % driver / shards / calls+waits*: shares of the epochs' seconds outside the calls "
    "to the shards; the shards' compute on each round's critical path (Ray: the slowest shard "
    "of the round; in process: every shard's, one after the other); and the rest of the calls, "
    "Ray calls and waits (handing arrays over, scheduling, waiting for a core).",
    "- *peak RSS*: the driver's peak over the configuration (`VmHWM`, reset at its start; it "
    "holds the graph's edges and, in process, the shards), each Ray actor's (`VmHWM` in the "
    "actor), dataflow-join's process (`VmHWM`, read as its output lines arrive).",
    "- *work max/mean*: values proposed plus pairs intersected, per shard, max over mean.",
    "- *match changes*: the single process's number; `= single`: every epoch's changes have "
    "the same number and the same fingerprint (a hash of each row, weighted by its diff, "
    "summed) as the single process's; `= ours`: dataflow-join's total equals it.",
    "- *Capacity*: the whole graph loaded in one batch into the single process's index and "
    "into S shards in this process (a shard's index is the same whether it lives here or in "
    "an actor). The work goal reads the streamed epochs of the 4-shard rows.",
]


_BEGUN = time.perf_counter()


def say(line: str) -> None:
    print(
        f"bench.distributed [{time.perf_counter() - _BEGUN:6.0f} s]: {line}",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
