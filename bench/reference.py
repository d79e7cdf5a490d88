"""The paper authors' implementation beside ours (issue #13): ``python -m bench.reference``.

The reference is frankmcsherry/dataflow-join, the Delta-BiGJoin authors' Rust implementation
on timely dataflow, built from ``../shared/peers`` into ``.cache/peers``
(:mod:`bench.reference_build`; skipped, exit 0 with the reason, when ``cargo`` or the source
is absent). Each row is one graph, one motif, one batch size:

- the graph as a simple undirected graph oriented low id -> high id, in a seeded random order
  (:mod:`bench.reference_inputs`): ego-Facebook, and an R-MAT graph of 2M edges;
- its first half preloaded, the second half inserted in batches of ``B`` (an epoch each);
- one worker each: the reference's ``motif`` example with ``-w1``; ours, ``subgraph-monitor
  run`` (single-threaded numpy), stdout to ``/dev/null``;
- timed over the streaming phase only, on both sides, without process start-up and preload
  (:mod:`bench.reference_runs` says exactly how, and what each side does in that time);
- changes/s = the changes of the motif's result set (every one a ``+1``: inserts only) over
  the median streaming seconds of ``--runs`` runs, interleaved (reference, ours, reference, ...).

Both sides count the changes; a row whose counts differ is reported as a ``MISMATCH`` (and a
side that fails as ``FAILED``), and the harness then exits 1 after writing the report.
``--quick`` runs two tiny rows once (an R-MAT graph of 20k edges), for the test.

Writes ``bench/reference.md`` (or ``--out``) and prints the table on stdout; progress goes to
stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.reference_build import CACHE, PEERS, Build, ensure_motif
from bench.reference_inputs import EdgeFiles, prepare
from bench.reference_report import Result, Row, render, table
from bench.reference_runs import run_ours, run_reference

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "reference.md"


#: The rows of issue #13.
ROWS = (
    Row("ego-facebook", "triangle", 1_000),
    Row("ego-facebook", "triangle", 10_000),
    Row("ego-facebook", "4-clique", 1_000),
    Row("ego-facebook", "4-clique", 10_000),
    Row("rmat-2M", "triangle", 10_000),
)
#: ``--quick``: tiny, for the test.
QUICK_ROWS = (
    Row("rmat-20k", "triangle", 1_000),
    Row("rmat-20k", "4-clique", 1_000),
)


def measure(row: Row, files: EdgeFiles, build: Build, runs: int, timeout: float) -> Result:
    """``runs`` interleaved runs of both sides on one row."""
    result = Result(row, files)
    assert build.motif is not None
    for run in range(runs):
        try:
            reference = run_reference(build.motif, row.query, files, row.batch, timeout)
            ours = run_ours(row.query, files, row.batch, timeout)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            result.error = str(error).splitlines()[0]
            _say(f"  {row}: FAILED: {error}")
            return result
        result.runs.append((reference, ours))
        _say(
            f"  run {run + 1}/{runs}: reference {reference.changes:,} changes in "
            f"{reference.seconds:.3f} s, ours +{ours.changes:,} -{ours.retractions:,} in "
            f"{ours.seconds:.2f} s (preload {ours.figures['preload_s']:.2f} s not counted)"
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs per row; medians reported")
    parser.add_argument("--quick", action="store_true", help="two tiny rows, one run (tests)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="build and inputs go here")
    parser.add_argument("--peers", type=Path, default=PEERS, help="the reference's source")
    parser.add_argument("--out", type=Path, default=OUT, help="the report")
    parser.add_argument("--cpu", type=int, help="pin every run to this core [default: none]")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    args = parser.parse_args(argv)
    rows, runs = (QUICK_ROWS, 1) if args.quick else (ROWS, args.runs)
    if runs < 1:
        parser.error("--runs must be at least 1")
    begun = time.perf_counter()
    args.cache = args.cache.resolve()
    build = ensure_motif(args.peers, args.cache)
    if build.motif is None:
        print(f"bench.reference: skipped: {build.why_not}")
        return 0
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # every process started from here runs on it
    inputs: dict[str, EdgeFiles] = {}
    results: list[Result] = []
    for row in rows:
        if row.graph not in inputs:
            _say(f"bench.reference: preparing {row.graph}")
            inputs[row.graph] = prepare(row.graph, args.cache / "inputs")
        _say(f"bench.reference: {row.graph} {row.query} batch {row.batch:,}")
        results.append(measure(row, inputs[row.graph], build, runs, args.timeout))
    command = " ".join(["python -m bench.reference", *(argv or sys.argv[1:])])
    report = render(results, build, runs, command, time.perf_counter() - begun, args.cpu)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(table(results))
    failed = [r for r in results if not r.ok]
    if failed:
        _say(f"bench.reference: {len(failed)} row(s) FAILED or MISMATCHED; see {args.out}")
        return 1
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
