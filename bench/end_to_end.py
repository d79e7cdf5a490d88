"""``subgraph-monitor run`` as a user runs it: the benchmarks' end-to-end figures.

The command is the console script installed beside this Python (``subgraph-monitor``; without it,
``python -m monitor``, the same entry point), its match deltas written to ``/dev/null``. Measured
from outside, as Flink SQL's jobs are: wall time from the process's start (``Popen``) to its exit
(``wait4``), so starting the interpreter, importing (from bytecode, as an installation does:
:func:`compiled`), reading and decoding the JSON lines, the engine, and encoding and writing the
output are all in; from ``wait4`` as well, the process's CPU time and its peak RSS. A child's
``ru_maxrss`` starts from the RSS of the process that started it (Linux keeps the larger at
``exec``), and the benchmarks hold their streams and engines, so the command is started from a
fresh, small Python, ``python -m bench.end_to_end`` (:func:`main`), which measures it and reports
as JSON.

From the process's summary on stderr (:func:`summary`): the updates it read, its epochs, each
query's ``+1`` and ``-1`` deltas, and its own elapsed time (from its processor's start to the
summary: no interpreter start, no imports); from its progress lines (:func:`progress`; one after
every epoch with ``SGM_PROGRESS_SECONDS`` tiny), the updates read and the seconds since its job
started at each, which time a stretch of its epochs on its own clock.
"""

from __future__ import annotations

import compileall
import functools
import json
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
_PROGRESS = re.compile(
    rf"^subgraph-monitor: {_NUMBER} updates read(?: \(\d+%\))?, {_NUMBER} epochs, "
    rf"{_NUMBER} match deltas, {_NUMBER} updates/s$",
    re.M,
)


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
    #: From its progress lines: updates read, epochs, seconds since its job started.
    progress: list[tuple[int, int, float]]

    def plus(self, query: str) -> int:
        return self.deltas.get(query, (0, 0))[0]

    def minus(self, query: str) -> int:
        return self.deltas.get(query, (0, 0))[1]


def command() -> list[str]:
    """How a user starts the service: the console script beside this Python, if installed."""
    script = Path(sys.executable).with_name("subgraph-monitor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "monitor"]


@functools.cache
def compiled() -> None:
    """The packages' bytecode written, as an installation has it (``pip install`` compiles
    what it installs, the image runs ``compileall``): an editable checkout under
    ``PYTHONDONTWRITEBYTECODE`` would compile every module from source at every start."""
    for package in ("core", "monitor", "connectors"):
        compileall.compile_dir(ROOT / package, quiet=1)


def run_cli(arguments: list[str], env: dict[str, str] | None = None) -> CliRun:
    """``subgraph-monitor run ARGUMENTS`` with stdout to ``/dev/null`` (and ``env`` added to
    this environment), timed and parsed; :class:`RuntimeError` with the end of its stderr if it
    fails. It runs on the CPUs this process may use (the benchmarks pin themselves first)."""
    compiled()
    argv = [*command(), "run", *arguments]
    measure = [sys.executable, "-m", "bench.end_to_end", *argv]
    environment = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nothing to drain meanwhile
        done = subprocess.run(
            measure, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=stderr
        )
        stderr.seek(0)
        said = stderr.read().decode(errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(measure)} exited {done.returncode}:\n{said[-3000:]}")
    measured = json.loads(done.stdout)
    if measured["exit"] != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {measured['exit']}:\n{said[-3000:]}")
    updates, applied, epochs, elapsed, deltas = summary(said)
    return CliRun(
        wall_s=measured["wall_s"],
        cpu_s=measured["cpu_s"],
        rss_mib=measured["rss_mib"],
        updates=updates,
        applied=applied,
        epochs=epochs,
        elapsed_s=elapsed,
        deltas=deltas,
        progress=progress(said),
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


def progress(stderr: str) -> list[tuple[int, int, float]]:
    """``(updates, epochs, seconds)`` of each progress line on a run's stderr; the seconds are
    the updates over the rate it prints (printed whole: a relative error below 0.5 / rate)."""
    found = []
    for updates, epochs, _, rate in _PROGRESS.findall(stderr):
        if _int(rate) > 0:
            found.append((_int(updates), _int(epochs), _int(updates) / _int(rate)))
    return found


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def main() -> int:
    """``python -m bench.end_to_end COMMAND...``: run ``COMMAND``, its stdout to ``/dev/null``
    and its stderr this process's; print its exit code, wall time (start to exit), CPU time and
    peak RSS as one JSON object."""
    started = time.perf_counter()
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    measured = {
        "exit": child.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
    }
    print(json.dumps(measured), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
