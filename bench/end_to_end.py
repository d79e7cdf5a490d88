"""``subgraph-monitor run`` as a user runs it: the benchmarks' end-to-end figures.

The command is the console script installed beside this Python (``subgraph-monitor``; without
it, ``python -m monitor``, the same entry point), its match deltas written to ``/dev/null``.
Measured from outside, as Flink SQL's jobs are: wall time from the process's start (``Popen``)
to its exit (``wait4``), so starting the interpreter, importing, reading and decoding the JSON
lines, the engine, and encoding and writing the output are all in; from ``wait4`` as well, the
process's CPU time and its peak RSS (its own: the benchmark's other children are not counted).
From the process's summary on stderr (:func:`summary`): the updates it read, its epochs, each
query's ``+1`` and ``-1`` deltas, and its own elapsed time (from its processor's start to the
summary: no interpreter start, no imports).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_NUMBER = r"([\d,]+)"
_UPDATES = re.compile(rf"^subgraph-monitor: updates read {_NUMBER}, applied {_NUMBER}", re.M)
_EPOCHS = re.compile(rf"^subgraph-monitor: epochs {_NUMBER}$", re.M)
_QUERY = re.compile(rf"^subgraph-monitor: query (\S+): \+{_NUMBER} -{_NUMBER} match deltas$", re.M)
_ELAPSED = re.compile(r"^subgraph-monitor: elapsed ([\d.]+) s: ", re.M)


@dataclass(frozen=True)
class CliRun:
    """One ``subgraph-monitor run`` process: measured from outside, and what it said."""

    #: Process start to exit, seconds (wall clock).
    wall_s: float
    #: User plus system CPU time of the process, seconds.
    cpu_s: float
    #: Peak resident set of the process (``ru_maxrss``), MiB.
    rss_mib: float
    #: From its summary: updates read and applied, epochs, its own elapsed seconds.
    updates: int
    applied: int
    epochs: int
    elapsed_s: float
    #: From its summary: per query, the numbers of ``+1`` and ``-1`` match deltas.
    deltas: dict[str, tuple[int, int]]

    def plus(self, query: str) -> int:
        return self.deltas.get(query, (0, 0))[0]

    def minus(self, query: str) -> int:
        return self.deltas.get(query, (0, 0))[1]


def command() -> list[str]:
    """How a user starts the service: the console script beside this Python, if installed."""
    script = Path(sys.executable).with_name("subgraph-monitor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "monitor"]


def run_cli(arguments: list[str]) -> CliRun:
    """``subgraph-monitor run ARGUMENTS`` with stdout to ``/dev/null``, timed and parsed;
    :class:`RuntimeError` with the end of its stderr if it fails. It runs on the CPUs this
    process may use (the benchmarks pin themselves first)."""
    argv = [*command(), "run", *arguments]
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nothing to drain meanwhile
        started = time.perf_counter()
        child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        stderr.seek(0)
        said = stderr.read().decode(errors="replace")
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {child.returncode}:\n{said[-3000:]}")
    updates, applied, epochs, elapsed, deltas = summary(said)
    return CliRun(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_mib=usage.ru_maxrss / 1024,
        updates=updates,
        applied=applied,
        epochs=epochs,
        elapsed_s=elapsed,
        deltas=deltas,
    )


def summary(stderr: str) -> tuple[int, int, int, float, dict[str, tuple[int, int]]]:
    """Updates read and applied, epochs, elapsed seconds and each query's ``(+1, -1)`` deltas
    from a run's summary on stderr (``monitor/cli/reports.py``); a query without any delta has
    no line. :class:`ValueError` naming the line that is missing."""
    found = {}
    for name, pattern in (("updates", _UPDATES), ("epochs", _EPOCHS), ("elapsed", _ELAPSED)):
        match = pattern.search(stderr)
        if match is None:
            raise ValueError(
                f"the summary of subgraph-monitor run has no '{name}' line "
                f"(pattern {pattern.pattern!r}); its stderr ends:\n{stderr[-2000:]}"
            )
        found[name] = match
    deltas = {q: (_int(plus), _int(minus)) for q, plus, minus in _QUERY.findall(stderr)}
    return (
        _int(found["updates"].group(1)),
        _int(found["updates"].group(2)),
        _int(found["epochs"].group(1)),
        float(found["elapsed"].group(1)),
        deltas,
    )


def _int(text: str) -> int:
    return int(text.replace(",", ""))
