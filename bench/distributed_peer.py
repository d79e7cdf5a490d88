"""dataflow-join, the paper authors' code, on the same graph, updates and batch as ours.

Its ``motif`` example (built by :func:`bench.reference_build.ensure_motif`) reads one text file,
loads its first ``LOAD`` lines and streams the rest in epochs of ``BATCH`` lines; so the file
here is the graph's preloaded half followed by exactly the updates our configurations stream
(:func:`edge_file`, written once into the cache). It runs as :mod:`bench.reference_runs`
describes, with ``-w1`` or ``-w2`` (timely workers: threads of one process), one motif per
process, counting its changes (``inspect``):

- its streaming seconds: from the arrival of its last ``indices merged`` line (one per worker,
  after the preload) to the arrival of its ``elapsed`` line, timestamped here as they come
  (Rust's stdout is line buffered); reading and parsing the streamed lines is in them (ours
  get the updates as arrays);
- its epoch latencies: per epoch, from the previous epoch's last count line (each worker prints
  its count of an epoch's changes once the epoch is done) to this one's;
- its changes: the ``total motifs`` it prints, over all its workers; they must equal our
  number of match deltas for the query (inserts only: every one is a ``+1``);
- its peak RSS: its ``VmHWM`` (``/proc/PID/status``), read as each line arrives, the last
  time as it prints its total and ends (not ``ru_maxrss``: Linux keeps that across ``exec``,
  so a child forked from this interpreter would report the interpreter's).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

from bench.distributed_runs import Graph, Outcome
from bench.reference_inputs import write_edges
from bench.reference_runs import MOTIFS, ONE_THREAD, rust_duration, watch

_ELAPSED = re.compile(r"^elapsed: (\S+)\s+total motifs at this process: (\d+)")
_COUNT = re.compile(r"^\(Root, (\d+)\): \[(\d+)\]")


def edge_file(graph: Graph, cache: Path) -> Path:
    """The preloaded half and the streamed updates, ``src dst`` per line, in stream order."""
    pairs = graph.edges[: graph.preloaded + graph.streamed]
    digest = hashlib.sha256(np.ascontiguousarray(pairs).tobytes()).hexdigest()[:12]
    path = cache / f"{graph.name}-{digest}-{pairs.shape[0]}.txt"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        write_edges(pairs, path)
    return path


def peer_command(
    motif: Path, query: str, path: Path, graph: Graph, batch: int, workers: int
) -> list[str]:
    """``motif`` on ``path``: the preloaded lines loaded, the rest in epochs of ``batch``."""
    atoms = MOTIFS[query]
    pairs = [str(v) for atom in atoms for v in atom]
    return [
        str(motif),
        str(len(atoms)),
        *pairs,
        str(path),
        str(graph.preloaded),
        str(batch),
        "inspect",
        f"-w{workers}",
    ]


def run_peer(
    motif: Path, query: str, graph: Graph, batch: int, workers: int, cache: Path, timeout: float
) -> Outcome:
    """One run of dataflow-join with ``workers`` workers; ``error`` says why if it failed."""
    out = Outcome(f"dataflow-join -w{workers}", "peer", workers, updates=graph.streamed)
    command = peer_command(motif, query, edge_file(graph, cache), graph, batch, workers)
    merged = ended = 0.0
    peak = 0
    done: dict[int, float] = {}
    total: int | None = None

    def read(now: float, line: str, pid: int) -> None:
        nonlocal merged, ended, peak, total
        peak = max(peak, _peak_rss(pid))
        if line.endswith("\tindices merged"):
            merged = now
        elif (count := _COUNT.match(line)) is not None:
            done[int(count.group(1))] = now
        elif (found := _ELAPSED.match(line)) is not None:
            ended, total = now, int(found.group(2))
            rust_duration(found.group(1))  # (its own figure; malformed: not its output)

    code, errors = watch(command, {**os.environ, **ONE_THREAD}, timeout, read)
    if code != 0 or total is None or not merged:
        tail = errors.strip().splitlines()[-1:] or ["no output"]
        out.error = f"FAILED (exit {code}): {tail[0][:200]}"
        return out
    out.seconds = ended - merged
    out.deltas = total
    arrivals = [merged, *(done[t] for t in sorted(done))]
    out.latencies = list(np.diff(arrivals))
    out.rss_driver = peak
    return out


def _peak_rss(pid: int) -> int:
    """A live process's peak resident bytes (``VmHWM``; 0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
