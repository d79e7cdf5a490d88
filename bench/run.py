"""The benchmark harness: ``python -m bench.run [--quick] [--only ...] [--sizes ...]``.

It runs every workload (the SNAP graphs in ``../shared/datasets`` and R-MAT graphs of the given
sizes; each also as a labelled workload for the ``fraud`` query) in a fresh worker process of
its own (:mod:`bench.worker`), one after the other, then writes ``BENCHMARKS.md`` and the
throughput plots. Progress goes to stderr, the figures to stdout.

``--quick`` is a smoke run of well under a minute on tiny graphs: it writes its report under
``.cache/bench/quick/`` (unless ``--out`` says otherwise) so the real ``BENCHMARKS.md`` stays.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.plot import plot_throughput
from bench.queries import LABELLED, QUERY_NAMES
from bench.report import RunInfo, python_command, render, stdout_summary
from bench.results import Results
from bench.targets import target_configurations
from bench.worker import ENGINES, WorkerSpec
from bench.workloads import GraphSpec, dataset_specs, rmat_spec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
DEFAULT_CACHE = ROOT / ".cache" / "bench"
NOTES = Path(__file__).resolve().parent / "NOTES.md"
PERSISTENCE = Path(__file__).resolve().parent / "persistence.md"
KAFKA = Path(__file__).resolve().parent / "kafka.md"
CLUSTER = Path(__file__).resolve().parent / "cluster.md"
KAFKA_OUTPUT = Path(__file__).resolve().parent / "kafka_output.md"
CONSOLIDATION = Path(__file__).resolve().parent / "consolidation.md"
PAYMENTS = Path(__file__).resolve().parent / "payments.md"
#: The reports of ``bench.timed_payments`` and ``bench.decoding``, carried after the events'.
TIMED = Path(__file__).resolve().parent / "timed_payments.md"
DECODING = Path(__file__).resolve().parent / "decoding.md"
DISTRIBUTED = Path(__file__).resolve().parent / "distributed.md"


def parse_count(text: str) -> int:
    """``"10M" -> 10_000_000``, ``"20k" -> 20_000``, ``"1500" -> 1500``."""
    text = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return int(float(number) * scale)


def parse_counts(text: str) -> list[int]:
    if text.strip().lower() in ("", "none", "0"):
        return []
    return [parse_count(t) for t in text.split(",") if t.strip()]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Benchmark subgraph-monitor against its baselines; writes BENCHMARKS.md.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (< 1 minute)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated workload and/or query names (shell patterns), e.g. "
        "'ego-facebook,sym-triangle' or 'rmat-*'",
    )
    parser.add_argument(
        "--sizes", default=None, help="R-MAT edge counts, e.g. '1M,10M,50M' or 'none'"
    )
    parser.add_argument("--batch-sizes", default=None, help="updates per epoch, e.g. '1,100,10k'")
    parser.add_argument(
        "--datasets", type=Path, default=DEFAULT_DATASETS, help="directory of SNAP edge lists"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="generated graphs")
    parser.add_argument("--out", type=Path, default=None, help="report file (BENCHMARKS.md)")
    parser.add_argument("--figures", type=Path, default=None, help="directory for the plots")
    parser.add_argument("--preload", type=float, default=0.5, help="fraction preloaded")
    parser.add_argument("--deletes", type=float, default=0.1, help="fraction of deletes")
    parser.add_argument("--flagged", type=float, default=0.01, help="fraction flagged")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of streaming per configuration (at least one epoch runs)",
    )
    parser.add_argument("--limit", type=float, default=None, help="seconds before a stop")
    parser.add_argument(
        "--target-limit",
        type=float,
        default=None,
        help="seconds before a stop, for the configurations a headline target names",
    )
    parser.add_argument(
        "--recompute-budget", type=float, default=None, help="seconds of recounting per query"
    )
    parser.add_argument(
        "--recompute-limit", type=float, default=None, help="seconds before a recount is stopped"
    )
    parser.add_argument(
        "--max-epochs", type=int, default=None, help="epochs per configuration at most"
    )
    parser.add_argument(
        "--max-updates", type=parse_count, default=None, help="updates per configuration"
    )
    parser.add_argument(
        "--max-deltas", type=parse_count, default=None, help="match deltas per epoch at most"
    )
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=12.0,
        help="GiB of memory a configuration may add to its preloaded worker's",
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin the workers to this CPU")
    parser.add_argument("--seed", type=int, default=0, help="edge order and stream seed")
    parser.add_argument(
        "--report-only",
        type=Path,
        default=None,
        metavar="RECORDS",
        help="write the report from records saved by an earlier run (.cache/bench/runs/*.jsonl)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "sizes": "20k" if quick else "1M,10M",
        "batch_sizes": "1,100,10k",
        "budget": 0.25 if quick else 2.0,
        "limit": 2.0 if quick else 30.0,
        "target_limit": 2.0 if quick else 120.0,
        "recompute_budget": 0.3 if quick else 5.0,
        "recompute_limit": 2.0 if quick else 15.0,
        "max_epochs": 100 if quick else 2_000,
        "max_updates": 10_000 if quick else 1_000_000,
        "max_deltas": 2_000_000 if quick else 60_000_000,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.out is None:
        args.out = DEFAULT_CACHE / "quick" / "BENCHMARKS.md" if quick else ROOT / "BENCHMARKS.md"
    if args.figures is None:
        args.figures = (
            ROOT / "bench" / "figures"
            if args.out.resolve().parent == ROOT
            else args.out.resolve().parent / "figures"
        )
    return args


def graphs(args: argparse.Namespace) -> list[GraphSpec]:
    """The datasets (smallest first; only the smallest in a quick run), then R-MAT sizes."""
    found = dataset_specs(args.datasets) if args.datasets.is_dir() else []
    if not found:
        log(f"no datasets in {args.datasets}: running R-MAT graphs only")
    if args.quick:
        found = found[:1]
    return found + [rmat_spec(n) for n in parse_counts(args.sizes)]


def matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def worker_specs(args: argparse.Namespace) -> list[WorkerSpec]:
    """One spec per workload: a graph with its plain queries, and labelled with ``fraud``."""
    patterns = [p.strip() for p in args.only.split(",") if p.strip()]
    graph_list = graphs(args)
    names = {g.name for g in graph_list} | {f"{g.name}+flags" for g in graph_list}
    graph_patterns = [p for p in patterns if any(fnmatch.fnmatchcase(n, p) for n in names)]
    query_patterns = [p for p in patterns if any(fnmatch.fnmatchcase(q, p) for q in QUERY_NAMES)]
    unknown = [p for p in patterns if p not in graph_patterns and p not in query_patterns]
    if unknown:
        raise SystemExit(
            f"--only: {', '.join(unknown)} names no workload or query; workloads are "
            f"{', '.join(sorted(names))}; queries are {', '.join(QUERY_NAMES)}"
        )
    sizes = sorted(parse_counts(args.batch_sizes))
    caps = {str(b): max(b, min(b * args.max_epochs, args.max_updates)) for b in sizes}
    base = WorkerSpec(
        workload="",
        graph=GraphSpec(""),
        labelled=False,
        queries=[],
        batch_sizes=sizes,
        engines=list(ENGINES),
        caps=caps,
        cache=str(args.cache),
        preload=args.preload,
        deletes=args.deletes,
        flagged=args.flagged,
        seed=args.seed,
        budget=args.budget,
        limit=args.limit,
        long_limit=args.target_limit,
        recompute_budget=args.recompute_budget,
        recompute_limit=args.recompute_limit,
        max_deltas=args.max_deltas,
        memory_limit=int(args.memory_limit * (1 << 30)) if args.memory_limit else None,
        cpu=args.cpu,
    )
    specs = []
    for graph in graph_list:
        for labelled in (False, True):
            workload = f"{graph.name}+flags" if labelled else graph.name
            if graph_patterns and not (
                matches(workload, graph_patterns) or matches(graph.name, graph_patterns)
            ):
                continue
            queries = [
                q
                for q in QUERY_NAMES
                if (q in LABELLED) == labelled
                and (not query_patterns or matches(q, query_patterns))
            ]
            if not queries:
                continue
            specs.append(
                replace(
                    base,
                    workload=workload,
                    graph=graph,
                    labelled=labelled,
                    queries=queries,
                    memory=not labelled,
                    long_limit_for=target_configurations(workload),
                )
            )
    return specs


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_worker(spec: WorkerSpec, results: Results) -> None:
    """Run one workload's worker and file its records."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(spec.to_json())
    process.stdin.close()

    for line in process.stdout:
        if line.strip():
            results.add(json.loads(line))
    code = process.wait()
    if code != 0:
        message = f"worker of {spec.workload} exited with {code} (see its traceback above)"
        log(message)
        results.failures.append(message)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.report_only is not None:
        results, info = load_results(args.report_only)
    else:
        specs = worker_specs(args)
        if not specs:
            log("nothing to run")
            return 1
        results, info = run_all(args, specs)
    figures = plot_throughput(results, args.figures, info.parameters["recompute_limit"])
    if not figures:
        log("matplotlib is not installed (pip install -e '.[bench]'): no plots")
    info = replace(info, figures=figures)
    notes = NOTES.read_text() if NOTES.exists() else "(bench/NOTES.md is missing)"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    persistence = PERSISTENCE.read_text() if PERSISTENCE.exists() else None
    kafka = KAFKA.read_text() if KAFKA.exists() else None
    if kafka and KAFKA_OUTPUT.exists():
        kafka += "\n### Output formats (bench/kafka_output.md)\n\n" + KAFKA_OUTPUT.read_text()
    cluster = CLUSTER.read_text() if CLUSTER.exists() else None
    if cluster and CONSOLIDATION.exists():
        cluster += "\n" + CONSOLIDATION.read_text().replace("# ", "### ", 1)
    carried = [
        (f"### {title} (bench/{path.name})\n\n", path.read_text().split("\n", 1)[1].lstrip())
        for title, path in (
            ("Event time", TIMED),
            ("Decoding alone", DECODING),
            ("The partitioned engine", DISTRIBUTED),
        )
        if path.exists()
    ]
    notes = "".join(head + text + "\n" for head, text in carried) + notes
    if PAYMENTS.exists():
        notes = "### Events (bench/payments.md)\n\n" + PAYMENTS.read_text() + "\n" + notes
    out_dir = args.out.resolve().parent
    args.out.write_text(render(results, info, notes, out_dir, persistence, kafka, cluster))
    print(stdout_summary(results, info))
    log(f"wrote {args.out} and {len(figures)} plot(s); run took {info.seconds / 60:.1f} minutes")
    return 1 if results.failures else 0


def run_all(args: argparse.Namespace, specs: list[WorkerSpec]) -> tuple[Results, RunInfo]:
    """Every workload's worker, one after the other; the records are also saved as JSON lines.

    An interrupt (Ctrl-C) stops the run, and the report is written from what was measured.
    """
    began = time.perf_counter()
    results = Results()
    try:
        for i, spec in enumerate(specs, 1):
            log(f"== workload {i}/{len(specs)}: {spec.workload} ({', '.join(spec.queries)})")
            run_worker(spec, results)
    except KeyboardInterrupt:
        results.failures.append("the run was interrupted; the figures are those measured so far")
        log(results.failures[-1])
    parameters = {
        "preload": args.preload,
        "deletes": args.deletes,
        "flagged": args.flagged,
        "budget": args.budget,
        "limit": args.limit,
        "target_limit": args.target_limit,
        "recompute_budget": args.recompute_budget,
        "recompute_limit": args.recompute_limit,
        "caps": specs[0].caps,
        "max_deltas": args.max_deltas,
        "cpu": args.cpu,
        "queries": list(dict.fromkeys(q for s in specs for q in s.queries)),
    }
    info = RunInfo(python_command(), parameters, time.perf_counter() - began, [])
    saved = args.cache / "runs" / time.strftime("%Y%m%d-%H%M%S.jsonl")
    saved.parent.mkdir(parents=True, exist_ok=True)
    head = {
        "type": "info",
        "command": info.command,
        "parameters": parameters,
        "seconds": info.seconds,
        "failures": results.failures,
    }
    lines = [json.dumps(head)] + [json.dumps(r) for r in results.raw]
    saved.write_text("\n".join(lines) + "\n")
    log(f"records saved to {saved} (re-render with --report-only {saved})")
    return results, info


def load_results(path: Path) -> tuple[Results, RunInfo]:
    """The results and run info saved by an earlier run."""
    results = Results()
    info = RunInfo("", {}, 0.0, [])
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("type") == "info":
            info = RunInfo(record["command"], record["parameters"], record["seconds"], [])
            results.failures.extend(record.get("failures", []))
        else:
            results.add(record)
    return results, info


if __name__ == "__main__":
    raise SystemExit(main())
