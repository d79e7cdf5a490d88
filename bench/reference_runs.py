"""One timed run of each side: the reference's ``motif`` and our ``subgraph-monitor run``.

Both count the same thing, the changes of a motif's result set while the second half of a
graph is inserted, and both are timed over the same phase: **streaming**, from the moment the
preloaded half is in the index to the moment the last batch's changes are out. Neither the
process start (an interpreter, a thread pool), nor reading and indexing the preloaded half,
is in it; reading and parsing the streamed lines is, on both sides.

- **The reference** (``motif Q FILE LOAD BATCH inspect -w1``; its ``examples/motif.rs``)
  loads the first ``LOAD`` lines of ``FILE`` as its initial graph (no motif changes come from
  them: it tracks the motif over the update stream only), prints ``indices merged`` once they
  are indexed and merged, then reads the rest of ``FILE`` and inserts it, advancing its input
  (one epoch) every ``BATCH`` lines and stepping until the epoch's changes are done. With
  ``inspect`` it counts the changes of each epoch (it does not materialise them anywhere), and
  at the end prints ``elapsed: S total motifs at this process: N``. That ``S`` is measured
  from the start of ``main``: it includes the preload. Its streaming time here is the time
  between the arrival of the ``indices merged`` line and of the ``elapsed`` line on its
  stdout, timestamped by this process as they arrive (Rust's stdout is line buffered, so each
  line reaches the pipe when it is printed). Its own figures (``elapsed`` minus the printed
  ``indices merged`` time, which counts from the worker's start, so after the dataflow is
  built) agree with it within about ten milliseconds; both are kept in the report.
- **Ours** (``subgraph-monitor run --query Q --preload PRE --edges REST --batch-size B``,
  stdout to ``/dev/null``) prints ``elapsed S s`` in its summary on stderr: the time from the
  queries being planned to the end of the job, so preload included (interpreter start-up and
  imports are not). Its preload alone is timed by the same command with an empty ``--edges``
  file, run just before it; the streaming time is the difference. Ours formats and writes one
  JSON line per change (to ``/dev/null``), which the reference does not do: that cost is in
  our figure, not in theirs.

The change counts: the reference's ``N``; ours, the ``+`` and ``-`` of ``query Q: +P -M match
deltas`` in the summary (inserts only, so ``M`` must be 0 and ``P`` must equal ``N``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.reference_inputs import EdgeFiles

ROOT = Path(__file__).resolve().parent.parent

#: The reference's motif of each of our built-in queries: the query's atoms as attribute
#: pairs, in the order of its text (``triangle(a1, a2, a3) := e(a1, a2), e(a1, a3), ...``).
MOTIFS: dict[str, tuple[tuple[int, int], ...]] = {
    "triangle": ((0, 1), (0, 2), (1, 2)),
    "4-clique": ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)),
}

#: numpy's thread pools held to one thread: one worker each.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_DURATION = re.compile(r"^([0-9.]+)(s|ms|µs|us|ns)$")
_UNIT = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_ELAPSED = re.compile(r"^elapsed: (\S+)\s+total motifs at this process: (\d+)")
_OURS_COUNT = r"query {}: \+([0-9,]+) -([0-9,]+) match deltas"
_OURS_ELAPSED = re.compile(r"subgraph-monitor: elapsed ([0-9.]+) s:")


@dataclass(frozen=True)
class Timed:
    """One run of one side: changes counted, seconds of streaming, and the raw figures."""

    changes: int
    seconds: float
    retractions: int = 0
    figures: dict[str, float] = field(default_factory=dict)


def rust_duration(text: str) -> float:
    """Seconds of a Rust ``Duration`` printed with ``{:?}`` (``1.5s``, ``12.3ms``, ``4µs``)."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise ValueError(f"not a Rust duration: {text!r}")
    return float(found.group(1)) * _UNIT[found.group(2)]


def reference_command(motif: Path, query: str, files: EdgeFiles, batch: int) -> list[str]:
    """``motif`` on the whole file: its first half loaded, the rest in batches of ``batch``."""
    atoms = MOTIFS[query]
    pairs = [str(v) for atom in atoms for v in atom]
    return [
        str(motif),
        str(len(atoms)),
        *pairs,
        str(files.whole),
        str(files.preloaded),
        str(batch),
        "inspect",
        "-w1",
    ]


def ours_command(query: str, preload: Path, edges: Path, batch: int) -> list[str]:
    """``subgraph-monitor run`` (as ``python -m monitor``) on the two halves."""
    return [
        sys.executable,
        "-m",
        "monitor",
        "run",
        *("--query", query, "--preload", str(preload), "--edges", str(edges)),
        *("--batch-size", str(batch)),
    ]


def run_reference(motif: Path, query: str, files: EdgeFiles, batch: int, timeout: float) -> Timed:
    """One run of the reference; raises ``RuntimeError`` if it fails or prints no total."""
    command = reference_command(motif, query, files, batch)
    arrived: dict[str, float] = {}
    printed: dict[str, float] = {}
    total: int | None = None

    def read(now: float, line: str, pid: int) -> None:
        nonlocal total
        if line.endswith("\tindices merged"):
            arrived["merged"] = now
            printed["merged"] = rust_duration(line.split("\t", 1)[0])
        elif line.endswith("\tdata loaded"):
            printed["loaded"] = rust_duration(line.split("\t", 1)[0])
        elif (found := _ELAPSED.match(line)) is not None:
            arrived["end"] = now
            printed["elapsed"] = rust_duration(found.group(1))
            total = int(found.group(2))

    code, errors = watch(command, _environment(), timeout, read)
    if code != 0 or total is None or "merged" not in arrived:
        raise RuntimeError(
            f"the reference failed (exit {code}): {' '.join(command)}\n{errors[-2000:]}"
        )
    seconds = arrived["end"] - arrived["merged"]
    figures = {
        "stream_s": seconds,
        "printed_stream_s": printed["elapsed"] - printed["merged"],
        "printed_elapsed_s": printed["elapsed"],
        "printed_loaded_s": printed.get("loaded", float("nan")),
        "printed_merged_s": printed["merged"],
    }
    return Timed(total, seconds, figures=figures)


def watch(
    command: list[str],
    env: dict[str, str],
    timeout: float,
    read: Callable[[float, str, int], None],
) -> tuple[int, str]:
    """Run ``command``, passing each line of its stdout to ``read`` as it arrives (with the
    ``perf_counter`` time and the process id), killed after ``timeout`` seconds; its exit code
    and its stderr."""
    with (
        tempfile.TemporaryFile() as stderr,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env) as process,
    ):
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            assert process.stdout is not None
            for raw in iter(process.stdout.readline, b""):
                now = time.perf_counter()
                read(now, raw.decode(errors="replace").rstrip("\n"), process.pid)
            code = process.wait()
        finally:
            timer.cancel()
        stderr.seek(0)
        return code, stderr.read().decode(errors="replace")


def run_ours(query: str, files: EdgeFiles, batch: int, timeout: float) -> Timed:
    """Ours with the preload alone, then on the whole input; streaming is the difference."""
    preload, _, _ = _ours(query, files.preload, files.empty, batch, timeout)
    elapsed, plus, minus = _ours(query, files.preload, files.rest, batch, timeout)
    figures = {"elapsed_s": elapsed, "preload_s": preload, "stream_s": elapsed - preload}
    return Timed(plus, elapsed - preload, retractions=minus, figures=figures)


def _ours(
    query: str, preload: Path, edges: Path, batch: int, timeout: float
) -> tuple[float, int, int]:
    """One ``run``: its printed elapsed seconds and its ``+`` and ``-`` deltas of ``query``."""
    command = ours_command(query, preload, edges, batch)
    done = subprocess.run(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_environment(),
        timeout=timeout,
        check=False,
    )
    errors = done.stderr.decode(errors="replace")
    elapsed = _OURS_ELAPSED.search(errors)
    if done.returncode != 0 or elapsed is None:
        raise RuntimeError(f"ours failed (exit {done.returncode}): {' '.join(command)}\n{errors}")
    counts = re.search(_OURS_COUNT.format(re.escape(query)), errors)
    plus, minus = (0, 0) if counts is None else (_int(counts.group(1)), _int(counts.group(2)))
    return float(elapsed.group(1)), plus, minus


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _environment() -> dict[str, str]:
    """This environment without ``SGM_`` settings (the flags say everything), one thread."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("SGM_")}
    return {**kept, **ONE_THREAD}
